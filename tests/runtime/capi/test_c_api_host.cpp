// The C ABI entry points the Python package stands on: prepare with options (revision),
// the JSON descriptions (model, scales) and the host executor, checked against the
// independent reference (tests/reference_nvfp4.hpp), the kv tools and the C++ runtime.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi_test_support.hpp"
#include "jitcache/jitcache.h"
#include "reference_nvfp4.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

std::string last_error() { return jitcache_last_error(); }

// A JSON document from a `char**` function, freed through the library.
nlohmann::json take_json(char* text) {
  EXPECT_NE(text, nullptr);
  if (text == nullptr) return {};
  nlohmann::json document = nlohmann::json::parse(text);
  jitcache_string_free(text);
  return document;
}

class CApiHostTest : public jitcache::testing::TempDirTest {
 protected:
  void TearDown() override {
    jitcache_model_release(m_model);
    jitcache_runtime_close(m_runtime);
    TempDirTest::TearDown();
  }

  void open_runtime() {
    m_cache_dir = (dir() / "cache").string();
    const auto options = jitcache::testing::deviceless_runtime_options(m_cache_dir.c_str());
    ASSERT_EQ(jitcache_runtime_open(&options, &m_runtime), JITCACHE_OK) << last_error();
  }

  std::string m_cache_dir;
  jitcache_runtime* m_runtime = nullptr;
  jitcache_model* m_model = nullptr;
};

// Random bf16 rows: mostly ordinary magnitudes, some zeros, some tiny, some large.
std::vector<std::uint16_t> random_rows(std::mt19937_64& rng, std::size_t tokens, std::size_t width) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<std::uint16_t> rows(tokens * width);
  for (auto& v : rows) {
    float x = normal(rng);
    switch (pick(rng)) {
      case 0: x = 0.0f; break;
      case 1: x *= 1e-30f; break;
      case 2: x *= 3e4f; break;
      default: x *= 0.05f; break;
    }
    v = reference::ref_float_to_bf16(x);
  }
  return rows;
}

// A writer launch over host vectors: every token, every slot of `cache`.
jitcache_writer_launch writer_launch(const std::vector<std::uint16_t>& kv, const std::vector<std::uint16_t>& pe,
                                     const std::vector<std::int64_t>& slots, std::vector<std::uint8_t>& cache,
                                     std::int64_t tokens, std::int64_t num_slots) {
  jitcache_writer_launch w{};
  w.kv_c = reinterpret_cast<std::uintptr_t>(kv.data());
  w.k_pe = reinterpret_cast<std::uintptr_t>(pe.data());
  w.slot_mapping = reinterpret_cast<std::uintptr_t>(slots.data());
  w.num_tokens = tokens;
  w.cache = reinterpret_cast<std::uintptr_t>(cache.data());
  w.num_slots = num_slots;
  return w;
}

