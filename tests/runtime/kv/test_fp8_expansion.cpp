// The host twin of FlashInfer's GLM NVFP4 row expansion (runtime/kv/fp8_expansion.hpp)
// against hand-computed rows taken from the reader's text (flashinfer-ai/flashinfer
// be75a2b19137e93b29618c5c03a36ef2f30e712c, common/nvfp4_to_fp8.cuh), and on fresh random
// records against the bound of one E4M3 rounding of E2M1 * E4M3 * kv_global_scale.
// python/tests/test_flashinfer_glm.py holds the independent numpy reference.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_templates/nvfp4_mla_formats.cuh"
#include "runtime/kv/fp8_expansion.hpp"
#include "test_support.hpp"

namespace jitcache::kv {
namespace {

constexpr float k_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

std::vector<std::uint8_t> glm_record(const std::uint8_t* nibbles, const std::uint8_t* scales) {
  std::vector<std::uint8_t> r(416, 0);
  for (int e = 0; e < 512; ++e) r[static_cast<std::size_t>(e / 2)] |= static_cast<std::uint8_t>(nibbles[e] << (e % 2 ? 4 : 0));
  std::memcpy(r.data() + 256, scales, 32);
  return r;
}

// Block 0 at E4M3's largest scale 448 (compute scale: 448 * 6/448 = 6, raised to 8), block 1
// at the subnormal 3 * 2^-9, the rest 0. 6 * 448 / 8 = 336 is halfway between 320 and 352:
// the even code 0x7A (320). 6 * 3 * 2^-9 / 8 = 2.25 * 2^-9 becomes the subnormal 2 * 2^-9.
TEST(Fp8Expansion, AHandMadeRowExpandsAsTheReaderDoes) {
  std::uint8_t nibbles[512] = {};
  std::uint8_t scales[32] = {};
  nibbles[0] = 0x7;   // 6
  nibbles[1] = 0x1;   // 0.5
  nibbles[2] = 0xF;   // -6
  nibbles[16] = 0x7;  // block 1: 6
  nibbles[17] = 0x8;  // -0
  scales[0] = 0x7E;
  scales[1] = 0x03;
  const auto row = expand_glm_row_to_fp8(glm_record(nibbles, scales), 0.25f);
  ASSERT_TRUE(row) << row.error().message;
  EXPECT_EQ(row->row_scale, 2.0f);
  EXPECT_EQ(row->codes[0], 0x7A);
  EXPECT_EQ(jc::e4m3_to_float(row->codes[1]), 28.0f);
  EXPECT_EQ(row->codes[2], 0xFA);
  EXPECT_EQ(row->codes[16], 0x02);
  EXPECT_EQ(row->codes[17], 0x80) << "-0 keeps its sign";
  const auto values = fp8_row_values(*row);
  EXPECT_EQ(values[0], 640.0f);
  for (int e = 18; e < 512; ++e) ASSERT_EQ(values[static_cast<std::size_t>(e)], 0.0f) << e;
}

TEST(Fp8Expansion, ARowOfZeroScalesIsZeroAndBadInputsAreRefused) {
  std::uint8_t nibbles[512];
  std::memset(nibbles, 0x7, sizeof nibbles);
  std::uint8_t scales[32] = {};
  const auto row = expand_glm_row_to_fp8(glm_record(nibbles, scales), 3.0f);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->row_scale, 0.0f);
  for (std::uint8_t c : row->codes) ASSERT_EQ(c, 0);
  const std::vector<std::uint8_t> short_record(432, 0);
  const auto wrong = expand_glm_row_to_fp8(short_record, 1.0f);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("416 bytes, got 432"), std::string::npos) << wrong.error().message;
  for (float bad : {0.0f, -1.0f, INFINITY, NAN}) {
    const auto refused = expand_glm_row_to_fp8(std::vector<std::uint8_t>(416, 0), bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("kv_global_scale"), std::string::npos);
  }
}

// Random codes and scales (any non-negative finite E4M3 byte, subnormals included): each
// expanded value is E2M1 * E4M3 * g rounded once on the row's grid: within half an E4M3
// step, exact where the value is on the grid.
TEST(Fp8Expansion, EveryValueIsOneE4m3RoundingOfTheReadersValue) {
  std::mt19937_64 rng(jitcache::testing::test_seed("Fp8Expansion.EveryValueIsOneE4m3Rounding"));
  std::uniform_int_distribution<int> nibble(0, 15), scale(0, 0x7E), spread(0, 3);
  for (int trial = 0; trial < 400; ++trial) {
    std::uint8_t nibbles[512], scales[32];
    for (auto& n : nibbles) n = static_cast<std::uint8_t>(nibble(rng));
    // Some rows with a narrow range of scales, some spanning all of E4M3.
    const int top = trial % 4 == 0 ? 0x7E : scale(rng);
    for (auto& s : scales) s = static_cast<std::uint8_t>(std::max(0, top - scale(rng) / (1 + spread(rng))));
    const float g = std::ldexp(1.0f + static_cast<float>(trial % 7) / 7.0f, trial % 40 - 30);
    const auto row = expand_glm_row_to_fp8(glm_record(nibbles, scales), g);
    ASSERT_TRUE(row);
    const auto values = fp8_row_values(*row);
    for (int e = 0; e < 512; ++e) {
      const double q = (nibbles[e] & 8 ? -1.0 : 1.0) * k_e2m1[nibbles[e] & 7];
      const double exact = q * jc::e4m3_to_float(scales[e / 16]) * g;
      const double got = values[static_cast<std::size_t>(e)];
      const double bound = std::max(std::fabs(exact) * 0x1p-4, static_cast<double>(row->row_scale) * 0x1p-10);
      ASSERT_LE(std::fabs(got - exact), bound * (1 + 1e-6)) << "trial " << trial << " element " << e;
      const double on_grid = exact / row->row_scale;
      if (row->row_scale > 0 && jc::e4m3_to_float(jc::float_to_e4m3_satfinite(static_cast<float>(on_grid))) == on_grid)
        ASSERT_EQ(got, static_cast<float>(exact)) << "trial " << trial << " element " << e;
    }
  }
}

}  // namespace
}  // namespace jitcache::kv
