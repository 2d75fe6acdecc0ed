// The element conversions of nvfp4_mla.cuh against NVIDIA's own host conversions
// (cuda_fp8.h, cuda_fp4.h, cuda_bf16.h) and against a value-table reference written
// here from the brief's definitions.
#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "e2m1_chunks.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "reference_nvfp4.hpp"
#include "test_support.hpp"

namespace {

using jitcache::testing::rotated_chunk;
using jitcache::testing::test_seed;
using namespace jitcache::reference;

// The bit views the kernels use themselves.
using jc::bits_float;
using jc::float_bits;

// --- NVIDIA's conversions --------------------------------------------------------------
std::uint8_t nv_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
float nv_e4m3_value(std::uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(code, __NV_E4M3);
  return __half2float(__half(h));
}
std::uint8_t nv_e2m1(float x) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); }
float nv_e2m1_value(std::uint8_t code) {
  const __half_raw h = __nv_cvt_fp4_to_halfraw(code, __NV_E2M1);
  return __half2float(__half(h));
}
std::uint16_t nv_bf16(float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  std::uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}

// How many of `xs` the kernels' encoder `ours` codes otherwise than NVIDIA's conversion or
// the reference; `report(x, our code)` describes each of the first ten.
template <class Ours, class Nvidia, class Reference, class Report>
int count_disagreements(const std::vector<float>& xs, Ours ours, Nvidia nvidia, Reference reference, Report report) {
  int mismatches = 0;
  for (float x : xs) {
    const std::uint8_t code = ours(x);
    if ((code != nvidia(x) || code != reference(x)) && ++mismatches <= 10) report(x, int(code));
  }
  return mismatches;
}

// Random fp32 values spread over every exponent the formats care about, plus specials.
std::vector<float> sample_floats(std::uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  std::vector<float> xs;
  for (std::uint32_t u : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                          0xffc00000u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x43e00000u,
                          0x43e80000u, 0x3c800000u, 0x3b000000u, 0x3a800000u})
    xs.push_back(bits_float(u));
  std::uniform_int_distribution<std::uint32_t> exponent(95, 160), mantissa(0, 0x7fffff);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < count; ++i) {
    const std::uint32_t sign = (any(rng) & 1u) << 31;
    std::uint32_t man = mantissa(rng);
    // One in four mantissas is cut to few bits so exact ties and exact values are common.
    if (i % 4 == 0) man &= 0x7f0000u;
    xs.push_back(bits_float(sign | (exponent(rng) << 23) | man));
    if (i % 16 == 0) xs.push_back(bits_float(any(rng)));  // anything, NaNs included
  }
  return xs;
}

TEST(E4m3, AllCodesDecodeLikeNvidiaAndRoundTrip) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    const float ours = jc::e4m3_to_float(c);
    const double ref = ref_e4m3_value(code);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(ours)) << code;
      EXPECT_TRUE(std::isnan(nv_e4m3_value(c))) << code;
      EXPECT_EQ(jc::float_to_e4m3_satfinite(ours), 0x7f) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(ours), ref) << "code " << code;
    EXPECT_EQ(float_bits(ours), float_bits(nv_e4m3_value(c))) << "code " << code;
    EXPECT_EQ(jc::float_to_e4m3_satfinite(ours), c) << "code " << code;
  }
}

TEST(E2m1, AllCodesDecodeLikeNvidiaAndRoundTrip) {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int code = 0; code < 16; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    const float ours = jc::e2m1_to_float(c);
    const float expected = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(float_bits(ours), float_bits(expected)) << "code " << code;
    EXPECT_EQ(float_bits(ours), float_bits(nv_e2m1_value(c))) << "code " << code;
    EXPECT_EQ(jc::float_to_e2m1_satfinite(ours), c) << "code " << code;
  }
}

TEST(E4m3, EncodeMatchesNvidiaAndReference) {
  const auto xs = sample_floats(test_seed("E4m3.EncodeMatchesNvidiaAndReference"), 400000);
  const int mismatches = count_disagreements(xs, jc::float_to_e4m3_satfinite, nv_e4m3, ref_e4m3, [](float x, int ours) {
    ADD_FAILURE() << "x=" << x << " bits=0x" << std::hex << float_bits(x) << " ours=0x" << ours << " nvidia=0x"
                  << int(nv_e4m3(x)) << " ref=0x" << int(ref_e4m3(x));
  });
  EXPECT_EQ(mismatches, 0);
}

