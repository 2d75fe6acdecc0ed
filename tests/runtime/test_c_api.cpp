// The C ABI (include/jitcache/jitcache.h): handles, error codes with a per-thread last
// error, the log callback, and the answers for the bundled GLM-5.x-shaped checkpoint,
// which must be the C++ runtime's answers.
#include <cmath>
#include <cstring>
#include <mutex>
#include <regex>
#include <thread>

#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

std::string last_error() { return jitcache_last_error(); }

class CApiTest : public jitcache::testing::TempDirTest {
 protected:
  void TearDown() override {
    jitcache_model_release(m_model);
    jitcache_runtime_close(m_runtime);
    jitcache_set_log_callback(nullptr, nullptr);
    jitcache_set_log_level(JITCACHE_LOG_INFO);
    TempDirTest::TearDown();
  }

  jitcache_runtime* open_runtime() {
    jitcache_runtime_options options;
    jitcache_runtime_options_init(&options);
    m_cache_dir = (dir() / "cache").string();
    options.cache_dir = m_cache_dir.c_str();
    options.device = JITCACHE_DEVICE_NONE;
    EXPECT_EQ(jitcache_runtime_open(&options, &m_runtime), JITCACHE_OK) << last_error();
    return m_runtime;
  }

  jitcache_model* prepare(const char* target = "sm_90", jitcache_rope rope = JITCACHE_ROPE_BF16) {
    EXPECT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), rope, target, nullptr, &m_model), JITCACHE_OK)
        << last_error();
    return m_model;
  }

  std::string m_cache_dir;
  jitcache_runtime* m_runtime = nullptr;
  jitcache_model* m_model = nullptr;
};

TEST(CApi, VersionAndNames) {
  EXPECT_TRUE(std::regex_match(jitcache_version(), std::regex(R"(\d+\.\d+\.\d+)"))) << jitcache_version();
  EXPECT_EQ(jitcache_abi_version(), static_cast<uint32_t>(JITCACHE_ABI_VERSION));
  EXPECT_STREQ(jitcache_status_name(JITCACHE_OK), "JITCACHE_OK");
  EXPECT_STREQ(jitcache_status_name(JITCACHE_ERROR_COMPILE), "JITCACHE_ERROR_COMPILE");
  EXPECT_STREQ(jitcache_status_name(static_cast<jitcache_status>(99)), "JITCACHE_ERROR_UNKNOWN");
}

TEST_F(CApiTest, PreparesTheBundledCheckpointLikeTheCxxRuntime) {
  ASSERT_NE(open_runtime(), nullptr);
  EXPECT_EQ(std::filesystem::path(jitcache_runtime_cache_dir(m_runtime)), dir() / "cache");
  jitcache_device_status device;
  ASSERT_EQ(jitcache_runtime_device(m_runtime, &device), JITCACHE_OK);
  EXPECT_EQ(device.available, 0);
  EXPECT_STREQ(device.reason, "device use disabled");
  EXPECT_STREQ(device.target, "");

  ASSERT_NE(prepare(), nullptr);
  EXPECT_STREQ(jitcache_model_target(m_model), "sm_90");
  int32_t layers = 0;
  ASSERT_EQ(jitcache_model_num_layers(m_model, &layers), JITCACHE_OK);
  EXPECT_EQ(layers, 79);
  jitcache_prepare_stats stats;
  ASSERT_EQ(jitcache_model_stats(m_model, &stats), JITCACHE_OK);
  EXPECT_EQ(stats.variants, 4u);
  EXPECT_EQ(stats.compiled, 4u);
  EXPECT_EQ(stats.cached, 0u);
  EXPECT_GT(stats.wall_ms, 0.0);

  // The same cache through the C++ API: everything cached, and the same per-layer answers.
  RuntimeOptions options;
  options.cache_dir = dir() / "cache";
  options.device = DeviceUse::none;
  auto rt = Runtime::open(options);
  ASSERT_OK(rt);
  auto cxx = (*rt)->prepare(ModelSpec{k_checkpoint, RopeFormat::bf16, "sm_90", std::nullopt, std::nullopt});
  ASSERT_OK(cxx);
  EXPECT_EQ((*cxx)->stats().cached, 4u);
  ASSERT_EQ((*cxx)->layers().size(), 79u);
  int dynamic = 0;
  for (const LayerBinding& b : (*cxx)->layers()) {
    jitcache_layer_info info;
    ASSERT_EQ(jitcache_model_layer(m_model, b.layer, &info), JITCACHE_OK) << last_error();
    EXPECT_EQ(info.layer, b.layer);
    EXPECT_EQ(info.scale, b.scale) << "layer " << b.layer;
    EXPECT_EQ(info.mode, b.mode == ScaleMode::identity ? JITCACHE_SCALE_IDENTITY : JITCACHE_SCALE_DYNAMIC);
    dynamic += info.mode == JITCACHE_SCALE_DYNAMIC;
    EXPECT_EQ(info.source, b.layer < 78 ? JITCACHE_SOURCE_CHECKPOINT : JITCACHE_SOURCE_DRAFT_IDENTITY);
  }
  EXPECT_EQ(dynamic, 78);
}

