// Store: a persistent cache of verified blobs keyed by facts, below one root directory.
//
//   <root>/index.db          SQLite index (cache/index.hpp, docs/cache-format.md)
//   <root>/blobs/ab/<digest> content-addressed blob files (cache/blob_files.hpp)
//   <root>/tmp/              blobs being written
//   <root>/locks/<key>.lock  flock per key: one producer across processes (cache/key_lock.hpp)
//   <root>/quarantine/       blobs (and index files) that failed verification
//   <root>/CACHEDIR.TAG      tells backup tools to skip the directory
//
// Guarantees:
// - Nothing unverified is returned: a disk read re-hashes the blob; a missing, truncated
//   or altered blob is quarantined (its entries removed, counted, logged) and is a miss.
// - An entry is published whole or not at all: blob renamed into place and synced before
//   its index row commits. Readers take no lock.
// - get_or_create runs the producer once per key: threads of one process wait for the
//   one that produces; processes queue on the key's flock, and the winners' successors
//   find the entry when they get the lock.
// - The root is private: created 0700, files 0600; a root that is a symlink, belongs to
//   another user, is group/world-writable or lies on a network filesystem is refused.
// - A garbage or truncated index.db is moved to quarantine/ and a fresh index started (the
//   cache is rebuilt by use; gc removes the blobs the old index knew); the Store remembers
//   it (index_recoveries()) and verify() reports it as a finding. An index written by a
//   newer schema is an error, never rewritten; one with a table missing is an error naming
//   the recovery unless StoreOptions::damaged_index asks for it to be moved aside.
//
// Every member function is thread-safe. Absent is not an error: a miss is std::nullopt.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/blob_files.hpp"
#include "cache/entry.hpp"
#include "cache/facts.hpp"
#include "cache/files.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

class Index;

inline constexpr std::uint64_t k_default_max_bytes = 2ull << 30;          // 2 GiB on disk
inline constexpr std::uint64_t k_default_memory_max_bytes = 256ull << 20;  // per process

// What Store::open does with an index that has a table, column or trigger missing.
// refuse: an error naming the recovery (`jitcache clear --all`); quarantine: move it aside
// and start a fresh index, as for a corrupt file (what `clear --all` asks for).
enum class DamagedIndex { refuse, quarantine };

struct StoreOptions {
  // Size cap of the blobs on disk; beyond it the least recently used entries go first.
  std::uint64_t max_bytes = k_default_max_bytes;
  // Size cap of the memory tier of this process; 0 disables it.
  std::uint64_t memory_max_bytes = k_default_memory_max_bytes;
  // How long a write waits for another process's SQLite transaction.
  std::chrono::milliseconds busy_timeout{10'000};
  // How long get_or_create waits for another process producing the same key before it
  // produces the entry itself (a duplicate produce, never a wrong result).
  std::chrono::milliseconds lock_timeout{std::chrono::minutes(10)};
  Durability durability = Durability::full;
  // Test seam: called at each step of publishing an entry (crash-safety tests).
  std::function<void(PublishStep)> publish_hook;
  // Test seam: called before each write step of a blob; a non-zero errno fails the step
  // as if the system call had (fault-injection tests).
  BlobFaultHook blob_fault_hook;
  DamagedIndex damaged_index = DamagedIndex::refuse;
};

using SharedBytes = std::shared_ptr<const Bytes>;

enum class Tier { memory, disk };
const char* to_string(Tier tier);

struct Hit {
  SharedBytes bytes;
  Tier tier;
};

// Where get_or_create's bytes came from.
enum class Source { memory, disk, coalesced, produced };
const char* to_string(Source source);

struct Fetched {
  SharedBytes bytes;
  Source source;
};

// What a producer returns: the bytes to store and what producing them cost.
struct Produced {
  Bytes bytes;
  double compile_ms = 0;
};
using Producer = std::function<Result<Produced>()>;

struct Stats {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t max_bytes = 0;
  Counters totals;  // cumulative over every process that used this root
};

struct VerifyFinding {
  CacheKey key;
  BlobDigest digest;
  std::string problem;  // names the file and what was wrong
};

// An index.db this Store found unusable, moved to quarantine/ and replaced by a fresh one.
struct IndexRecovery {
  std::filesystem::path moved_to;
  std::optional<std::uint64_t> entries;  // what the old index held; std::nullopt: unreadable
  std::string problem;                   // what was wrong with it
};

struct VerifyReport {
  std::uint64_t checked = 0;
  std::vector<VerifyFinding> bad;               // quarantined by this run
  // PRAGMA integrity_check output, then every stored value that breaks its rule.
  std::vector<std::string> integrity_problems;
  // Indexes this Store discarded (when it opened or since): their entries are gone.
  std::vector<IndexRecovery> index_quarantined;
  std::uint64_t orphan_blobs = 0;               // blob files no entry refers to (gc removes them)
  bool clean() const { return bad.empty() && integrity_problems.empty() && index_quarantined.empty(); }
};

// A blob file younger than this that no index row refers to may belong to a writer
// between its rename and its row commit: gc spares it, and it is no audit finding.
inline constexpr std::chrono::milliseconds k_publish_grace = std::chrono::minutes(15);

struct ClearReport {
  std::vector<EntryInfo> removed;                  // entries removed through the index
  std::optional<IndexRecovery> index_quarantined;  // the index was unusable: moved aside instead
  std::uint64_t blob_files = 0;                    // blob files removed with a quarantined index
};

// Whether a lookup that finds nothing counts as a miss. A probe followed by
// get_or_create (which counts the miss when it produces) must not count it twice.
enum class CountMiss { no, yes };

struct GcOptions {
  std::optional<std::uint64_t> max_bytes;  // default: StoreOptions::max_bytes
  // Leftovers younger than this may belong to a writer still at work; they are spared.
  std::chrono::milliseconds grace = k_publish_grace;
};

struct GcReport {
  std::uint64_t evicted_entries = 0;
  std::uint64_t evicted_bytes = 0;
  std::uint64_t orphan_blobs = 0;
  std::uint64_t temp_files = 0;
  std::uint64_t lock_files = 0;
  std::uint64_t quarantine_files = 0;
  std::uint64_t bytes_after = 0;
  std::uint64_t max_bytes = 0;  // the cap applied
};

enum class DryRun { no, yes };

// How much of the store is backed by disk.
//   read_write   the normal case
//   read_only    a root this process cannot write (a cache baked into a read-only image):
//                lookups read the index and verify blobs; nothing is written (no usage,
//                no quarantine, no publish: a miss is produced and kept in memory, with
//                one warning); remove and gc are refused
//   memory_only  no directory at all (the runtime's fallback when the cache directory is
//                unusable): every entry lives in this process's memory tier
enum class StoreMode { read_write, read_only, memory_only };
const char* to_string(StoreMode mode);

class Store {
 public:
  // Opens the root, creating it when missing; a root that exists but cannot be written
  // (read-only filesystem, no write permission) opens read_only when it holds an index.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& root,
                                             StoreOptions options = {});
  // A store without a directory: get_or_create produces and keeps entries in memory
  // (options.memory_max_bytes must be > 0 for anything to be kept); every operation
  // that needs the disk fails with ErrorCode::unavailable.
  static std::unique_ptr<Store> open_memory_only(StoreOptions options = {});
  // Flushes batched usage and counters; errors are logged.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The verified bytes stored under `key`, or std::nullopt.
  Result<std::optional<Hit>> get(const CacheKey& key, CountMiss count_miss = CountMiss::yes);

