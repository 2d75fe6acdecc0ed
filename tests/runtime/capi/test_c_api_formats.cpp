// The C ABI's record formats: jitcache_host_write_format / _gather_format against the C++
// host executor they wrap, their checks (format, latent choice, the per-token scale rule,
// b12x-304 without RoPE), jitcache_format_record_bytes, and jitcache_prepare_with's
// format and latent_scale options, including a caller whose struct ends before them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi_test_support.hpp"
#include "every_slot_gather.hpp"
#include "jitcache/jitcache.h"
#include "reference_nvfp4.hpp"
#include "runtime/kv/host_executor.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

std::string last_error() { return jitcache_last_error(); }

bool mentions(const std::string& text) { return last_error().find(text) != std::string::npos; }

// The formats with one record per slot (the page-major ones have tests of their own).
constexpr std::int32_t k_formats[] = {JITCACHE_FORMAT_B12X_432, JITCACHE_FORMAT_B12X_368, JITCACHE_FORMAT_B12X_304,
                                      JITCACHE_FORMAT_FLASHMLA_352, JITCACHE_FORMAT_FLASHINFER_GLM_416};
// The first value that names no format.
constexpr std::int32_t k_no_format = JITCACHE_FORMAT_FLASHMLA_V41_288 + 1;

RecordFormat cpp_format(std::int32_t format) {
  switch (format) {
    case JITCACHE_FORMAT_B12X_432: return RecordFormat::b12x_432;
    case JITCACHE_FORMAT_B12X_368: return RecordFormat::b12x_368;
    case JITCACHE_FORMAT_B12X_304: return RecordFormat::b12x_304;
    case JITCACHE_FORMAT_FLASHMLA_352: return RecordFormat::flashmla_352;
    default: return RecordFormat::flashinfer_glm_416;
  }
}

// 16-byte aligned storage, as the launches require.
template <class T>
struct Aligned {
  explicit Aligned(std::size_t n, T fill = T{}) : storage((n * sizeof(T) + 15) / 16 + 1), count(n) {
    std::fill_n(data(), n, fill);
  }
  T* data() { return reinterpret_cast<T*>(storage.data()); }
  const T* data() const { return reinterpret_cast<const T*>(storage.data()); }
  std::uint64_t address() const { return reinterpret_cast<std::uintptr_t>(data()); }
  std::vector<T> values() const { return std::vector<T>(data(), data() + count); }
  std::vector<jc::Vec16> storage;
  std::size_t count;
};

// Random bf16 rows with per-token magnitudes from 2^-10 to 2^4, one all-zero token.
Aligned<std::uint16_t> random_rows(std::mt19937_64& rng, std::size_t tokens, std::size_t width) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-10.0f, 4.0f);
  Aligned<std::uint16_t> rows(tokens * width);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float magnitude = std::exp2(exponent(rng));
    for (std::size_t c = 0; c < width; ++c)
      rows.data()[t * width + c] = t == 1 ? 0 : reference::ref_float_to_bf16(normal(rng) * magnitude);
  }
  return rows;
}

struct Tokens {
  static constexpr std::int64_t count = 13;
  Aligned<std::uint16_t> kv, pe;
  Aligned<std::int64_t> slots{count};
  explicit Tokens(std::mt19937_64& rng) : kv(random_rows(rng, count, 512)), pe(random_rows(rng, count, 64)) {
    for (std::int64_t t = 0; t < count; ++t) slots.data()[t] = count - 1 - t;  // reversed
  }
  jitcache_writer_launch launch(Aligned<std::uint8_t>& cache, std::uint32_t* status) const {
    jitcache_writer_launch w{};
    w.kv_c = kv.address();
    w.k_pe = pe.address();
    w.slot_mapping = slots.address();
    w.num_tokens = count;
    w.cache = cache.address();
    w.num_slots = count;
    w.status = reinterpret_cast<std::uintptr_t>(status);
    return w;
  }
};

