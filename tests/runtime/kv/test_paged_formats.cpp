// The page-major records (flashinfer-dsv4-384, flashmla-v41-288) of the host executor, byte
// for byte against references written here from FlashInfer 0.7.2.post1's writers:
//   csrc/sparse_mla_sm120/dsv4_nvfp4_cache_ops.cu   (384: QuantizeAppendFirstKernel and the
//       owner-claim path, quantize_token), include/.../compute/nvfp4_quantization.cuh
//       (quantize_fp32_group16_to_nvfp4_regs), model/dsv4_nvfp4_layout.cuh, built with
//       -use_fast_math;
//   csrc/sparse_mla_sm120/dsv41_fp4_cache_ops.cu    (288: quantize_dsv41_group16,
//       QuantizeAppendKernel), model/dsv41_layout.cuh;
//   model/kv_storage.cuh (FooterScaleLayout: data_offset = row * DATA, scale_offset =
//       page_size * DATA + row * SCALE).
// The references use plain double arithmetic and nearest-value searches over the E4M3 and
// E2M1 grids, none of the kernels' bit tricks. The 384 reference takes rn(1 / scale) where
// FlashInfer's compiled writer has MUFU.RCP (docs/record-formats.md): the one step it
// cannot state exactly without a GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/host_executor.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using jitcache::testing::test_seed;

constexpr int k_page = 64;

