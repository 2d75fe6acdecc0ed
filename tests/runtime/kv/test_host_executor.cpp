// The host executor (the kernels' own lane bodies run on the CPU) against the
// independent reference in tests/reference_nvfp4.hpp: bit-identical records and
// gathered rows, on fresh random data and on edge cases.
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference_nvfp4.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/host_executor.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::reference;
using jitcache::testing::test_seed;

struct AlignedBytes {
  explicit AlignedBytes(std::size_t n) : storage((n + 15) / 16 + 1) {}
  std::uint8_t* data() { return reinterpret_cast<std::uint8_t*>(storage.data()); }
  std::vector<jc::Vec16> storage;
};

std::uint16_t bf16(float x) { return ref_float_to_bf16(x); }

// Gathers `rows` (two) of a b12x-432 cache of `num_slots` slots in identity mode into `out`
// (two rows of 576 bf16), which holds `fill` in every byte before; the status word.
Result<std::uint32_t> gather_two_rows(AlignedBytes& cache, std::int64_t num_slots, std::vector<std::int32_t> rows,
                                      float scale, std::uint8_t fill, AlignedBytes& out) {
  std::memset(out.data(), fill, 2 * 576 * 2);
  const jc::GatherParams g{cache.data(), num_slots, rows.data(), 2, reinterpret_cast<std::uint16_t*>(out.data()),
                           576, nullptr};
  return host_run_gather(LatentScale::identity, RecordFormat::b12x_432, g, scale);
}

// Tokens stored as one [T, 576] bf16 tensor: kv_c is columns 0..511, k_pe 512..575, so
// the kernels see real row strides.
struct Batch {
  int tokens = 0;
  std::vector<jc::Vec16> storage;
  std::uint16_t* rows() { return reinterpret_cast<std::uint16_t*>(storage.data()); }
  explicit Batch(int t) : tokens(t), storage(static_cast<std::size_t>(t) * 576 * 2 / 16) {}
};

// Post-RMSNorm-like latents: per token a layer magnitude from 0.004 to 50 (shallow
// layers sit in E4M3's subnormal range), Gaussian bulk with a few outliers; one token in
// eight is arbitrary finite bf16 bit patterns.
Batch random_batch(std::mt19937_64& rng, int tokens) {
  Batch b(tokens);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> log_mag(std::log(0.004f), std::log(50.0f));
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffff);
  for (int t = 0; t < tokens; ++t) {
    std::uint16_t* row = b.rows() + static_cast<std::size_t>(t) * 576;
    const float mag = std::exp(log_mag(rng));
    for (int c = 0; c < 576; ++c) {
      if (t % 8 == 7) {
        std::uint16_t h;
        do h = static_cast<std::uint16_t>(bits(rng));
        while ((h & 0x7f80) == 0x7f80);  // finite only; specials have their own tests
        row[c] = h;
      } else {
        const float outlier = (c % 97 == 3) ? 4.0f : 1.0f;
        row[c] = bf16(normal(rng) * mag * 0.25f * outlier);
      }
    }
  }
  return b;
}

struct Variant {
  LatentScale latent;
  RecordFormat rope;
};
const Variant k_variants[] = {{LatentScale::identity, RecordFormat::b12x_432},
                              {LatentScale::identity, RecordFormat::b12x_368},
                              {LatentScale::dynamic, RecordFormat::b12x_432},
                              {LatentScale::dynamic, RecordFormat::b12x_368}};

std::string name(const Variant& v) {
  return std::string(to_string(v.latent)) + "/" + to_string(v.rope);
}

