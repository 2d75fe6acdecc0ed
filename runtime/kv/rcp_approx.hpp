// The GPU's approximate reciprocal, rcp.approx.ftz.f32, reproduced on the CPU from a table
// of its results on the 2^23 significands of [1, 2). Writers of the engines' own records
// that divide with it (an approximate 1/x, MUFU.RCP) can then be reproduced on the host bit
// for bit. The table is measured on a GPU (scripts/gpu_check.sh writes it; bench/rcp_table.cpp)
// and read here; nothing in it is computed on the host.
//
// The file: 2^23 little-endian uint32 words, word i the result's bits for the input bits
// 0x3f800000 + i (the fp32 1 + i * 2^-23), each in [0.5, 1].
//
// The rule, for an fp32 input x with sign s, biased exponent E and significand field f:
//   - x a NaN (E = 255, f != 0): a NaN; this helper returns the canonical 0x7fffffff;
//   - x = +-inf (E = 255, f = 0): +-0;
//   - x = +-0 or subnormal (E = 0; ftz reads a subnormal input as a zero of its sign): +-inf;
//   - otherwise x = (-1)^s * m * 2^e with m = 1 + f * 2^-23 in [1, 2) and e = E - 127. Let
//     r = table[f], in [0.5, 1], with biased exponent Er (126 or 127) and significand field
//     fr. The result is (-1)^s * r * 2^-e: biased exponent Er - e, significand field fr. When
//     Er - e <= 0 the result is below the smallest normal and ftz flushes it to a zero of
//     the input's sign. (Er - e never exceeds 253, so no result overflows.)
// The GPU check (GpuTest.RcpApproxTableReproducesEveryInput) holds the hardware to this
// rule on all 2^32 inputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

inline constexpr std::size_t k_rcp_table_entries = std::size_t{1} << 23;
inline constexpr std::uint32_t k_rcp_table_first_input = 0x3f800000u;  // 1.0f
inline constexpr std::uint32_t k_canonical_nan = 0x7fffffffu;

class RcpApproxTable {
 public:
  // The table in `path`: invalid_input naming the file when it is not 2^23 words or a word
  // is outside [0.5, 1] (the word's index and value).
  static Result<RcpApproxTable> read(const std::filesystem::path& path);
  // From measured words (2^23 of them, each checked as read() does); `what` names them in
  // errors.
  static Result<RcpApproxTable> from_words(std::vector<std::uint32_t> words, const std::string& what);

  // rcp.approx.ftz.f32 of the fp32 `bits`, as bits, by the rule above.
  std::uint32_t rcp_bits(std::uint32_t bits) const;
  float rcp(float x) const;

  std::span<const std::uint32_t> words() const { return m_words; }

 private:
  explicit RcpApproxTable(std::vector<std::uint32_t> words) : m_words(std::move(words)) {}
  std::vector<std::uint32_t> m_words;
};

// The file's bytes for `words` (little-endian), as read() takes them.
std::vector<std::uint8_t> rcp_table_bytes(std::span<const std::uint32_t> words);

}  // namespace jitcache