  // Publishes `bytes` under `key`. `facts` must validate and hash to `key`.
  Status put(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
             double compile_ms);

  // The bytes under `key`, producing and storing them first when absent. The producer
  // runs at most once per key at a time across threads and processes; its error is
  // returned to every caller waiting on it. A failing index degrades to "produce and do
  // not store" (logged), so a broken cache never fails a caller whose producer works.
  // `label` says what the producer makes, for the log line of a process waiting on it.
  Result<Fetched> get_or_create(const CacheKey& key, const Facts& facts, const Producer& producer,
                                std::string_view label = {});

  // Entries, most recently used first.
  Result<std::vector<EntryInfo>> list(const EntryFilter& filter = {});
  // Removes the matching entries (every entry for an empty filter) and the blobs no
  // other entry needs. Returns what was (or, dry run, would be) removed.
  Result<std::vector<EntryInfo>> remove(const EntryFilter& filter, DryRun dry_run);
  // Removes every entry and its blob. Succeeds on any index SQLite can open: one that
  // cannot be read or changed is moved to quarantine/ (as a corrupt one is) and every blob
  // file removed with it.
  Result<ClearReport> clear_all();
  // Re-hashes every blob and checks the index; quarantines what is bad.
  Result<VerifyReport> verify();
  // The indexes this Store moved aside as unusable, oldest first.
  std::vector<IndexRecovery> index_recoveries() const;
  // Evicts down to the size cap, removes orphan blobs, abandoned temporary files, idle
  // lock files and old quarantined files.
  Result<GcReport> gc(const GcOptions& options = {});

  // For audits, which must change nothing: reads and verifies one blob without counting a
  // use, touching the memory tier or quarantining. The outer error is a failure to look
  // (the index); the inner one is what is wrong with the blob.
  Result<std::expected<SharedBytes, BlobFailure>> read_blob(const BlobDigest& digest, std::uint64_t size);
  // Blob files no index row refers to, at least `min_age` old (younger ones may be a
  // publish in flight: renamed into place, row not yet committed).
  Result<std::vector<StoredBlob>> orphan_blobs(std::chrono::milliseconds min_age = {});
  // Removes an orphan blob file unless, checked again after it was moved aside, an index
  // row refers to it or it is younger than `min_age` (a publish of the same content
  // landed since it was listed). Returns whether it was removed.
  Result<bool> remove_orphan_blob(const BlobDigest& digest, std::chrono::milliseconds min_age = k_publish_grace);