// Writes a batch through the host executor into a cache of `slots` records laid out
// by `slot_of`, then checks every written record against the reference, untouched
// records against the sentinel, then gathers and checks every row.
void check_round_trip(Batch& batch, const Variant& v, float scale, const std::vector<std::int64_t>& slot_of,
                      std::int64_t slots) {
  const bool dynamic = v.latent == LatentScale::dynamic;
  const bool fp8 = v.rope == RecordFormat::b12x_368;
  const int rb = ref_record_bytes(fp8);
  AlignedBytes cache(static_cast<std::size_t>(slots) * rb);
  std::memset(cache.data(), 0xA5, static_cast<std::size_t>(slots) * rb);

  jc::WriterParams w{};
  w.kv_c = batch.rows();
  w.kv_c_stride = 576;
  w.k_pe = batch.rows() + 512;
  w.k_pe_stride = 576;
  w.slot_mapping = slot_of.data();
  w.num_tokens = batch.tokens;
  w.cache = cache.data();
  w.num_slots = slots;
  auto status = host_run_writer(v.latent, v.rope, w, scale);
  ASSERT_OK(status);
  ASSERT_EQ(*status, 0u);

  std::vector<bool> written(slots, false);
  for (int t = 0; t < batch.tokens; ++t) {
    if (slot_of[t] < 0) continue;
    written[slot_of[t]] = true;
    const std::uint16_t* row = batch.rows() + static_cast<std::size_t>(t) * 576;
    const auto expected = ref_write_record(row, row + 512, scale, dynamic, fp8);
    const std::uint8_t* got = cache.data() + slot_of[t] * rb;
    for (int i = 0; i < rb; ++i)
      ASSERT_EQ(got[i], expected[i]) << name(v) << " token " << t << " byte " << i;
  }
  for (std::int64_t s = 0; s < slots; ++s) {
    if (written[s]) continue;
    for (int i = 0; i < rb; ++i) ASSERT_EQ(cache.data()[s * rb + i], 0xA5) << "slot " << s;
  }

  // Gather every slot once, in reverse, plus padding rows (-1).
  std::vector<std::int32_t> gather_slots;
  for (std::int64_t s = slots - 1; s >= 0; --s) {
    if (written[s]) gather_slots.push_back(static_cast<std::int32_t>(s));
    if (s % 5 == 0) gather_slots.push_back(-1);
  }
  AlignedBytes out(gather_slots.size() * 576 * 2);
  jc::GatherParams g{};
  g.cache = cache.data();
  g.num_slots = slots;
  g.slots = gather_slots.data();
  g.num_rows = static_cast<std::int64_t>(gather_slots.size());
  g.out = reinterpret_cast<std::uint16_t*>(out.data());
  g.out_stride = 576;
  auto gstatus = host_run_gather(v.latent, v.rope, g, scale);
  ASSERT_OK(gstatus);
  ASSERT_EQ(*gstatus, 0u);
  for (std::size_t r = 0; r < gather_slots.size(); ++r) {
    const std::uint16_t* got = g.out + r * 576;
    if (gather_slots[r] < 0) {
      for (int c = 0; c < 576; ++c) ASSERT_EQ(got[c], 0) << "padding row " << r;
      continue;
    }
    const auto expected = ref_gather_row(cache.data() + gather_slots[r] * rb, scale, dynamic, fp8);
    for (int c = 0; c < 576; ++c)
      ASSERT_EQ(got[c], expected[c]) << name(v) << " row " << r << " column " << c;
  }
}

