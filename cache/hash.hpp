// 128-bit XXH3 hashes as value types. Two distinct types share one template so that a
// cache key (hash of facts) can never be passed where a blob digest (hash of content)
// is expected, or the other way round.
//
// Text form: 32 lowercase hex digits, most significant byte first; equal to
// printf("%016llx%016llx", hash.high64, hash.low64) of xxHash's XXH128_hash_t.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"

namespace jitcache::cache {

inline constexpr std::size_t k_hash_bytes = 16;
inline constexpr std::size_t k_hash_hex_chars = 2 * k_hash_bytes;

namespace detail {
std::array<std::uint8_t, k_hash_bytes> xxh3_128(std::span<const std::byte> data);
std::string to_hex(std::span<const std::uint8_t, k_hash_bytes> bytes);
// Parses exactly 32 hex digits (either case); `what` names the value in the error.
Result<std::array<std::uint8_t, k_hash_bytes>> from_hex(std::string_view text, std::string_view what);
bool is_hex(std::string_view text);
}  // namespace detail

template <class Tag>
class Hash128 {
 public:
  Hash128() = default;
  explicit Hash128(const std::array<std::uint8_t, k_hash_bytes>& bytes) : m_bytes(bytes) {}

  static Hash128 of(std::span<const std::byte> data) { return Hash128(detail::xxh3_128(data)); }
  static Hash128 of(std::string_view data) { return of(std::as_bytes(std::span(data))); }
  static Result<Hash128> from_hex(std::string_view text) {
    auto bytes = JC_TRY(detail::from_hex(text, Tag::k_name));
    return Hash128(bytes);
  }

  std::string to_hex() const { return detail::to_hex(m_bytes); }
  const std::array<std::uint8_t, k_hash_bytes>& bytes() const { return m_bytes; }

  // The bytes are already uniformly distributed: any 8 of them make a good bucket hash.
  std::size_t bucket_hash() const {
    std::size_t h;
    std::memcpy(&h, m_bytes.data(), sizeof h);
    return h;
  }

  friend bool operator==(const Hash128&, const Hash128&) = default;
  friend auto operator<=>(const Hash128&, const Hash128&) = default;

 private:
  std::array<std::uint8_t, k_hash_bytes> m_bytes{};
};

struct CacheKeyTag {
  static constexpr std::string_view k_name = "cache key";
};
struct BlobDigestTag {
  static constexpr std::string_view k_name = "blob digest";
};

// XXH3-128 of a Facts' canonical serialization (see cache/facts.hpp).
using CacheKey = Hash128<CacheKeyTag>;
// XXH3-128 of a blob's content; names the blob file (see cache/blob_files.hpp).
using BlobDigest = Hash128<BlobDigestTag>;

}  // namespace jitcache::cache

template <class Tag>
struct std::hash<jitcache::cache::Hash128<Tag>> {
  std::size_t operator()(const jitcache::cache::Hash128<Tag>& h) const noexcept {
    return h.bucket_hash();
  }
};
