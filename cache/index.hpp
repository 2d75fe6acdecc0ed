// The SQLite index of a cache root: <root>/index.db. Internal to cache/; the schema is
// documented for operators in docs/cache-format.md and here:
//
//   schema_version(version INTEGER)           one row: the layout version (k_schema_version)
//   entries(key TEXT PRIMARY KEY,             32 hex: XXH3-128 of the canonical facts
//           key_schema INTEGER,               k_key_schema_version the key was made with
//           digest TEXT,                      32 hex: XXH3-128 of the blob content
//           size INTEGER,                     blob bytes
//           facts TEXT,                       JSON object of string facts
//           created INTEGER,                  Unix ms
//           last_used INTEGER,                Unix ms, updated in batches
//           hits INTEGER,
//           compile_ms REAL)                  what producing it cost
//     indexes: entries_lookup (key, digest, size, compile_ms) covers lookups;
//              entries_last_used (LRU eviction); entries_digest (blob references)
//   counters(name TEXT PRIMARY KEY, value)    cumulative figures; `entries` and `bytes`
//                                             are kept exact by triggers on entries
//   usage_log(key, hits, last_used)           uses recorded by processes, not yet added to
//                                             entries (eviction, inspect and gc fold it)
//
// Journal mode WAL, so readers never wait for the writer; every write is one
// BEGIN IMMEDIATE transaction, so writers queue on the busy timeout instead of failing.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/blob_files.hpp"
#include "cache/entry.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

// Bump with a new entry in k_migrations (index.cpp) when the tables change.
inline constexpr int k_index_schema_version = 2;

struct IndexRow {
  BlobDigest digest;
  std::uint64_t size = 0;
  double compile_ms = 0;
};

struct NewEntry {
  CacheKey key;
  BlobDigest digest;
  std::uint64_t size = 0;
  std::string facts_json;
  double compile_ms = 0;
  std::int64_t now_ms = 0;
};

struct Usage {
  CacheKey key;
  std::uint64_t hits = 0;
  std::int64_t last_used_ms = 0;
};

struct Removed {
  std::vector<EntryInfo> entries;
  std::vector<BlobDigest> unreferenced;  // digests no remaining entry points to
};

struct IndexTotals {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
};

enum class IndexAccess { read_write, read_only };

class Index {
 public:
  struct OpenFailure {
    Error error;
    bool corrupt = false;  // the file is not a usable SQLite database: rebuild it
    bool unwritable = false;  // it could not be written (full disk, read-only, I/O error): try read-only
  };

  static std::expected<std::unique_ptr<Index>, OpenFailure> open(const std::filesystem::path& db_path,
                                                                  std::chrono::milliseconds busy_timeout,
                                                                  Durability durability,
                                                                  IndexAccess access = IndexAccess::read_write);
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // SQLite reported the file corrupt since it was opened.
  bool corrupt() const;
  const std::filesystem::path& path() const { return m_path; }
  // The file this connection opened, to tell whether index.db was replaced since.
  const std::optional<FileId>& file_id() const { return m_file_id; }

  Result<std::optional<IndexRow>> lookup(const CacheKey& key);
  // Inserts or replaces the entry; `before_commit` runs inside the transaction.
  Result<IndexTotals> insert(const NewEntry& entry, const std::function<void()>& before_commit);
  Result<Removed> remove_digest(const BlobDigest& digest);
  Result<Removed> remove_key(const CacheKey& key);
  Result<Removed> remove(const EntryFilter& filter);
  // Least recently used first until at most `target_bytes` remain, sparing `keep`.
  Result<Removed> evict(std::uint64_t target_bytes, const std::optional<CacheKey>& keep);
  // Appends uses to usage_log and adds `delta` to the counters, in one transaction.
  Status record_usage(std::span<const Usage> usage, const Counters& delta);
  // Adds usage_log into entries.hits/last_used and empties it.
  Status fold_usage();

  Result<std::vector<EntryInfo>> list(const EntryFilter& filter);
  Result<IndexTotals> totals();
  Result<Counters> counters();
  Result<std::vector<BlobDigest>> referenced_digests();
  // PRAGMA integrity_check: empty when the database is sound, else its complaints.
  Result<std::vector<std::string>> integrity_check();

 private:
  Index() = default;
  Error db_error(const std::string& what, int rc);
  // In one transaction: selects the entries `where_sql` matches (its ?N bound to `binds`),
  // deletes them and reports the blobs left without an entry.
  Result<Removed> remove_where(const std::string& where_sql, const std::vector<std::string>& binds);

  std::filesystem::path m_path;
  std::optional<FileId> m_file_id;
  sqlite3* m_db = nullptr;
  sqlite3_stmt* m_lookup = nullptr;
  mutable std::mutex m_mutex;
  bool m_corrupt = false;
};

}  // namespace jitcache::cache
