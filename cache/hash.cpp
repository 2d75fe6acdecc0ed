#include "cache/hash.hpp"

#include <xxhash.h>

#include "support/text.hpp"

namespace jitcache::cache::detail {

std::array<std::uint8_t, k_hash_bytes> xxh3_128(std::span<const std::byte> data) {
  const XXH128_hash_t hash = XXH3_128bits(data.data(), data.size());
  // The canonical form is big-endian, so the hex text reads like xxhsum's output.
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);
  std::array<std::uint8_t, k_hash_bytes> out;
  static_assert(sizeof canonical.digest == k_hash_bytes);
  std::memcpy(out.data(), canonical.digest, k_hash_bytes);
  return out;
}

std::string to_hex(std::span<const std::uint8_t, k_hash_bytes> bytes) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out(k_hash_hex_chars, '0');
  for (std::size_t i = 0; i < k_hash_bytes; ++i) {
    out[2 * i] = k_digits[bytes[i] >> 4];
    out[2 * i + 1] = k_digits[bytes[i] & 0xF];
  }
  return out;
}

bool is_hex(std::string_view text) {
  for (char c : text)
    if (text::hex_digit_value(c) < 0) return false;
  return true;
}

Result<std::array<std::uint8_t, k_hash_bytes>> from_hex(std::string_view text,
                                                        std::string_view what) {
  if (text.size() != k_hash_hex_chars)
    return make_error(ErrorCode::invalid_input,
                      std::string(what) + " '" + std::string(text) + "': expected " +
                          std::to_string(k_hash_hex_chars) + " hex digits, got " +
                          std::to_string(text.size()) + " characters");
  std::array<std::uint8_t, k_hash_bytes> out;
  for (std::size_t i = 0; i < k_hash_bytes; ++i) {
    const int hi = text::hex_digit_value(text[2 * i]);
    const int lo = text::hex_digit_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return make_error(ErrorCode::invalid_input, std::string(what) + " '" + std::string(text) +
                                                      "': not a hexadecimal string");
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace jitcache::cache::detail
