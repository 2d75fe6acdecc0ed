// Facts: the named string facts that identify a cache entry, and the key derived from
// them. The cache knows no fact by meaning; callers (runtime/) decide which facts change
// their binary and must record every one of them.
//
// Canonical serialization (the bytes hashed into the key), all integers little-endian:
//
//   canonical := magic version count field*
//   magic     := "jitcache.facts"                  14 bytes, no terminator
//   version   := u32 k_key_schema_version
//   count     := u64 number of fields
//   field     := 'F' u64 len(name) name u64 len(value) value
//
// Fields appear in ascending bytewise order of name; names are unique. Because every
// name and value carries its length, {"ab": "c"} and {"a": "bc"} serialize differently,
// and the order in which a caller set the facts never matters.
//
//   key := XXH3-128(canonical), printed as 32 lowercase hex digits (cache/hash.hpp)
//
// Readable form (stored with each entry): a JSON object of string values, keys sorted,
// for example {"kernel":"kv_write","latent_scale":"dynamic"}.
//
// Rules checked by validate(): 1 to 128 name characters from [A-Za-z0-9_.-]; values are
// valid UTF-8 of at most 64 KiB.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "cache/hash.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

// Bump when the canonical serialization above changes in any way: every existing key
// becomes unreachable (old entries age out through eviction) instead of being misread.
// The golden test in tests/cache/test_facts.cpp pins a key and fails when you forget.
inline constexpr std::uint32_t k_key_schema_version = 1;

inline constexpr std::size_t k_max_fact_name_chars = 128;
inline constexpr std::size_t k_max_fact_value_bytes = 64 * 1024;

class Facts {
 public:
  using Map = std::map<std::string, std::string, std::less<>>;

  Facts() = default;
  Facts(std::initializer_list<Map::value_type> fields);

  // Sets or replaces one fact. Checked by validate(), so building stays a plain chain.
  Facts& set(std::string name, std::string value);

  std::optional<std::string_view> get(std::string_view name) const;
  const Map& fields() const { return m_fields; }
  std::size_t size() const { return m_fields.size(); }
  bool empty() const { return m_fields.empty(); }

  // The first rule a name or value breaks, naming the fact.
  Status validate() const;

  std::string canonical() const;
  CacheKey key() const;

  std::string to_json() const;
  // Accepts only an object whose values are all strings, and whose facts validate().
  static Result<Facts> from_json(std::string_view text);

  friend bool operator==(const Facts&, const Facts&) = default;

 private:
  Map m_fields;
};

bool is_valid_fact_name(std::string_view name);

}  // namespace jitcache::cache
