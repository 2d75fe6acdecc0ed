// The C ABI (include/jitcache/jitcache.h): handles, error codes with a per-thread last
// error, the log callback, and the answers for the bundled GLM-5.x-shaped checkpoint,
// which must be the C++ runtime's answers.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capi_test_support.hpp"
#include "deviceless_runtime.hpp"
#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"
#include "test_scale_support.hpp"
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
    m_cache_dir = (dir() / "cache").string();
    const auto options = jitcache::testing::deviceless_runtime_options(m_cache_dir.c_str());
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
  auto rt = jitcache::testing::open_deviceless_runtime(dir() / "cache");
  ASSERT_OK(rt);
  auto cxx = (*rt)->prepare(jitcache::testing::sm_90_model(k_checkpoint, RecordFormat::b12x_432));
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
  EXPECT_NE(last_error().find("options.device is 7"), std::string::npos) << last_error();
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
  w.kv_c = w.k_pe = w.slot_mapping = base;  // strides 0: the dense defaults; reads may overlap
  w.cache = base + 2048;                    // written: apart from every other buffer
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
  g.cache = g.slots = base;
  g.out = base + 1024;
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

TEST_F(CApiTest, ALargerOptionsStructFromANewerHeaderIsAcceptedWhenItsTailIsZero) {
  // A caller built against a later header: its struct has more fields after ours. Left at
  // their defaults (zero) they ask for nothing this library lacks.
  struct Newer {
    jitcache_runtime_options v1;
    std::uint64_t future_field;
  } newer;
  std::memset(&newer, 0, sizeof newer);
  jitcache_runtime_options_init(&newer.v1);
  newer.v1.struct_size = sizeof newer;
  const std::string cache = (dir() / "newer").string();
  newer.v1.cache_dir = cache.c_str();
  newer.v1.device = JITCACHE_DEVICE_NONE;
  newer.future_field = 12345;
  jitcache_runtime* rt = nullptr;
  EXPECT_EQ(jitcache_runtime_open(&newer.v1, &rt), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("beyond the " + std::to_string(sizeof(jitcache_runtime_options)) + " bytes"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(rt, nullptr);
  newer.future_field = 0;
  ASSERT_EQ(jitcache_runtime_open(&newer.v1, &m_runtime), JITCACHE_OK) << last_error();
  EXPECT_EQ(std::string(jitcache_runtime_cache_dir(m_runtime)), cache);
}

// Issue 13: options.remote is the last field. A caller built before it existed passes a
// struct_size that ends before it, and whatever lies beyond is never read; one that has it
// gets its URL checked (the sharing itself: python/tests/test_remote.py).
TEST_F(CApiTest, TheRemoteOptionIsReadOnlyWhenTheCallersStructHasIt) {
  jitcache::testing::ScopedEnv no_remote("JITCACHE_REMOTE", nullptr);
  const std::string cache = (dir() / "cache").string();
  jitcache_runtime_options o;
  jitcache_runtime_options_init(&o);
  EXPECT_EQ(o.remote, nullptr);
  o.cache_dir = cache.c_str();
  o.device = JITCACHE_DEVICE_NONE;
  // The remote is never required (issue 24): an unusable one is a warning naming it, even
  // with a required cache, so the warning is what shows the field was read.
  o.cache_requirement = JITCACHE_CACHE_REQUIRED;
  o.remote = "http://127.0.0.1:6379";
  static std::mutex lines_mutex;
  static std::vector<std::string> lines;
  auto warned = [] {
    std::lock_guard lock(lines_mutex);
    const bool found = std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("remote cache not used") != std::string::npos && l.find("unsupported scheme 'http'") != std::string::npos;
    });
    lines.clear();
    return found;
  };
  ASSERT_EQ(jitcache_set_log_callback(
                [](void*, jitcache_log_level, const char* text, size_t length) {
                  std::lock_guard lock(lines_mutex);
                  lines.emplace_back(text, length);
                },
                nullptr),
            JITCACHE_OK);
  ASSERT_EQ(jitcache_runtime_open(&o, &m_runtime), JITCACHE_OK) << last_error();
  jitcache_runtime_close(std::exchange(m_runtime, nullptr));
  EXPECT_TRUE(warned()) << "the remote field is read";

  o.struct_size = offsetof(jitcache_runtime_options, remote);  // the header before issue 13
  ASSERT_EQ(jitcache_runtime_open(&o, &m_runtime), JITCACHE_OK) << last_error();
  jitcache_runtime_close(std::exchange(m_runtime, nullptr));
  EXPECT_FALSE(warned()) << "a struct without the field is not read past its end";
  jitcache_set_log_callback(nullptr, nullptr);

  o.struct_size = sizeof o;
  o.remote = "";  // "": JITCACHE_REMOTE, unset here
  ASSERT_EQ(jitcache_runtime_open(&o, &m_runtime), JITCACHE_OK) << last_error();
}