TEST(CApiHost, RecordBytesAndBf16Rounding) {
  EXPECT_EQ(jitcache_record_bytes(JITCACHE_ROPE_BF16), 432u);
  EXPECT_EQ(jitcache_record_bytes(JITCACHE_ROPE_FP8), 368u);
  EXPECT_EQ(jitcache_record_bytes(static_cast<jitcache_rope>(7)), 0u);

  const float in[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* a tie: to even, 1.0 */, 1.01171875f /* to 1.015625 */,
                      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                      3.4e38f /* beyond bf16: rounds to infinity */, 1e-40f /* subnormal */};
  constexpr std::size_t n = sizeof in / sizeof in[0];
  std::uint16_t out[n] = {};
  ASSERT_EQ(jitcache_host_bf16_from_float(in, out, n), JITCACHE_OK) << last_error();
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], reference::ref_float_to_bf16(in[i])) << "value " << i;
  EXPECT_EQ(out[5], 0x7FFF);  // every NaN is the canonical one
  EXPECT_EQ(out[6], 0xFF80);
  EXPECT_EQ(out[7], 0x7F80);

  EXPECT_EQ(jitcache_host_bf16_from_float(nullptr, out, 1), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("in is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_host_bf16_from_float(nullptr, nullptr, 0), JITCACHE_OK);
}

// jitcache_host_write/gather against the independent reference, token by token, in both
// RoPE formats, for the identity and a dynamic scale, on fresh random data.
TEST(CApiHost, HostWriteAndGatherMatchTheReference) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiHost.HostWriteAndGatherMatchTheReference");
  std::mt19937_64 rng(seed);
  constexpr std::int64_t tokens = 37;
  const std::vector<std::uint16_t> kv = random_rows(rng, tokens, 512);
  const std::vector<std::uint16_t> pe = random_rows(rng, tokens, 64);
  for (const jitcache_rope rope : {JITCACHE_ROPE_BF16, JITCACHE_ROPE_FP8}) {
    for (const float scale : {1.0f, 7.440476e-06f, 3.5f}) {
      SCOPED_TRACE(::testing::Message() << "rope " << rope << " scale " << scale);
      const bool fp8 = rope == JITCACHE_ROPE_FP8, dynamic = scale != 1.0f;
      const std::size_t rb = jitcache_record_bytes(rope);
      // Slots in reverse, one token skipped (negative), so the mapping is really used.
      std::vector<std::int64_t> slots(tokens);
      for (std::int64_t t = 0; t < tokens; ++t) slots[t] = tokens - 1 - t;
      slots[3] = -1;
      constexpr std::uint8_t guard_fill = 0xAB;
      std::vector<std::uint8_t> cache(tokens * rb, guard_fill);
      std::uint32_t status = 0;
      jitcache_writer_launch w = writer_launch(kv, pe, slots, cache, tokens, tokens);
      w.status = reinterpret_cast<std::uintptr_t>(&status);
      ASSERT_EQ(jitcache_host_write(scale, rope, &w), JITCACHE_OK) << last_error();
      EXPECT_EQ(status, 0u);
      for (std::int64_t t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        const auto want = reference::ref_write_record(&kv[t * 512], &pe[t * 64], scale, dynamic, fp8);
        ASSERT_EQ(std::memcmp(want.data(), &cache[slots[t] * rb], rb), 0) << "token " << t;
      }
      // The skipped token's slot (tokens-1-3) was not written.
      const std::size_t untouched = static_cast<std::size_t>(tokens - 1 - 3) * rb;
      EXPECT_EQ(cache[untouched], guard_fill);

      std::vector<std::int32_t> rows(tokens);
      for (std::int64_t r = 0; r < tokens; ++r) rows[r] = static_cast<std::int32_t>(r);
      rows[5] = -1;  // a zero row
      std::vector<std::uint16_t> out(tokens * 576, 0x1234);
      jitcache_gather_launch g{};
      g.cache = w.cache;
      g.num_slots = tokens;
      g.slots = reinterpret_cast<std::uintptr_t>(rows.data());
      g.num_rows = tokens;
      g.out = reinterpret_cast<std::uintptr_t>(out.data());
      ASSERT_EQ(jitcache_host_gather(scale, rope, &g), JITCACHE_OK) << last_error();
      for (std::int64_t r = 0; r < tokens; ++r) {
        if (rows[r] < 0) {
          for (int e = 0; e < 576; ++e) ASSERT_EQ(out[r * 576 + e], 0u) << "zero row, element " << e;
          continue;
        }
        if (r == tokens - 1 - 3) continue;  // never written
        const auto want = reference::ref_gather_row(&cache[rows[r] * rb], scale, dynamic, fp8);
        ASSERT_EQ(std::memcmp(want.data(), &out[r * 576], 576 * 2), 0) << "row " << r;
      }
    }
  }
}

TEST(CApiHost, HostKernelsRefuseBadScalesRopesAndArguments) {
  std::vector<std::uint16_t> kv(512), pe(64);
  std::vector<std::int64_t> slots = {0};
  std::vector<std::uint8_t> cache(432);
  jitcache_writer_launch w = writer_launch(kv, pe, slots, cache, 1, 1);
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(), 1e-40f}) {
    EXPECT_EQ(jitcache_host_write(bad, JITCACHE_ROPE_BF16, &w), JITCACHE_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(last_error().find("jitcache_host_write: scale"), std::string::npos) << last_error();
  }
  EXPECT_EQ(jitcache_host_write(1.0f, static_cast<jitcache_rope>(5), &w), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no RoPE format 5"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);

  // The device's launch checks hold on the host: a misaligned k_pe, a short stride.
  jitcache_writer_launch misaligned = w;
  misaligned.k_pe += 2;
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &misaligned), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("k_pe"), std::string::npos) << last_error();
  jitcache_writer_launch narrow = w;
  narrow.kv_c_stride = 256;
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &narrow), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("kv_c_stride"), std::string::npos) << last_error();

  // A slot beyond the cache is the kernel's status bit, not a write out of bounds.
  slots[0] = 1;
  std::uint32_t status = 0;
  w.status = reinterpret_cast<std::uintptr_t>(&status);
  ASSERT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &w), JITCACHE_OK) << last_error();
  EXPECT_NE(status, 0u);
  EXPECT_TRUE(std::all_of(cache.begin(), cache.end(), [](std::uint8_t b) { return b == 0; }));
}

