// A cache problem never stops an engine from serving (issue 10): through the C ABI, a
// cache directory that cannot be used (world-writable, read-only and empty) opens
// memory-only with one WARNING delivered to the log callback, prepare still compiles
// every variant, and JITCACHE_REQUIRE_CACHE=1 turns it into the directory's error. A
// read-only directory that holds a warmed index opens read-only and serves it.
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/jitcache.h"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

const fs::path k_checkpoint = testing::source_dir() / "examples" / "glm5-mini";

struct LogLine {
  jitcache_log_level level;
  std::string text;
};

std::mutex g_log_mutex;
std::vector<LogLine> g_log;

void capture(void*, jitcache_log_level level, const char* message, size_t length) {
  std::lock_guard lock(g_log_mutex);
  g_log.push_back({level, std::string(message, length)});
}

using testing::ScopedEnv;

class CacheFallbackTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    {
      std::lock_guard lock(g_log_mutex);
      g_log.clear();
    }
    ASSERT_EQ(jitcache_set_log_callback(capture, nullptr), JITCACHE_OK);
  }
  void TearDown() override {
    jitcache_set_log_callback(nullptr, nullptr);
    TempDirTest::TearDown();
  }

  static std::vector<std::string> warnings_naming(const std::string& needle) {
    std::lock_guard lock(g_log_mutex);
    std::vector<std::string> found;
    for (const LogLine& l : g_log)
      if (l.level == JITCACHE_LOG_WARNING && l.text.find(needle) != std::string::npos) found.push_back(l.text);
    return found;
  }

  static jitcache_status open(const fs::path& cache, jitcache_runtime** out) {
    jitcache_runtime_options options;
    jitcache_runtime_options_init(&options);
    options.device = JITCACHE_DEVICE_NONE;
    options.jobs = 2;
    const std::string dir = cache.string();
    options.cache_dir = dir.c_str();
    return jitcache_runtime_open(&options, out);
  }

  // Prepares the bundled checkpoint for sm_90 and returns its stats.
  static std::optional<jitcache_prepare_stats> prepare(jitcache_runtime* runtime, jitcache_rope rope) {
    jitcache_model* model = nullptr;
    if (jitcache_prepare(runtime, k_checkpoint.c_str(), rope, "sm_90", nullptr, &model) != JITCACHE_OK) {
      ADD_FAILURE() << "prepare: " << jitcache_last_error();
      return std::nullopt;
    }
    jitcache_prepare_stats stats{};
    EXPECT_EQ(jitcache_model_stats(model, &stats), JITCACHE_OK);
    jitcache_model_release(model);
    return stats;
  }

  // The checks of `body` run in a child that cannot write below `path` (a read-only bind
  // mount); returns what failed, empty when everything held, or "SKIP: why".
  static std::string with_read_only(const fs::path& path, const std::function<std::string()>& body) {
    const std::string report = testing::run_read_only(path, testing::ReadOnlyMeans::bind_mount, body);
    return report.starts_with("SKIP:") ? report : testing::read_only_verdict(report);
  }
};

TEST_F(CacheFallbackTest, WorldWritableDirectoryRunsMemoryOnlyWithOneWarning) {
  ScopedEnv unset("JITCACHE_REQUIRE_CACHE", nullptr);
  const fs::path cache = dir() / "shared";
  fs::create_directory(cache);
  ::chmod(cache.c_str(), 0777);
  jitcache_runtime* runtime = nullptr;
  ASSERT_EQ(open(cache, &runtime), JITCACHE_OK) << jitcache_last_error();
  jitcache_cache_status status{};
  ASSERT_EQ(jitcache_runtime_cache_status(runtime, &status), JITCACHE_OK);
  EXPECT_EQ(status.mode, JITCACHE_CACHE_MEMORY_ONLY);
  EXPECT_NE(std::string(status.reason).find("world-writable"), std::string::npos) << status.reason;
  const auto warnings = warnings_naming("memory-only");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(cache.string()), std::string::npos) << "names the directory: " << warnings[0];
  EXPECT_NE(warnings[0].find("world-writable"), std::string::npos) << "names the rule: " << warnings[0];
  EXPECT_NE(warnings[0].find("chmod 700"), std::string::npos) << "names the fix: " << warnings[0];

  const auto cold = prepare(runtime, JITCACHE_ROPE_BF16);
  ASSERT_TRUE(cold);
  EXPECT_EQ(cold->variants, 4u);
  EXPECT_EQ(cold->compiled, 4u);
  const auto again = prepare(runtime, JITCACHE_ROPE_BF16);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->compiled, 0u) << "compiles are kept for the runtime's life";
  jitcache_runtime_close(runtime);
  EXPECT_TRUE(fs::is_empty(cache)) << "nothing was written into the refused directory";
}

