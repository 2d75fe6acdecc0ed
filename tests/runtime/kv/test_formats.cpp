// Every record format and latent-scale mode of the host executor (the kernels' own lane
// bodies) against the independent reference in tests/reference_formats.hpp: byte for byte
// on fresh random data and edge rows, gathered rows bit for bit. Also: the formats' bodies
// (nvfp4_mla_formats.cuh) write and read exactly what nvfp4_mla.cuh's do on the variants
// both build, the per-token record's own scale, and what each format refuses.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_templates/variant_dimensions.hpp"
#include "reference_formats.hpp"
#include "runtime/kv/host_executor.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::reference;
using jitcache::testing::test_seed;

RefFormat ref_of(RecordFormat f) {
  switch (f) {
    case RecordFormat::b12x_432: return RefFormat::b12x_432;
    case RecordFormat::b12x_368: return RefFormat::b12x_368;
    case RecordFormat::b12x_304: return RefFormat::b12x_304;
    case RecordFormat::flashmla_352: return RefFormat::flashmla_352;
    case RecordFormat::flashinfer_glm_416: return RefFormat::flashinfer_glm_416;
    // Page-major records have their own reference (test_paged_formats.cpp).
    case RecordFormat::flashinfer_dsv4_384:
    case RecordFormat::flashmla_v41_288: ADD_FAILURE() << "a page-major format has no per-slot reference"; break;
  }
  return RefFormat::b12x_432;
}

RefMode ref_of(LatentScale m) {
  switch (m) {
    case LatentScale::identity: return RefMode::identity;
    case LatentScale::dynamic: return RefMode::dynamic;
    case LatentScale::per_token: return RefMode::per_token;
  }
  return RefMode::identity;
}

// Tokens as one [T, 576] bf16 tensor (kv_c columns 0..511, k_pe 512..575), 16-byte aligned.
struct Tokens {
  int count;
  std::vector<jc::Vec16> storage;
  explicit Tokens(int t) : count(t), storage(static_cast<std::size_t>(t) * 576 * 2 / 16) {}
  std::uint16_t* row(int t) { return reinterpret_cast<std::uint16_t*>(storage.data()) + static_cast<std::size_t>(t) * 576; }
};

std::uint16_t bf(float x) { return ref_float_to_bf16(x); }

// Random GLM-like tokens over a 10^4 magnitude range, one in eight arbitrary finite bf16
// bits, then edge rows: zeros, an all-NaN latent, NaN and infinities among values, values
// beyond 448 * 6, exact E2M1 ties on a power-of-two scale, subnormal block scales, and
// one tiny token whose s_t is an fp32 subnormal.
Tokens make_tokens(std::mt19937_64& rng, int random_rows) {
  const int edges = 8;
  Tokens tk(random_rows + edges);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> log_mag(std::log(0.004f), std::log(50.0f));
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffff);
  for (int t = 0; t < random_rows; ++t) {
    const float mag = std::exp(log_mag(rng));
    for (int c = 0; c < 576; ++c) {
      if (t % 8 == 7) {
        std::uint16_t h;
        do h = static_cast<std::uint16_t>(bits(rng));
        while ((h & 0x7f80) == 0x7f80);
        tk.row(t)[c] = h;
      } else {
        tk.row(t)[c] = bf(normal(rng) * mag * (c % 97 == 3 ? 1.0f : 0.25f));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int t = random_rows;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = 0;  // zeros
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = c < 512 ? bf(nan) : bf(0.5f);  // all-NaN latent
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = bf(c % 5 == 0 ? nan : c % 7 == 0 ? -inf : c % 11 == 0 ? inf : 0.3f * (c % 9));
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = bf((c % 2 ? -1.0f : 1.0f) * (3000.0f + 100.0f * (c % 13)));  // > 2688
  ++t;
  // Ties: block amax 6 (scale 1), every E2M1 midpoint and its neighbours.
  const float ties[16] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, 0.0f};
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = bf(ties[c % 16]);
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = bf(std::ldexp(1.0f + (c % 8) / 8.0f, -12 - c % 5));  // subnormal scales
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = static_cast<std::uint16_t>(c % 3 == 0 ? 0x0001 + c % 5 : 0x8000);  // bf16 subnormals
  ++t;
  for (int c = 0; c < 576; ++c) tk.row(t)[c] = bf(c == 17 ? 2.0e30f : 1.0e-3f * (c % 4));  // one huge value
  return tk;
}

struct FormatRun {
  std::vector<std::uint8_t> records;
  std::vector<std::uint16_t> rows;
};

FormatRun write_and_gather(RecordFormat f, LatentScale m, Tokens& tk, float scale, HostBodies bodies) {
  const int bytes = record_bytes(f);
  const int width = gathered_row_elems(f);
  std::vector<jc::Vec16> cache(static_cast<std::size_t>(tk.count) * bytes / 16 + 1);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tk.count));
  std::vector<std::int32_t> slots32(static_cast<std::size_t>(tk.count));
  for (int t = 0; t < tk.count; ++t) slots[t] = slots32[t] = tk.count - 1 - t;  // reversed: real slot mapping
  jc::WriterParams w{tk.row(0), 576, tk.row(0) + 512, 576, slots.data(), tk.count,
                     reinterpret_cast<jc::u8*>(cache.data()), tk.count, nullptr};
  if (gathered_row_elems(f) == 512) w.k_pe = nullptr;  // a format without RoPE reads none
  auto written = host_run_writer(m, f, w, scale, bodies);
  EXPECT_TRUE(written) << written.error().message;
  EXPECT_EQ(written.value_or(99), 0u);
  std::vector<jc::Vec16> out(static_cast<std::size_t>(tk.count) * static_cast<std::size_t>(width) * 2 / 16);
  jc::GatherParams g{reinterpret_cast<const jc::u8*>(cache.data()), tk.count, slots32.data(), tk.count,
                     reinterpret_cast<jc::u16*>(out.data()), width, nullptr};
  auto gathered = host_run_gather(m, f, g, scale, bodies);
  EXPECT_TRUE(gathered) << gathered.error().message;
  EXPECT_EQ(gathered.value_or(99), 0u);
  FormatRun r;
  const auto* c = reinterpret_cast<const std::uint8_t*>(cache.data());
  r.records.assign(c, c + static_cast<std::size_t>(tk.count) * bytes);
  const auto* o = reinterpret_cast<const std::uint16_t*>(out.data());
  r.rows.assign(o, o + static_cast<std::size_t>(tk.count) * width);
  return r;
}