// The kv tools (what `jitcache kv quantize` runs) and the C ABI give the same bytes.
TEST(CApiHost, HostWriteIsTheKvToolsQuantize) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiHost.HostWriteIsTheKvToolsQuantize");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.03f);
  constexpr std::size_t tokens = 9;
  std::vector<float> values(tokens * 576);
  for (auto& v : values) v = normal(rng);
  const float scale = 1.2254464e-05f;
  const auto records = kv::quantize(values, 576, kv::RecordOptions{{scale, LatentScale::dynamic}, RecordFormat::b12x_368, 1});
  ASSERT_OK(records);

  std::vector<std::uint16_t> bits(values.size());
  ASSERT_EQ(jitcache_host_bf16_from_float(values.data(), bits.data(), values.size()), JITCACHE_OK);
  std::vector<std::uint16_t> kv(tokens * 512), pe(tokens * 64);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::copy_n(&bits[t * 576], 512, &kv[t * 512]);
    std::copy_n(&bits[t * 576 + 512], 64, &pe[t * 64]);
  }
  std::vector<std::int64_t> slots(tokens);
  for (std::size_t t = 0; t < tokens; ++t) slots[t] = static_cast<std::int64_t>(t);
  std::vector<std::uint8_t> cache(tokens * 368);
  jitcache_writer_launch w = writer_launch(kv, pe, slots, cache, tokens, tokens);
  ASSERT_EQ(jitcache_host_write(scale, JITCACHE_ROPE_FP8, &w), JITCACHE_OK) << last_error();
  EXPECT_EQ(cache, *records);
}

TEST_F(CApiHostTest, PrepareWithOptionsChecksTheStructAndPassesTheRevision) {
  open_runtime();
  jitcache_prepare_options options;
  jitcache_prepare_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof options);
  EXPECT_EQ(options.rope, JITCACHE_ROPE_BF16);
  options.checkpoint = k_checkpoint.c_str();
  options.target = "sm_90";

  jitcache_prepare_options garbage = options;
  garbage.struct_size = 8;
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &garbage, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("jitcache_prepare_with: options.struct_size is 8"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("jitcache_prepare_options_init"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_prepare_with(m_runtime, nullptr, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m_model, nullptr);

  // The example's sidecar records its model_revision: another revision is refused, naming
  // the field; the recorded one is accepted.
  options.revision = "1111111111111111111111111111111111111111";
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &options, &m_model), JITCACHE_ERROR_INVALID_INPUT);
  EXPECT_NE(last_error().find("model_revision"), std::string::npos) << last_error();
  EXPECT_EQ(m_model, nullptr);
  options.revision = "0ea160f27a530ae0f516cee123965851bea7cf86";
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &options, &m_model), JITCACHE_OK) << last_error();

  char* text = nullptr;
  ASSERT_EQ(jitcache_model_describe(m_model, &text), JITCACHE_OK) << last_error();
  const nlohmann::json d = take_json(text);
  EXPECT_EQ(d["target"], "sm_90");
  EXPECT_EQ(d["rope"], "bf16");
  EXPECT_EQ(d["stats"]["variants"], 4);
  EXPECT_EQ(d["stats"]["compiled"], 4);
  EXPECT_EQ(d["stats"]["stored"], 4);
  EXPECT_EQ(d["stats"]["from_remote"], 0) << "no remote tier configured";
  ASSERT_EQ(d["kernels"].size(), 4u);
  for (const auto& k : d["kernels"]) {
    EXPECT_EQ(k["target"], "sm_90");
    EXPECT_EQ(k["key"].get<std::string>().size(), 32u);
    EXPECT_TRUE(k["stored"].get<bool>());
    EXPECT_FALSE(k["loaded"].get<bool>());  // no device
  }
  EXPECT_EQ(d["scales"]["provenance"]["checkpoint_revision"], "0ea160f27a530ae0f516cee123965851bea7cf86");
  EXPECT_EQ(d["scales"]["layers"].size(), 79u);
  EXPECT_EQ(d["scales"]["dynamic_layers"], 78);
  EXPECT_EQ(jitcache_model_describe(m_model, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_model_describe(nullptr, &text), JITCACHE_ERROR_INVALID_ARGUMENT);
  jitcache_string_free(nullptr);
}