TEST_F(CacheFallbackTest, RequireCacheMakesTheDirectoryErrorFatal) {
  ScopedEnv require("JITCACHE_REQUIRE_CACHE", "1");
  const fs::path cache = dir() / "shared";
  fs::create_directory(cache);
  ::chmod(cache.c_str(), 0777);
  jitcache_runtime* runtime = nullptr;
  EXPECT_EQ(open(cache, &runtime), JITCACHE_ERROR_UNSAFE);
  EXPECT_EQ(runtime, nullptr);
  EXPECT_NE(std::string(jitcache_last_error()).find(cache.string()), std::string::npos) << jitcache_last_error();
  EXPECT_TRUE(warnings_naming("memory-only").empty());
}

TEST_F(CacheFallbackTest, TheOptionBeatsTheEnvironment) {
  const fs::path cache = dir() / "shared";
  fs::create_directory(cache);
  ::chmod(cache.c_str(), 0777);
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  EXPECT_EQ(options.cache_requirement, JITCACHE_CACHE_FROM_ENVIRONMENT);
  options.device = JITCACHE_DEVICE_NONE;
  const std::string path = cache.string();
  options.cache_dir = path.c_str();
  jitcache_runtime* runtime = nullptr;
  {
    ScopedEnv unset("JITCACHE_REQUIRE_CACHE", nullptr);
    options.cache_requirement = JITCACHE_CACHE_REQUIRED;
    EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_ERROR_UNSAFE);
  }
  {
    ScopedEnv require("JITCACHE_REQUIRE_CACHE", "1");
    options.cache_requirement = JITCACHE_CACHE_OPTIONAL;
    ASSERT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_OK) << jitcache_last_error();
    jitcache_cache_status status{};
    ASSERT_EQ(jitcache_runtime_cache_status(runtime, &status), JITCACHE_OK);
    EXPECT_EQ(status.mode, JITCACHE_CACHE_MEMORY_ONLY);
    jitcache_runtime_close(runtime);
  }
  const int out_of_range = 7;  // a value no enumerator has, as a C caller could pass
  std::memcpy(&options.cache_requirement, &out_of_range, sizeof out_of_range);
  EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jitcache_last_error()).find("cache_requirement"), std::string::npos) << jitcache_last_error();
}

TEST_F(CacheFallbackTest, RequireCacheMustBeABoolean) {
  ScopedEnv require("JITCACHE_REQUIRE_CACHE", "sometimes");
  jitcache_runtime* runtime = nullptr;
  EXPECT_EQ(open(dir() / "cache", &runtime), JITCACHE_ERROR_INVALID_INPUT);
  EXPECT_NE(std::string(jitcache_last_error()).find("JITCACHE_REQUIRE_CACHE"), std::string::npos)
      << jitcache_last_error();
}