// The scales the static modes are run with: identity's 1.0, and calibrated layers from
// shallow (subnormal-range blocks without it) to deep.
std::vector<float> scales_for(LatentScale m) {
  if (m == LatentScale::dynamic) return {0.02f / 2688.0f, 0.37f / 2688.0f, 5.2f / 2688.0f, 1.5f};
  return {1.0f};
}

TEST(RecordFormats, EveryFormatAndModeEqualsTheReferenceByteForByte) {
  const std::uint64_t seed = test_seed("RecordFormats.EveryFormatAndModeEqualsTheReference");
  std::mt19937_64 rng(seed);
  Tokens tk = make_tokens(rng, 96);
  int checked = 0;
  for (const RecordFormatRow& format : k_record_formats.rows)
    for (const LatentScaleRow& mode : k_latent_scales.rows) {
      if (!allows(format, mode.value) || format.page_size > 1) continue;  // page-major: test_paged_formats.cpp
      for (float s : scales_for(mode.value)) {
        const std::string what = std::string(format.name) + "/" + mode.name + " s=" + std::to_string(s);
        const FormatRun run = write_and_gather(format.value, mode.value, tk, s, HostBodies::as_generated);
        const int bytes = format.record_bytes;
        const int width = gathered_row_elems(format.value);
        for (int t = 0; t < tk.count; ++t) {
          const int slot = tk.count - 1 - t;
          const auto want = ref_write(ref_of(format.value), ref_of(mode.value), tk.row(t), tk.row(t) + 512, s);
          const std::uint8_t* got = run.records.data() + static_cast<std::size_t>(slot) * bytes;
          for (int i = 0; i < bytes; ++i)
            ASSERT_EQ(got[i], want[static_cast<std::size_t>(i)]) << what << " token " << t << " byte " << i;
          const auto row = ref_read(ref_of(format.value), ref_of(mode.value), got, s);
          for (int i = 0; i < width; ++i)
            ASSERT_EQ(run.rows[static_cast<std::size_t>(t) * width + i], row[static_cast<std::size_t>(i)])
                << what << " row " << t << " element " << i;
        }
        ++checked;
      }
    }
  EXPECT_EQ(checked, 4 + 7 + 1 + 5 + 5);  // every allowed (format, mode), dynamic at 4 scales
}

// nvfp4_mla_formats.cuh's bodies, run for the variants nvfp4_mla.cuh builds, write and read
// the same bytes: the new text is the old one generalised, not a second implementation.
TEST(RecordFormats, TheFormatsBodiesEqualTheFirstTextOnItsVariants) {
  const std::uint64_t seed = test_seed("RecordFormats.TheFormatsBodiesEqualTheFirstText");
  std::mt19937_64 rng(seed);
  Tokens tk = make_tokens(rng, 64);
  for (RecordFormat f : {RecordFormat::b12x_432, RecordFormat::b12x_368})
    for (LatentScale m : {LatentScale::identity, LatentScale::dynamic})
      for (float s : scales_for(m)) {
        const FormatRun first = write_and_gather(f, m, tk, s, HostBodies::as_generated);
        const FormatRun general = write_and_gather(f, m, tk, s, HostBodies::formats);
        EXPECT_EQ(first.records, general.records) << to_string(f) << "/" << to_string(m) << " s=" << s;
        EXPECT_EQ(first.rows, general.rows) << to_string(f) << "/" << to_string(m) << " s=" << s;
      }
}

