// What the Index's source files (index_*.cpp) share: the counter layout, reading entry
// rows and the totals, deleting selected rows, and k_max_count spelt as SQL. Internal to
// the Index; cache/index.hpp is its header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "cache/entry.hpp"
#include "cache/index.hpp"
#include "cache/sqlite.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache::index_detail {

// PRAGMA user_version holds a digest of the counter names (k_counter_fields). An index
// written by a jitcache that knew other counters holds another digest; the rows it lacks
// are added, as 0, when it is next opened for writing. So a new counter needs no migration,
// while a row that goes missing later (an operator's DELETE) is not silently made again:
// check_values reports it.
constexpr std::int32_t counter_layout() {
  std::uint32_t hash = 2166136261u;  // FNV-1a
  for (const CounterField& field : k_counter_fields) {
    for (const char c : field.name) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
    hash *= 16777619u;  // a separator: {"ab", "c"} differs from {"a", "bc"}
  }
  return static_cast<std::int32_t>((hash & 0x7FFFFFFF) | 1);  // never 0, a fresh file's value
}
inline constexpr std::int32_t k_counter_layout = counter_layout();

// A stored count as read back: junk below zero reads as 0, beyond k_max_count as k_max_count
// (a REAL too large for int64 is saturated by SQLite itself).
inline std::uint64_t column_count(const sql::Statement& stmt, int column) {
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(stmt.int64(column), 0, k_max_count));
}

inline constexpr const char* k_entry_columns =
    "key, key_schema, digest, size, facts, created, last_used, hits, compile_ms";

// An entries row read with k_entry_columns; std::nullopt (and a warning) for a row whose
// key or digest is malformed.
std::optional<EntryInfo> read_entry(const sql::Statement& stmt, const std::filesystem::path& db_path);

// The `entries` and `bytes` rows the triggers keep.
Result<IndexTotals> read_totals(sql::Database& db);

// Deletes the selected rows inside an open transaction and finds the digests left
// without any entry.
Result<Removed> delete_selected(sql::Database& db, std::vector<EntryInfo> selected);

}  // namespace jitcache::cache::index_detail

// k_max_count as SQL text, for the statements that clamp counts.
#define JC_MAX_COUNT_SQL "1000000000000000"
static_assert(jitcache::cache::k_max_count == 1'000'000'000'000'000, "JC_MAX_COUNT_SQL spells k_max_count");
