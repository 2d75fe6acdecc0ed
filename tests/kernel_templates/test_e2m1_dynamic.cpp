// The dynamic writer decides E2M1 codes by comparing kv with thresholds derived from the
// latent scale s (e2m1_bounds_scaled) instead of dividing every element by s. These tests
// hold it to the brief's formula E2M1_satfinite_rn(rn(rn(kv / s) / sf)):
//   * per element, exhaustively: every bf16 kv x every positive E4M3 scale value sf x a few
//     hundred scales s (powers of two and their neighbours, the tiny and huge ends, the
//     scales of examples/glm5-mini, random ones from the printed seed);
//   * the GPU's way of computing the thresholds (directed-rounding FMAs, scaled for tiny
//     s), emulated step by step on the CPU, gives the host's thresholds;
//   * per block: quantize_block<dynamic> equals the division-per-element formulation it
//     replaced, kept here as the reference.
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "e2m1_chunks.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "test_support.hpp"

namespace {

using jitcache::testing::rotated_chunk;
using jitcache::testing::test_seed;

// The bit views the kernels use themselves.
using jc::bits_float;
using jc::float_bits;

// The latent scales to test: every edge the threshold arithmetic has, and the real ones.
std::vector<float> latent_scales(std::uint64_t seed) {
  std::vector<float> scales;
  auto add = [&](float s) {
    if (s > 0.0f && s <= std::numeric_limits<float>::max()) scales.push_back(s);
  };
  // Powers of two over the whole range, with the floats just below and above.
  for (int e = -149; e <= 127; e += 9) {
    const float p = std::ldexp(1.0f, e);
    add(p);
    add(std::nextafter(p, 0.0f));
    add(std::nextafter(p, INFINITY));
  }
  // Where the GPU switches to the scaled computation, and the extremes.
  for (float s : {0x1p-64f, 0x1p-100f, 0x1p-126f, 0x1p-127f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(), 0x1p127f, 0x1p100f, 1.0f, 3.0f, 0.1f, 1.0f / 3.0f}) {
    add(s);
    add(std::nextafter(s, 0.0f));
    add(std::nextafter(s, INFINITY));
  }
  // The calibrated scales of the example checkpoint.
  std::ifstream in(jitcache::testing::source_dir() / "examples" / "glm5-mini" / "nvfp4_ds_mla_outer_scales.json");
  const auto doc = nlohmann::json::parse(in);
  for (double s : doc.at("scales")) add(static_cast<float>(s));
  // Random ones: any exponent, any significand.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits(1u, 0x7f7fffffu);
  for (int i = 0; i < 40; ++i) add(bits_float(bits(rng)));
  return scales;
}

// Positive finite E4M3 scale values: codes 0x01..0x7E, value i is code i + 1.
std::vector<float> scale_values() {
  std::vector<float> values;
  for (int code = 1; code < 0x7f; ++code) values.push_back(jc::e4m3_to_float(static_cast<std::uint8_t>(code)));
  return values;
}

// The writer's own path: the fp32 thresholds rounded onto bf16 pairs
// (e2m1_thresholds<dynamic>) and the packed encoder (e2m1_encode8), eight consecutive bf16
// patterns per call, so every pattern passes through every position of a chunk once per
// eight scale codes.
TEST(E2m1Dynamic, ThresholdCodesEqualDividingTwiceForEveryBf16) {
  const std::uint64_t seed = test_seed("E2m1Dynamic.ThresholdCodesEqualDividingTwiceForEveryBf16");
  const auto scales = latent_scales(seed);
  const auto sfs = scale_values();
  ASSERT_GT(scales.size(), 200u);
  std::vector<float> kv(65536), x(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) kv[h] = jc::bf16_to_float(static_cast<std::uint16_t>(h));
  long mismatches = 0, checked = 0;
  for (float s : scales) {
    for (std::uint32_t h = 0; h < 65536; ++h) x[h] = kv[h] / s;  // correctly rounded on the host
    for (std::size_t k = 0; k < sfs.size(); ++k) {
      const float sf = sfs[k];
      const jc::E2M1Thresholds thresholds =
          jc::e2m1_thresholds<jc::LatentMode::dynamic>(static_cast<std::uint8_t>(k + 1), s);  // code k + 1
      const std::uint32_t rotate = static_cast<std::uint32_t>(k % 8);
      for (std::uint32_t base = 0; base < 65536; base += 8) {
        const auto [h, chunk] = rotated_chunk(base, rotate);
        const std::uint32_t codes = jc::e2m1_encode8(chunk, thresholds);
        for (int i = 0; i < 8; ++i) {
          const std::uint8_t expected = jc::float_to_e2m1_satfinite(x[h[i]] / sf);
          const std::uint32_t got = (codes >> (4 * i)) & 0xfu;
          if (got != expected && ++mismatches <= 10)
            ADD_FAILURE() << "s bits=0x" << std::hex << float_bits(s) << " sf=" << std::dec << sf << " kv bits=0x"
                          << std::hex << h[i] << " thresholds " << std::dec << got << " division " << int(expected);
        }
      }
      checked += 65536;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked << " (" << scales.size() << " scales)";
}

// The fp32 thresholds themselves (e2m1_bounds_scaled with the scalar comparisons of
// e2m1_encode_scaled) on every bf16 for a sample of the scales: the statement argued in
// nvfp4_mla.cuh before the rounding onto the bf16 grid.
TEST(E2m1Dynamic, Fp32ThresholdsEqualDividingTwice) {
  const auto scales = latent_scales(test_seed("E2m1Dynamic.Fp32ThresholdsEqualDividingTwice"));
  long mismatches = 0;
  for (std::size_t i = 0; i < scales.size(); i += 9) {
    const float s = scales[i];
    for (float sf : scale_values()) {
      const jc::E2M1Bounds bounds = jc::e2m1_bounds_scaled(sf, s);
      for (std::uint32_t h = 0; h < 65536; ++h) {
        const float kv = jc::bf16_to_float(static_cast<std::uint16_t>(h));
        if (jc::e2m1_encode_scaled(kv, bounds) != jc::float_to_e2m1_satfinite(kv / s / sf) && ++mismatches <= 10)
          ADD_FAILURE() << "s=" << s << " sf=" << sf << " kv bits=0x" << std::hex << h;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The GPU computes RD((c + h) * s) as fma.rm(c, s', h * s') and, for s < 2^-64, scales by
// 2^100 and back with a multiply rounded the same way. Emulated here with doubles, which
// hold every intermediate of these operands exactly, and compared with the host's direct
// rounding of the exact product.
float round_down(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) > v) f = std::nextafter(f, -INFINITY);
  return f;
}
float round_up(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v) f = std::nextafter(f, INFINITY);
  return f;
}

float gpu_threshold(float c, float s, bool above) {
  const bool tiny = s < 0x1p-64f;
  const float s_up = tiny ? s * 0x1p100f : s;
  const float h = jc::e2m1_half_ulp(c);
  const float hs = h * s_up;
  // The product and the sum must be exact for the emulation to be the FMA.
  EXPECT_EQ(static_cast<double>(hs), static_cast<double>(h) * s_up);
  const double exact = static_cast<double>(c) * s_up + (above ? 1.0 : -1.0) * hs;
  const float t = above ? round_down(exact) : round_up(exact);
  if (!tiny) return t;
  return above ? round_down(static_cast<double>(t) * 0x1p-100) : round_up(static_cast<double>(t) * 0x1p-100);
}

TEST(E2m1Dynamic, GpuThresholdStepsGiveTheHostThresholds) {
  const auto scales = latent_scales(test_seed("E2m1Dynamic.GpuThresholdStepsGiveTheHostThresholds"));
  long mismatches = 0;
  for (float s : scales) {
    for (float sf : scale_values()) {
      const jc::E2M1Bounds c = jc::e2m1_bounds(sf);
      const jc::E2M1Bounds host = jc::e2m1_bounds_scaled(sf, s);
      for (int k = 0; k < 7; ++k) {
        const float gpu = gpu_threshold(c.c[k], s, k % 2 == 0);
        if (float_bits(gpu) != float_bits(host.c[k]) && ++mismatches <= 10)
          ADD_FAILURE() << "s=" << s << " sf=" << sf << " k=" << k << " gpu=" << gpu << " host=" << host.c[k];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The decision points the >= thresholds sit at are never powers of two (the argument in
// nvfp4_mla.cuh needs that), and every decision point is a normal float >= 2^-11.
TEST(E2m1Dynamic, DecisionPointsAreNormalAndTheGreaterEqualOnesNotPowersOfTwo) {
  for (float sf : scale_values()) {
    const jc::E2M1Bounds c = jc::e2m1_bounds(sf);
    for (int k = 0; k < 7; ++k) {
      EXPECT_GE(c.c[k], 0x1p-11f);
      if (k % 2 == 1) {
        EXPECT_NE(float_bits(c.c[k]) & 0x007fffffu, 0u) << "sf=" << sf << " k=" << k;
      }
    }
  }
}

// The formulation quantize_block<dynamic> replaced: divide every element by s, amax of the
// quotients, codes from the quotients.
std::uint8_t reference_block(const std::uint32_t* words, float s, std::uint32_t* q) {
  float x[16];
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const std::uint16_t h = static_cast<std::uint16_t>(i & 1 ? words[i / 2] >> 16 : words[i / 2] & 0xffffu);
    x[i] = jc::div_rn(jc::bf16_to_float(h), s);
    amax = jc::max_num(amax, jc::abs_f(x[i]));
  }
  const std::uint8_t sf = jc::float_to_e4m3_satfinite(jc::div_rn(amax, 6.0f));
  const float sf_value = jc::e4m3_to_float(sf);
  q[0] = q[1] = 0;
  if (sf_value != 0.0f) {
    const jc::E2M1Bounds bounds = jc::e2m1_bounds(sf_value);
    for (int i = 0; i < 16; ++i) q[i / 8] |= static_cast<std::uint32_t>(jc::e2m1_encode_scaled(x[i], bounds)) << (4 * (i % 8));
  }
  return sf;
}

TEST(E2m1Dynamic, QuantizeBlockEqualsDividingEveryElement) {
  const std::uint64_t seed = test_seed("E2m1Dynamic.QuantizeBlockEqualsDividingEveryElement");
  std::mt19937_64 rng(seed);
  const auto scales = latent_scales(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-140, 120), pick(0, 15);
  const std::uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f81, 0x7f80, 0xff80, 0x0000, 0x8000,
                                    0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0080};
  long mismatches = 0, blocks = 0;
  for (float s : scales) {
    for (int b = 0; b < 400; ++b) {
      // Blocks of one magnitude (so the block scale spans all codes), some with specials.
      const float mag = std::ldexp(1.0f, exponent(rng));
      std::uint32_t words[8];
      for (int i = 0; i < 16; ++i) {
        std::uint16_t h = jc::float_to_bf16(normal(rng) * mag);
        if (b % 4 == 0 && pick(rng) == 0) h = specials[pick(rng) % 12];
        if (b % 50 == 1) h = static_cast<std::uint16_t>(rng());  // any bit pattern
        if (i % 2 == 0) words[i / 2] = h; else words[i / 2] |= static_cast<std::uint32_t>(h) << 16;
      }
      std::uint32_t expected_q[2], got_q[2];
      const std::uint8_t expected_sf = reference_block(words, s, expected_q);
      const std::uint8_t got_sf = jc::quantize_block<jc::LatentMode::dynamic>(words, s, got_q);
      ++blocks;
      if ((got_sf != expected_sf || got_q[0] != expected_q[0] || got_q[1] != expected_q[1]) && ++mismatches <= 5)
        ADD_FAILURE() << "s=" << s << " block " << b << " sf " << int(got_sf) << " vs " << int(expected_sf);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << blocks << " blocks, seed " << seed;
}

}  // namespace