jitcache_gather_launch gather_launch(const Aligned<std::uint8_t>& cache, const Aligned<std::int32_t>& rows,
                                     Aligned<std::uint16_t>& out, std::uint32_t* status) {
  jitcache_gather_launch g{};
  g.cache = cache.address();
  g.num_slots = static_cast<std::int64_t>(rows.count);
  g.slots = rows.address();
  g.num_rows = static_cast<std::int64_t>(rows.count);
  g.out = out.address();
  g.status = reinterpret_cast<std::uintptr_t>(status);
  return g;
}

TEST(CApiFormats, RecordBytesPerFormat) {
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_B12X_432), 432u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_B12X_368), 368u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_B12X_304), 304u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_FLASHMLA_352), 352u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_FLASHINFER_GLM_416), 416u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_FLASHINFER_DSV4_384), 384u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_FLASHMLA_V41_288), 288u);
  EXPECT_EQ(jitcache_format_record_bytes(JITCACHE_FORMAT_FLASHMLA_V41_288 + 1), 0u);
  EXPECT_EQ(jitcache_format_record_bytes(-1), 0u);
  // The old function and the new one agree on the RoPE formats.
  EXPECT_EQ(jitcache_record_bytes(JITCACHE_ROPE_BF16), jitcache_format_record_bytes(JITCACHE_FORMAT_B12X_432));
  EXPECT_EQ(jitcache_record_bytes(JITCACHE_ROPE_FP8), jitcache_format_record_bytes(JITCACHE_FORMAT_B12X_368));
}

// Every mode each format has: the ABI's records and rows are the C++ host executor's,
// byte for byte (dense out_stride 0 gives the format's row width), and the status is clean.
TEST(CApiFormats, HostKernelsAreTheHostExecutorInEveryMode) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiFormats.HostKernelsAreTheHostExecutorInEveryMode");
  std::mt19937_64 rng(seed);
  const Tokens tokens(rng);
  struct Case {
    std::int32_t format;
    std::int32_t latent;
    float scale;
    LatentScale mode;
  };
  const float s_l = 7.440476e-06f;
  const Case cases[] = {
      {JITCACHE_FORMAT_B12X_432, JITCACHE_LATENT_PER_LAYER, 1.0f, LatentScale::identity},
      {JITCACHE_FORMAT_B12X_432, JITCACHE_LATENT_PER_LAYER, s_l, LatentScale::dynamic},
      {JITCACHE_FORMAT_B12X_368, JITCACHE_LATENT_PER_LAYER, 1.0f, LatentScale::identity},
      {JITCACHE_FORMAT_B12X_368, JITCACHE_LATENT_PER_LAYER, s_l, LatentScale::dynamic},
      {JITCACHE_FORMAT_B12X_368, JITCACHE_LATENT_PER_TOKEN, 1.0f, LatentScale::per_token},
      {JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_TOKEN, 1.0f, LatentScale::per_token},
      {JITCACHE_FORMAT_FLASHMLA_352, JITCACHE_LATENT_PER_LAYER, 1.0f, LatentScale::identity},
      {JITCACHE_FORMAT_FLASHMLA_352, JITCACHE_LATENT_PER_LAYER, s_l, LatentScale::dynamic},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "format " << c.format << " latent " << c.latent << " scale " << c.scale);
    const RecordFormat format = cpp_format(c.format);
    const std::size_t rb = jitcache_format_record_bytes(c.format);
    const std::size_t width = static_cast<std::size_t>(gathered_row_elems(format));
    const std::int64_t n = Tokens::count;

    Aligned<std::uint8_t> ours(n * rb, 0xAB), theirs(n * rb, 0xAB);
    std::uint32_t status = 0, their_status = 0;
    jitcache_writer_launch w = tokens.launch(ours, &status);
    ASSERT_EQ(jitcache_host_write_format(c.scale, c.format, c.latent, &w), JITCACHE_OK) << last_error();
    EXPECT_EQ(status, 0u);
    jitcache_writer_launch direct = tokens.launch(theirs, &their_status);
    jc::WriterParams p{};
    p.kv_c = reinterpret_cast<const jc::u16*>(direct.kv_c);
    p.kv_c_stride = 512;
    p.k_pe = reinterpret_cast<const jc::u16*>(direct.k_pe);
    p.k_pe_stride = 64;
    p.slot_mapping = reinterpret_cast<const jc::i64*>(direct.slot_mapping);
    p.num_tokens = n;
    p.cache = theirs.data();
    p.num_slots = n;
    ASSERT_OK(host_run_writer(c.mode, format, p, c.scale));
    ASSERT_EQ(ours.values(), theirs.values());
    // The all-zero token (1, at slot n - 2) is all zeros except flashmla's floored block
    // scales.
    const std::uint8_t* zero_record = ours.data() + (n - 2) * rb;
    if (c.format == JITCACHE_FORMAT_FLASHMLA_352)
      EXPECT_TRUE(std::all_of(zero_record + 320, zero_record + 352, [](std::uint8_t b) { return b == 0x01; }));
    else
      EXPECT_TRUE(std::all_of(zero_record, zero_record + rb, [](std::uint8_t b) { return b == 0; }));

    Aligned<std::int32_t> rows(n);
    for (std::int64_t r = 0; r < n; ++r) rows.data()[r] = static_cast<std::int32_t>(r);
    Aligned<std::uint16_t> out(n * width + 8, 0x1234), want(n * width + 8, 0x1234);
    status = 0;
    jitcache_gather_launch g = gather_launch(ours, rows, out, &status);
    ASSERT_EQ(jitcache_host_gather_format(c.scale, c.format, c.latent, &g), JITCACHE_OK) << last_error();
    EXPECT_EQ(status, 0u);
    const jc::GatherParams q =
        jitcache::testing::every_slot_gather(ours.data(), n, rows.data(), want.data(), static_cast<std::int64_t>(width));
    ASSERT_OK(host_run_gather(c.mode, format, q, c.scale));
    ASSERT_EQ(out.values(), want.values());
    // Dense rows of the format's width: nothing past the last row was written.
    for (std::size_t e = n * width; e < n * width + 8; ++e) EXPECT_EQ(out.data()[e], 0x1234) << e;
  }
}