// Issue 10 item 11: SIZE_MAX opened, and a never-initialised struct (0x01 bytes) gave
// jobs = 16843009 and a garbage cache cap.
TEST_F(CApiTest, OptionsStructSizeAndEveryFieldAreRangeChecked) {
  const std::string cache = (dir() / "cache").string();
  auto expect_refused = [&](const jitcache_runtime_options& options, const std::string& needle) {
    jitcache_runtime* rt = nullptr;
    EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_ARGUMENT) << needle;
    EXPECT_NE(last_error().find(needle), std::string::npos) << last_error();
    EXPECT_EQ(rt, nullptr);
    jitcache_runtime_close(rt);
  };
  jitcache_runtime_options garbage;
  std::memset(&garbage, 0x01, sizeof garbage);
  expect_refused(garbage, "options.struct_size is 72340172838076673");

  auto valid = [&] {
    jitcache_runtime_options o;
    jitcache_runtime_options_init(&o);
    o.cache_dir = cache.c_str();
    o.device = JITCACHE_DEVICE_NONE;
    return o;
  };
  jitcache_runtime_options o = valid();
  o.struct_size = SIZE_MAX;
  expect_refused(o, "options.struct_size is " + std::to_string(SIZE_MAX));
  // The 0x01 fields behind a correct struct_size: each named.
  o = garbage;
  o.struct_size = sizeof o;
  o.cache_dir = cache.c_str();
  expect_refused(o, "options.jobs is 16843009");
  o = valid();
  o.jobs = 1025;
  expect_refused(o, "options.jobs is 1025, expected 0 (one per core) to 1024");
  o = valid();
  o.device_ordinal = -1;
  expect_refused(o, "options.device_ordinal is -1");
  o = valid();
  o.cache_max_bytes = 0x0101010101010101ull;
  expect_refused(o, "options.cache_max_bytes is 72340172838076673");
  o = valid();
  o.cache_max_bytes = 4096;
  expect_refused(o, "options.cache_max_bytes is 4096");
  o = valid();
  o.device = static_cast<jitcache_device_use>(0x01010101);
  expect_refused(o, "options.device is 16843009");

  o = valid();
  o.jobs = 1024;
  o.cache_max_bytes = 16ull << 20;
  ASSERT_EQ(jitcache_runtime_open(&o, &m_runtime), JITCACHE_OK) << last_error();
}