TEST(HostExecutor, MatchesReferenceOnRandomData) {
  std::mt19937_64 rng(test_seed("HostExecutor.MatchesReferenceOnRandomData"));
  for (const Variant& v : k_variants) {
    for (int trial = 0; trial < 3; ++trial) {
      const int tokens = 1 + static_cast<int>(rng() % 200);
      Batch batch = random_batch(rng, tokens);
      // A calibrated scale: max_abs / 2688 for a layer magnitude in the data's range.
      const float scale = v.latent == LatentScale::dynamic
                              ? std::exp(std::uniform_real_distribution<float>(-9.0f, 0.0f)(rng))
                              : 1.0f;
      // A paged cache with more slots than tokens, a random placement, some padding.
      const std::int64_t slots = tokens + 17;
      std::vector<std::int64_t> perm(slots);
      for (std::int64_t i = 0; i < slots; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<std::int64_t> slot_of(tokens);
      for (int t = 0; t < tokens; ++t) slot_of[t] = (rng() % 9 == 0) ? -1 : perm[t];
      SCOPED_TRACE(name(v) + " scale " + std::to_string(scale));
      check_round_trip(batch, v, scale, slot_of, slots);
    }
  }
}

std::vector<std::int64_t> identity_slots(int n) {
  std::vector<std::int64_t> s(n);
  for (int i = 0; i < n; ++i) s[i] = i;
  return s;
}

// Tokens built to hit the edges: zeros, E4M3-subnormal block scales, saturation,
// exact E2M1 ties, NaN and infinities.
Batch edge_batch() {
  Batch b(8);
  auto row = [&](int t) { return b.rows() + t * 576; };
  for (int c = 0; c < 576; ++c) row(0)[c] = 0;                                  // all zero
  for (int c = 0; c < 576; ++c) row(1)[c] = bf16(((c % 7) - 3) * 0.0011f);        // subnormal sf
  for (int c = 0; c < 576; ++c) row(2)[c] = bf16((c % 2 ? -1 : 1) * 3.0e5f * (1 + c % 3));  // > 448*6
  const float ties[16] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -0.25f, -0.75f, -1.25f,
                          -1.75f, -2.5f, -3.5f, -5, -6};
  for (int c = 0; c < 576; ++c) row(3)[c] = bf16(ties[c % 16]);                 // amax 6: sf = 1
  for (int c = 0; c < 576; ++c) row(4)[c] = bf16(0.01f * (c % 5));
  row(4)[17] = 0x7fc0;                                                           // NaN
  row(4)[530] = 0x7fc0;                                                          // NaN in RoPE
  for (int c = 0; c < 576; ++c) row(5)[c] = bf16(0.5f - 0.001f * c);
  row(5)[33] = 0x7f80;                                                           // +inf
  row(5)[100] = 0xff80;                                                          // -inf
  for (int c = 0; c < 576; ++c) row(6)[c] = bf16(std::ldexp(1.0f, -20) * (c % 9));  // tiny
  for (int c = 0; c < 576; ++c) row(7)[c] = bf16(448.0f * 6.0f * ((c % 3) - 1));  // exactly max
  return b;
}

TEST(HostExecutor, MatchesReferenceOnEdgeCases) {
  for (const Variant& v : k_variants) {
    for (float scale : {1.0f, 0.02f / 2688.0f, 5.2f / 2688.0f, 3.0f}) {
      if (v.latent == LatentScale::identity && scale != 1.0f) continue;
      Batch batch = edge_batch();
      SCOPED_TRACE(name(v) + " scale " + std::to_string(scale));
      check_round_trip(batch, v, scale, identity_slots(batch.tokens), batch.tokens);
    }
  }
}

TEST(HostExecutor, DocumentedSpecialValues) {
  Batch batch = edge_batch();
  AlignedBytes cache(8 * 432);
  const auto slots = identity_slots(8);
  jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 8, cache.data(), 8, nullptr};
  ASSERT_OK(host_run_writer(LatentScale::identity, RecordFormat::b12x_432, w, 1.0f));
  const std::uint8_t* zero = cache.data();
  for (int i = 0; i < 304; ++i) EXPECT_EQ(zero[i], 0) << "all-zero token, byte " << i;
  // Ties: block 0 of token 3 has amax 6, so sf = 1.0 (0x38) and x/sf are the ties.
  const std::uint8_t* tie = cache.data() + 3 * 432;
  EXPECT_EQ(tie[256], 0x38);
  const int expected_codes[16] = {7, 0, 2, 2, 4, 4, 6, 6, 8, 10, 10, 12, 12, 14, 14, 15};
  for (int i = 0; i < 16; ++i) {
    const int q = i % 2 ? tie[i / 2] >> 4 : tie[i / 2] & 0xf;
    EXPECT_EQ(q, expected_codes[i]) << "tie element " << i;
  }
  // Saturation: block amax far beyond 448*6 clamps the scale to 448 (0x7E).
  EXPECT_EQ(cache.data()[2 * 432 + 256], 0x7e);
  // Subnormal block scales: max 0.0033 / 6 is below 2^-6.
  EXPECT_LT(cache.data()[1 * 432 + 256] & 0x7f, 0x08);
  // A NaN element does not poison its block: the scale comes from the other elements
  // and the NaN itself encodes as +6 (0x7), as NVIDIA's E2M1 conversion does.
  const std::uint8_t* nan_rec = cache.data() + 4 * 432;
  EXPECT_EQ(nan_rec[257], ref_e4m3(0.04f / 6.0f));  // block 1 holds element 17
  EXPECT_EQ(nan_rec[8] >> 4, 0x7);
  // An infinity makes its block scale 448 and encodes as +-6.
  const std::uint8_t* inf_rec = cache.data() + 5 * 432;
  EXPECT_EQ(inf_rec[258], 0x7e);  // block 2 holds element 33
  EXPECT_EQ(inf_rec[16] >> 4, 0x7);
  EXPECT_EQ(inf_rec[50] & 0xf, 0xf);  // element 100: -inf -> -6
}

