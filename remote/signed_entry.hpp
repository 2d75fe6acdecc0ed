// The value of one remote cache entry: the entry's facts, its bytes and what producing
// them cost, signed with the fleet key. Nothing in a remote value is trusted until its
// signature, its digest and its facts have been checked against the request.
//
// Layout, integers little-endian:
//
//   offset  size  field
//        0     8  magic "JCREMOTE"
//        8     4  format version (k_signed_entry_version)
//       12     4  facts_len: bytes of the facts JSON
//       16     8  blob_len: bytes of the entry
//       24     8  compile_ms, an IEEE-754 double
//       32    16  blob digest: XXH3-128 of the entry's bytes (cache/hash.hpp)
//       48     .  facts JSON (cache/facts.hpp's readable form), facts_len bytes
//        .     .  the entry's bytes, blob_len bytes
//        .    32  HMAC-SHA256 under the fleet key of
//                 "jitcache.remote.v1\0" || u32 len(name) || name || every byte above,
//                 where name is the Redis key the value is stored under
//
// Because the MAC covers the Redis key, a value copied to another key fails its signature
// even before its facts are compared with the key asked for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "cache/tier.hpp"
#include "jitcache/error.hpp"

namespace jitcache::remote {

inline constexpr std::uint32_t k_signed_entry_version = 1;
inline constexpr std::size_t k_signed_entry_header_bytes = 48;
inline constexpr std::size_t k_signed_entry_mac_bytes = 32;

// Why a value was refused; each is counted and logged with the key, never loaded.
enum class Rejection {
  truncated,        // shorter than its header and signature, or its lengths
  bad_magic,        // not a jitcache remote value (an unsigned or foreign value)
  unknown_version,  // a format this build does not read
  bad_signature,    // not signed with this fleet key, or altered, or moved to another key
  bad_facts,        // the facts JSON does not parse or validate
  wrong_key,        // the facts are not those of the key asked for
  bad_digest,       // the bytes do not hash to the digest
  bad_field,        // a field breaks the rule the index holds it to (cache/entry.hpp: compile_ms)
  oversized,        // larger than the configured bound (not read in full)
  bad_content,      // the bytes are not what the reader expects (the kernel cache's check)
  wrong_type,       // not a Redis string at all (a list, hash, set...): nobody's value
};
const char* to_string(Rejection rejection);

struct Rejected {
  Rejection why;
  std::string detail;
  std::string to_string() const;
};

struct SignedEntry {
  cache::Facts facts;
  cache::Bytes bytes;
  double compile_ms = 0;
};

// The value to store under Redis key `name`.
std::string encode_signed_entry(std::string_view name, std::string_view fleet_key, const cache::Facts& facts,
                                std::span<const std::byte> bytes, double compile_ms);

// Checks everything in order (lengths, magic, version, signature before anything inside
// is parsed, facts, that the facts hash to `expected`, the digest, the fields' ranges: a
// value signed by a buggy writer must not reach the index) and returns the entry.
std::expected<SignedEntry, Rejected> decode_signed_entry(std::string_view name, std::string_view fleet_key,
                                                         std::string_view value, const cache::CacheKey& expected);

// Only the parts that need no key: the facts of a value, for audits that also report
// values they cannot verify. std::nullopt for a value that is not even well-formed.
std::optional<cache::Facts> peek_facts(std::string_view value);

}  // namespace jitcache::remote