// Issue 10 item 11: slot_mapping, slots and status were not alignment-checked, and sizes,
// strides and bases that overflow the address arithmetic passed validation. Every case is
// refused before any device work, so without a GPU it is INVALID_ARGUMENT, not
// UNAVAILABLE; the same launch made valid is UNAVAILABLE.
TEST_F(CApiTest, LaunchArgumentsAreAlignedAndBoundedBeforeAnyDeviceWork) {
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_NE(prepare(), nullptr);
  alignas(16) static std::uint8_t buffer[4096];
  const auto base = reinterpret_cast<std::uint64_t>(buffer);
  constexpr std::int64_t k_i64_max = std::numeric_limits<std::int64_t>::max();
  constexpr std::uint64_t k_max = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t k_top = k_max & ~std::uint64_t{15};

  // The buffers only read share the base; the written ones lie apart (issue 16).
  auto writer = [&] {
    jitcache_writer_launch w{};
    w.kv_c = w.k_pe = w.slot_mapping = base;
    w.cache = base + 2048;   // 2 records of 432 bytes
    w.status = base + 3072;
    w.num_tokens = 2;
    w.num_slots = 2;
    return w;
  };
  auto gather = [&] {
    jitcache_gather_launch g{};
    g.cache = g.slots = base;
    g.out = base + 1024;     // 2 rows of 1152 bytes
    g.status = base + 3456;
    g.num_slots = 2;
    g.num_rows = 2;
    return g;
  };
  auto launch_writer = [&](const jitcache_writer_launch& w) {
    return jitcache_launch_writer(m_model, 3, &w, nullptr);
  };
  auto launch_gather = [&](const jitcache_gather_launch& g) {
    return jitcache_launch_gather(m_model, 3, &g, nullptr);
  };
  // The valid launch is UNAVAILABLE (no GPU); each case spoils one field of it and is
  // refused naming the kernel parameter.
  auto expect_refusals = [&](auto valid, auto launch, const auto& cases) {
    EXPECT_EQ(launch(valid()), JITCACHE_ERROR_UNAVAILABLE) << last_error();
    for (const auto& [spoil, field] : cases) {
      SCOPED_TRACE(field);
      auto spoilt = valid();
      spoil(spoilt);
      EXPECT_EQ(launch(spoilt), JITCACHE_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(last_error().find(std::string("kernel parameter '") + field + "'"), std::string::npos)
          << last_error();
    }
  };
  using WriterCase = std::pair<std::function<void(jitcache_writer_launch&)>, const char*>;
  const std::vector<WriterCase> writer_cases = {
      {[&](auto& w) { w.slot_mapping = base + 4; }, "slot_mapping"},
      {[&](auto& w) { w.status = base + 2; }, "status"},
      {[&](auto& w) { w.num_tokens = k_i64_max; }, "num_tokens"},
      {[&](auto& w) { w.num_slots = k_i64_max; }, "cache"},
      {[&](auto& w) { w.kv_c_stride = k_i64_max & ~std::int64_t{7}; }, "kv_c"},
      {[&](auto& w) { w.k_pe_stride = std::int64_t{1} << 62; }, "k_pe"},
      {[&](auto& w) { w.kv_c = k_top; }, "kv_c"},
      // 8 bytes left, 16 needed
      {[&](auto& w) { w.slot_mapping = k_max - 7; }, "slot_mapping"},
      {[&](auto& w) { w.cache = k_top; }, "cache"},
      {[&](auto& w) { w.num_tokens = -1; }, "num_tokens"},
  };
  expect_refusals(writer, launch_writer, writer_cases);
  using GatherCase = std::pair<std::function<void(jitcache_gather_launch&)>, const char*>;
  const std::vector<GatherCase> gather_cases = {
      {[&](auto& g) { g.slots = base + 2; }, "slots"},
      {[&](auto& g) { g.status = base + 1; }, "status"},
      {[&](auto& g) { g.num_rows = k_i64_max; }, "num_rows"},
      {[&](auto& g) { g.num_slots = k_i64_max; }, "cache"},
      {[&](auto& g) { g.out_stride = k_i64_max & ~std::int64_t{7}; }, "out"},
      {[&](auto& g) { g.out = k_top; }, "out"},
      // 4 bytes left, 8 needed
      {[&](auto& g) { g.slots = k_max - 3; }, "slots"},
      {[&](auto& g) { g.cache = k_top; }, "cache"},
  };
  expect_refusals(gather, launch_gather, gather_cases);

  // A count of 0 touches no buffer: pointers may be 0; without a GPU it is still
  // UNAVAILABLE, like any launch. A NULL status is valid.
  jitcache_writer_launch empty_w{};
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &empty_w, nullptr), JITCACHE_ERROR_UNAVAILABLE)
      << last_error();
  jitcache_gather_launch empty_g{};
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &empty_g, nullptr), JITCACHE_ERROR_UNAVAILABLE)
      << last_error();
  jitcache_writer_launch w = writer();
  w.status = 0;
  EXPECT_EQ(launch_writer(w), JITCACHE_ERROR_UNAVAILABLE) << last_error();
}