// The old functions are the new ones with the RoPE formats and a per-layer scale.
TEST(CApiFormats, OldHostFunctionsAreTheRopeFormats) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiFormats.OldHostFunctionsAreTheRopeFormats");
  std::mt19937_64 rng(seed);
  const Tokens tokens(rng);
  for (const auto& [rope, format] : {std::pair{JITCACHE_ROPE_BF16, JITCACHE_FORMAT_B12X_432},
                                     std::pair{JITCACHE_ROPE_FP8, JITCACHE_FORMAT_B12X_368}}) {
    for (const float scale : {1.0f, 3.5f}) {
      const std::size_t rb = jitcache_record_bytes(rope);
      Aligned<std::uint8_t> a(Tokens::count * rb), b(Tokens::count * rb);
      jitcache_writer_launch wa = tokens.launch(a, nullptr), wb = tokens.launch(b, nullptr);
      ASSERT_EQ(jitcache_host_write(scale, rope, &wa), JITCACHE_OK) << last_error();
      ASSERT_EQ(jitcache_host_write_format(scale, format, JITCACHE_LATENT_PER_LAYER, &wb), JITCACHE_OK)
          << last_error();
      EXPECT_EQ(a.values(), b.values()) << "rope " << rope << " scale " << scale;
    }
  }
}