TEST(HostExecutor, DynamicWithUnitScaleEqualsIdentity) {
  std::mt19937_64 rng(test_seed("HostExecutor.DynamicWithUnitScaleEqualsIdentity"));
  Batch batch = random_batch(rng, 64);
  const auto slots = identity_slots(64);
  for (RecordFormat rope : k_record_formats.values()) {
    // Only the formats written with both; b12x-304 is per-token only.
    if (!format_allows(rope, LatentScale::identity) || !format_allows(rope, LatentScale::dynamic)) continue;
    AlignedBytes a(64 * 432), b(64 * 432);
    jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 64, a.data(), 64, nullptr};
    ASSERT_OK(host_run_writer(LatentScale::identity, rope, w, 1.0f));
    w.cache = b.data();
    ASSERT_OK(host_run_writer(LatentScale::dynamic, rope, w, 1.0f));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 64 * record_bytes(rope)), 0);
  }
}

TEST(HostExecutor, IdentityKernelRefusesACalibratedScale) {
  Batch batch = edge_batch();
  AlignedBytes cache(8 * 432);
  std::memset(cache.data(), 0x5a, 8 * 432);
  const auto slots = identity_slots(8);
  std::uint32_t host_status = 0;
  jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 8, cache.data(), 8, &host_status};
  auto status = host_run_writer(LatentScale::identity, RecordFormat::b12x_432, w, 5.2f / 2688.0f);
  ASSERT_OK(status);
  EXPECT_EQ(*status, jc::k_status_identity_scale_mismatch);
  EXPECT_EQ(host_status, jc::k_status_identity_scale_mismatch);
  for (int i = 0; i < 8 * 432; ++i) ASSERT_EQ(cache.data()[i], 0x5a) << "nothing may be written";

  AlignedBytes out(2 * 576 * 2);
  auto gstatus = gather_two_rows(cache, 8, {0, 1}, 0.5f, 0x5a, out);
  ASSERT_OK(gstatus);
  EXPECT_EQ(*gstatus, jc::k_status_identity_scale_mismatch);
  for (int i = 0; i < 2 * 576 * 2; ++i) ASSERT_EQ(out.data()[i], 0x5a);
}

TEST(HostExecutor, DynamicKernelRefusesImpossibleScales) {
  Batch batch = edge_batch();
  AlignedBytes cache(8 * 368);
  const auto slots = identity_slots(8);
  jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 8, cache.data(), 8, nullptr};
  for (float bad : {0.0f, -1.0f, NAN, INFINITY, -0.0f}) {
    auto status = host_run_writer(LatentScale::dynamic, RecordFormat::b12x_368, w, bad);
    ASSERT_OK(status);
    EXPECT_EQ(*status, jc::k_status_bad_latent_scale) << bad;
  }
}

TEST(HostExecutor, OutOfRangeSlotsAreReportedAndSkipped) {
  Batch batch = edge_batch();
  AlignedBytes cache(4 * 432);
  std::memset(cache.data(), 0x11, 4 * 432);
  const std::vector<std::int64_t> slots = {0, 4, 100, -1, 3, -7, 2, 1};
  jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 8, cache.data(), 4, nullptr};
  auto status = host_run_writer(LatentScale::identity, RecordFormat::b12x_432, w, 1.0f);
  ASSERT_OK(status);
  EXPECT_EQ(*status, jc::k_status_slot_out_of_range);
  // Slot 0 holds token 0 (zeros), slot 3 token 4, slot 2 token 6, slot 1 token 7.
  EXPECT_EQ(cache.data()[0], 0);
  const auto expected = ref_write_record(batch.rows() + 4 * 576, batch.rows() + 4 * 576 + 512, 1.0f, false, false);
  EXPECT_EQ(std::memcmp(cache.data() + 3 * 432, expected.data(), 432), 0);

  AlignedBytes out(2 * 576 * 2);
  auto gstatus = gather_two_rows(cache, 4, {9, 0}, 1.0f, 0x77, out);
  ASSERT_OK(gstatus);
  EXPECT_EQ(*gstatus, jc::k_status_slot_out_of_range);
  for (int i = 0; i < 576 * 2; ++i) ASSERT_EQ(out.data()[i], 0) << "out-of-range row is zeroed";
}