TEST_F(CApiTest, SecondPrepareIsCachedAndModelsOutliveTheirRuntime) {
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_NE(prepare("sm_100a", JITCACHE_ROPE_FP8), nullptr);
  jitcache_model* first = std::exchange(m_model, nullptr);
  ASSERT_NE(prepare("sm_100a", JITCACHE_ROPE_FP8), nullptr);
  jitcache_prepare_stats stats;
  ASSERT_EQ(jitcache_model_stats(m_model, &stats), JITCACHE_OK);
  EXPECT_EQ(stats.compiled, 0u);
  EXPECT_EQ(stats.cached, 4u);

  jitcache_runtime_close(std::exchange(m_runtime, nullptr));
  jitcache_layer_info info;
  ASSERT_EQ(jitcache_model_layer(first, 5, &info), JITCACHE_OK) << last_error();
  EXPECT_EQ(info.mode, JITCACHE_SCALE_DYNAMIC);
  EXPECT_TRUE(std::isfinite(info.scale) && info.scale > 0.0f && info.scale != 1.0f);
  EXPECT_STREQ(jitcache_model_target(first), "sm_100a");
  jitcache_model_release(first);
}

TEST_F(CApiTest, BadArgumentsAreCodesWithMessages) {
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  EXPECT_EQ(jitcache_runtime_open(&options, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "jitcache_runtime_open: out is NULL");

  // Forgetting jitcache_runtime_options_init is caught, not read as garbage.
  jitcache_runtime_options raw;
  std::memset(&raw, 0, sizeof raw);
  jitcache_runtime* rt = nullptr;
  EXPECT_EQ(jitcache_runtime_open(&raw, &rt), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("jitcache_runtime_options_init"), std::string::npos) << last_error();
  EXPECT_EQ(rt, nullptr);

  options.device = static_cast<jitcache_device_use>(7);
  EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("device use 7"), std::string::npos) << last_error();
  EXPECT_EQ(rt, nullptr);

  EXPECT_EQ(jitcache_set_log_level(static_cast<jitcache_log_level>(-1)), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_model_num_layers(nullptr, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_runtime_device(nullptr, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(jitcache_runtime_cache_dir(nullptr), "");
  EXPECT_STREQ(jitcache_model_target(nullptr), "");
  jitcache_model_release(nullptr);
  jitcache_runtime_close(nullptr);

  ASSERT_NE(open_runtime(), nullptr);
  jitcache_model* model = nullptr;
  EXPECT_EQ(jitcache_prepare(m_runtime, nullptr, JITCACHE_ROPE_BF16, "sm_90", nullptr, &model),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), static_cast<jitcache_rope>(2), "sm_90", nullptr, &model),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("RoPE"), std::string::npos) << last_error();
  // No target and no device to detect one from.
  EXPECT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, nullptr, nullptr, &model),
            JITCACHE_ERROR_UNAVAILABLE);
  EXPECT_NE(last_error().find("no target"), std::string::npos) << last_error();
  EXPECT_NE(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_12", nullptr, &model),
            JITCACHE_OK);
  EXPECT_NE(last_error().find("sm_12"), std::string::npos) << last_error();
  const std::string missing = (dir() / "nowhere").string();
  EXPECT_NE(jitcache_prepare(m_runtime, missing.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model), JITCACHE_OK);
  EXPECT_NE(last_error().find(missing), std::string::npos) << last_error();
  const std::string no_scales = (dir() / "no-scales.json").string();
  EXPECT_NE(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", no_scales.c_str(), &model),
            JITCACHE_OK);
  EXPECT_NE(last_error().find("no-scales.json"), std::string::npos) << last_error();
  EXPECT_EQ(model, nullptr);  // outputs are written only on success
}