TEST(RecordFormats, PerTokenRecordsCarryTheirOwnScale) {
  std::mt19937_64 rng(test_seed("RecordFormats.PerTokenRecordsCarryTheirOwnScale"));
  Tokens tk = make_tokens(rng, 16);
  for (RecordFormat f : {RecordFormat::b12x_368, RecordFormat::b12x_304}) {
    const FormatRun run = write_and_gather(f, LatentScale::per_token, tk, 1.0f, HostBodies::as_generated);
    const int bytes = record_bytes(f);
    for (int t = 0; t < tk.count; ++t) {
      const std::uint8_t* rec = run.records.data() + static_cast<std::size_t>(tk.count - 1 - t) * bytes;
      // s_t = max|kv_c| / 2688, correctly rounded: the double quotient of an 8-bit bf16
      // magnitude by 2688 is never a float midpoint, so rounding it once more is exact.
      double amax = 0.0;
      for (int i = 0; i < 512; ++i) {
        const double v = std::fabs(static_cast<double>(ref_bf16_to_float(tk.row(t)[i])));
        if (!std::isnan(v)) amax = std::max(amax, std::min(v, 3.3895313892515355e38));
      }
      float s_t;
      std::memcpy(&s_t, rec + 292, 4);
      EXPECT_EQ(s_t, static_cast<float>(amax / 2688.0)) << to_string(f) << " token " << t;
      // The bytes around it: [288,292) the RoPE scale (368) or zero (304), [296,304) zero.
      for (int i = 296; i < 304; ++i) EXPECT_EQ(rec[i], 0) << to_string(f) << " byte " << i;
      if (f == RecordFormat::b12x_304) {
        for (int i = 288; i < 292; ++i) EXPECT_EQ(rec[i], 0) << "byte " << i;
      }
      // A token of zeros or NaNs has s_t = 0 and an all-zero latent, and reads back as zeros.
      if (amax == 0.0) {
        for (int i = 0; i < 288; ++i) EXPECT_EQ(rec[i], 0) << to_string(f) << " token " << t << " byte " << i;
        for (int i = 0; i < 512; ++i)
          EXPECT_EQ(run.rows[static_cast<std::size_t>(t) * gathered_row_elems(f) + i], 0) << "token " << t;
      }
    }
  }
}

TEST(RecordFormats, FlashMlaScalesAreFlooredAndPermuted) {
  Tokens tk(1);
  for (int c = 0; c < 576; ++c) tk.row(0)[c] = 0;
  // Block b holds one value 6 * 2^(b - 20): its scale is 2^(b - 20), floored at 2^-9.
  for (int b = 0; b < 32; ++b) tk.row(0)[16 * b + 3] = bf(6.0f * std::ldexp(1.0f, b - 20));
  for (int i = 0; i < 64; ++i) tk.row(0)[512 + i] = bf(0.01f * (i - 32));
  const FormatRun run = write_and_gather(RecordFormat::flashmla_352, LatentScale::identity, tk, 1.0f, HostBodies::as_generated);
  for (int b = 0; b < 32; ++b) {
    const std::uint8_t sf = run.records[static_cast<std::size_t>(320 + 8 * (b % 4) + b / 4)];
    const double want = std::max(std::ldexp(1.0, b - 20), std::ldexp(1.0, -9));
    EXPECT_EQ(ref_e4m3_value(sf), std::min(want, 448.0)) << "block " << b;
    EXPECT_NE(sf, 0) << "a flashmla-352 scale is never 0 (block " << b << ")";
  }
  for (int i = 0; i < 64; ++i)  // unscaled E4M3 RoPE
    EXPECT_EQ(run.records[static_cast<std::size_t>(256 + i)], ref_e4m3(ref_bf16_to_float(tk.row(0)[512 + i]))) << i;
}

