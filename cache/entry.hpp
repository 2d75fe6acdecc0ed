// Value types the store hands out: an entry's metadata, a filter over entries, and the
// store's counters. Plain data, no behaviour beyond formatting helpers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/facts.hpp"
#include "cache/hash.hpp"

namespace jitcache::cache {

// One row of the index (see docs/cache-format.md for the table it comes from).
struct EntryInfo {
  CacheKey key;
  BlobDigest digest;
  std::uint64_t size = 0;
  std::uint32_t key_schema = 0;  // k_key_schema_version of the writer
  Facts facts;                   // empty when facts_json did not parse
  std::string facts_json;        // as stored
  std::int64_t created_ms = 0;   // Unix time, milliseconds
  std::int64_t last_used_ms = 0;
  std::uint64_t hits = 0;
  double compile_ms = 0;
};

// Entries match when every condition holds; an empty filter matches every entry.
struct EntryFilter {
  std::optional<std::string> key_prefix;                    // hex digits, any case
  std::vector<std::pair<std::string, std::string>> facts;  // fact name == value

  bool matches_all() const { return !key_prefix && facts.empty(); }
};

// What a store did. Persisted cumulatively in the index's `counters` table; a Store also
// keeps the figures of its own session.
struct Counters {
  std::uint64_t memory_hits = 0;  // served from this process's memory tier
  std::uint64_t disk_hits = 0;    // served from a verified blob file
  std::uint64_t coalesced = 0;    // waited for another thread of this process to fetch or produce
  std::uint64_t misses = 0;       // nothing usable stored: the producer ran
  std::uint64_t produces = 0;     // producer calls that succeeded
  std::uint64_t produce_failures = 0;
  std::uint64_t quarantined = 0;  // entries dropped because their blob was missing or altered
  std::uint64_t evicted = 0;      // entries dropped by the size cap or gc
  double compile_ms_spent = 0;    // sum of compile_ms of produced entries
  double compile_ms_saved = 0;    // sum of compile_ms of entries served by a hit

  Counters& operator+=(const Counters& other);
  friend bool operator==(const Counters&, const Counters&) = default;
};

}  // namespace jitcache::cache