TEST_F(CacheFallbackTest, ReadOnlyEmptyDirectoryRunsMemoryOnly) {
  ScopedEnv unset("JITCACHE_REQUIRE_CACHE", nullptr);
  const fs::path cache = dir() / "baked";
  fs::create_directory(cache);
  ::chmod(cache.c_str(), 0700);
  const std::string outcome = with_read_only(cache, [&]() -> std::string {
    jitcache_runtime* runtime = nullptr;
    if (open(cache, &runtime) != JITCACHE_OK) return std::string("open failed: ") + jitcache_last_error();
    jitcache_cache_status status{};
    jitcache_runtime_cache_status(runtime, &status);
    std::string problems;
    if (status.mode != JITCACHE_CACHE_MEMORY_ONLY) problems += "mode is not memory-only; ";
    if (warnings_naming("memory-only").size() != 1) problems += "not exactly one warning; ";
    jitcache_model* model = nullptr;
    if (jitcache_prepare(runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model) != JITCACHE_OK)
      return problems + "prepare failed: " + jitcache_last_error();
    jitcache_prepare_stats stats{};
    jitcache_model_stats(model, &stats);
    if (stats.compiled != 4) problems += "compiled " + std::to_string(stats.compiled) + ", not 4; ";
    jitcache_model_release(model);
    jitcache_runtime_close(runtime);
    ScopedEnv require("JITCACHE_REQUIRE_CACHE", "1");
    if (const jitcache_status s = open(cache, &runtime); s != JITCACHE_ERROR_IO)
      problems += std::string("with JITCACHE_REQUIRE_CACHE=1 open gave ") + jitcache_status_name(s) + "; ";
    return problems;
  });
  if (outcome.starts_with("SKIP:")) GTEST_SKIP() << outcome;
  EXPECT_EQ(outcome, "");
  EXPECT_TRUE(fs::is_empty(cache));
}

TEST_F(CacheFallbackTest, ReadOnlyWarmedDirectoryServesItsEntries) {
  ScopedEnv unset("JITCACHE_REQUIRE_CACHE", nullptr);
  const fs::path cache = dir() / "baked";
  {
    jitcache_runtime* runtime = nullptr;
    ASSERT_EQ(open(cache, &runtime), JITCACHE_OK) << jitcache_last_error();
    ASSERT_TRUE(prepare(runtime, JITCACHE_ROPE_BF16));
    jitcache_runtime_close(runtime);
  }
  const std::string outcome = with_read_only(cache, [&]() -> std::string {
    ScopedEnv require("JITCACHE_REQUIRE_CACHE", "1");  // read-only is a usable cache
    jitcache_runtime* runtime = nullptr;
    if (open(cache, &runtime) != JITCACHE_OK) return std::string("open failed: ") + jitcache_last_error();
    std::string problems;
    jitcache_cache_status status{};
    jitcache_runtime_cache_status(runtime, &status);
    if (status.mode != JITCACHE_CACHE_READ_ONLY) problems += "mode is not read-only; ";
    jitcache_model* model = nullptr;
    jitcache_prepare_stats stats{};
    if (jitcache_prepare(runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model) != JITCACHE_OK)
      return problems + "prepare failed: " + jitcache_last_error();
    jitcache_model_stats(model, &stats);
    jitcache_model_release(model);
    if (stats.cached != 4 || stats.compiled != 0) problems += "the warmed entries were not served; ";
    // A miss compiles in memory, with one warning that it cannot be stored.
    for (int i = 0; i < 2; ++i) {
      if (jitcache_prepare(runtime, k_checkpoint.c_str(), JITCACHE_ROPE_FP8, "sm_90", nullptr, &model) != JITCACHE_OK)
        return problems + "fp8 prepare failed: " + jitcache_last_error();
      jitcache_model_stats(model, &stats);
      jitcache_model_release(model);
      if (i == 0 && stats.compiled != 4) problems += "fp8 compiled " + std::to_string(stats.compiled) + "; ";
    }
    if (warnings_naming("read-only to this process").size() != 1) problems += "not exactly one read-only warning; ";
    jitcache_runtime_close(runtime);
    return problems;
  });
  if (outcome.starts_with("SKIP:")) GTEST_SKIP() << outcome;
  EXPECT_EQ(outcome, "");
}

