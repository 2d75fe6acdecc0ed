#include "remote/signed_entry.hpp"

#include <cstring>

#include "cache/entry.hpp"
#include "support/enum_names.hpp"
#include "support/hmac.hpp"
#include "support/little_endian.hpp"

namespace jitcache::remote {
namespace {

constexpr std::string_view k_magic = "JCREMOTE";
constexpr std::string_view k_domain{"jitcache.remote.v1\0", 19};

Sha256Digest sign(std::string_view name, std::string_view key, std::string_view body) {
  std::string length;
  append_le(length, static_cast<std::uint32_t>(name.size()));
  return hmac_sha256(key, {k_domain, length, name, body});
}

}  // namespace

const char* to_string(Rejection rejection) {
  return enum_name(rejection, {"truncated", "not a signed jitcache entry", "unknown format version",
                               "bad signature", "unreadable facts", "facts of another key", "digest mismatch",
                               "field out of range", "oversized", "unusable content", "not a string value"});
}

std::string Rejected::to_string() const {
  return std::string(remote::to_string(why)) + (detail.empty() ? "" : ": " + detail);
}

std::string encode_signed_entry(std::string_view name, std::string_view fleet_key, const cache::Facts& facts,
                                std::span<const std::byte> bytes, double compile_ms) {
  const std::string facts_json = facts.to_json();
  std::string value;
  value.reserve(k_signed_entry_header_bytes + facts_json.size() + bytes.size() + k_signed_entry_mac_bytes);
  value.append(k_magic);
  append_le(value, k_signed_entry_version);
  append_le(value, static_cast<std::uint32_t>(facts_json.size()));
  append_le(value, static_cast<std::uint64_t>(bytes.size()));
  append_le(value, compile_ms);
  const auto digest = cache::BlobDigest::of(bytes).bytes();
  value.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  value.append(facts_json);
  value.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const Sha256Digest mac = sign(name, fleet_key, value);
  value.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return value;
}

namespace {

struct Layout {
  std::uint32_t facts_len;
  std::uint64_t blob_len;
};

std::expected<Layout, Rejected> read_layout(std::string_view value) {
  if (value.size() < k_magic.size() || value.substr(0, k_magic.size()) != k_magic)
    return std::unexpected(Rejected{Rejection::bad_magic, "the value does not start with " + std::string(k_magic)});
  if (value.size() < k_signed_entry_header_bytes + k_signed_entry_mac_bytes)
    return std::unexpected(Rejected{Rejection::truncated, std::to_string(value.size()) + " bytes"});
  const auto version = read_le<std::uint32_t>(value, 8);
  if (version != k_signed_entry_version)
    return std::unexpected(Rejected{Rejection::unknown_version, "version " + std::to_string(version) +
                                                                   ", this build reads " +
                                                                   std::to_string(k_signed_entry_version)});
  Layout layout{read_le<std::uint32_t>(value, 12), read_le<std::uint64_t>(value, 16)};
  const std::uint64_t room = value.size() - k_signed_entry_header_bytes - k_signed_entry_mac_bytes;
  if (layout.facts_len > room || layout.blob_len != room - layout.facts_len)
    return std::unexpected(Rejected{Rejection::truncated, "the header promises " +
                                                              std::to_string(layout.facts_len) + " + " +
                                                              std::to_string(layout.blob_len) + " bytes, the value has " +
                                                              std::to_string(room)});
  return layout;
}

}  // namespace

std::expected<SignedEntry, Rejected> decode_signed_entry(std::string_view name, std::string_view fleet_key,
                                                         std::string_view value, const cache::CacheKey& expected) {
  const Layout layout = JC_TRY(read_layout(value));
  const std::string_view body = value.substr(0, value.size() - k_signed_entry_mac_bytes);
  if (!same_mac(sign(name, fleet_key, body), value.substr(body.size())))
    return std::unexpected(Rejected{Rejection::bad_signature, "not signed with this fleet key for " + std::string(name)});
  const std::string_view facts_json = value.substr(k_signed_entry_header_bytes, layout.facts_len);
  auto facts = cache::Facts::from_json(facts_json);
  if (!facts) return std::unexpected(Rejected{Rejection::bad_facts, facts.error().message});
  const cache::CacheKey key = facts->key();
  if (key != expected)
    return std::unexpected(Rejected{Rejection::wrong_key, "its facts are those of " + key.to_hex()});
  const std::string_view blob = value.substr(k_signed_entry_header_bytes + layout.facts_len, layout.blob_len);
  cache::BlobDigest stored(
      [&] {
        std::array<std::uint8_t, cache::k_hash_bytes> d{};
        std::memcpy(d.data(), value.data() + 32, d.size());
        return d;
      }());
  const cache::BlobDigest actual = cache::BlobDigest::of(blob);
  if (actual != stored)
    return std::unexpected(Rejected{Rejection::bad_digest, "the bytes hash to " + actual.to_hex() + ", the value says " +
                                                               stored.to_hex()});
  const double compile_ms = read_le<double>(value, 24);
  if (auto fields = cache::check_incoming_fields({blob.size(), compile_ms, {}}); !fields)
    return std::unexpected(Rejected{Rejection::bad_field, fields.error().message});
  SignedEntry entry;
  entry.facts = std::move(*facts);
  const auto* begin = reinterpret_cast<const std::byte*>(blob.data());
  entry.bytes.assign(begin, begin + blob.size());
  entry.compile_ms = compile_ms;
  return entry;
}

std::optional<cache::Facts> peek_facts(std::string_view value) {
  auto layout = read_layout(value);
  if (!layout) return std::nullopt;
  auto facts = cache::Facts::from_json(value.substr(k_signed_entry_header_bytes, layout->facts_len));
  if (!facts) return std::nullopt;
  return std::move(*facts);
}

}  // namespace jitcache::remote
