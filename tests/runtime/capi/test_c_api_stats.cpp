// jitcache_runtime_stats: the figures of a runtime's cache, as one JSON document. The
// session's counters are the runtime's own (this process, since it opened); the size is the
// cache directory's; the metrics carry both, named as docs/metrics.md says.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi_test_support.hpp"
#include "jitcache/jitcache.h"
#include "test_support.hpp"

namespace jitcache {
namespace {

using nlohmann::json;

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

class CApiStatsTest : public jitcache::testing::TempDirTest {
 protected:
  void TearDown() override {
    for (jitcache_runtime* runtime : m_runtimes) jitcache_runtime_close(runtime);
    TempDirTest::TearDown();
  }

  jitcache_runtime* open(const char* cache_dir) {
    const auto options = jitcache::testing::deviceless_runtime_options(cache_dir);
    jitcache_runtime* runtime = nullptr;
    EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_OK) << jitcache_last_error();
    m_runtimes.push_back(runtime);
    return runtime;
  }

  void prepare(jitcache_runtime* runtime) {
    jitcache_model* model = nullptr;
    ASSERT_EQ(jitcache_prepare(runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model),
              JITCACHE_OK)
        << jitcache_last_error();
    jitcache_model_release(model);
  }

  static json stats(jitcache_runtime* runtime) {
    char* text = nullptr;
    EXPECT_EQ(jitcache_runtime_stats(runtime, &text), JITCACHE_OK) << jitcache_last_error();
    if (text == nullptr) return {};
    json doc = json::parse(text);
    jitcache_string_free(text);
    return doc;
  }

  // The value of the sample of `name` whose labels include `labels`; NaN when none has.
  static double metric(const json& doc, const std::string& name, const json& labels = json::object()) {
    for (const json& family : doc["metrics"]) {
      if (family["name"] != name) continue;
      for (const json& sample : family["samples"]) {
        bool match = true;
        for (const auto& [key, value] : labels.items()) match = match && sample["labels"].value(key, "") == value;
        if (match) return sample["value"].get<double>();
      }
    }
    ADD_FAILURE() << "no sample of " << name << " with " << labels.dump();
    return std::nan("");
  }

