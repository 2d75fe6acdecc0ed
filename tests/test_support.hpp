// Shared helpers for jitcache's tests: fresh temporary directories, printable errors,
// seeded random numbers whose seed is printed so a failure can be replayed.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "jitcache/error.hpp"

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