// b12x-304 reads no RoPE: a NULL k_pe is fine, and the record has none of it.
TEST(CApiFormats, B12x304TakesNoRope) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiFormats.B12x304TakesNoRope");
  std::mt19937_64 rng(seed);
  const Tokens tokens(rng);
  const std::int64_t n = Tokens::count;
  Aligned<std::uint8_t> with(n * 304), without(n * 304);
  jitcache_writer_launch w = tokens.launch(with, nullptr);
  ASSERT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_TOKEN, &w), JITCACHE_OK)
      << last_error();
  jitcache_writer_launch v = tokens.launch(without, nullptr);
  v.k_pe = 0;
  ASSERT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_TOKEN, &v), JITCACHE_OK)
      << last_error();
  EXPECT_EQ(with.values(), without.values());
  // [288, 292) and [296, 304) are zero; s_t at [292, 296) is the token's max |kv_c| / 2688.
  for (std::int64_t t = 0; t < n; ++t) {
    const std::uint8_t* rec = without.data() + tokens.slots.data()[t] * 304;
    EXPECT_TRUE(std::all_of(rec + 288, rec + 292, [](std::uint8_t b) { return b == 0; })) << t;
    EXPECT_TRUE(std::all_of(rec + 296, rec + 304, [](std::uint8_t b) { return b == 0; })) << t;
    float amax = 0.0f;
    for (int c = 0; c < 512; ++c)
      amax = std::max(amax, std::fabs(reference::ref_bf16_to_float(tokens.kv.data()[t * 512 + c])));
    float s_t;
    std::memcpy(&s_t, rec + 292, 4);
    EXPECT_EQ(s_t, amax / 2688.0f) << "token " << t;  // IEEE division: correctly rounded
  }
  // A gather row of 512 cannot be given a narrower stride.
  Aligned<std::int32_t> rows(1);
  Aligned<std::uint16_t> out(512);
  jitcache_gather_launch g = gather_launch(without, rows, out, nullptr);
  g.out_stride = 504;
  EXPECT_EQ(jitcache_host_gather_format(1.0f, JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_TOKEN, &g),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("out_stride")) << last_error();
  // The other formats still need k_pe.
  Aligned<std::uint8_t> cache(n * 368);
  jitcache_writer_launch fp8 = tokens.launch(cache, nullptr);
  fp8.k_pe = 0;
  EXPECT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_368, JITCACHE_LATENT_PER_TOKEN, &fp8),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("k_pe")) << last_error();
}

TEST(CApiFormats, HostKernelsRefuseWhatTheFormatDoesNotHave) {
  const std::uint64_t seed = jitcache::testing::test_seed("CApiFormats.HostKernelsRefuseWhatTheFormatDoesNotHave");
  std::mt19937_64 rng(seed);
  const Tokens tokens(rng);
  Aligned<std::uint8_t> cache(Tokens::count * 432);
  std::uint32_t status = 0;
  jitcache_writer_launch w = tokens.launch(cache, &status);

  const int unknown = JITCACHE_FORMAT_FLASHMLA_V41_288 + 1;
  EXPECT_EQ(jitcache_host_write_format(1.0f, unknown, JITCACHE_LATENT_PER_LAYER, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("jitcache_host_write_format: format is " + std::to_string(unknown))) << last_error();
  EXPECT_TRUE(mentions("0 (b12x-432), 1 (b12x-368), 2 (b12x-304), 3 (flashmla-352), 4 (flashinfer-glm-416), ")) << last_error();
  EXPECT_TRUE(mentions(" or " + std::to_string(JITCACHE_FORMAT_FLASHMLA_V41_288) + " (flashmla-v41-288)")) << last_error();
  EXPECT_EQ(jitcache_host_gather_format(1.0f, -1, JITCACHE_LATENT_PER_LAYER, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("args")) << last_error();
  EXPECT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_432, 2, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("latent is 2")) << last_error();

  // Per-token records only where the format has them.
  for (const std::int32_t format : {JITCACHE_FORMAT_B12X_432, JITCACHE_FORMAT_FLASHMLA_352}) {
    EXPECT_EQ(jitcache_host_write_format(1.0f, format, JITCACHE_LATENT_PER_TOKEN, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions("per-token")) << last_error();
  }
  EXPECT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_LAYER, &w),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("b12x-304")) << last_error();

  // A per-token launch given an outer scale: the kernel refuses (status bit 8) and the
  // call says why; nothing is written.
  for (const std::int32_t format : {JITCACHE_FORMAT_B12X_368, JITCACHE_FORMAT_B12X_304}) {
    std::fill_n(cache.data(), cache.count, std::uint8_t{0});
    status = 0;
    EXPECT_EQ(jitcache_host_write_format(0.5f, format, JITCACHE_LATENT_PER_TOKEN, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions("jitcache_host_write_format: scale is 0.5")) << last_error();
    EXPECT_TRUE(mentions("exactly 1.0")) << last_error();
    EXPECT_EQ(status, 8u);
    EXPECT_TRUE(std::all_of(cache.data(), cache.data() + cache.count, [](std::uint8_t b) { return b == 0; }));
  }
  Aligned<std::int32_t> rows(1);
  Aligned<std::uint16_t> out(576);
  jitcache_gather_launch g = gather_launch(cache, rows, out, nullptr);
  EXPECT_EQ(jitcache_host_gather_format(2.0f, JITCACHE_FORMAT_B12X_368, JITCACHE_LATENT_PER_TOKEN, &g),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("jitcache_host_gather_format: scale is 2")) << last_error();
  // A per-layer scale is checked as a scales file's value.
  EXPECT_EQ(jitcache_host_write_format(std::numeric_limits<float>::quiet_NaN(), JITCACHE_FORMAT_FLASHMLA_352,
                                       JITCACHE_LATENT_PER_LAYER, &w),
            JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("jitcache_host_write_format: scale")) << last_error();
}

class CApiFormatsPrepare : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_cache_dir = (dir() / "cache").string();
    const auto options = jitcache::testing::deviceless_runtime_options(m_cache_dir.c_str());
    ASSERT_EQ(jitcache_runtime_open(&options, &m_runtime), JITCACHE_OK) << last_error();
    jitcache_prepare_options_init(&m_options);
    m_options.checkpoint = k_checkpoint.c_str();
    m_options.target = "sm_90";
  }
  void TearDown() override {
    jitcache_model_release(m_model);
    jitcache_runtime_close(m_runtime);
    TempDirTest::TearDown();
  }
  nlohmann::json describe() {
    char* text = nullptr;
    EXPECT_EQ(jitcache_model_describe(m_model, &text), JITCACHE_OK) << last_error();
    if (text == nullptr) return {};
    nlohmann::json document = nlohmann::json::parse(text);
    jitcache_string_free(text);
    return document;
  }

  std::string m_cache_dir;
  jitcache_runtime* m_runtime = nullptr;
  jitcache_model* m_model = nullptr;
  jitcache_prepare_options m_options{};
};