  std::vector<jitcache_runtime*> m_runtimes;
};

TEST_F(CApiStatsTest, AFreshRuntimeCountsNothingAndSeesTheEmptyCache) {
  const std::string dir = (this->dir() / "cache").string();
  const json doc = stats(open(dir.c_str()));
  EXPECT_EQ(doc["cache_dir"], dir);
  EXPECT_EQ(doc["mode"], "read-write");
  EXPECT_EQ(doc["session"]["misses"], 0);
  EXPECT_EQ(doc["session"]["hits"]["memory"], 0);
  EXPECT_EQ(doc["cache"]["entries"], 0);
  EXPECT_EQ(doc["cache"]["bytes"], 0);
  EXPECT_GT(doc["cache"]["max_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_FALSE(doc.contains("cache_error"));
  for (const json& family : doc["metrics"]) {
    EXPECT_TRUE(family["type"] == "counter" || family["type"] == "gauge") << family.dump();
    for (const json& sample : family["samples"]) {
      EXPECT_EQ(sample["labels"]["cache_dir"], dir);
      if (family["type"] == "counter") EXPECT_EQ(sample["labels"]["scope"], "process");
      else EXPECT_FALSE(sample["labels"].contains("scope"));
    }
  }
  EXPECT_EQ(metric(doc, "jitcache_cache_entries"), 0);
}

// Each runtime counts what it did; the cache's size is every runtime's.
TEST_F(CApiStatsTest, CountersAreTheRuntimesOwnAndTheSizeIsTheCaches) {
  const std::string dir = (this->dir() / "cache").string();
  jitcache_runtime* first = open(dir.c_str());
  prepare(first);  // the bundled checkpoint: 4 variants, compiled
  json doc = stats(first);
  EXPECT_EQ(doc["session"]["misses"], 4);
  EXPECT_EQ(doc["session"]["compiles"], 4);
  const double spent_ms = doc["session"]["compile_ms"]["spent"].get<double>();
  EXPECT_GT(spent_ms, 0.0);
  EXPECT_EQ(doc["cache"]["entries"], 4);
  const auto bytes = doc["cache"]["bytes"].get<std::uint64_t>();
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(metric(doc, "jitcache_misses_total"), 4);
  EXPECT_EQ(metric(doc, "jitcache_compiles_total"), 4);
  EXPECT_DOUBLE_EQ(metric(doc, "jitcache_compile_seconds_spent_total"), spent_ms / 1000);
  EXPECT_EQ(metric(doc, "jitcache_cache_entries"), 4);
  EXPECT_EQ(metric(doc, "jitcache_cache_bytes"), static_cast<double>(bytes));

  prepare(first);  // again: this runtime's memory tier
  doc = stats(first);
  EXPECT_EQ(doc["session"]["hits"]["memory"], 4);
  EXPECT_EQ(metric(doc, "jitcache_hits_total", {{"tier", "memory"}}), 4);
  EXPECT_EQ(metric(doc, "jitcache_hits_total", {{"tier", "disk"}}), 0);

  jitcache_runtime* second = open(dir.c_str());  // a new session: the disk serves it
  EXPECT_EQ(stats(second)["session"]["misses"], 0);
  prepare(second);
  const json other = stats(second);
  EXPECT_EQ(other["session"]["hits"]["disk"], 4);
  EXPECT_EQ(other["session"]["compiles"], 0);
  EXPECT_EQ(other["cache"]["entries"], 4);
  EXPECT_EQ(stats(first)["session"]["hits"]["disk"], 0) << "the other runtime's hits are not this one's";
}

TEST_F(CApiStatsTest, AMemoryOnlyRuntimeHasCountersAndNoSize) {
  // A world-writable directory is refused: the runtime runs memory-only.
  const std::filesystem::path shared = dir() / "shared";
  std::filesystem::create_directory(shared);
  std::filesystem::permissions(shared, std::filesystem::perms::all);
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  const std::string refused = shared.string();
  options.cache_dir = refused.c_str();
  options.device = JITCACHE_DEVICE_NONE;
  options.cache_requirement = JITCACHE_CACHE_OPTIONAL;
  jitcache_runtime* runtime = nullptr;
  ASSERT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_OK) << jitcache_last_error();
  m_runtimes.push_back(runtime);
  prepare(runtime);
  const json doc = stats(runtime);
  EXPECT_EQ(doc["mode"], "memory-only");
  EXPECT_TRUE(doc["cache"].is_null());
  EXPECT_FALSE(doc.contains("cache_error"));
  EXPECT_EQ(doc["session"]["compiles"], 4);
  EXPECT_EQ(metric(doc, "jitcache_compiles_total"), 4);
  for (const json& family : doc["metrics"]) EXPECT_EQ(family["type"], "counter") << family["name"];
}

TEST_F(CApiStatsTest, BadArgumentsAndAClosedRuntimeAreRefused) {
  char* text = nullptr;
  EXPECT_EQ(jitcache_runtime_stats(nullptr, &text), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jitcache_last_error()).find("runtime"), std::string::npos) << jitcache_last_error();
  const std::string dir = (this->dir() / "cache").string();
  jitcache_runtime* runtime = open(dir.c_str());
  EXPECT_EQ(jitcache_runtime_stats(runtime, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jitcache_last_error()).find("out"), std::string::npos) << jitcache_last_error();
  jitcache_runtime_close(runtime);
  EXPECT_EQ(jitcache_runtime_stats(runtime, &text), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(jitcache_last_error()).find("closed"), std::string::npos) << jitcache_last_error();
  EXPECT_EQ(text, nullptr) << "output written on failure";
}

}  // namespace
}  // namespace jitcache
