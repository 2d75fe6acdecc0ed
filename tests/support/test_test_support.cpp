// The test programs' own helpers (tests/test_support.cpp): the environment guard puts back
// exactly what was there, "unset" included; the leak check fails a test that leaves a
// watched variable changed and names it; no test file changes the environment another way;
// the log capture sees every level and puts the level back.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "jitcache/log.hpp"
#include "test_support.hpp"

namespace jitcache::testing {
namespace {

namespace fs = std::filesystem;

// Names no other test or tool reads.
constexpr const char* k_unset_probe = "JCTEST_GUARD_PROBE_UNSET";
constexpr const char* k_set_probe = "JCTEST_GUARD_PROBE_SET";

std::optional<std::string> value_of(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

// Gives each probe a known starting point for the test: one unset, one holding "before".
class ScopedEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_start.unset(k_unset_probe);
    m_start.set(k_set_probe, "before");
  }
  ScopedEnv m_start;
};

TEST_F(ScopedEnvTest, PutsBackAValueAndUnsetness) {
  {
    ScopedEnv set_unset(k_unset_probe, "now");
    ScopedEnv change(k_set_probe, std::string("changed"));
    EXPECT_EQ(value_of(k_unset_probe), "now");
    EXPECT_EQ(value_of(k_set_probe), "changed");
  }
  EXPECT_EQ(value_of(k_unset_probe), std::nullopt) << "\"was unset\" must be restored as unset";
  EXPECT_EQ(value_of(k_set_probe), "before");
}

TEST_F(ScopedEnvTest, UnsettingPutsTheValueBack) {
  {
    ScopedEnv by_null(k_set_probe, nullptr);
    EXPECT_EQ(value_of(k_set_probe), std::nullopt);
  }
  EXPECT_EQ(value_of(k_set_probe), "before");
  {
    ScopedEnv by_nullopt(k_set_probe, std::nullopt);
    EXPECT_EQ(value_of(k_set_probe), std::nullopt);
  }
  EXPECT_EQ(value_of(k_set_probe), "before");
}

TEST_F(ScopedEnvTest, ManyChangesOfOneNameRestoreTheFirstValue) {
  {
    ScopedEnv env;
    env.set(k_set_probe, "one");
    env.unset(k_set_probe);
    env.set(k_set_probe, "two");
    env.set(k_unset_probe, "three");
    env.unset(k_unset_probe);
    env.set(k_unset_probe, "");
    EXPECT_EQ(value_of(k_set_probe), "two");
    EXPECT_EQ(value_of(k_unset_probe), "") << "set to empty is not unset";
  }
  EXPECT_EQ(value_of(k_set_probe), "before");
  EXPECT_EQ(value_of(k_unset_probe), std::nullopt);
}

TEST_F(ScopedEnvTest, NestedGuardsUnwindInOrder) {
  {
    ScopedEnv outer(k_set_probe, "outer");
    {
      ScopedEnv inner(k_set_probe, "inner");
      EXPECT_EQ(value_of(k_set_probe), "inner");
    }
    EXPECT_EQ(value_of(k_set_probe), "outer");
  }
  EXPECT_EQ(value_of(k_set_probe), "before");
}

TEST_F(ScopedEnvTest, WatchedEnvironmentHoldsTheWatchedNamesOnly) {
  ScopedEnv env;
  env.set("JCTEST_WATCHED_PROBE", "x");
  env.set("JITCACHE_DIR", "/srv/probe");
  env.set("XDG_CACHE_HOME", "/srv/xdg-probe");
  env.set("JCTESTX_NOT_WATCHED", "y");  // the prefix is JCTEST_, with the underscore
  const EnvSnapshot snapshot = watched_environment();
  EXPECT_EQ(snapshot.at("JCTEST_WATCHED_PROBE"), "x");
  EXPECT_EQ(snapshot.at("JITCACHE_DIR"), "/srv/probe");
  EXPECT_EQ(snapshot.at("XDG_CACHE_HOME"), "/srv/xdg-probe");
  EXPECT_FALSE(snapshot.contains("JCTESTX_NOT_WATCHED"));
  EXPECT_FALSE(snapshot.contains("PATH"));
  EXPECT_EQ(snapshot.contains("HOME"), value_of("HOME").has_value());
}

TEST(EnvironmentChanges, NamesEachChangedVariableWithBothValues) {
  const EnvSnapshot before{{"HOME", "/root"}, {"JITCACHE_DIR", "/a"}, {"JITCACHE_STRICT", "1"}};
  const EnvSnapshot after{{"HOME", "/root"}, {"JITCACHE_DIR", "/b"}, {"VLLM_X", ""}};
  const std::vector<std::string> expected{"JITCACHE_DIR: was \"/a\", now \"/b\"",
                                          "JITCACHE_STRICT: was \"1\", now unset",
                                          "VLLM_X: was unset, now \"\""};
  EXPECT_EQ(environment_changes(before, after), expected);
  EXPECT_TRUE(environment_changes(before, before).empty());
  EXPECT_TRUE(environment_changes({}, {}).empty());
}

// The listener run by hand inside this test: each leak must be exactly one failure naming
// the variable, and the listener must have put the old value back before the guard does.
TEST_F(ScopedEnvTest, LeakCheckFailsATestThatLeavesAVariableChanged) {
  const ::testing::TestInfo& self = *::testing::UnitTest::GetInstance()->current_test_info();
  EnvironmentLeakCheck check;
  ScopedEnv leak;

  check.OnTestStart(self);
  leak.set(k_unset_probe, "leaked");
  EXPECT_NONFATAL_FAILURE(check.OnTestEnd(self), "JCTEST_GUARD_PROBE_UNSET: was unset, now \"leaked\"");
  EXPECT_EQ(value_of(k_unset_probe), std::nullopt) << "the leak check must unset what a test set";

  check.OnTestStart(self);
  leak.set(k_set_probe, "changed");
  EXPECT_NONFATAL_FAILURE(check.OnTestEnd(self), "JCTEST_GUARD_PROBE_SET: was \"before\", now \"changed\"");
  EXPECT_EQ(value_of(k_set_probe), "before");

  check.OnTestStart(self);
  leak.unset(k_set_probe);
  EXPECT_NONFATAL_FAILURE(check.OnTestEnd(self), "JCTEST_GUARD_PROBE_SET: was \"before\", now unset");
  EXPECT_EQ(value_of(k_set_probe), "before");

  check.OnTestStart(self);
  leak.set("HOME", "/leaked-home");
  EXPECT_NONFATAL_FAILURE(check.OnTestEnd(self), "use testing::ScopedEnv): HOME: was");
}

TEST_F(ScopedEnvTest, LeakCheckPassesATestThatRestoredWhatItChanged) {
  const ::testing::TestInfo& self = *::testing::UnitTest::GetInstance()->current_test_info();
  EnvironmentLeakCheck check;
  check.OnTestStart(self);
  {
    ScopedEnv env(k_unset_probe, "for a while");
    env.set(k_set_probe, "for a while");
    env.set("JITCACHE_DIR", "/srv/for-a-while");
  }
  check.OnTestEnd(self);  // a failure here fails this test
}

// Every change of the environment in a test goes through ScopedEnv (C++) or pytest's
// monkeypatch (Python): a direct call is a leak waiting for an early return.
TEST(EnvironmentDiscipline, OnlyTheGuardChangesTheEnvironment) {
  const fs::path root = source_dir();
  if (!fs::is_directory(root / "tests")) GTEST_SKIP() << "no test sources under " << root;
  const std::regex cpp_call(R"((^|[^A-Za-z_])(setenv|unsetenv|putenv|clearenv)\s*\()");
  const std::regex python_call(
      R"(os\.(putenv|unsetenv)\s*\(|del\s+os\.environ)"
      R"(|os\.environ\s*(\[[^\]]*\]\s*=[^=]|\.(pop|update|clear|setdefault|popitem)\s*\())");
  // The guards themselves, and this test's own patterns.
  const std::vector<fs::path> allowed{root / "tests" / "test_support.cpp",
                                      root / "python" / "tests" / "conftest.py",
                                      root / "tests" / "support" / "test_test_support.cpp"};
  std::vector<std::string> offenders;
  std::size_t scanned = 0;
  for (const fs::path& top : {root / "tests", root / "python" / "tests"}) {
    if (!fs::is_directory(top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(top)) {
      const fs::path& path = entry.path();
      const std::string ext = path.extension().string();
      const bool python = ext == ".py";
      if (!entry.is_regular_file() || (!python && ext != ".cpp" && ext != ".hpp" && ext != ".h")) continue;
      if (std::find(allowed.begin(), allowed.end(), path) != allowed.end()) continue;
      ++scanned;
      std::ifstream in(path);
      int line_number = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_number;
        if (std::regex_search(line, python ? python_call : cpp_call))
          offenders.push_back(path.lexically_relative(root).string() + ":" + std::to_string(line_number) +
                              ": " + line);
      }
    }
  }
  EXPECT_GT(scanned, 20u) << "the scan found too few test files under " << root;
  std::string listing;
  for (const std::string& o : offenders) listing += o + "\n";
  EXPECT_TRUE(offenders.empty()) << "change the environment through testing::ScopedEnv (C++) or "
                                    "monkeypatch (pytest):\n"
                                 << listing;
}

TEST(LogCaptureTest, SeesEveryLevelAndPutsTheLevelBack) {
  const LogLevel before = log_level();
  {
    LogCapture capture;
    EXPECT_EQ(log_level(), LogLevel::debug);
    log_debug("probe debug line");
    log_info("probe info line");
    log_warning("probe warning line");
    log_error("probe error line");
    EXPECT_EQ(capture.at(LogLevel::debug), std::vector<std::string>{"probe debug line"});
    EXPECT_EQ(capture.at(LogLevel::info), std::vector<std::string>{"probe info line"});
    EXPECT_EQ(capture.warnings(), 2u);
    EXPECT_EQ(capture.count_containing("probe"), 4u);
    EXPECT_EQ(capture.count_containing("warning line"), 1u);
    EXPECT_EQ(capture.all(), "probe debug line\nprobe info line\nprobe warning line\nprobe error line\n");
  }
  EXPECT_EQ(log_level(), before);
}

}  // namespace
}  // namespace jitcache::testing
