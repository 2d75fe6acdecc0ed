// Value types the store hands out: an entry's metadata, a filter over entries, and the
// store's counters. Plain data, no behaviour beyond formatting helpers.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"

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

// The rules an entry's fields keep: `jitcache verify` holds every row of the index to them,
// and an entry that arrives from another tier or an export file must keep them before it
// is stored (remote values, imports), so nothing that enters the index makes verify report
// it damaged. One predicate per field, shared by both.
inline constexpr double k_max_compile_ms = 1e9;                // about eleven days
inline constexpr std::uint64_t k_max_entry_bytes = 1ull << 40;  // 1 TiB
inline constexpr std::string_view k_compile_ms_rule = "milliseconds from 0 to 10^9";
inline constexpr std::string_view k_entry_size_rule = "a byte count from 0 to 1 TiB";
inline constexpr std::string_view k_facts_json_rule = "a JSON object";

// A finite number from 0 to k_max_compile_ms (NaN, infinities and negatives are not).
bool compile_ms_in_range(double ms);
bool entry_size_in_range(std::uint64_t bytes);
bool facts_json_in_rule(std::string_view text);

// The fields of an entry on its way into the index.
struct IncomingFields {
  std::uint64_t size = 0;
  double compile_ms = 0;
  std::string_view facts_json;  // empty: not checked (the caller holds parsed Facts)
};

// The first field that breaks its rule, as ErrorCode::invalid_input "<field>: <value> is
// not <rule>"; the caller prefixes where the entry came from.
Status check_incoming_fields(const IncomingFields& fields);

// Entries match when every condition holds; an empty filter matches every entry.
struct EntryFilter {
  std::optional<std::string> key_prefix;                    // hex digits, any case
  std::vector<std::pair<std::string, std::string>> facts;  // fact name == value

  bool matches_all() const { return !key_prefix && facts.empty(); }
};

// What a store did, one entry per counter; everything else is derived from this list: the
// members of Counters, +=, ==, the rows of the index's `counters` table (created, read,
// added to, checked), the JSON of `jitcache stats --json` and the text of `jitcache stats`.
// A new counter is one entry here: an index written before it existed reads it as 0 and
// gains its row when next opened for writing.
//
//   X(member, type, json, text_row, text_part, description)
//     member     also the row's name in the index; never rename (it is on disk)
//     type       std::uint64_t (a count) or double (milliseconds)
//     json       path in the stats JSON, '/' between levels; a public contract
//     text_row   label of the `jitcache stats` row; consecutive counters share a row
//     text_part  this counter's part of that row, "{}" standing for the value (a count,
//                or milliseconds shown as seconds with one decimal)
// Entries are in the order the JSON and the text show them.
#define JC_CACHE_COUNTERS(X)                                                         \
  X(memory_hits, std::uint64_t, "hits/memory", "hits", "memory {}",                  \
    "served from this process's memory tier")                                        \
  X(disk_hits, std::uint64_t, "hits/disk", "hits", ", disk {}",                      \
    "served from a verified blob file")                                              \
  X(coalesced, std::uint64_t, "coalesced", "hits", ", waited for a thread {}",       \
    "waited for another thread of this process to fetch or produce")                 \
  X(misses, std::uint64_t, "misses", "misses", "{}",                                 \
    "nothing usable stored: the producer ran")                                       \
  X(produces, std::uint64_t, "compiles", "compiles", "{}",                           \
    "producer calls that succeeded")                                                 \
  X(produce_failures, std::uint64_t, "compile_failures", "compiles", " ({} failed)", \
    "producer calls that failed")                                                    \
  X(compile_ms_spent, double, "compile_ms/spent", "compile time", "spent {} s",      \
    "sum of compile_ms of produced entries")                                         \
  X(compile_ms_saved, double, "compile_ms/saved", "compile time", ", saved {} s",    \
    "sum of compile_ms of entries served by a hit")                                  \
  X(quarantined, std::uint64_t, "quarantined", "quarantined", "{}",                  \
    "entries dropped because their blob was missing or altered")                     \
  X(evicted, std::uint64_t, "evicted", "evicted", "{}",                              \
    "entries dropped by the size cap or gc")                                         \
  X(provider_hits, std::uint64_t, "provider/hits", "providers", "hits {}",           \
    "served by an installed cache provider (a cache wheel), verified")               \
  X(provider_rejects, std::uint64_t, "provider/rejected", "providers",              \
    ", rejected {}", "provider manifests or entries refused; never loaded")          \
  X(remote_hits, std::uint64_t, "remote/hits", "remote", "hits {}",                  \
    "served by the shared remote tier, verified")                                    \
  X(remote_misses, std::uint64_t, "remote/misses", "remote", ", misses {}",          \
    "asked the remote tier, which had nothing")                                      \
  X(remote_rejects, std::uint64_t, "remote/rejected", "remote", ", rejected {}",     \
    "remote values refused (signature, digest, facts, size); never loaded")          \
  X(remote_uploads, std::uint64_t, "remote/uploads", "remote", ", uploads {}",       \
    "entries this node stored in the remote tier")                                   \
  X(remote_lease_waits, std::uint64_t, "remote/lease_waits", "remote",               \
    ", lease waits {}", "waited for another node compiling the same key")            \
  X(remote_errors, std::uint64_t, "remote/errors", "remote", ", errors {}",          \
    "remote operations that failed (down, slow, full, refused)")

// Persisted cumulatively in the index's `counters` table; a Store also keeps the figures
// of its own session.
struct Counters {
#define JC_COUNTER_MEMBER(member, type, json, text_row, text_part, description) type member = 0;
  JC_CACHE_COUNTERS(JC_COUNTER_MEMBER)
#undef JC_COUNTER_MEMBER

  Counters& operator+=(const Counters& other);
  friend bool operator==(const Counters&, const Counters&) = default;
};

enum class CounterKind { count, milliseconds };

// One line of JC_CACHE_COUNTERS as data. Exactly one of `count` and `milliseconds` is set,
// as `kind` says.
struct CounterField {
  std::string_view name;
  CounterKind kind;
  std::uint64_t Counters::*count;
  double Counters::*milliseconds;
  std::string_view json;
  std::string_view text_row;
  std::string_view text_part;
  std::string_view description;
};

namespace detail {
constexpr CounterField counter_field(std::string_view name, std::uint64_t Counters::*member,
                                     std::string_view json, std::string_view text_row,
                                     std::string_view text_part, std::string_view description) {
  return {name, CounterKind::count, member, nullptr, json, text_row, text_part, description};
}
constexpr CounterField counter_field(std::string_view name, double Counters::*member,
                                     std::string_view json, std::string_view text_row,
                                     std::string_view text_part, std::string_view description) {
  return {name, CounterKind::milliseconds, nullptr, member, json, text_row, text_part, description};
}
}  // namespace detail

inline constexpr std::array k_counter_fields = {
#define JC_COUNTER_FIELD(member, type, json, text_row, text_part, description) \
  detail::counter_field(#member, &Counters::member, json, text_row, text_part, description),
    JC_CACHE_COUNTERS(JC_COUNTER_FIELD)
#undef JC_COUNTER_FIELD
};

// A counter's value as a double, whatever its kind (for text and tests).
double counter_value(const CounterField& field, const Counters& counters);

}  // namespace jitcache::cache
