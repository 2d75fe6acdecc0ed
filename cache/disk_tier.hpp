// The disk tier: the cache directory, an SQLite index (cache/index.hpp) over verified blob
// files (cache/blob_files.hpp), below one root:
//
//   <root>/index.db          SQLite index (docs/cache-format.md)
//   <root>/blobs/ab/<digest> content-addressed blob files
//   <root>/tmp/              blobs being written
//   <root>/locks/<key>.lock  flock per key: one producer across processes (cache/key_lock.hpp)
//   <root>/quarantine/       blobs (and index files) that failed verification
//   <root>/CACHEDIR.TAG      tells backup tools to skip the directory
//
// Beyond get/put/remove it owns what only a directory has: usage recording (hits and
// last use, batched, for the least-recently-used order), index recovery
// (cache/recovering_index.hpp), and maintenance (list, remove, clear, verify, gc:
// cache/disk_maintenance.cpp).
//
// Guarantees:
// - Nothing unverified is returned: a read re-hashes the blob; a missing, truncated or
//   altered blob is quarantined (its entries removed, counted, logged) and is a miss.
// - An entry is published whole or not at all: blob renamed into place and synced before
//   its index row commits. Readers take no lock.
// - The root is private: created 0700, files 0600; a root that is a symlink, belongs to
//   another user, is group/world-writable or lies on a network filesystem is refused.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/blob_files.hpp"
#include "cache/entry.hpp"
#include "cache/key_lock.hpp"
#include "cache/recovering_index.hpp"
#include "cache/tally.hpp"
#include "cache/tier.hpp"
#include "cache/usage_journal.hpp"

namespace jitcache::cache {

inline constexpr std::uint64_t k_default_max_bytes = 2ull << 30;  // 2 GiB on disk

// How much of the store is backed by disk.
//   read_write   the normal case
//   read_only    a root this process cannot write (a cache baked into a read-only image):
//                lookups read the index and verify blobs; nothing is written (no usage,
//                no quarantine, no publish: a miss is produced and kept in memory, with
//                one warning); remove and gc are refused
//   memory_only  no directory at all, so no disk tier (the runtime's fallback when the
//                cache directory is unusable): every entry lives in the memory tier
enum class StoreMode { read_write, read_only, memory_only };
const char* to_string(StoreMode mode);

struct DiskTierOptions {
  // Size cap of the blobs on disk; beyond it the least recently used entries go first.
  std::uint64_t max_bytes = k_default_max_bytes;
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

class DiskTier final : public StorageTier {
 public:
  // Where the uses of hits served above the disk tier come from (the memory tier's drain).
  using UpstreamUses = std::function<PendingUses(std::int64_t now_ms)>;

  // Opens the root, creating it when missing; a root that exists but cannot be written
  // (read-only filesystem, no write permission) opens read_only when it holds an index.
  // Quarantines and evictions are counted into `tally`, which must outlive the tier.
  static Result<std::unique_ptr<DiskTier>> open(const std::filesystem::path& root, DiskTierOptions options,
                                                Tally& tally, UpstreamUses upstream);
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  Tier kind() const override { return Tier::disk; }
  std::string name() const override { return "disk"; }
  // A hit is recorded as a use of its entry (written at the next flush).
  Result<std::optional<TierHit>> get(const CacheKey& key) override;
  // get() that records no use and quarantines nothing (a damaged blob is a miss here, and
  // the next get() quarantines it).
  Result<std::optional<TierHit>> peek(const CacheKey& key) override;
  // Publishes the entry; evicts down to 90% of the cap when the directory outgrew it.
  Status put(const CacheKey& key, const TierEntry& entry) override;
  // Under the key's lock (creators queue on it, so a loser publishes no blob) and with a
  // create-only insert (Index::insert_new; a put takes no lock). An entry whose blob is
  // damaged or gone is quarantined, like any read of it, and replaced.
  Result<std::optional<TierHit>> create(const CacheKey& key, const TierEntry& entry) override;
  Status remove(const CacheKey& key) override;
  // Every entry of the index with its facts (its blob is not read).
  Result<std::optional<std::vector<ListedEntry>>> list_entries() override;

