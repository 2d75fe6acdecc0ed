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
//   counters(name TEXT PRIMARY KEY, value)    cumulative figures, one row per counter of
//                                             k_counter_fields (cache/entry.hpp); `entries`
//                                             and `bytes` are kept exact by triggers on entries
//   PRAGMA user_version                       digest of the counter names whose rows exist:
//                                             another digest makes the open add missing rows
//   usage_log(key, hits, last_used)           uses recorded by processes, not yet added to
//                                             entries (eviction, inspect and gc fold it)
//
// Journal mode WAL, so readers never wait for the writer; every write is one
// BEGIN IMMEDIATE transaction, so writers queue on the busy timeout instead of failing.
//
// Opening. Creating, migrating and checking the schema happen under an exclusive flock on
// index.lock beside index.db (flock: the kernel releases it when its holder dies), so any
// number of processes may open a fresh cache at once. SQLite still answers SQLITE_BUSY
// without waiting where two connections would deadlock (`PRAGMA journal_mode=WAL` while
// another connection, one that takes no flock, writes): such an open is retried from the
// start with a growing pause until the busy timeout has passed.
//
// Read-only access (IndexAccess::read_only), for a cache baked into an image on a read-only
// filesystem or in a directory this process cannot write: the file is opened
// SQLITE_OPEN_READONLY with `PRAGMA query_only`, never migrated, never locked with
// index.lock, never written. A WAL database needs its -shm file to be read: an existing
// one is used read-only; where none exists and none can be created, the file is opened
// `immutable=1`, which is only done when no -wal file with content exists (a writer always
// leaves both -wal and -shm while it runs; SQLite removes both when the last writer closes
// cleanly). Content left in -wal without a -shm is an error telling how to checkpoint it.
// An index of an older schema is an error (it cannot be migrated without writing), as are
// a newer one, an empty file and a missing one (a read-only index is never created).
// Every write (insert, remove*, evict, record_usage, fold_usage) on a read-only Index
// returns an ErrorCode::database error saying it was opened read-only; reads work as usual.
#pragma once

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
#include "cache/files.hpp"
#include "cache/hash.hpp"
#include "cache/sqlite.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

// Bump with a new entry in k_migrations (index_open.cpp) when the tables change.
inline constexpr int k_index_schema_version = 2;

// Counts (hits, counters) saturate here rather than overflow: 10^15, far beyond any real use.
inline constexpr std::int64_t k_max_count = 1'000'000'000'000'000;

enum class IndexAccess { read_write, read_only };

struct IndexOptions {
  // How long an open or a write waits for other processes' locks.
  std::chrono::milliseconds busy_timeout{10'000};
  Durability durability = Durability::full;
  IndexAccess access = IndexAccess::read_write;
};

// An exclusive flock on index.lock in the directory of `db_path`, waited for up to
// `timeout`: serialises creating, migrating and rebuilding the index across processes.
Result<UniqueFd> lock_index_file(const std::filesystem::path& db_path, std::chrono::milliseconds timeout);

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

class Index {
 public:
  struct OpenFailure {
    Error error;
    bool corrupt = false;  // the file is not a usable SQLite database: rebuild it
    // A jitcache index with a table, column or trigger missing (an operator's DROP TABLE).
    // Not rebuilt silently: the message names the recovery, `jitcache clear --all`.
    bool schema_damaged = false;
    // Nothing could be written (a full disk, a read-only file, an I/O error): the caller
    // may still read the index read-only.
    bool unwritable = false;
  };

  static std::expected<std::unique_ptr<Index>, OpenFailure> open(const std::filesystem::path& db_path,
                                                                 const IndexOptions& options);
  static std::expected<std::unique_ptr<Index>, OpenFailure> open(const std::filesystem::path& db_path,
                                                                 std::chrono::milliseconds busy_timeout,
                                                                 Durability durability) {
    return open(db_path, IndexOptions{busy_timeout, durability, IndexAccess::read_write});
  }

  // Best effort, for reporting a damaged index before it is moved aside: how many entries
  // the file at `db_path` holds, or std::nullopt when that cannot be read.
  static std::optional<std::uint64_t> count_entries(const std::filesystem::path& db_path);
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // SQLite reported the file corrupt since it was opened.
  bool corrupt() const;
  IndexAccess access() const { return m_access; }
  const std::filesystem::path& path() const { return m_path; }
  // The file this connection opened, to tell whether index.db was replaced since.
  const std::optional<FileId>& file_id() const { return m_file_id; }

  Result<std::optional<IndexRow>> lookup(const CacheKey& key);
  // Inserts or replaces the entry; `before_commit` runs inside the transaction.
  Result<IndexTotals> insert(const NewEntry& entry, const std::function<void()>& before_commit);
  // Inserts the entry only if no row has its key, in one transaction (index_create.cpp):
  // whether it did. A row that is there is left alone, whatever it holds.
  Result<bool> insert_new(const NewEntry& entry, const std::function<void()>& before_commit);
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
  // Every stored value against its rule: hex keys and digests, sizes, hits and times in
  // range, facts a JSON object, counters present, in range and (entries, bytes) matching
  // the table. Empty when all hold; else one line per broken rule, naming table.field.
  Result<std::vector<std::string>> check_values();

 private:
  Index() = default;
  struct ConnectFailure {
    OpenFailure failure;
    int rc = SQLITE_OK;  // SQLite's code where it gave one (SQLITE_BUSY: worth retrying)
  };
  std::expected<void, ConnectFailure> connect(const IndexOptions& options);
  std::expected<void, ConnectFailure> connect_read_only(const IndexOptions& options);
  std::expected<void, ConnectFailure> read_schema(int& version);
  std::expected<void, ConnectFailure> check_schema();
  Status writable(const std::string& what) const;
  Status prepare_lookup();
  // The failure of the SQLite call that produced `error`, classified by its code.
  ConnectFailure sqlite_failure(Error error) const;
  // In one transaction: selects the entries `where_sql` matches (its ?N bound to `binds`),
  // deletes them and reports the blobs left without an entry.
  Result<Removed> remove_where(const std::string& where_sql, const std::vector<std::string>& binds);

  std::filesystem::path m_path;
  IndexAccess m_access = IndexAccess::read_write;
  std::optional<FileId> m_file_id;
  sql::Database m_db;
  sql::Statement m_lookup;  // after m_db: finalized before the connection closes
  mutable std::mutex m_mutex;
};

}  // namespace jitcache::cache
