// The C ABI of no-compile mode (jitcache_runtime_options.no_compile, the field after
// verify_spec) and of coverage (jitcache_runtime_coverage's JSON), and the C++ Runtime's:
// a cold cache is refused naming every missing variant, coverage counts nothing.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "capi_test_support.hpp"
#include "deviceless_runtime.hpp"
#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = testing::source_dir() / "examples" / "glm5-mini";

std::string last_error() { return jitcache_last_error(); }

class CApiCoverageTest : public testing::TempDirTest {
 protected:
  void TearDown() override {
    jitcache_model_release(m_model);
    jitcache_runtime_close(m_runtime);
    TempDirTest::TearDown();
  }
  jitcache_status open(int32_t no_compile) {
    jitcache_runtime_close(m_runtime);
    m_runtime = nullptr;
    m_cache = (dir() / "cache").string();
    auto o = jitcache::testing::deviceless_runtime_options(m_cache.c_str());
    o.no_compile = no_compile;
    return jitcache_runtime_open(&o, &m_runtime);
  }
  jitcache_prepare_options model() const {
    jitcache_prepare_options p;
    jitcache_prepare_options_init(&p);
    p.checkpoint = k_checkpoint.c_str();
    p.target = "sm_90";
    return p;
  }
  nlohmann::json coverage() {
    const jitcache_prepare_options p = model();
    char* out = nullptr;
    EXPECT_EQ(jitcache_runtime_coverage(m_runtime, &p, &out), JITCACHE_OK) << last_error();
    nlohmann::json doc = nlohmann::json::parse(out ? out : "null");
    jitcache_string_free(out);
    return doc;
  }

  std::string m_cache;
  jitcache_runtime* m_runtime = nullptr;
  jitcache_model* m_model = nullptr;
};

TEST_F(CApiCoverageTest, TheOptionDefaultsToTheEnvironmentAndIsRangeChecked) {
  jitcache_runtime_options o;
  jitcache_runtime_options_init(&o);
  EXPECT_LT(o.no_compile, 0) << "_init leaves it to JITCACHE_NO_COMPILE";
  EXPECT_EQ(offsetof(jitcache_runtime_options, no_compile),
            offsetof(jitcache_runtime_options, verify_spec) + sizeof(double))
      << "a new field goes at the end";
  EXPECT_EQ(open(2), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.no_compile is 2"), std::string::npos) << last_error();
  testing::ScopedEnv bad("JITCACHE_NO_COMPILE", "sometimes");
  EXPECT_EQ(open(-1), JITCACHE_ERROR_INVALID_INPUT);
  EXPECT_NE(last_error().find("JITCACHE_NO_COMPILE"), std::string::npos) << last_error();
  EXPECT_EQ(open(0), JITCACHE_OK) << "the option beats the environment: " << last_error();
}

TEST_F(CApiCoverageTest, ACallerWhoseStructEndsBeforeTheFieldFollowsTheEnvironment) {
  testing::ScopedEnv on("JITCACHE_NO_COMPILE", "1");
  jitcache_runtime_options o;
  jitcache_runtime_options_init(&o);
  m_cache = (dir() / "cache").string();
  o.cache_dir = m_cache.c_str();
  o.device = JITCACHE_DEVICE_NONE;
  o.struct_size = offsetof(jitcache_runtime_options, no_compile);
  o.no_compile = 0;  // beyond the caller's struct: never read
  ASSERT_EQ(jitcache_runtime_open(&o, &m_runtime), JITCACHE_OK) << last_error();
  const jitcache_prepare_options p = model();
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &p, &m_model), JITCACHE_ERROR_UNAVAILABLE);
  EXPECT_NE(last_error().find("no-compile mode"), std::string::npos) << last_error();
}