TEST_F(CApiTest, TheCxxLaunchApiRefusesTheSameArguments) {
  auto rt = jitcache::testing::open_deviceless_runtime(dir() / "cache");
  ASSERT_OK(rt);
  auto model = (*rt)->prepare(jitcache::testing::sm_90_model(k_checkpoint, RecordFormat::b12x_368));
  ASSERT_OK(model);
  alignas(16) static std::uint8_t buffer[4096];
  const auto base = reinterpret_cast<std::uint64_t>(buffer);
  WriterLaunch w;
  w.kv_c = w.k_pe = w.slot_mapping = base;
  w.cache = base + 2048;
  w.num_tokens = 1;
  w.num_slots = 1;
  auto launched = (*model)->launch_writer(0, w, nullptr);
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::unavailable);
  w.slot_mapping = base + 4;
  launched = (*model)->launch_writer(0, w, nullptr);
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::invalid_argument);
  EXPECT_CONTAINS(launched.error().message, "'slot_mapping': must be 8-byte aligned");
  GatherLaunch g;
  g.cache = g.slots = base;
  g.out = base + 1024;
  g.num_slots = std::numeric_limits<std::int64_t>::max();
  g.num_rows = 1;
  launched = (*model)->launch_gather(0, g, nullptr);
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::invalid_argument);
  EXPECT_CONTAINS(launched.error().message, "'cache'");
  // Overlap (issue 16): refused before the missing device is noticed.
  w.slot_mapping = base;
  w.cache = base + 1008;  // over kv_c's last 16 bytes
  launched = (*model)->launch_writer(0, w, nullptr);
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::invalid_argument);
  EXPECT_CONTAINS(launched.error().message, "kernel parameter 'cache': [0x");
  EXPECT_CONTAINS(launched.error().message, "overlaps 'kv_c'");
  g.num_slots = 1;
  g.status = g.out + 1148;  // the last 4 bytes of the one row
  launched = (*model)->launch_gather(0, g, nullptr);
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::invalid_argument);
  EXPECT_CONTAINS(launched.error().message, "kernel parameter 'out'");
  EXPECT_CONTAINS(launched.error().message, "overlaps 'status'");
}