  StoreMode mode() const { return m_mode; }
  // Why the tier is read_only (names the directory); empty when it is not.
  const std::string& mode_reason() const { return m_mode_reason; }
  // An error for an operation that needs a writable directory, naming why there is none.
  Error needs_writable(const std::string& what) const;
  const std::filesystem::path& root() const { return m_root; }
  std::filesystem::path blob_path(const BlobDigest& digest) const { return m_blobs.path_of(digest); }
  std::filesystem::path index_path() const { return m_index->path(); }

  // The flock that makes one process produce `key` while others wait (cache/key_lock.hpp).
  Result<std::optional<KeyLock>> lock_key(const CacheKey& key, std::string_view label);
  // Whether the index has an entry under `key` (its blob is not read).
  Result<bool> contains(const CacheKey& key);

  // Writes batched uses and counters: one line appended to the usage journal
  // (cache/usage_journal.hpp), or, when the journal cannot take it, to the index's
  // usage_log. list, remove, gc, stats and eviction fold both into the entries' hits and
  // last_used and the counters. A read_only tier discards them.
  Status flush();
  // Flushes when the last flush is old or many uses wait.
  void maybe_flush();

  // Maintenance (cache/disk_maintenance.cpp); Store documents each.
  Result<std::vector<EntryInfo>> list(const EntryFilter& filter);
  Result<std::vector<EntryInfo>> remove(const EntryFilter& filter, DryRun dry_run);
  Result<ClearReport> clear_all();
  Result<VerifyReport> verify();
  std::vector<IndexRecovery> index_recoveries() const { return m_index->recoveries(); }
  Result<GcReport> gc(const GcOptions& options);
  Result<std::expected<SharedBytes, BlobFailure>> read_blob(const BlobDigest& digest, std::uint64_t size);
  Result<std::vector<StoredBlob>> orphan_blobs(std::chrono::milliseconds min_age);
  Result<bool> remove_orphan_blob(const BlobDigest& digest, std::chrono::milliseconds min_age);
  Result<Stats> stats();

 private:
  struct PendingUse {
    std::uint64_t hits = 0;
    std::int64_t last_used_ms = 0;
  };

  DiskTier(std::filesystem::path root, DiskTierOptions options, StoreMode mode, UniqueFd root_fd,
           BlobFiles blobs, UniqueFd locks_fd, Tally& tally, UpstreamUses upstream);
  static Result<std::unique_ptr<DiskTier>> open_read_only(const std::filesystem::path& root,
                                                          DiskTierOptions options, Tally& tally,
                                                          UpstreamUses upstream);
  RecoveringIndex::Settings index_settings() const;
  template <class F>
  auto with_index(F&& f) {
    return m_index->with(std::forward<F>(f));
  }
  // Writes the blob of `entry`: what put and create share.
  Result<NewEntry> publish(const CacheKey& key, const TierEntry& entry);
  // Evicts down to 90% of the cap when the totals are over it, sparing `key`.
  Status evict_if_over(const IndexTotals& totals, const CacheKey& key);
  void quarantine(const CacheKey& key, const BlobDigest& digest, const BlobFailure& failure);
  void remove_blobs(const std::vector<BlobDigest>& digests);
  // Flushes, then folds every process's recorded uses into the entries' rows.
  Status flush_and_fold();
  // Flushes, then moves the usage journal into the index (usage_log and the counters):
  // what every reader of uses or counters does first.
  Status flush_and_settle();
  Status fold_journal();

  std::filesystem::path m_root;
  DiskTierOptions m_options;
  StoreMode m_mode;
  std::string m_mode_reason;
  UniqueFd m_root_fd;
  UsageJournal m_journal;  // in m_root_fd
  BlobFiles m_blobs;
  UniqueFd m_locks_fd;  // absent unless read_write
  std::unique_ptr<RecoveringIndex> m_index;
  Tally& m_tally;
  UpstreamUses m_upstream;

  std::mutex m_usage_mutex;
  std::unordered_map<CacheKey, PendingUse> m_pending_usage;
  std::atomic<std::int64_t> m_last_flush_ms{0};
};

}  // namespace jitcache::cache