TEST_F(CApiTest, LayerQueriesAndLaunchesRefuseWithoutCrashing) {
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_NE(prepare(), nullptr);
  jitcache_layer_info info{};
  info.layer = -5;
  EXPECT_EQ(jitcache_model_layer(m_model, 79, &info), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "jitcache_model_layer: no layer 79 (the model has 79)");
  EXPECT_EQ(jitcache_model_layer(m_model, -1, &info), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(info.layer, -5);  // untouched on failure

  alignas(16) static std::uint8_t buffer[4096];
  const auto base = reinterpret_cast<std::uintptr_t>(buffer);
  jitcache_writer_launch w{};
  w.kv_c = w.k_pe = w.slot_mapping = w.cache = base;  // strides 0: the dense defaults
  w.num_tokens = 1;
  w.num_slots = 1;
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &w, nullptr), JITCACHE_ERROR_UNAVAILABLE);
  EXPECT_NE(last_error().find("not loaded"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_launch_writer(m_model, 500, &w, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, nullptr, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  w.kv_c += 2;
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &w, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("kv_c"), std::string::npos) << last_error();
  w.kv_c -= 2;
  w.kv_c_stride = 100;  // not >= 512
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &w, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("kv_c_stride"), std::string::npos) << last_error();

  jitcache_gather_launch g{};
  g.cache = g.slots = g.out = base;
  g.num_slots = 1;
  g.num_rows = 1;
  EXPECT_EQ(jitcache_launch_gather(m_model, 78, &g, nullptr), JITCACHE_ERROR_UNAVAILABLE);
  g.out_stride = 575;
  EXPECT_EQ(jitcache_launch_gather(m_model, 78, &g, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out_stride"), std::string::npos) << last_error();
}

TEST(CApi, LastErrorIsPerThreadAndSurvivesSuccess) {
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  ASSERT_EQ(jitcache_runtime_open(&options, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  ASSERT_FALSE(mine.empty());

  std::string other_before, other_after;
  std::thread other([&] {
    other_before = jitcache_last_error();
    jitcache_model_num_layers(nullptr, nullptr);
    other_after = jitcache_last_error();
  });
  other.join();
  EXPECT_EQ(other_before, "");
  EXPECT_EQ(other_after, "jitcache_model_num_layers: model is NULL");
  EXPECT_EQ(last_error(), mine);  // another thread's failure is not ours

  EXPECT_EQ(jitcache_set_log_level(JITCACHE_LOG_INFO), JITCACHE_OK);
  EXPECT_EQ(last_error(), mine);  // success leaves it as it was
}

struct Captured {
  std::mutex mutex;
  std::vector<std::pair<jitcache_log_level, std::string>> lines;
};

void capture(void* user_data, jitcache_log_level level, const char* message, size_t length) {
  auto* c = static_cast<Captured*>(user_data);
  std::lock_guard lock(c->mutex);
  EXPECT_EQ(std::strlen(message), length);
  c->lines.emplace_back(level, std::string(message, length));
}

TEST_F(CApiTest, LogCallbackReceivesTheResolverLineAndRespectsTheLevel) {
  Captured captured;
  ASSERT_EQ(jitcache_set_log_callback(capture, &captured), JITCACHE_OK);
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_NE(prepare(), nullptr);
  {
    std::lock_guard lock(captured.mutex);
    ASSERT_FALSE(captured.lines.empty());
    bool resolver_line = false;
    for (const auto& [level, text] : captured.lines) {
      EXPECT_GE(level, JITCACHE_LOG_INFO);  // debug is below the default threshold
      resolver_line |= level == JITCACHE_LOG_INFO && text.find("checkpoint metadata") != std::string::npos;
    }
    EXPECT_TRUE(resolver_line);
    captured.lines.clear();
  }

  ASSERT_EQ(jitcache_set_log_level(JITCACHE_LOG_OFF), JITCACHE_OK);
  jitcache_model_release(std::exchange(m_model, nullptr));
  ASSERT_NE(prepare(), nullptr);
  {
    std::lock_guard lock(captured.mutex);
    EXPECT_TRUE(captured.lines.empty());
  }

  ASSERT_EQ(jitcache_set_log_level(JITCACHE_LOG_INFO), JITCACHE_OK);
  ASSERT_EQ(jitcache_set_log_callback(nullptr, nullptr), JITCACHE_OK);
  jitcache_model_release(std::exchange(m_model, nullptr));
  ::testing::internal::CaptureStderr();
  ASSERT_NE(prepare(), nullptr);
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(stderr_text.find("jitcache INFO"), std::string::npos) << stderr_text;
  std::lock_guard lock(captured.mutex);
  EXPECT_TRUE(captured.lines.empty());  // the callback is gone
}

TEST_F(CApiTest, ALargerOptionsStructFromANewerHeaderIsAccepted) {
  // A caller built against a later header: its struct has more fields after ours.
  struct Newer {
    jitcache_runtime_options v1;
    std::uint64_t future_field;
  } newer;
  jitcache_runtime_options_init(&newer.v1);
  newer.v1.struct_size = sizeof newer;
  newer.future_field = 12345;
  const std::string cache = (dir() / "newer").string();
  newer.v1.cache_dir = cache.c_str();
  newer.v1.device = JITCACHE_DEVICE_NONE;
  ASSERT_EQ(jitcache_runtime_open(&newer.v1, &m_runtime), JITCACHE_OK) << last_error();
  EXPECT_EQ(std::string(jitcache_runtime_cache_dir(m_runtime)), cache);
}

}  // namespace
}  // namespace jitcache