float f_of_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bf16_value(std::uint16_t h) { return f_of_bits(static_cast<std::uint32_t>(h) << 16); }
std::uint16_t to_bf16(float x) {  // round to nearest even (inputs here are never NaN)
  const std::uint32_t u = bits_of(x);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// -use_fast_math's flush: a subnormal fp32 operand or result is a zero of its sign.
float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// E4M3 (e4m3fn) values by code; 0x7F / 0xFF NaN.
double e4m3_of(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}
// cvt.rn.satfinite.e4m3x2.f32 of x >= 0 or +inf: the nearest code of 0..0x7E, ties to the
// even code, beyond 448 saturating.
int e4m3_code(double x) {
  if (x >= 448.0) return 0x7e;
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(e4m3_of(c) - x), db = std::fabs(e4m3_of(best) - x);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best;
}
// cvt.rn.satfinite.e2m1x2.f32 (cuda_fp4.hpp's rule): nearest of 0, .5, 1, 1.5, 2, 3, 4, 6,
// ties to the even code, saturating at 6, NaN to +6 (0x7), the sign kept on a zero.
int e2m1_code(float x) {
  if (std::isnan(x)) return 0x7;
  static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double a = std::fabs(static_cast<double>(x));
  int best = 7;
  if (a < 6.0) {
    best = 0;
    for (int c = 1; c < 8; ++c) {
      const double d = std::fabs(mags[c] - a), db = std::fabs(mags[best] - a);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
  }
  return best | (std::signbit(x) ? 0x8 : 0);
}
double e2m1_of(int code) {
  static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -mags[code & 7] : mags[code & 7];
}

struct Paged {
  int data, footer;  // bytes per slot in the page's data part and footer
  std::size_t data_at(long slot) const {
    return static_cast<std::size_t>(slot / k_page) * k_page * (data + footer) + (slot % k_page) * data;
  }
  std::size_t footer_at(long slot) const {
    return static_cast<std::size_t>(slot / k_page) * k_page * (data + footer) + k_page * data + (slot % k_page) * footer;
  }
};
constexpr Paged k_384{352, 32};
constexpr Paged k_288{256, 32};

// FlashInfer's quantize_fp32_group16_to_nvfp4_regs as compiled with -use_fast_math for
// sm_120a: amax by FMNMX.FTZ, amax / 6.f as FMUL.FTZ by 0x3E2AAAAB, scale_inv = 1 / scale
// (MUFU.RCP there, rn here) or 0, values * scale_inv by FMUL.FTZ, cvt to E2M1.
void ref_group_384(const std::uint16_t* in, std::uint8_t* codes, std::uint8_t* scale) {
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const float v = std::fabs(ftz(bf16_value(in[i])));
    if (v > amax) amax = v;  // NaN compares false: ignored, as fmaxf
  }
  const float scaled = ftz(amax * f_of_bits(0x3e2aaaabu));
  const int sf = e4m3_code(scaled);
  *scale = static_cast<std::uint8_t>(sf);
  const double value = e4m3_of(sf);
  const float inv = value == 0.0 ? 0.0f : static_cast<float>(1.0 / value);
  for (int i = 0; i < 8; ++i) {
    const int lo = e2m1_code(ftz(ftz(bf16_value(in[2 * i])) * inv));
    const int hi = e2m1_code(ftz(ftz(bf16_value(in[2 * i + 1])) * inv));
    codes[i] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

// dsv41_fp4_cache_ops.cu's quantize_dsv41_group16: poison, then clamp(amax / 6, 2^-9, 448)
// to E4M3, values / scale (exact division), cvt to E2M1.
void ref_group_288(const std::uint16_t* in, std::uint8_t* codes, std::uint8_t* scale) {
  bool poisoned = false;
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const float v = bf16_value(in[i]);
    poisoned = poisoned || !std::isfinite(v);
    if (std::fabs(ftz(v)) > amax) amax = std::fabs(ftz(v));
  }
  if (poisoned) {
    std::memset(codes, 0, 8);
    *scale = 0x7f;
    return;
  }
  const float q = ftz(static_cast<float>(static_cast<double>(amax) / 6.0));  // double, then float: rn
  const int sf = e4m3_code(std::fmin(std::fmax(q, 0x1p-9f), 448.0f));
  *scale = static_cast<std::uint8_t>(sf);
  const double value = e4m3_of(sf);
  for (int i = 0; i < 8; ++i) {
    const int lo = e2m1_code(ftz(static_cast<float>(ftz(bf16_value(in[2 * i])) / value)));
    const int hi = e2m1_code(ftz(static_cast<float>(ftz(bf16_value(in[2 * i + 1])) / value)));
    codes[i] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

// The append writers: the lowest input row of a slot wins (FlashInfer's duplicate scan,
// and for more than 256 rows of the 384 the atomicMin owner claim: the same rule);
// negative and out-of-range slots write nothing. Bytes not written keep `cache`'s.
void ref_write(RecordFormat format, const std::vector<std::uint16_t>& rows, const std::vector<std::int64_t>& slots,
               std::vector<std::uint8_t>& cache) {
  const bool is_384 = format == RecordFormat::flashinfer_dsv4_384;
  const Paged geometry = is_384 ? k_384 : k_288;
  const long num_slots = static_cast<long>(cache.size() / (geometry.data + geometry.footer));
  for (std::size_t t = 0; t < slots.size(); ++t) {
    const std::int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;
    bool earlier = false;
    for (std::size_t prior = 0; prior < t; ++prior) earlier = earlier || slots[prior] == slot;
    if (earlier) continue;
    const std::uint16_t* in = rows.data() + t * 512;
    std::uint8_t* data = cache.data() + geometry.data_at(slot);
    std::uint8_t* footer = cache.data() + geometry.footer_at(slot);
    if (is_384) {
      for (int g = 0; g < 28; ++g) ref_group_384(in + 16 * g, data + 8 * g, footer + g);
      std::memcpy(data + 224, in + 448, 128);  // the RoPE's bf16 bits unchanged
      std::memset(footer + 28, 0, 4);
    } else {
      for (int g = 0; g < 32; ++g) ref_group_288(in + 16 * g, data + 8 * g, footer + g);
    }
  }
}

// The engines' readers: value = E2M1 x E4M3 scale (exact in bf16), a NaN scale a NaN
// group; the 384's RoPE as stored. A negative or out-of-range slot: a zero row.
std::vector<std::uint16_t> ref_read(RecordFormat format, const std::vector<std::uint8_t>& cache, std::int32_t slot) {
  const bool is_384 = format == RecordFormat::flashinfer_dsv4_384;
  const Paged geometry = is_384 ? k_384 : k_288;
  const long num_slots = static_cast<long>(cache.size() / (geometry.data + geometry.footer));
  std::vector<std::uint16_t> row(512, 0);
  if (slot < 0 || slot >= num_slots) return row;
  const std::uint8_t* data = cache.data() + geometry.data_at(slot);
  const std::uint8_t* footer = cache.data() + geometry.footer_at(slot);
  const int quantized = is_384 ? 448 : 512;
  for (int i = 0; i < quantized; ++i) {
    const int sf = footer[i / 16];
    const int code = (data[i / 2] >> (4 * (i % 2))) & 0xf;
    row[static_cast<std::size_t>(i)] =
        (sf & 0x7f) == 0x7f ? std::uint16_t{0x7fff} : to_bf16(static_cast<float>(e2m1_of(code) * e4m3_of(sf)));
  }
  if (is_384) std::memcpy(row.data() + 448, data + 224, 128);
  return row;
}

// Random rows over a wide magnitude range and arbitrary finite bits, then adversarial rows:
// zeros and -0, NaNs and infinities among values, an all-NaN group, values beyond 448 * 6,
// subnormals (alone in a group and among normals), E2M1 ties on power-of-two and other
// scales, and tiny groups whose scale is an E4M3 subnormal or the 2^-9 floor.
std::vector<std::uint16_t> make_rows(std::mt19937_64& rng, int random_rows, int* total) {
  const int edges = 10;
  *total = random_rows + edges;
  std::vector<std::uint16_t> rows(static_cast<std::size_t>(*total) * 512);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> log_mag(std::log(1e-4f), std::log(3000.0f));
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffff);
  for (int t = 0; t < random_rows; ++t) {
    std::uint16_t* r = rows.data() + static_cast<std::size_t>(t) * 512;
    for (int g = 0; g < 32; ++g) {
      const float mag = std::exp(log_mag(rng));
      for (int i = 0; i < 16; ++i) {
        std::uint16_t h;
        if (t % 6 == 5) {
          do h = static_cast<std::uint16_t>(bits(rng));
          while ((h & 0x7f80) == 0x7f80);
        } else {
          h = to_bf16(normal(rng) * mag);
        }
        r[16 * g + i] = h;
      }
    }
  }
  const std::uint16_t nan = 0x7fc0, snan = 0x7f81, inf = 0x7f80, ninf = 0xff80;
  int t = random_rows;
  auto row = [&](int k) { return rows.data() + static_cast<std::size_t>(k) * 512; };
  std::fill(row(t), row(t) + 512, 0);
  for (int i = 0; i < 512; i += 3) row(t)[i] = 0x8000;  // -0
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = to_bf16(std::sin(static_cast<float>(i)) * 4.0f);
  row(t)[5] = nan, row(t)[40] = snan, row(t)[77] = inf, row(t)[150] = ninf, row(t)[470] = nan, row(t)[500] = inf;
  for (int i = 256; i < 272; ++i) row(t)[i] = 0xffc1;  // an all-NaN group
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = to_bf16((i % 2 ? -1.0f : 1.0f) * (3000.0f + 977.0f * i));  // beyond 448 * 6
  row(t)[33] = 0x7f7f, row(t)[300] = 0xff7f;                                                        // the largest bf16
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = static_cast<std::uint16_t>(((i * 37) % 0x7f + 1) | (i % 3 ? 0 : 0x8000));  // subnormals
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = (i / 16) % 2 ? to_bf16(1.5f * (i % 7 - 3)) : static_cast<std::uint16_t>(i % 50 + 1);
  ++t;
  // E2M1 ties: amax 6 * 2^k gives a scale of 2^k; the other values sit on decision points.
  static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5.0f, 0.5f};
  for (int g = 0; g < 32; ++g) {
    const float scale = std::ldexp(1.0f, g % 12 - 6) * (g % 3 == 0 ? 1.0f : (g % 3 == 1 ? 1.5f : 1.125f));
    row(t)[16 * g] = to_bf16(6.0f * scale);
    for (int i = 1; i < 16; ++i) row(t)[16 * g + i] = to_bf16(ties[i - 1] * scale);
  }
  ++t;
  for (int g = 0; g < 32; ++g)  // tiny groups: E4M3-subnormal scales (384) and the 2^-9 floor (288)
    for (int i = 0; i < 16; ++i) row(t)[16 * g + i] = to_bf16(std::ldexp(1.0f, -8 - g % 8) * (i % 5 - 2) * 1.5f);
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = to_bf16(i % 16 == 0 ? 6.0f * 0x1p-10f : 0x1p-12f * (i % 4));  // sf at 2^-10 ties
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = static_cast<std::uint16_t>(i % 16 == 3 ? nan : to_bf16(0.001f * i));
  ++t;
  for (int i = 0; i < 512; ++i) row(t)[i] = to_bf16(std::ldexp(1.0f, (i % 60) - 30) * (i % 2 ? -1.0f : 1.0f));
  ++t;
  return rows;
}

struct Aligned {
  std::vector<jc::Vec16> storage;
  explicit Aligned(std::size_t bytes) : storage((bytes + 15) / 16) {}
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(storage.data());
  }
};

class PagedFormats : public ::testing::TestWithParam<RecordFormat> {};

// Slots: a random permutation over three pages, some rows padding (-1), some out of range,
// some duplicates of earlier (and later) rows' slots. The cache starts as random bytes, so
// that a byte the writer must not touch is seen untouched.
TEST_P(PagedFormats, WritesTheEngineWritersBytesAndGathersItsReadersValues) {
  const RecordFormat format = GetParam();
  const RecordFormatRow& row = k_record_formats[format];
  const std::uint64_t seed = test_seed(("PagedFormats." + std::string(row.name)).c_str());
  std::mt19937_64 rng(seed);
  int count = 0;
  const std::vector<std::uint16_t> rows = make_rows(rng, 150, &count);
  const long num_slots = 3 * k_page;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(count));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(num_slots));
  for (long i = 0; i < num_slots; ++i) perm[static_cast<std::size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < count; ++t) {
    const int kind = static_cast<int>(rng() % 10);
    slots[static_cast<std::size_t>(t)] = kind == 0 ? -1 : kind == 1 ? num_slots + static_cast<long>(rng() % 5)
                                         : kind == 2 && t > 0 ? slots[rng() % static_cast<std::size_t>(t)]
                                                              : perm[static_cast<std::size_t>(t) % perm.size()];
  }
  slots[3] = slots[2] = 17;  // a duplicate pair for sure: row 2 wins

  const std::size_t cache_bytes = static_cast<std::size_t>(num_slots) * row.record_bytes;
  Aligned in(rows.size() * 2), slot_buf(slots.size() * 8), cache(cache_bytes);
  std::memcpy(in.as<std::uint16_t>(), rows.data(), rows.size() * 2);
  std::memcpy(slot_buf.as<std::int64_t>(), slots.data(), slots.size() * 8);
  std::vector<std::uint8_t> want(cache_bytes);
  for (auto& b : want) b = static_cast<std::uint8_t>(rng());
  std::memcpy(cache.as<std::uint8_t>(), want.data(), cache_bytes);

  jc::WriterParams w{};
  w.kv_c = in.as<std::uint16_t>();
  w.kv_c_stride = 512;
  w.k_pe = nullptr;  // the RoPE is in the row
  w.slot_mapping = slot_buf.as<std::int64_t>();
  w.num_tokens = count;
  w.cache = cache.as<std::uint8_t>();
  w.num_slots = num_slots;
  const auto status = host_run_writer(LatentScale::identity, format, w, 1.0f);
  ASSERT_OK(status);
  EXPECT_EQ(*status, jc::k_status_slot_out_of_range);

  ref_write(format, rows, slots, want);
  const std::uint8_t* got = cache.as<std::uint8_t>();
  for (std::size_t i = 0; i < cache_bytes; ++i)
    ASSERT_EQ(got[i], want[i]) << row.name << " cache byte " << i << " (page " << i / (k_page * row.record_bytes)
                               << ", byte " << i % (k_page * row.record_bytes) << " of the page)";

  // Gather every slot, padding and out of range included.
  std::vector<std::int32_t> gather_slots;
  for (long s = 0; s < num_slots; ++s) gather_slots.push_back(static_cast<std::int32_t>(s));
  gather_slots.push_back(-1);
  gather_slots.push_back(static_cast<std::int32_t>(num_slots));
  Aligned g_slots(gather_slots.size() * 4), out(gather_slots.size() * 512 * 2);
  std::memcpy(g_slots.as<std::int32_t>(), gather_slots.data(), gather_slots.size() * 4);
  jc::GatherParams g{};
  g.cache = cache.as<std::uint8_t>();
  g.num_slots = num_slots;
  g.slots = g_slots.as<std::int32_t>();
  g.num_rows = static_cast<jc::i64>(gather_slots.size());
  g.out = out.as<std::uint16_t>();
  g.out_stride = 512;
  const auto gathered = host_run_gather(LatentScale::identity, format, g, 1.0f);
  ASSERT_OK(gathered);
  EXPECT_EQ(*gathered, jc::k_status_slot_out_of_range);
  for (std::size_t r = 0; r < gather_slots.size(); ++r) {
    const auto expect = ref_read(format, want, gather_slots[r]);
    for (int i = 0; i < 512; ++i)
      ASSERT_EQ(out.as<std::uint16_t>()[r * 512 + static_cast<std::size_t>(i)], expect[static_cast<std::size_t>(i)])
          << row.name << " gathered slot " << gather_slots[r] << " element " << i;
  }
}

