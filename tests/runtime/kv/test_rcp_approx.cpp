// The rule that extends a table of rcp.approx.ftz.f32 on [1, 2) to every fp32
// (runtime/kv/rcp_approx.hpp), on a table of the correctly rounded reciprocal: for it the
// rule must give exactly the host's IEEE division 1.0f / x wherever that result is normal
// (scaling by a power of two commutes with rounding there), and the documented values at
// zeros, subnormals, infinities, NaNs and the flushed edge of the range. The table the GPU
// measures is held to the hardware in GpuTest.RcpApproxTableReproducesEveryInput.
#include "runtime/kv/rcp_approx.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "support/atomic_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

// Word i: 1.0f / (1 + i * 2^-23), correctly rounded by the host's float division.
std::vector<std::uint32_t> exact_words() {
  std::vector<std::uint32_t> words(k_rcp_table_entries);
  for (std::size_t i = 0; i < words.size(); ++i)
    words[i] = std::bit_cast<std::uint32_t>(1.0f / std::bit_cast<float>(k_rcp_table_first_input + std::uint32_t(i)));
  return words;
}

const RcpApproxTable& exact_table() {
  static const RcpApproxTable table = *RcpApproxTable::from_words(exact_words(), "the exact table");
  return table;
}

class RcpApproxTest : public jitcache::testing::TempDirTest {};

TEST_F(RcpApproxTest, RuleGivesTheCorrectlyRoundedReciprocalWhereItIsNormal) {
  const std::uint64_t seed = jitcache::testing::test_seed("RcpApprox");
  std::mt19937_64 rng(seed);
  // Biased exponents 1..252: |x| < 2^126, so 1/x > 2^-126 is normal.
  std::uniform_int_distribution<std::uint32_t> exponent(1, 252), fraction(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint32_t bits = sign(rng) << 31 | exponent(rng) << 23 | fraction(rng);
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(exact_table().rcp_bits(bits), std::bit_cast<std::uint32_t>(1.0f / x)) << std::hex << bits;
  }
  // Every significand at both ends of that range.
  for (std::uint32_t f = 0; f <= 0x7fffff; ++f)
    for (std::uint32_t e : {1u, 252u}) {
      const std::uint32_t bits = e << 23 | f;
      ASSERT_EQ(exact_table().rcp_bits(bits), std::bit_cast<std::uint32_t>(1.0f / std::bit_cast<float>(bits)))
          << std::hex << bits;
    }
}

TEST_F(RcpApproxTest, SpecialInputsGiveTheDocumentedResults) {
  const RcpApproxTable& t = exact_table();
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    SCOPED_TRACE(sign);
    // Zeros and subnormals (read as zeros): infinity of the sign.
    for (std::uint32_t bits : {0x0u, 0x1u, 0x400000u, 0x7fffffu}) EXPECT_EQ(t.rcp_bits(sign | bits), sign | 0x7f800000u);
    // Infinity: zero of the sign.
    EXPECT_EQ(t.rcp_bits(sign | 0x7f800000u), sign);
    // NaNs, quiet and signalling: the canonical NaN.
    for (std::uint32_t bits : {0x7f800001u, 0x7fc00000u, 0x7fffffffu}) EXPECT_EQ(t.rcp_bits(sign | bits), k_canonical_nan);
    // 2^126: 2^-126, the smallest normal; anything larger is flushed to a zero of the sign.
    EXPECT_EQ(t.rcp_bits(sign | 0x7e800000u), sign | 0x00800000u);
    for (std::uint32_t bits : {0x7e800001u, 0x7effffffu, 0x7f000000u, 0x7f7fffffu}) EXPECT_EQ(t.rcp_bits(sign | bits), sign);
    // The smallest normal: 2^126; 1: 1.
    EXPECT_EQ(t.rcp_bits(sign | 0x00800000u), sign | 0x7e800000u);
    EXPECT_EQ(t.rcp_bits(sign | 0x3f800000u), sign | 0x3f800000u);
  }
  EXPECT_EQ(t.rcp(4.0f), 0.25f);
  EXPECT_EQ(t.rcp(-0.5f), -2.0f);
}

TEST_F(RcpApproxTest, ReadsTheFileItsWriterMakesAndRefusesAnyOther) {
  const std::vector<std::uint32_t> words = exact_words();
  const std::vector<std::uint8_t> bytes = rcp_table_bytes(words);
  ASSERT_EQ(bytes.size(), k_rcp_table_entries * 4);
  EXPECT_EQ(bytes[0], 0x00);  // 1.0f, 0x3f800000, little-endian
  EXPECT_EQ(bytes[3], 0x3f);
  const auto path = dir() / "rcp.bin";
  const std::span<const std::uint8_t> parts[] = {bytes};
  ASSERT_TRUE(write_file_atomic(path, parts));
  auto read = RcpApproxTable::read(path);
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_TRUE(std::equal(read->words().begin(), read->words().end(), words.begin(), words.end()));

  // One word short.
  const auto short_path = dir() / "short.bin";
  const std::span<const std::uint8_t> short_parts[] = {std::span(bytes).first(bytes.size() - 4)};
  ASSERT_TRUE(write_file_atomic(short_path, short_parts));
  auto refused = RcpApproxTable::read(short_path);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_NE(refused.error().message.find(short_path.string()), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("33554428"), std::string::npos) << refused.error().message;

  // A word outside [0.5, 1]: entry 5 holds 2.0f.
  std::vector<std::uint8_t> bad = bytes;
  bad[20] = 0x00, bad[21] = 0x00, bad[22] = 0x00, bad[23] = 0x40;
  const auto bad_path = dir() / "bad.bin";
  const std::span<const std::uint8_t> bad_parts[] = {bad};
  ASSERT_TRUE(write_file_atomic(bad_path, bad_parts));
  refused = RcpApproxTable::read(bad_path);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find(bad_path.string() + ": entry 5 (the input 0x3f800005) holds 0x40000000"),
            std::string::npos)
      << refused.error().message;

  refused = RcpApproxTable::read(dir() / "missing.bin");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("missing.bin"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(RcpApproxTable::from_words({0x3f800000u}, "one word"));
}

}  // namespace
}  // namespace jitcache