// Issue 16: a buffer a kernel writes overlapping another buffer of the launch is refused
// on the host, before any device work (so INVALID_ARGUMENT here, without a GPU), naming
// both buffers with their byte ranges; buffers only read may overlap. The runtime has no
// device, so made-up addresses are safe: nothing is ever dereferenced.
TEST_F(CApiTest, LaunchesRefuseOverlappingBuffersBeforeAnyDeviceWork) {
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_NE(prepare(), nullptr);
  // vLLM's layout: kv_c and k_pe as column slices of one [4, 576] bf16 tensor.
  jitcache_writer_launch w{};
  w.kv_c = 0x100000;
  w.kv_c_stride = 576;
  w.k_pe = 0x100000 + 1024;
  w.k_pe_stride = 576;
  w.slot_mapping = 0x200000;
  w.num_tokens = 4;
  w.cache = 0x300000;
  w.num_slots = 8;
  w.status = 0x400000;
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &w, nullptr), JITCACHE_ERROR_UNAVAILABLE) << last_error();
  const struct {
    const char* written;
    std::uint64_t jitcache_writer_launch::*field;
    std::uint64_t address;
    const char* other;
  } writer_cases[] = {
      {"cache", &jitcache_writer_launch::cache, 0x100000 + 4480 - 16, "kv_c"},
      {"cache", &jitcache_writer_launch::cache, 0x100000 + 4592, "k_pe"},  // past kv_c, in k_pe's last row
      {"cache", &jitcache_writer_launch::cache, 0x200000 - 3456 + 16, "slot_mapping"},
      {"cache", &jitcache_writer_launch::cache, 0x400000 - 3456 + 16, "status"},
      {"status", &jitcache_writer_launch::status, 0x100000 + 2000, "kv_c"},
      {"status", &jitcache_writer_launch::status, 0x200000 + 28, "slot_mapping"},
      {"cache", &jitcache_writer_launch::status, 0x300000 + 3452, "status"},
  };
  for (const auto& c : writer_cases) {
    SCOPED_TRACE(std::string(c.written) + " over " + c.other);
    jitcache_writer_launch bad = w;
    bad.*c.field = c.address;
    EXPECT_EQ(jitcache_launch_writer(m_model, 3, &bad, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_CONTAINS(last_error(), "kernel parameter '" + std::string(c.written) + "': [0x");
    EXPECT_CONTAINS(last_error(), "overlaps '" + std::string(c.other) + "' [0x");
  }
  // Only-read buffers overlapping one another pass the checks (then: no GPU).
  jitcache_writer_launch reads = w;
  reads.slot_mapping = reads.kv_c + 64;
  EXPECT_EQ(jitcache_launch_writer(m_model, 3, &reads, nullptr), JITCACHE_ERROR_UNAVAILABLE) << last_error();

  jitcache_gather_launch g{};
  g.cache = 0x100000;
  g.num_slots = 8;
  g.slots = 0x100000 + 432;  // inside the cache: both only read
  g.num_rows = 4;
  g.out = 0x300000;
  g.out_stride = 640;
  g.status = 0x400000;
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &g, nullptr), JITCACHE_ERROR_UNAVAILABLE) << last_error();
  jitcache_gather_launch bad = g;
  bad.status = g.out + 1152;  // in the gap after out's first row: out's range is conservative
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &bad, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "kernel parameter 'out': [0x300000, +4992 bytes) overlaps "
                          "'status' [0x300480, +4 bytes); a buffer the kernel writes may share no byte with "
                          "another buffer of the launch");
  bad = g;
  bad.out = 0x100000 + 3456 - 16;
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &bad, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_CONTAINS(last_error(), "kernel parameter 'out'");
  EXPECT_CONTAINS(last_error(), "overlaps 'cache'");
  bad = g;
  bad.status = g.slots + 12;
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &bad, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_CONTAINS(last_error(), "kernel parameter 'status'");
  bad = g;
  bad.num_slots = 0;  // the cache is never read: out may lie over it (slots moved off it)
  bad.slots = 0x200000;
  bad.out = g.cache;
  EXPECT_EQ(jitcache_launch_gather(m_model, 3, &bad, nullptr), JITCACHE_ERROR_UNAVAILABLE) << last_error();
}

// Issue 10 item 11: a callback calling jitcache_prepare for a key being compiled waited for
// its own compile for ever. Such calls are refused; the outer prepare finishes. The wait
// is bounded: a hang exits the test program instead of stalling the suite.
struct Reentrant {
  jitcache_runtime* runtime = nullptr;
  std::string checkpoint;
  std::string other_cache;
  std::mutex mutex;
  std::vector<std::pair<jitcache_status, std::string>> prepares;
  std::vector<std::pair<jitcache_status, std::string>> opens;
  int closes = 0;
};

void reenter(void* user_data, jitcache_log_level, const char*, size_t) {
  auto* r = static_cast<Reentrant*>(user_data);
  jitcache_model* model = nullptr;
  const jitcache_status prepared =
      jitcache_prepare(r->runtime, r->checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model);
  const std::string prepare_error = jitcache_last_error();
  jitcache_model_release(model);
  jitcache_runtime* other = nullptr;
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  options.cache_dir = r->other_cache.c_str();
  options.device = JITCACHE_DEVICE_NONE;
  const jitcache_status opened = jitcache_runtime_open(&options, &other);
  const std::string open_error = jitcache_last_error();
  jitcache_runtime_close(other);
  jitcache_runtime_close(r->runtime);  // refused: the runtime is the one logging
  std::lock_guard lock(r->mutex);
  r->prepares.emplace_back(prepared, prepare_error);
  r->opens.emplace_back(opened, open_error);
  ++r->closes;
}