TEST(HostExecutor, RejectsMisalignedOrInvalidParameters) {
  Batch batch = edge_batch();
  AlignedBytes cache(8 * 432);
  const auto slots = identity_slots(8);
  jc::WriterParams w{batch.rows(), 576, batch.rows() + 512, 576, slots.data(), 8, cache.data(), 8, nullptr};
  auto bad = w;
  bad.kv_c = batch.rows() + 1;
  auto r = host_run_writer(LatentScale::identity, RecordFormat::b12x_432, bad, 1.0f);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'kv_c'"), std::string::npos) << r.error().message;
  bad = w;
  bad.kv_c_stride = 577;
  r = host_run_writer(LatentScale::identity, RecordFormat::b12x_432, bad, 1.0f);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("kv_c_stride"), std::string::npos);
  bad = w;
  bad.cache = cache.data() + 8;
  EXPECT_FALSE(host_run_writer(LatentScale::identity, RecordFormat::b12x_432, bad, 1.0f));
  bad = w;
  bad.slot_mapping = nullptr;
  EXPECT_FALSE(host_run_writer(LatentScale::identity, RecordFormat::b12x_432, bad, 1.0f));
  bad = w;
  bad.num_tokens = -1;
  EXPECT_FALSE(host_run_writer(LatentScale::identity, RecordFormat::b12x_432, bad, 1.0f));

  std::vector<std::int32_t> rows = {0};
  AlignedBytes out(576 * 2 + 16);
  jc::GatherParams g{cache.data(), 8, rows.data(), 1, reinterpret_cast<std::uint16_t*>(out.data() + 2), 576, nullptr};
  auto gr = host_run_gather(LatentScale::identity, RecordFormat::b12x_432, g, 1.0f);
  ASSERT_FALSE(gr);
  EXPECT_NE(gr.error().message.find("'out'"), std::string::npos);
  g.out = reinterpret_cast<std::uint16_t*>(out.data());
  g.out_stride = 500;
  EXPECT_FALSE(host_run_gather(LatentScale::identity, RecordFormat::b12x_432, g, 1.0f));
}

// A change that makes good launch parameters invalid for `format`, and the words of the
// refusal.
template <class Params>
struct Refusal {
  std::function<void(Params&)> change;
  RecordFormat format;
  std::string needle;
};