// FlashInfer's GLM record is b12x-432's bytes without its 16-byte pad: the same codes and
// linear scales, the same bf16 RoPE at 288 instead of 304, and the same gathered rows, for
// identity and for dynamic at s_l (FlashInfer's kv_global_scale).
TEST(RecordFormats, FlashInferGlmRecordsAreB12x432WithoutItsPad) {
  const std::uint64_t seed = test_seed("RecordFormats.FlashInferGlmRecordsAreB12x432WithoutItsPad");
  std::mt19937_64 rng(seed);
  Tokens tk = make_tokens(rng, 64);
  for (LatentScale m : {LatentScale::identity, LatentScale::dynamic})
    for (float s : scales_for(m)) {
      const FormatRun glm = write_and_gather(RecordFormat::flashinfer_glm_416, m, tk, s, HostBodies::as_generated);
      const FormatRun b12x = write_and_gather(RecordFormat::b12x_432, m, tk, s, HostBodies::as_generated);
      for (int slot = 0; slot < tk.count; ++slot) {
        const std::uint8_t* g = glm.records.data() + static_cast<std::size_t>(slot) * 416;
        const std::uint8_t* b = b12x.records.data() + static_cast<std::size_t>(slot) * 432;
        for (int i = 0; i < 416; ++i)
          ASSERT_EQ(g[i], b[i < 288 ? i : i + 16]) << to_string(m) << " s=" << s << " slot " << slot << " byte " << i;
      }
      EXPECT_EQ(glm.rows, b12x.rows) << to_string(m) << " s=" << s;
    }
}

TEST(RecordFormats, AModeAFormatIsNotWrittenWithIsRefused) {
  Tokens tk(1);
  std::vector<jc::Vec16> cache(64);
  std::int64_t slot = 0;
  jc::WriterParams w{tk.row(0), 576, tk.row(0) + 512, 576, &slot, 1, reinterpret_cast<jc::u8*>(cache.data()), 1, nullptr};
  const auto per_token_432 = host_run_writer(LatentScale::per_token, RecordFormat::b12x_432, w, 1.0f);
  ASSERT_FALSE(per_token_432);
  EXPECT_EQ(per_token_432.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(per_token_432.error().message.find("b12x-432 is not written with a per-token latent scale"),
            std::string::npos)
      << per_token_432.error().message;
  // FlashInfer's GLM reader takes one scale per layer and none per token: refused, saying so.
  const auto per_token_416 = host_run_writer(LatentScale::per_token, RecordFormat::flashinfer_glm_416, w, 1.0f);
  ASSERT_FALSE(per_token_416);
  EXPECT_NE(per_token_416.error().message.find("flashinfer-glm-416 is not written with a per-token latent scale (it "
                                               "takes: identity, dynamic): its reader, FlashInfer "
                                               "SparseMLAGlmNvfp4Sm120Wrapper (SM120), has no per-token scale"),
            std::string::npos)
      << per_token_416.error().message;
  const auto static_304 = host_run_writer(LatentScale::dynamic, RecordFormat::b12x_304, w, 0.5f);
  ASSERT_FALSE(static_304);
  EXPECT_NE(static_304.error().message.find("(it takes: per-token)"), std::string::npos) << static_304.error().message;
}

// A per-token kernel takes no outer scale: one given is refused with its own status bit and
// nothing is written, as the identity kernel refuses a scale other than 1.0.
TEST(RecordFormats, APerTokenKernelGivenAnOuterScaleDoesNothing) {
  Tokens tk(1);
  for (int c = 0; c < 576; ++c) tk.row(0)[c] = bf(0.5f);
  std::vector<jc::Vec16> cache(64);
  std::memset(cache.data(), 0xAB, cache.size() * sizeof(jc::Vec16));
  std::int64_t slot = 0;
  jc::WriterParams w{tk.row(0), 576, tk.row(0) + 512, 576, &slot, 1, reinterpret_cast<jc::u8*>(cache.data()), 1, nullptr};
  const auto status = host_run_writer(LatentScale::per_token, RecordFormat::b12x_368, w, 0.002f);
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ(*status, jc::fmt::k_status_per_token_scale_given);
  EXPECT_EQ(reinterpret_cast<const std::uint8_t*>(cache.data())[0], 0xAB);
}

// A record whose s_t is not a scale (negative, infinite, NaN: never written by a writer,
// so a corrupt or foreign record) reads as NaN latents, never as a hardware NaN payload.
TEST(RecordFormats, APerTokenRecordWithABadScaleReadsAsNaN) {
  for (float bad : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<jc::Vec16> record(23);
    auto* rec = reinterpret_cast<std::uint8_t*>(record.data());
    std::memset(rec, 0x22, 368);
    std::memcpy(rec + 292, &bad, 4);
    std::int32_t slot = 0;
    std::vector<jc::Vec16> out(576 * 2 / 16);
    jc::GatherParams g{rec, 1, &slot, 1, reinterpret_cast<jc::u16*>(out.data()), 576, nullptr};
    ASSERT_TRUE(host_run_gather(LatentScale::per_token, RecordFormat::b12x_368, g, 1.0f));
    const auto* row = reinterpret_cast<const std::uint16_t*>(out.data());
    for (int i = 0; i < 512; ++i) ASSERT_EQ(row[i], 0x7fff) << "s_t " << bad << " element " << i;
  }
}

}  // namespace
}  // namespace jitcache
