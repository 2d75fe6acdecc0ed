// The C ABI's handles against threads (runtime/capi/handles.hpp; jitcache.h, "Handles,
// ownership and thread safety"): closing a runtime or releasing a model while other threads
// call it lets each call finish or refuses it with "closed"; it never frees what a call
// uses. Closing and releasing twice is harmless.
#include <string>

#include "capi_test_support.hpp"
#include "close_race.hpp"
#include "jitcache/jitcache.h"
#include "test_support.hpp"

namespace jitcache {
namespace {

using jitcache::testing::CallEnd;

const std::string k_checkpoint = (jitcache::testing::source_dir() / "examples" / "glm5-mini").string();

bool says(const std::string& text) { return std::string(jitcache_last_error()).find(text) != std::string::npos; }

class CApiHandlesTest : public jitcache::testing::TempDirTest {
 protected:
  jitcache_runtime* open() {
    m_cache = (dir() / "cache").string();
    const auto options = jitcache::testing::deviceless_runtime_options(m_cache.c_str());
    jitcache_runtime* runtime = nullptr;
    EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_OK) << jitcache_last_error();
    return runtime;
  }

  jitcache_model* prepare(jitcache_runtime* runtime) {
    jitcache_model* model = nullptr;
    return jitcache_prepare(runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model) ==
                   JITCACHE_OK
               ? model
               : nullptr;
  }

  std::string m_cache;
};

// Issue 24 item 4: on main the threads called into the freed runtime (a crash).
TEST_F(CApiHandlesTest, ClosingARuntimeWhileThreadsPrepareLetsEachCallFinishOrRefusesIt) {
  jitcache_runtime* runtime = open();
  ASSERT_NE(runtime, nullptr);
  jitcache_model* warm = prepare(runtime);  // compiles; the threads below hit the cache
  ASSERT_NE(warm, nullptr) << jitcache_last_error();

  const auto tally = jitcache::testing::race_close(
      4,
      [&](int) {
        if (jitcache_model* model = prepare(runtime)) {
          jitcache_model_release(model);
          return CallEnd::answered;
        }
        return says("runtime closed") ? CallEnd::refused : CallEnd::other;
      },
      [&] { jitcache_runtime_close(runtime); });
  EXPECT_GT(tally.answered, 0);
  EXPECT_EQ(tally.refused, 4);
  EXPECT_EQ(tally.other, 0);

  // Every entry point that takes the closed runtime refuses it; closing again is harmless.
  jitcache_device_status device;
  EXPECT_EQ(jitcache_runtime_device(runtime, &device), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(says("jitcache_runtime_device: runtime closed")) << jitcache_last_error();
  jitcache_cache_status cache;
  EXPECT_EQ(jitcache_runtime_cache_status(runtime, &cache), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(jitcache_runtime_cache_dir(runtime), "");
  EXPECT_EQ(jitcache_declare_family(runtime, R"({"family": "f", "kind": "cuda", "facts": {}})"),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(says("runtime closed")) << jitcache_last_error();
  jitcache_lookup_outcome outcome;
  jitcache_kernel* kernel = nullptr;
  EXPECT_EQ(jitcache_lookup(runtime, "f", nullptr, 0, "sm_90", &outcome, &kernel), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(says("runtime closed")) << jitcache_last_error();
  jitcache_runtime_close(runtime);

  // The model prepared before is its own.
  int32_t layers = 0;
  EXPECT_EQ(jitcache_model_num_layers(warm, &layers), JITCACHE_OK) << jitcache_last_error();
  EXPECT_EQ(layers, 79);
  jitcache_model_release(warm);
}

TEST_F(CApiHandlesTest, ReleasingAModelWhileThreadsUseItLetsEachCallFinishOrRefusesIt) {
  jitcache_runtime* runtime = open();
  ASSERT_NE(runtime, nullptr);
  jitcache_model* model = prepare(runtime);
  ASSERT_NE(model, nullptr) << jitcache_last_error();
  jitcache_runtime_close(runtime);

  const auto tally = jitcache::testing::race_close(
      4,
      [&](int t) {
        jitcache_layer_info info;
        char* described = nullptr;
        const jitcache_status status = t % 2 == 0 ? jitcache_model_layer(model, 7, &info)
                                                  : jitcache_model_describe(model, &described);
        jitcache_string_free(described);
        if (status == JITCACHE_OK) return CallEnd::answered;
        return status == JITCACHE_ERROR_INVALID_ARGUMENT && says("model closed") ? CallEnd::refused : CallEnd::other;
      },
      [&] { jitcache_model_release(model); });
  EXPECT_GT(tally.answered, 0);
  EXPECT_EQ(tally.refused, 4);
  EXPECT_EQ(tally.other, 0);
  jitcache_writer_launch launch{};
  EXPECT_EQ(jitcache_launch_writer(model, 0, &launch, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(says("jitcache_launch_writer: model closed")) << jitcache_last_error();
  EXPECT_EQ(jitcache_model_host_write(model, 0, &launch), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(jitcache_model_target(model), "");
  jitcache_model_release(model);  // harmless
}

}  // namespace
}  // namespace jitcache