// The remote is never required for an engine (issue 24): with JITCACHE_REQUIRE_CACHE=1, a
// remote configuration that cannot be used (each way a fleet key file can be unusable, a
// malformed URL, a bad timeout) opens read-write on the local cache with exactly one
// warning naming what is wrong, and no part of the URL's password in any log line.
TEST_F(CacheFallbackTest, RequireCacheNeverRequiresTheRemote) {
  ScopedEnv require("JITCACHE_REQUIRE_CACHE", "1");
  ScopedEnv debug("JITCACHE_LOG_LEVEL", "debug");  // every line the library logs
  const std::string secret = "Qz7sekret/Vx9part@Wm4tail:Kp2end";
  const std::string url = "redis://jc:" + secret + "@127.0.0.1:9";
  const fs::path keys = dir() / "keys";
  fs::create_directory(keys);
  ::chmod(keys.c_str(), 0700);
  auto key_file = [&](const std::string& name, std::size_t bytes, mode_t mode) {
    const fs::path path = keys / name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(std::string(bytes, 'k').data(), 1, bytes, f);
    std::fclose(f);
    ::chmod(path.c_str(), mode);
    return path.string();
  };
  const std::string good_key = key_file("good.key", 32, 0600);
  const fs::path fifo = keys / "fifo.key";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string what, remote, key_file, timeout, named;
  };
  const std::vector<Case> cases = {
      {"key mode 0644", url, key_file("shared.key", 32, 0644), "", "JITCACHE_REMOTE_KEY_FILE"},
      {"key is a FIFO", url, fifo.string(), "", "JITCACHE_REMOTE_KEY_FILE"},
      {"key of 31 bytes", url, key_file("short.key", 31, 0600), "", "JITCACHE_REMOTE_KEY_FILE"},
      {"key missing", url, (keys / "missing.key").string(), "", "JITCACHE_REMOTE_KEY_FILE"},
      {"malformed URL", "redis://jc:" + secret + "@127.0.0.1:notaport", good_key, "", "JITCACHE_REMOTE"},
      {"bad timeout", url, good_key, "soon", "JITCACHE_REMOTE_TIMEOUT_MS"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    {
      std::lock_guard lock(g_log_mutex);
      g_log.clear();
    }
    ScopedEnv remote("JITCACHE_REMOTE", c.remote.c_str());
    ScopedEnv key("JITCACHE_REMOTE_KEY_FILE", c.key_file.c_str());
    ScopedEnv timeout("JITCACHE_REMOTE_TIMEOUT_MS", c.timeout.empty() ? nullptr : c.timeout.c_str());
    jitcache_runtime* runtime = nullptr;
    ASSERT_EQ(open(dir() / "cache", &runtime), JITCACHE_OK) << jitcache_last_error();
    jitcache_cache_status status{};
    EXPECT_EQ(jitcache_runtime_cache_status(runtime, &status), JITCACHE_OK);
    EXPECT_EQ(status.mode, JITCACHE_CACHE_READ_WRITE) << "the local cache is used as usual";
    jitcache_runtime_close(runtime);
    std::lock_guard lock(g_log_mutex);
    std::size_t warnings = 0;
    for (const LogLine& l : g_log) {
      if (l.level >= JITCACHE_LOG_WARNING) {
        ++warnings;
        EXPECT_NE(l.text.find("remote cache not used"), std::string::npos) << l.text;
        EXPECT_NE(l.text.find(c.named), std::string::npos) << "names " << c.named << ": " << l.text;
      }
      for (const std::string piece : {"Qz7sekret", "Vx9part", "Wm4tail", "Kp2end"})
        EXPECT_EQ(l.text.find(piece), std::string::npos) << "a piece of the password is logged: " << l.text;
    }
    EXPECT_EQ(warnings, 1u) << "one warning";
  }
}

}  // namespace
}  // namespace jitcache