TEST_F(CApiHostTest, ResolveScalesIsTheScalesShowDocument) {
  char* text = nullptr;
  ASSERT_EQ(jitcache_resolve_scales(k_checkpoint.c_str(), nullptr, nullptr, &text), JITCACHE_OK) << last_error();
  const nlohmann::json d = take_json(text);
  EXPECT_EQ(d["num_hidden_layers"], 78);
  EXPECT_EQ(d["num_draft_layers"], 1);
  EXPECT_EQ(d["provenance"]["source"], "checkpoint");
  EXPECT_EQ(d["provenance"]["checkpoint_form"], "sidecar");
  EXPECT_EQ(d["layers"][0]["mode"], "dynamic");
  EXPECT_EQ(d["layers"][78]["source"], "draft-identity");

  // A malformed override is the resolver's error, naming the file.
  const auto bad = dir() / "bad.json";
  jitcache::testing::write_text(bad, "{\"format\": ");
  EXPECT_EQ(jitcache_resolve_scales(k_checkpoint.c_str(), bad.c_str(), nullptr, &text), JITCACHE_ERROR_INVALID_INPUT);
  EXPECT_NE(last_error().find("bad.json"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_resolve_scales((dir() / "missing").c_str(), nullptr, nullptr, &text), JITCACHE_ERROR_NOT_FOUND)
      << last_error();
  EXPECT_EQ(jitcache_resolve_scales("", nullptr, nullptr, &text), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_resolve_scales(k_checkpoint.c_str(), nullptr, nullptr, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
}

// A prepared model's host kernels use the layer's binding: a dynamic layer's records
// differ from the identity kernel's, and equal jitcache_host_write with the layer's scale.
TEST_F(CApiHostTest, ModelHostKernelsFollowTheLayerBinding) {
  open_runtime();
  ASSERT_EQ(jitcache_prepare(m_runtime, k_checkpoint.c_str(), JITCACHE_ROPE_BF16, "sm_90", nullptr, &m_model),
            JITCACHE_OK)
      << last_error();
  const std::uint64_t seed = jitcache::testing::test_seed("CApiHost.ModelHostKernelsFollowTheLayerBinding");
  std::mt19937_64 rng(seed);
  constexpr std::int64_t tokens = 4;
  const std::vector<std::uint16_t> kv = random_rows(rng, tokens, 512);
  const std::vector<std::uint16_t> pe = random_rows(rng, tokens, 64);
  std::vector<std::int64_t> slots = {0, 1, 2, 3};
  auto write = [&](auto&& run) {
    std::vector<std::uint8_t> cache(tokens * 432);
    jitcache_writer_launch w = writer_launch(kv, pe, slots, cache, tokens, tokens);
    EXPECT_EQ(run(w), JITCACHE_OK) << last_error();
    return cache;
  };
  jitcache_layer_info info;
  ASSERT_EQ(jitcache_model_layer(m_model, 7, &info), JITCACHE_OK);
  ASSERT_EQ(info.mode, JITCACHE_SCALE_DYNAMIC);
  const auto layer7 = write([&](const jitcache_writer_launch& w) { return jitcache_model_host_write(m_model, 7, &w); });
  const auto direct = write([&](const jitcache_writer_launch& w) { return jitcache_host_write(info.scale, JITCACHE_ROPE_BF16, &w); });
  const auto identity = write([&](const jitcache_writer_launch& w) { return jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &w); });
  EXPECT_EQ(layer7, direct);
  EXPECT_NE(layer7, identity);
  const auto draft = write([&](const jitcache_writer_launch& w) { return jitcache_model_host_write(m_model, 78, &w); });
  EXPECT_EQ(draft, identity);

  std::vector<std::uint8_t> cache = layer7;
  std::vector<std::int32_t> rows = {3, 2, 1, 0};
  std::vector<std::uint16_t> out(tokens * 576);
  jitcache_gather_launch g{};
  g.cache = reinterpret_cast<std::uintptr_t>(cache.data());
  g.num_slots = tokens;
  g.slots = reinterpret_cast<std::uintptr_t>(rows.data());
  g.num_rows = tokens;
  g.out = reinterpret_cast<std::uintptr_t>(out.data());
  ASSERT_EQ(jitcache_model_host_gather(m_model, 7, &g), JITCACHE_OK) << last_error();
  for (std::int64_t r = 0; r < tokens; ++r) {
    const auto want = reference::ref_gather_row(&cache[rows[r] * 432], info.scale, true, false);
    ASSERT_EQ(std::memcmp(want.data(), &out[r * 576], 576 * 2), 0) << "row " << r;
  }
  EXPECT_EQ(jitcache_model_host_gather(m_model, 79, &g), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no layer 79 (the model has 79)"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_model_host_write(nullptr, 0, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace jitcache