TEST_F(CApiTest, LogCallbackCannotReenterPrepareOpenOrClose) {
  ASSERT_NE(open_runtime(), nullptr);
  Reentrant r;
  r.runtime = m_runtime;
  r.checkpoint = k_checkpoint.string();
  r.other_cache = (dir() / "other-cache").string();
  ASSERT_EQ(jitcache_set_log_level(JITCACHE_LOG_DEBUG), JITCACHE_OK);
  ASSERT_EQ(jitcache_set_log_callback(reenter, &r), JITCACHE_OK);
  auto outer = std::async(std::launch::async, [&] {
    jitcache_model* model = nullptr;
    const jitcache_status status =
        jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &model);
    return std::make_pair(status, model);
  });
  if (outer.wait_for(std::chrono::seconds(240)) != std::future_status::ready) {
    std::fprintf(stderr, "jitcache_prepare did not return within 240 s: a log callback deadlocked it\n");
    std::_Exit(97);
  }
  const auto [status, model] = outer.get();
  m_model = model;
  ASSERT_EQ(jitcache_set_log_callback(nullptr, nullptr), JITCACHE_OK);
  ASSERT_EQ(status, JITCACHE_OK);
  std::lock_guard lock(r.mutex);
  ASSERT_FALSE(r.prepares.empty());
  for (const auto& [code, message] : r.prepares) {
    EXPECT_EQ(code, JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("jitcache_prepare: called from inside a jitcache log callback"), std::string::npos)
        << message;
  }
  for (const auto& [code, message] : r.opens) {
    EXPECT_EQ(code, JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("jitcache_runtime_open: called from inside a jitcache log callback"),
              std::string::npos)
        << message;
  }
  // The runtime survived the closes attempted from the callback.
  EXPECT_GT(r.closes, 0);
  EXPECT_EQ(std::filesystem::path(jitcache_runtime_cache_dir(m_runtime)), dir() / "cache");
  jitcache_model* again = nullptr;
  ASSERT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &again),
            JITCACHE_OK)
      << last_error();
  jitcache_model_release(again);
}

// Issue 10 item 11: "  " was opened as a path (NOT_FOUND) although the environment
// variable and the docs treat a blank value as unset.
TEST_F(CApiTest, BlankScalesOverrideIsNone) {
  ASSERT_NE(open_runtime(), nullptr);
  for (const char* blank : {"", " ", "\t \n"}) {
    jitcache_model* model = nullptr;
    ASSERT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", blank, &model),
              JITCACHE_OK)
        << last_error();
    jitcache_layer_info info;
    ASSERT_EQ(jitcache_model_layer(model, 0, &info), JITCACHE_OK);
    EXPECT_EQ(info.source, JITCACHE_SOURCE_CHECKPOINT);
    jitcache_model_release(model);
  }
}

TEST_F(CApiTest, EmptyCheckpointPathIsNamed) {
  ASSERT_NE(open_runtime(), nullptr);
  jitcache_model* model = nullptr;
  EXPECT_EQ(jitcache_prepare(m_runtime, "", JITCACHE_ROPE_BF16, "sm_90", nullptr, &model),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "checkpoint directory: empty path; give the directory that holds config.json");
  EXPECT_EQ(model, nullptr);
  // Without a target on a runtime without a device, the empty path is still the error
  // (not the missing device).
  EXPECT_EQ(jitcache_prepare(m_runtime, "", JITCACHE_ROPE_BF16, nullptr, nullptr, &model),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "checkpoint directory: empty path; give the directory that holds config.json");
  EXPECT_EQ(model, nullptr);
}