TEST_F(CApiFormatsPrepare, InitDefaultsAndRefusals) {
  EXPECT_EQ(m_options.format, -1);
  EXPECT_EQ(m_options.latent_scale, JITCACHE_LATENT_PER_LAYER);

  jitcache_prepare_options bad = m_options;
  bad.format = 9;
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &bad, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("jitcache_prepare_with: options.format is 9")) << last_error();
  bad = m_options;
  bad.latent_scale = 3;
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &bad, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("options.latent_scale is 3")) << last_error();
  for (const std::int32_t format : {JITCACHE_FORMAT_B12X_432, JITCACHE_FORMAT_FLASHMLA_352}) {
    bad = m_options;
    bad.format = format;
    bad.latent_scale = JITCACHE_LATENT_PER_TOKEN;
    EXPECT_EQ(jitcache_prepare_with(m_runtime, &bad, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions("has no per-token records")) << last_error();
  }
  // With -1 the rope is read (and checked); with a format it is not.
  bad = m_options;
  bad.rope = static_cast<jitcache_rope>(6);
  EXPECT_EQ(jitcache_prepare_with(m_runtime, &bad, &m_model), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("no RoPE format 6")) << last_error();
  EXPECT_EQ(m_model, nullptr);
}

// A caller built against the header before formats: its struct ends after `revision`, and
// it gets the defaults (the record of `rope`, per-layer scales).
TEST_F(CApiFormatsPrepare, AnOlderCallersStructKeepsWorking) {
  struct OldOptions {
    size_t struct_size;
    const char* checkpoint;
    jitcache_rope rope;
    const char* target;
    const char* scales_override;
    const char* revision;
  };
  static_assert(sizeof(OldOptions) == offsetof(jitcache_prepare_options, format));
  OldOptions old{};
  old.struct_size = sizeof old;
  old.checkpoint = k_checkpoint.c_str();
  old.rope = JITCACHE_ROPE_FP8;
  old.target = "sm_90";
  // The library reads only struct_size bytes of it.
  ASSERT_EQ(jitcache_prepare_with(m_runtime, reinterpret_cast<const jitcache_prepare_options*>(&old), &m_model),
            JITCACHE_OK)
      << last_error();
  const nlohmann::json d = describe();
  EXPECT_EQ(d["format"], "b12x-368");
  EXPECT_EQ(d["rope"], "fp8");
  EXPECT_EQ(d["scales"]["dynamic_layers"], 78);
  std::set<std::string> modes;
  for (const auto& k : d["kernels"]) modes.insert(k["latent_scale"].get<std::string>());
  EXPECT_EQ(modes, (std::set<std::string>{"identity", "dynamic"}));
}