// Each case, applied to a copy of `good`, is refused as an invalid argument naming its words.
template <class Params>
void expect_each_refused(const Params& good, std::initializer_list<Refusal<Params>> cases) {
  for (const Refusal<Params>& c : cases) {
    Params bad = good;
    c.change(bad);
    const Status status = validate(bad, c.format);
    ASSERT_FALSE(status) << c.needle;
    EXPECT_EQ(status.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(status.error().message.find(c.needle), std::string::npos) << status.error().message;
  }
}

// Issue 10 item 11: the int64 slot_mapping, int32 slots and uint32 status were not
// alignment-checked, and counts, strides and bases whose address arithmetic overflows
// passed. The host executor and the device launches share validate().
TEST(HostExecutor, EveryPointerIsAlignedForItsTypeAndNoExtentOverflows) {
  // Disjoint places in one buffer (the launch contract forbids a written buffer to
  // overlap another); the caches come last, so that a huge num_slots overlaps nothing.
  alignas(16) static std::uint8_t buffer[4096];
  auto* kv_c = reinterpret_cast<std::uint16_t*>(buffer);                // 2 rows: 2048 bytes
  auto* k_pe = reinterpret_cast<std::uint16_t*>(buffer + 2048);         // 256 bytes
  auto* i64 = reinterpret_cast<const std::int64_t*>(buffer + 2304);     // 16 bytes
  auto* u32 = reinterpret_cast<std::uint32_t*>(buffer + 2320);
  std::uint8_t* writer_cache = buffer + 2336;                           // up to 864 bytes
  auto* i32 = reinterpret_cast<const std::int32_t*>(buffer);            // gather: 8 bytes
  auto* out = reinterpret_cast<std::uint16_t*>(buffer + 32);            // 2 rows: 2304 bytes
  std::uint8_t* gather_cache = buffer + 2336;
  constexpr std::int64_t k_max = std::numeric_limits<std::int64_t>::max();
  auto at = [](std::uintptr_t address) { return address; };
  const std::uintptr_t top = std::numeric_limits<std::uintptr_t>::max() & ~std::uintptr_t{15};
  const jc::WriterParams w{kv_c, 512, k_pe, 64, i64, 2, writer_cache, 2, u32};
  // (A page-major cache is whole pages of 64 slots: tests/runtime/kv/test_paged_formats.cpp.)
  for (RecordFormat rope : k_record_formats.values())
    if (k_record_formats[rope].page_size == 1) EXPECT_OK(validate(w, rope));
  expect_each_refused<jc::WriterParams>(
      w, {
             {[&](auto& p) { p.slot_mapping = reinterpret_cast<const std::int64_t*>(buffer + 4); },
              RecordFormat::b12x_432, "'slot_mapping': must be 8-byte aligned (int64)"},
             {[&](auto& p) { p.status = reinterpret_cast<std::uint32_t*>(buffer + 2); }, RecordFormat::b12x_432,
              "'status': must be 4-byte aligned (uint32)"},
             {[&](auto& p) { p.num_tokens = k_max; }, RecordFormat::b12x_432, "'num_tokens': must be <= 8589934588"},
             // slot * 432 overflows int64
             {[&](auto& p) { p.num_slots = k_max / 432 + 1; }, RecordFormat::b12x_432, "'cache'"},
             {[&](auto& p) { p.kv_c_stride = k_max & ~std::int64_t{7}; }, RecordFormat::b12x_432, "'kv_c'"},
             {[&](auto& p) { p.k_pe = reinterpret_cast<const std::uint16_t*>(at(top)); }, RecordFormat::b12x_432,
              "'k_pe'"},
             // 8 bytes left, 16 needed
             {[&](auto& p) { p.slot_mapping = reinterpret_cast<const std::int64_t*>(at(top + 8)); },
              RecordFormat::b12x_432, "'slot_mapping'"},
         });
  auto bad = w;
  bad.num_slots = k_max / 368;  // fits for fp8 records
  EXPECT_OK(validate(bad, RecordFormat::b12x_368));

  const jc::GatherParams g{gather_cache, 2, i32, 2, out, 576, reinterpret_cast<std::uint32_t*>(buffer + 16)};
  EXPECT_OK(validate(g, RecordFormat::b12x_432));
  expect_each_refused<jc::GatherParams>(
      g, {
             {[&](auto& p) { p.slots = reinterpret_cast<const std::int32_t*>(buffer + 2); }, RecordFormat::b12x_432,
              "'slots': must be 4-byte aligned (int32)"},
             {[&](auto& p) { p.status = reinterpret_cast<std::uint32_t*>(buffer + 1); }, RecordFormat::b12x_432,
              "'status'"},
             {[&](auto& p) { p.num_rows = k_max; }, RecordFormat::b12x_432, "'num_rows'"},
             {[&](auto& p) { p.num_slots = k_max; }, RecordFormat::b12x_368, "'cache'"},
             {[&](auto& p) { p.out_stride = (k_max / 2) & ~std::int64_t{7}; }, RecordFormat::b12x_432, "'out'"},
             {[&](auto& p) { p.out = reinterpret_cast<std::uint16_t*>(at(top)); }, RecordFormat::b12x_432, "'out'"},
         });

  // A count of 0 reads nothing: null buffers are fine. So is a null status, and a
  // gather with no slots never reads the cache.
  EXPECT_OK(
      validate(jc::WriterParams{nullptr, 0, nullptr, 0, nullptr, 0, nullptr, 0, nullptr}, RecordFormat::b12x_432));
  EXPECT_OK(validate(jc::GatherParams{nullptr, 0, nullptr, 0, nullptr, 0, nullptr}, RecordFormat::b12x_432));
  auto gbad = g;
  gbad.status = nullptr;
  gbad.cache = nullptr;
  gbad.num_slots = 0;
  EXPECT_OK(validate(gbad, RecordFormat::b12x_432));
}

}  // namespace
}  // namespace jitcache