TEST_F(CApiTest, ANewlineInTheCheckpointPathStaysInsideOneLogLine) {
  const std::filesystem::path odd = dir() / "ck\npt";
  std::filesystem::copy(k_checkpoint, odd, std::filesystem::copy_options::recursive);
  Captured captured;
  ASSERT_EQ(jitcache_set_log_callback(capture, &captured), JITCACHE_OK);
  ASSERT_NE(open_runtime(), nullptr);
  ASSERT_EQ(jitcache_prepare(m_runtime, odd.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &m_model),
            JITCACHE_OK)
      << last_error();
  std::lock_guard lock(captured.mutex);
  bool resolver_line = false;
  for (const auto& [level, text] : captured.lines) {
    EXPECT_EQ(text.find_first_of("\n\r"), std::string::npos) << text;
    resolver_line |= text.find("outer scales for " + (dir() / "ck\\x0apt").string() +
                               ": checkpoint metadata") != std::string::npos;
  }
  EXPECT_TRUE(resolver_line);
}

// NULL is the default cache directory; "" is a caller's empty variable, refused whatever
// the cache requirement (a memory-only fallback must not hide it).
TEST_F(CApiTest, AnEmptyCacheDirIsRefusedNamingIt) {
  jitcache::testing::ScopedEnv env("JITCACHE_DIR", (dir() / "env-cache").string());
  for (const jitcache_cache_requirement requirement : {JITCACHE_CACHE_FROM_ENVIRONMENT, JITCACHE_CACHE_OPTIONAL}) {
    jitcache_runtime_options options;
    jitcache_runtime_options_init(&options);
    options.cache_dir = "";
    options.device = JITCACHE_DEVICE_NONE;
    options.cache_requirement = requirement;
    jitcache_runtime* rt = nullptr;
    EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_ARGUMENT) << last_error();
    EXPECT_EQ(rt, nullptr);
    EXPECT_NE(last_error().find("cache_dir"), std::string::npos) << last_error();
    if (rt != nullptr) jitcache_runtime_close(rt);
  }
  EXPECT_FALSE(std::filesystem::exists(dir() / "env-cache"));
}

// Issue 10 items 7 and 11: the environment is checked at open; its errors are
// INVALID_INPUT (INVALID_ARGUMENT is for handles, enums and layers).
TEST_F(CApiTest, EnvironmentErrorsAtOpenAreInvalidInput) {
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  const std::string cache = (dir() / "cache").string();
  options.cache_dir = cache.c_str();
  options.device = JITCACHE_DEVICE_NONE;
  jitcache_runtime* rt = nullptr;
  {
    jitcache::testing::ScopedEnv strict("JITCACHE_STRICT", "maybe");
    EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_INPUT);
    EXPECT_NE(
        last_error().find("JITCACHE_STRICT=maybe: expected a boolean: 1, true, yes, on or 0, false, no, off"),
        std::string::npos)
        << last_error();
  }
  {
    jitcache::testing::ScopedEnv strict("JITCACHE_STRICT", "1");
    jitcache::testing::ScopedEnv typo("JITCACHE_STRCT_TYPO", "1");
    EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_INPUT);
    EXPECT_NE(last_error().find("JITCACHE_STRCT_TYPO"), std::string::npos) << last_error();
  }
  {
    jitcache::testing::ScopedEnv strict("JITCACHE_STRICT", "1");
    jitcache::testing::ScopedEnv level("JITCACHE_LOG_LEVEL", "bogus");
    EXPECT_EQ(jitcache_runtime_open(&options, &rt), JITCACHE_ERROR_INVALID_INPUT);
    EXPECT_NE(last_error().find("JITCACHE_LOG_LEVEL=bogus"), std::string::npos) << last_error();
  }
  EXPECT_EQ(rt, nullptr);
  // Not strict: a bad log level is a warning delivered to the callback, and open succeeds.
  jitcache::testing::ScopedEnv level("JITCACHE_LOG_LEVEL", "bogus");
  Captured captured;
  ASSERT_EQ(jitcache_set_log_callback(capture, &captured), JITCACHE_OK);
  ASSERT_EQ(jitcache_runtime_open(&options, &m_runtime), JITCACHE_OK) << last_error();
  std::lock_guard lock(captured.mutex);
  bool warned = false;
  for (const auto& [lvl, text] : captured.lines)
    warned |= lvl == JITCACHE_LOG_WARNING && text.find("JITCACHE_LOG_LEVEL=bogus") != std::string::npos;
  EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace jitcache