TEST_F(CApiCoverageTest, NoCompileRefusesAColdCacheNamingEveryVariantThenServesAWarmOne) {
  ASSERT_EQ(open(1), JITCACHE_OK) << last_error();
  const nlohmann::json cold = coverage();
  ASSERT_TRUE(cold["variants"].is_array());
  ASSERT_FALSE(cold["variants"].empty());
  EXPECT_EQ(cold["covered"], false);
  EXPECT_EQ(cold["missing"], cold["variants"].size());
  EXPECT_EQ(cold["target"], "sm_90");
  const jitcache_prepare_options p = model();
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &p, &m_model), JITCACHE_ERROR_UNAVAILABLE);
  const std::string message = last_error();
  for (const auto& v : cold["variants"]) {
    EXPECT_TRUE(v["tier"].is_null());
    EXPECT_NE(message.find(v["label"].get<std::string>()), std::string::npos) << message;
    EXPECT_NE(message.find(v["key"].get<std::string>()), std::string::npos) << message;
  }
  EXPECT_NE(message.find("looked up in memory, disk (" + m_cache + ")"), std::string::npos) << message;

  ASSERT_EQ(open(0), JITCACHE_OK) << last_error();
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &p, &m_model), JITCACHE_OK) << last_error();
  jitcache_model_release(m_model);
  m_model = nullptr;
  ASSERT_EQ(open(1), JITCACHE_OK) << last_error();
  const nlohmann::json warm = coverage();
  EXPECT_EQ(warm["covered"], true);
  for (const auto& v : warm["variants"]) EXPECT_EQ(v["tier"], "local") << v.dump();
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &p, &m_model), JITCACHE_OK) << last_error();
  jitcache_prepare_stats stats;
  ASSERT_EQ(jitcache_model_stats(m_model, &stats), JITCACHE_OK);
  EXPECT_EQ(stats.compiled, 0u);
}

TEST_F(CApiCoverageTest, CoverageArgumentsAreChecked) {
  ASSERT_EQ(open(-1), JITCACHE_OK) << last_error();
  jitcache_prepare_options p = model();
  char* out = nullptr;
  EXPECT_EQ(jitcache_runtime_coverage(nullptr, &p, &out), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_runtime_coverage(m_runtime, nullptr, &out), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_runtime_coverage(m_runtime, &p, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  p.target = "sm_12";
  EXPECT_NE(jitcache_runtime_coverage(m_runtime, &p, &out), JITCACHE_OK);
  EXPECT_NE(last_error().find("sm_12"), std::string::npos) << last_error();
  EXPECT_EQ(out, nullptr);
}

TEST_F(CApiCoverageTest, TheCxxRuntimeCoverageCountsNothingAndFollowsPrepare) {
  auto rt = testing::open_deviceless_runtime(dir() / "cxx");
  ASSERT_TRUE(rt) << rt.error().to_string();
  const ModelSpec spec = testing::sm_90_model(k_checkpoint, RecordFormat::b12x_368);
  auto cold = (*rt)->coverage(spec);
  ASSERT_TRUE(cold) << cold.error().to_string();
  for (const VariantCoverage& v : *cold) EXPECT_FALSE(v.tier) << v.label;
  auto prepared = (*rt)->prepare(spec);
  ASSERT_TRUE(prepared) << prepared.error().to_string();
  const auto kernels = (*prepared)->kernels();
  auto after = (*rt)->coverage(spec);
  ASSERT_TRUE(after) << after.error().to_string();
  ASSERT_EQ(after->size(), kernels.size());
  for (std::size_t i = 0; i < after->size(); ++i) {
    EXPECT_EQ((*after)[i].key, kernels[i].key) << "coverage keys what prepare keys";
    EXPECT_EQ((*after)[i].tier, CoverageTier::memory) << "the first tier asked holds it now";
    EXPECT_EQ((*after)[i].format, RecordFormat::b12x_368);
  }
  // Coverage moved nothing: a second prepare finds every variant where the first left it.
  auto again = (*rt)->prepare(spec);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ((*again)->stats().cached, kernels.size());
  EXPECT_STREQ(to_string(CoverageTier::local), "local");
  EXPECT_STREQ(to_string(CoverageTier::provider), "provider");
}

}  // namespace
}  // namespace jitcache
