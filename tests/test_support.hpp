// Shared helpers for jitcache's tests: fresh temporary directories, printable errors,
// seeded random numbers whose seed is printed so a failure can be replayed, a log capture
// and the one way a test changes the process environment.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jitcache/error.hpp"
#include "jitcache/log.hpp"

namespace jitcache::testing {

// A fresh private directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  const std::filesystem::path& dir() const { return m_dir; }

 private:
  std::filesystem::path m_dir;
};

// Ends the test program with SIGALRM unless the scope is left within `seconds`: a test of
// something that could block for ever (opening a FIFO) then fails instead of hanging.
class HangGuard {
 public:
  explicit HangGuard(unsigned seconds) { ::alarm(seconds); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;
  ~HangGuard() { ::alarm(0); }
};

// Makes a UNIX socket file at `path` (bound, then closed: the file stays). False when the
// path is too long for a socket address or bind fails.
bool make_unix_socket(const std::filesystem::path& path);

// Seed from JITCACHE_TEST_SEED when set (to replay), else fresh; always printed.
std::uint64_t test_seed(const char* what);

// The source tree the tests read (examples/, golden files): JCTEST_SOURCE_DIR when set,
// for test programs built elsewhere and run from another checkout (scripts/gpu_bundle.sh),
// else the tree they were built from. (Not JITCACHE_*: that prefix belongs to the
// runtime's environment registry, which warns about names it does not know.)
std::filesystem::path source_dir();

enum class ReadOnlyMeans { bind_mount, other_user };

// Runs `checks` in a child process that cannot write below `dir`: through a read-only
// bind mount in a private mount namespace (real EROFS; needs CAP_SYS_ADMIN), or as user
// 65534 on a tree chowned to it with modes 0500/0400 (root in CI can always do this;
// root itself would ignore the modes); without root, the modes alone. Returns the child's
// report: a first line saying how creating a file failed, then what `checks` returned
// (empty when every check held), or "SKIP: why" where the means is missing.
std::string run_read_only(const std::filesystem::path& dir, ReadOnlyMeans means,
                          const std::function<std::string()>& checks);
// What `checks` returned in a run_read_only report.
std::string read_only_verdict(const std::string& text);

// Captures every log line, at every level, for its lifetime: the sink and the level in
// force before are put back by the destructor.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines logged at exactly `level`.
  std::vector<std::string> at(LogLevel level) const;
  std::size_t count_containing(const std::string& needle) const;
  std::size_t warnings() const;  // lines at warning or above
  std::string all() const;       // every line, one per line, for failure messages

 private:
  LogLevel m_old_level;
  mutable std::mutex m_mutex;
  std::vector<std::pair<LogLevel, std::string>> m_lines;
};

// The one way a test changes the process environment: sets or unsets variables for its
// scope, and its destructor gives each the value it had before its first change here
// ("unset" included). A listener registered by this file fails any test that leaves a
// watched variable (watched_environment) changed.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  // A null `value` unsets the variable for the scope.
  ScopedEnv(std::string name, const char* value);
  // std::nullopt unsets the variable for the scope.
  ScopedEnv(std::string name, std::optional<std::string> value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& name, const std::string& value);
  void unset(const std::string& name);

 private:
  void remember(const std::string& name);
  // Each name once, with the value it had before this guard first changed it.
  std::vector<std::pair<std::string, std::optional<std::string>>> m_saved;
};

// The variables a test could leave behind to change what later tests see: JITCACHE_*,
// VLLM_*, XDG_*, JCTEST_*, HOME and TMPDIR, by name.
using EnvSnapshot = std::map<std::string, std::string>;
EnvSnapshot watched_environment();
// One line per variable whose value differs, e.g. `JITCACHE_DIR: was unset, now "/x"`.
std::vector<std::string> environment_changes(const EnvSnapshot& before, const EnvSnapshot& after);

// Snapshots the watched variables when a test starts; when it ends, fails it for every
// variable it left changed, naming each, and puts the old values back so that the next
// test starts from the same environment. Registered for every test program.
class EnvironmentLeakCheck : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& test) override;
  void OnTestEnd(const ::testing::TestInfo& test) override;

 private:
  EnvSnapshot m_before;
};

}  // namespace jitcache::testing

// Assert a Result/Status holds a value; on failure print the error text.
#define ASSERT_OK(expr)                                                          \
  do {                                                                           \
    const auto& jc_r_ = (expr);                                                  \
    ASSERT_TRUE(jc_r_.has_value()) << #expr << " failed: " << jc_r_.error().to_string(); \
  } while (0)
#define EXPECT_OK(expr)                                                          \
  do {                                                                           \
    const auto& jc_r_ = (expr);                                                  \
    EXPECT_TRUE(jc_r_.has_value()) << #expr << " failed: " << jc_r_.error().to_string(); \
  } while (0)