// Every fp32 whose low 16 mantissa bits are one of the patterns that sit on or next to a
// rounding boundary of E4M3 (exact, just above/below a half, sticky bits), with all 65536
// combinations of sign, exponent and high mantissa bits: every tie, carry, saturation
// and subnormal boundary of the format is among them.
TEST(E4m3, EncodeMatchesNvidiaOnEveryRoundingBoundary) {
  int mismatches = 0, checked = 0;
  for (std::uint32_t high = 0; high < 0x10000u; ++high) {
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float x = bits_float((high << 16) | low);
      const std::uint8_t ours = jc::float_to_e4m3_satfinite(x);
      ++checked;
      if (ours != nv_e4m3(x) && ++mismatches <= 10)
        ADD_FAILURE() << "bits=0x" << std::hex << float_bits(x) << " ours=0x" << int(ours)
                      << " nvidia=0x" << int(nv_e4m3(x));
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked;
}

TEST(E4m3, EdgeCases) {
  EXPECT_EQ(jc::float_to_e4m3_satfinite(448.0f), 0x7e);
  EXPECT_EQ(jc::float_to_e4m3_satfinite(463.9f), 0x7e);  // would round to 448 anyway
  EXPECT_EQ(jc::float_to_e4m3_satfinite(1e30f), 0x7e);   // saturates, never NaN
  EXPECT_EQ(jc::float_to_e4m3_satfinite(-1e30f), 0xfe);
  EXPECT_EQ(jc::float_to_e4m3_satfinite(INFINITY), 0x7e);
  EXPECT_EQ(jc::float_to_e4m3_satfinite(NAN), 0x7f);
  EXPECT_EQ(jc::float_to_e4m3_satfinite(std::ldexp(1.0f, -6)), 0x08);  // min normal
  EXPECT_EQ(jc::float_to_e4m3_satfinite(std::ldexp(1.0f, -9)), 0x01);  // min subnormal
  EXPECT_EQ(jc::float_to_e4m3_satfinite(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (0)
  EXPECT_EQ(jc::float_to_e4m3_satfinite(std::ldexp(3.0f, -10)), 0x02);  // 1.5 ulp tie -> 2
  EXPECT_EQ(jc::float_to_e4m3_satfinite(std::ldexp(15.0f, -10)), 0x08);  // 7.5 ulp -> 8 = 2^-6
  EXPECT_EQ(jc::float_to_e4m3_satfinite(-0.0f), 0x80);
}

TEST(E2m1, EncodeMatchesNvidiaAndReference) {
  const auto xs = sample_floats(test_seed("E2m1.EncodeMatchesNvidiaAndReference"), 400000);
  const int mismatches = count_disagreements(xs, jc::float_to_e2m1_satfinite, nv_e2m1, ref_e2m1, [](float x, int ours) {
    ADD_FAILURE() << "x=" << x << " ours=" << ours << " nvidia=" << int(nv_e2m1(x)) << " ref=" << int(ref_e2m1(x));
  });
  EXPECT_EQ(mismatches, 0);
}

TEST(E2m1, TiesRoundToEven) {
  const struct {
    float x;
    int code;
  } cases[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4},
               {3.5f, 6},  {5.0f, 6},  {6.5f, 7},  {1e9f, 7},  {-0.25f, 8},
               {-0.75f, 10}, {-5.0f, 14}, {-1e9f, 15}};
  for (const auto& c : cases) {
    EXPECT_EQ(jc::float_to_e2m1_satfinite(c.x), c.code) << c.x;
    EXPECT_EQ(nv_e2m1(c.x), c.code) << "NVIDIA disagrees with the table at " << c.x;
  }
  // Just off the ties, the nearer value wins.
  EXPECT_EQ(jc::float_to_e2m1_satfinite(std::nextafter(0.25f, 1.0f)), 1);
  EXPECT_EQ(jc::float_to_e2m1_satfinite(std::nextafter(0.75f, 0.0f)), 1);
  EXPECT_EQ(jc::float_to_e2m1_satfinite(std::nextafter(5.0f, 6.0f)), 7);
  // NaN saturates to +6 and infinities to +-6, as cuda_fp4.h does.
  EXPECT_EQ(jc::float_to_e2m1_satfinite(NAN), 7);
  EXPECT_EQ(jc::float_to_e2m1_satfinite(-INFINITY), 15);
}

// The writer decides E2M1 codes by comparing with t * sf (e2m1_encode_scaled) instead of
// dividing by sf. That must equal the brief's E2M1_satfinite_rn(x / sf) for every fp32 x
// and every scale: checked for each of the 126 positive finite E4M3 scales against each
// decision point's neighbourhood (4 ulps either side, both signs), every bf16 value, the
// specials, and fresh random fp32 values of every exponent; NVIDIA's conversion of the
// correctly rounded quotient agrees as well.
TEST(E2m1, ScaledEncodeEqualsDivideThenEncode) {
  std::mt19937_64 rng(test_seed("E2m1.ScaledEncodeEqualsDivideThenEncode"));
  std::uniform_int_distribution<std::uint32_t> any;
  const float points[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 1.0f, 3.0f};
  long checked = 0;
  int mismatches = 0;
  auto check = [&](float x, float sf, const jc::E2M1Bounds& bounds) {
    const float q = x / sf;  // correctly rounded on the host (no contraction, no fast math)
    const std::uint8_t expected = jc::float_to_e2m1_satfinite(q);
    const std::uint8_t ours = jc::e2m1_encode_scaled(x, bounds);
    ++checked;
    if ((ours != expected || expected != nv_e2m1(q)) && ++mismatches <= 10)
      ADD_FAILURE() << "x bits=0x" << std::hex << float_bits(x) << " sf=" << std::dec << sf
                    << " scaled=" << int(ours) << " divided=" << int(expected)
                    << " nvidia=" << int(nv_e2m1(q));
  };
  int scales = 0;
  for (int code = 1; code < 0x7f; ++code) {
    const float sf = jc::e4m3_to_float(static_cast<std::uint8_t>(code));
    ASSERT_GT(sf, 0.0f);
    ++scales;
    const jc::E2M1Bounds bounds = jc::e2m1_bounds(sf);
    for (float t : points) {
      const float c = t * sf;
      ASSERT_EQ(static_cast<double>(c), static_cast<double>(t) * sf) << "t * sf must be exact";
      for (int k = -4; k <= 4; ++k) {
        const float x = bits_float(static_cast<std::uint32_t>(static_cast<std::int64_t>(float_bits(c)) + k));
        check(x, sf, bounds);
        check(-x, sf, bounds);
      }
    }
    for (std::uint32_t h = 0; h < 0x10000u; ++h)
      check(jc::bf16_to_float(static_cast<std::uint16_t>(h)), sf, bounds);
    for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
      check(x, sf, bounds);
    for (int i = 0; i < 4000; ++i) check(bits_float(any(rng)), sf, bounds);
  }
  EXPECT_EQ(scales, 126);
  EXPECT_EQ(mismatches, 0) << "of " << checked;
}

// The identity writer's path: the decision points as bf16 pairs and the packed encoder
// (e2m1_encode8) against the brief's E2M1(rn(kv / sf)), for every bf16 kv in every position
// of a chunk and every positive scale code.
TEST(E2m1, PackedEncoderEqualsDivideThenEncodeForEveryBf16) {
  long mismatches = 0;
  for (int code = 1; code < 0x7f; ++code) {
    const float sf = jc::e4m3_to_float(static_cast<std::uint8_t>(code));
    const jc::E2M1Thresholds thresholds =
        jc::e2m1_thresholds<jc::LatentMode::identity>(static_cast<std::uint8_t>(code), 1.0f);
    for (std::uint32_t base = 0; base < 65536; base += 8) {
      for (std::uint32_t rotate = 0; rotate < 8; rotate += 3) {
        const auto [h, chunk] = rotated_chunk(base, rotate);
        const std::uint32_t codes = jc::e2m1_encode8(chunk, thresholds);
        for (int i = 0; i < 8; ++i) {
          const float kv = jc::bf16_to_float(static_cast<std::uint16_t>(h[i]));
          const std::uint32_t expected = jc::float_to_e2m1_satfinite(kv / sf);
          if (((codes >> (4 * i)) & 0xfu) != expected && ++mismatches <= 10)
            ADD_FAILURE() << "sf=" << sf << " kv bits=0x" << std::hex << h[i] << " position " << i;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The bf16 constants t * 2^120 behind the identity thresholds, and the scale code's bits
// as the bf16 number sf * 2^-120 (codes 1..7 are bf16 subnormals).
TEST(E2m1, ThresholdConstantsAndScaleCodeBits) {
  const float points[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (int k = 0; k < 7; ++k) {
    const std::uint32_t pair = jc::k_e2m1_points_2p120[k];
    EXPECT_EQ(pair >> 16, pair & 0xffffu);
    EXPECT_EQ(jc::bf16_to_float(static_cast<std::uint16_t>(pair)), std::ldexp(points[k], 120)) << k;
  }
  for (int code = 1; code < 0x7f; ++code) {
    const float as_bf16 = jc::bf16_to_float(static_cast<std::uint16_t>(code << 4));
    EXPECT_EQ(as_bf16, std::ldexp(jc::e4m3_to_float(static_cast<std::uint8_t>(code)), -120)) << code;
  }
}

TEST(Packed, BytePermAndSelectBits) {
  EXPECT_EQ(jc::byte_perm(0x33221100u, 0x77665544u, 0x5410u), 0x55441100u);
  EXPECT_EQ(jc::byte_perm(0x33221100u, 0x77665544u, 0x7632u), 0x77663322u);
  EXPECT_EQ(jc::byte_perm(0xabcd1234u, 0u, 0x3232u), 0xabcdabcdu);
  EXPECT_EQ(jc::select_bits(0x0000ffffu, 0x11112222u, 0x33334444u), 0x33332222u);
}

// A block whose scale is 0 (every |kv| below 2^-10, or all NaN) has every code 0.
TEST(E2m1, ZeroScaleBlockHasZeroCodes) {
  const std::uint32_t words[8] = {0x80010001u, 0x7fc00000u, 0x3a0039ffu, 0xba00ffc0u,
                                  0x00000000u, 0x80008000u, 0x7f817f81u, 0x00010001u};
  std::uint32_t q[2] = {~0u, ~0u};
  EXPECT_EQ(jc::quantize_block<jc::LatentMode::identity>(words, 1.0f, q), 0);
  EXPECT_EQ(q[0], 0u);
  EXPECT_EQ(q[1], 0u);
}

TEST(Bf16, RoundingMatchesNvidia) {
  const auto xs = sample_floats(test_seed("Bf16.RoundingMatchesNvidia"), 400000);
  int mismatches = 0;
  for (float x : xs) {
    if (jc::float_to_bf16(x) != nv_bf16(x) && ++mismatches <= 10)
      ADD_FAILURE() << "x bits=0x" << std::hex << float_bits(x) << " ours=0x" << jc::float_to_bf16(x)
                    << " nvidia=0x" << nv_bf16(x);
  }
  EXPECT_EQ(mismatches, 0);
  // Widening is exact.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = jc::bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(jc::float_to_bf16(f), h);
  }
}

TEST(MaxNum, IgnoresNan) {
  EXPECT_EQ(jc::max_num(NAN, 2.0f), 2.0f);
  EXPECT_EQ(jc::max_num(2.0f, NAN), 2.0f);
  EXPECT_EQ(jc::max_num(1.0f, 3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(jc::max_num(NAN, NAN)));
}

// The C library's fmaxf is IEEE 754-2008 maxNum, which turns a signalling NaN operand into
// a quiet NaN result instead of returning the other operand; bf16 inputs can be signalling
// NaNs (0x7F81..0x7FBF), which is why the host side of max_num is not fmaxf. This pins the
// host rule: the non-NaN operand comes back unchanged, for quiet and signalling NaNs alike.
TEST(MaxNum, SignallingNanYieldsTheOtherOperand) {
  for (std::uint32_t nan : {0x7f810000u, 0xffbf0000u, 0x7fc00000u, 0x7f800001u}) {
    for (float other : {0.0f, 1.5f, std::numeric_limits<float>::denorm_min(), INFINITY}) {
      EXPECT_EQ(float_bits(jc::max_num(bits_float(nan), other)), float_bits(other)) << std::hex << nan;
      EXPECT_EQ(float_bits(jc::max_num(other, bits_float(nan))), float_bits(other)) << std::hex << nan;
    }
  }
}

}  // namespace