// format b12x-304 with the default latent choice is per-token (the only mode it has); the
// model's host kernels then write what jitcache_host_write_format writes.
TEST_F(CApiFormatsPrepare, B12x304ModelIsPerToken) {
  m_options.format = JITCACHE_FORMAT_B12X_304;
  m_options.rope = static_cast<jitcache_rope>(6);  // not read when a format is set
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &m_options, &m_model), JITCACHE_OK) << last_error();
  const nlohmann::json d = describe();
  EXPECT_EQ(d["format"], "b12x-304");
  EXPECT_TRUE(d["rope"].is_null());
  ASSERT_EQ(d["kernels"].size(), 2u);
  for (const auto& k : d["kernels"]) {
    EXPECT_EQ(k["latent_scale"], "per-token");
    EXPECT_EQ(k["format"], "b12x-304");
  }
  jitcache_layer_info info;
  ASSERT_EQ(jitcache_model_layer(m_model, 7, &info), JITCACHE_OK);
  EXPECT_EQ(info.scale, 1.0f);

  const std::uint64_t seed = jitcache::testing::test_seed("CApiFormatsPrepare.B12x304ModelIsPerToken");
  std::mt19937_64 rng(seed);
  const Tokens tokens(rng);
  Aligned<std::uint8_t> a(Tokens::count * 304), b(Tokens::count * 304);
  jitcache_writer_launch wa = tokens.launch(a, nullptr), wb = tokens.launch(b, nullptr);
  wa.k_pe = 0;
  ASSERT_EQ(jitcache_model_host_write(m_model, 7, &wa), JITCACHE_OK) << last_error();
  ASSERT_EQ(jitcache_host_write_format(1.0f, JITCACHE_FORMAT_B12X_304, JITCACHE_LATENT_PER_TOKEN, &wb), JITCACHE_OK);
  EXPECT_EQ(a.values(), b.values());
}

TEST_F(CApiFormatsPrepare, PerTokenOnB12x368AndFlashmlaPerLayer) {
  m_options.format = JITCACHE_FORMAT_B12X_368;
  m_options.latent_scale = JITCACHE_LATENT_PER_TOKEN;
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &m_options, &m_model), JITCACHE_OK) << last_error();
  nlohmann::json d = describe();
  EXPECT_EQ(d["format"], "b12x-368");
  for (const auto& k : d["kernels"]) EXPECT_EQ(k["latent_scale"], "per-token");
  jitcache_model_release(m_model);
  m_model = nullptr;

  m_options.format = JITCACHE_FORMAT_FLASHMLA_352;
  m_options.latent_scale = JITCACHE_LATENT_PER_LAYER;
  ASSERT_EQ(jitcache_prepare_with(m_runtime, &m_options, &m_model), JITCACHE_OK) << last_error();
  d = describe();
  EXPECT_EQ(d["format"], "flashmla-352");
  EXPECT_TRUE(d["rope"].is_null());
  std::set<std::string> modes;
  for (const auto& k : d["kernels"]) modes.insert(k["latent_scale"].get<std::string>());
  EXPECT_EQ(modes, (std::set<std::string>{"identity", "dynamic"}));
}

}  // namespace
}  // namespace jitcache