  Result<Stats> stats();
  StoreMode mode() const { return m_mode; }
  // Why the store is not read_write (names the directory); empty when it is.
  const std::string& mode_reason() const { return m_mode_reason; }
  // Whether the index has an entry under `key` (its blob is not read).
  Result<bool> contains(const CacheKey& key);
  // What this Store object did since it was opened.
  Counters session_counters() const;
  // Writes batched uses and counters to the index (appended to usage_log; list, remove
  // and eviction fold them into the entries' hits and last_used).
  Status flush();

  const std::filesystem::path& root() const { return m_root; }
  std::filesystem::path blob_path(const BlobDigest& digest) const { return m_blobs.path_of(digest); }
  std::filesystem::path index_path() const { return m_root / "index.db"; }

 private:
  struct MemoryEntry {
    SharedBytes bytes;
    double compile_ms = 0;
    std::uint64_t pending_uses = 0;         // hits not yet written to the entry's row
    std::uint64_t pending_memory_hits = 0;  // memory hits not yet added to the counters
  };
  struct DiskHit {
    SharedBytes bytes;
    double compile_ms = 0;
  };
  struct PendingUse {
    std::uint64_t hits = 0;
    std::int64_t last_used_ms = 0;
  };
  struct Flight;

  Store(std::filesystem::path root, StoreOptions options, StoreMode mode, UniqueFd root_fd, BlobFiles blobs,
        UniqueFd locks_fd);
  static Result<std::unique_ptr<Store>> open_read_only(const std::filesystem::path& root, StoreOptions options);
  // An error for an operation that needs a writable directory, naming why there is none.
  Error needs_writable(const std::string& what) const;

  std::shared_ptr<Index> index() const;
  Result<std::shared_ptr<Index>> open_index(const std::optional<FileId>& broken,
                                            const std::string& problem = {});
  // Under index.lock: moves index.db (and -wal, -shm) to quarantine/, records it, and
  // creates an empty index.db for the fresh index.
  // std::nullopt when there was no index.db to move.
  Result<std::optional<IndexRecovery>> move_index_aside(const std::string& problem);
  Status recover_index(const std::shared_ptr<Index>& broken, const std::string& problem);
  template <class F>
  auto with_index(F&& f) -> decltype(f(std::declval<Index&>()));

  std::optional<SharedBytes> memory_get(const CacheKey& key);
  void memory_put(const CacheKey& key, SharedBytes bytes, double compile_ms, std::uint64_t uses);
  void record_disk_use(const CacheKey& key, double compile_ms);

  Result<std::optional<DiskHit>> disk_get(const CacheKey& key);
  void quarantine(const CacheKey& key, const BlobDigest& digest, const BlobFailure& failure);
  Status publish(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                 double compile_ms);
  void remove_blobs(const std::vector<BlobDigest>& digests);
  Status check_facts(const CacheKey& key, const Facts& facts) const;
  Result<Fetched> lead(const CacheKey& key, const Facts& facts, const Producer& producer, std::string_view label);
  void count(const Counters& delta);
  void maybe_flush();
  // Flushes, then folds every process's recorded uses into the entries' rows.
  Status flush_and_fold();

  std::filesystem::path m_root;
  StoreOptions m_options;
  StoreMode m_mode = StoreMode::read_write;
  std::string m_mode_reason;
  UniqueFd m_root_fd;
  BlobFiles m_blobs;     // detached in memory_only mode
  UniqueFd m_locks_fd;   // absent unless read_write
  std::once_flag m_unstored_warning;

  mutable std::mutex m_index_mutex;
  std::shared_ptr<Index> m_index;
  std::mutex m_recover_mutex;
  mutable std::mutex m_recoveries_mutex;
  std::vector<IndexRecovery> m_recoveries;

  mutable std::mutex m_memory_mutex;
  std::unordered_map<CacheKey, MemoryEntry> m_memory;
  std::deque<CacheKey> m_memory_order;  // insertion order: the memory tier evicts FIFO
  std::uint64_t m_memory_bytes = 0;
  std::uint64_t m_memory_hits = 0;

  mutable std::mutex m_stats_mutex;
  Counters m_session;    // everything but memory hits (m_memory_hits)
  Counters m_unflushed;  // not yet added to the index's counters
  std::unordered_map<CacheKey, PendingUse> m_pending_usage;  // disk hits without a memory tier
  std::atomic<std::int64_t> m_last_flush_ms{0};

  std::mutex m_flights_mutex;
  std::unordered_map<CacheKey, std::shared_ptr<Flight>> m_flights;
};

// Parses a size such as 500M, 2G, 1.5GiB or 4096 (bytes); K/M/G/T are powers of 1024.
Result<std::uint64_t> parse_size(std::string_view text);
// 1536 -> "1.5 KiB".
std::string format_size(std::uint64_t bytes);

}  // namespace jitcache::cache
