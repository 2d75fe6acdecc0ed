#include "runtime/kv/rcp_approx.hpp"

#include <bit>
#include <cstdio>
#include <cstring>

#include "support/regular_file.hpp"

namespace jitcache {
namespace {

constexpr std::uint32_t k_half_bits = 0x3f000000u;  // 0.5f
constexpr std::uint32_t k_one_bits = 0x3f800000u;   // 1.0f

}  // namespace

Result<RcpApproxTable> RcpApproxTable::from_words(std::vector<std::uint32_t> words, const std::string& what) {
  if (words.size() != k_rcp_table_entries)
    return make_error(ErrorCode::invalid_input, what + ": expected " + std::to_string(k_rcp_table_entries) +
                                                    " entries (the significands of [1, 2)), found " +
                                                    std::to_string(words.size()));
  for (std::size_t i = 0; i < words.size(); ++i) {
    // Positive finite floats order as their bits: [0.5, 1] is [0x3f000000, 0x3f800000].
    if (words[i] < k_half_bits || words[i] > k_one_bits) {
      char text[160];
      std::snprintf(text, sizeof text, ": entry %zu (the input 0x%08x) holds 0x%08x, outside [0.5, 1]", i,
                    k_rcp_table_first_input + static_cast<std::uint32_t>(i), words[i]);
      return make_error(ErrorCode::invalid_input, what + text);
    }
  }
  return RcpApproxTable(std::move(words));
}

Result<RcpApproxTable> RcpApproxTable::read(const std::filesystem::path& path) {
  constexpr std::size_t bytes = k_rcp_table_entries * 4;
  auto read = read_regular_file_bytes(path, bytes + 1);
  if (!read) return std::unexpected(read.error());
  const std::vector<std::uint8_t>& data = *read;
  if (data.size() != bytes)
    return make_error(ErrorCode::invalid_input, path.string() + ": an rcp.approx table is " + std::to_string(bytes) +
                                                    " bytes (2^23 uint32 words), this file has " +
                                                    std::to_string(data.size()));
  std::vector<std::uint32_t> words(k_rcp_table_entries);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::uint8_t* p = &data[4 * i];
    words[i] = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
  }
  return from_words(std::move(words), path.string());
}

std::uint32_t RcpApproxTable::rcp_bits(std::uint32_t bits) const {
  const std::uint32_t sign = bits & 0x80000000u;
  const std::uint32_t exponent = (bits >> 23) & 0xffu;
  const std::uint32_t fraction = bits & 0x7fffffu;
  if (exponent == 0xffu) return fraction != 0 ? k_canonical_nan : sign;  // NaN; 1/inf = 0
  if (exponent == 0) return sign | 0x7f800000u;                          // ftz: 1/(+-0) = +-inf
  const std::uint32_t r = m_words[fraction];
  const int result_exponent = static_cast<int>((r >> 23) & 0xffu) - (static_cast<int>(exponent) - 127);
  if (result_exponent <= 0) return sign;  // below the smallest normal: flushed
  return sign | static_cast<std::uint32_t>(result_exponent) << 23 | (r & 0x7fffffu);
}

float RcpApproxTable::rcp(float x) const { return std::bit_cast<float>(rcp_bits(std::bit_cast<std::uint32_t>(x))); }

std::vector<std::uint8_t> rcp_table_bytes(std::span<const std::uint32_t> words) {
  std::vector<std::uint8_t> out(words.size() * 4);
  for (std::size_t i = 0; i < words.size(); ++i)
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<std::uint8_t>(words[i] >> (8 * b));
  return out;
}

}  // namespace jitcache