// Only identity: neither engine's reader takes a per-layer scale; a cache of part of a page
// is refused, naming num_slots.
TEST_P(PagedFormats, RefusesOtherModesAndPartPages) {
  const RecordFormat format = GetParam();
  EXPECT_FALSE(allows(k_record_formats[format], LatentScale::dynamic));
  EXPECT_FALSE(allows(k_record_formats[format], LatentScale::per_token));
  Aligned in(512 * 2), slot_buf(8), cache(static_cast<std::size_t>(k_record_formats[format].record_bytes) * 65);
  jc::WriterParams w{};
  w.kv_c = in.as<std::uint16_t>();
  w.kv_c_stride = 512;
  w.slot_mapping = slot_buf.as<std::int64_t>();
  w.num_tokens = 1;
  w.cache = cache.as<std::uint8_t>();
  w.num_slots = 65;
  const auto part = host_run_writer(LatentScale::identity, format, w, 1.0f);
  ASSERT_FALSE(part);
  EXPECT_NE(part.error().message.find("num_slots"), std::string::npos) << part.error().message;
  EXPECT_NE(part.error().message.find("page size 64"), std::string::npos) << part.error().message;
  w.num_slots = 64;
  EXPECT_FALSE(host_run_writer(LatentScale::dynamic, format, w, 2.0f));
  // The identity kernel refuses a scale other than 1 and writes nothing.
  const auto scaled = host_run_writer(LatentScale::identity, format, w, 2.0f);
  ASSERT_OK(scaled);
  EXPECT_EQ(*scaled, jc::k_status_identity_scale_mismatch);
}

INSTANTIATE_TEST_SUITE_P(Formats, PagedFormats,
                         ::testing::Values(RecordFormat::flashinfer_dsv4_384, RecordFormat::flashmla_v41_288),
                         [](const auto& info) {
                           std::string name = k_record_formats[info.param].name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace jitcache
