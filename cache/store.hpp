// Store: a persistent cache of verified blobs keyed by facts. It coordinates storage tiers
// behind one interface (cache/tier.hpp):
//
//   memory   this process's entries (cache/memory_tier.hpp); always first
//   disk     the cache directory: index + blob files (cache/disk_tier.hpp); absent in
//            memory_only mode
//   extra    StoreOptions::extra_tiers, after the disk, in order (a remote cache)
//
// and does what no tier can do alone:
// - Read-through: a lookup asks the tiers in order; a hit fills the tiers above the one
//   that served it (the memory tier always; the others where the entry's facts are known,
//   that is in get_or_create, since a tier stores an entry with its facts).
// - Write-through: put and a produced entry go to every tier that can take them.
// - Single flight: get_or_create runs the producer once per key at a time: threads of one
//   process wait for the one that produces; processes queue on the disk tier's key lock,
//   and the winners' successors find the entry when they get the lock.
// - Counters per tier: memory_hits and disk_hits (Counters), and tier_stats() for every
//   tier of this session, extra ones included.
//
// - Fleet-wide single production: on a miss of every tier, each extra tier may claim the
//   key (StorageTier::claim): wait for another node producing it, or hold a lease while
//   this one produces; a remote hit found that way is served like any other.
//
// Errors of a tier. A lookup that a tier cannot answer goes on to the next tier: an extra
// tier's error is counted and never fails a call (a remote cache is an optimisation),
// and logged as a warning once per episode (the first failure of its reads, or of its
// writes (a lease is a write), after a success; the rest of the episode at debug level;
// a tier that cannot be reached at all fails its reads and writes as one episode); the
// disk tier's error, when no later tier has the key, is the result of get() and makes
// get_or_create produce without storing on disk (logged), so a broken cache never fails a
// caller whose producer works. A write that fails in an extra tier is
// logged and counted; put() fails only when the disk tier cannot store.
//
// Index recovery, verification, gc and clearing belong to the disk tier; the Store
// offers them here for the CLI. Every member function is thread-safe.
#pragma once

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
#include "cache/disk_tier.hpp"
#include "cache/entry.hpp"
#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "cache/memory_tier.hpp"
#include "cache/single_flight.hpp"
#include "cache/size.hpp"
#include "cache/tally.hpp"
#include "cache/tier.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

struct StoreOptions : DiskTierOptions {
  // Size cap of the memory tier of this process; 0 disables it.
  std::uint64_t memory_max_bytes = k_default_memory_max_bytes;
  // Tiers consulted after the disk tier, in order, and written through to. Wiring a
  // remote cache is one line: options.extra_tiers.push_back(std::make_shared<RedisTier>(...)).
  std::vector<std::shared_ptr<StorageTier>> extra_tiers;
};

struct Hit {
  SharedBytes bytes;
  Tier tier;
  SharedDecoded decoded;  // what a reader attached to a memory entry (see Store::attach)
};

// Where get_or_create's bytes came from.
enum class Source { memory, disk, provider, remote, coalesced, produced };
const char* to_string(Source source);
// The Source of a hit served by a tier of this kind.
Source source_of(Tier tier);

struct Fetched {
  SharedBytes bytes;
  Source source;
  SharedDecoded decoded;  // set on memory hits whose entry has one attached
};

// What a producer returns: the bytes to store and what producing them cost.
struct Produced {
  Bytes bytes;
  double compile_ms = 0;
};
using Producer = std::function<Result<Produced>()>;

// What put_if_absent found under the key.
struct FirstWrite {
  // The bytes stored under the key are the caller's: this call stored them, or the same
  // bytes were there already.
  bool ours = false;
  SharedBytes bytes;  // what is stored under the key now: the caller's, or the first writer's
};

// Whether a lookup that finds nothing counts as a miss. A probe followed by
// get_or_create (which counts the miss when it produces) must not count it twice.
enum class CountMiss { no, yes };

// What one tier did in this session.
struct TierStats {
  std::string name;
  Tier kind;
  std::uint64_t hits = 0;
  std::uint64_t errors = 0;  // lookups and writes it failed (extra tiers; the disk's errors are returned)
};

// A tier of a store, as a question about the cache names it.
struct TierInfo {
  Tier kind;
  std::string name;  // StorageTier::name(): "memory", "disk", "redis", ...
  bool writable = true;
};

// Which tier holds a key (Store::locate).
struct Located {
  Tier kind;
  std::string name;
};

class Store {
 public:
  // Opens the root, creating it when missing; a root that exists but cannot be written
  // (read-only filesystem, no write permission) opens read_only when it holds an index.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& root, StoreOptions options = {});
  // A store without a directory: get_or_create produces and keeps entries in memory
  // (options.memory_max_bytes must be > 0 for anything to be kept) and in the extra
  // tiers; every operation that needs the disk fails with ErrorCode::unavailable.
  static std::unique_ptr<Store> open_memory_only(StoreOptions options = {});
  // Flushes batched usage and counters; errors are logged.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The verified bytes stored under `key`, or std::nullopt.
  Result<std::optional<Hit>> get(const CacheKey& key, CountMiss count_miss = CountMiss::yes);

  // The first tier, in lookup order, that holds a verified entry under `key` (std::nullopt:
  // none). A question, not a lookup: no hit or miss is counted, no use recorded, no tier
  // filled and nothing produced (StorageTier::peek). A tier that cannot answer is skipped
  // (logged at debug level), as a lookup goes on past it; the disk's failure is the result
  // when no later tier holds the key.
  Result<std::optional<Located>> locate(const CacheKey& key);
  // The tiers a lookup asks, in order (memory first).
  std::vector<TierInfo> tiers() const;
  // The same tiers, for questions that read them (StorageTier::list_entries). Owned by
  // this store (the extra ones shared with it); valid while it lives.
  std::vector<StorageTier*> tier_objects() const;

  // Publishes `bytes` under `key`. `facts` must validate and hash to `key`.
  Status put(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes, double compile_ms);

  // Publishes `bytes` under `key` unless the key holds an entry, atomically across
  // threads, processes and (through a shared tier) nodes: the first writer wins and every
  // later one is handed the winner's verified bytes. The widest tier that answers decides
  // (the extra tiers from the last, then the disk, each by StorageTier::create); the tiers
  // above it are then given the winner's bytes (replacing what a writer there had put), so
  // every tier agrees with the decision. An extra tier that fails is logged and counted,
  // and the next one decides; the disk's error is the caller's. Needs a read-write store.
  Result<FirstWrite> put_if_absent(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                                   double compile_ms);

  // The bytes under `key`, producing and storing them first when absent. The producer
  // runs at most once per key at a time across threads and processes; its error is
  // returned to every caller waiting on it. `label` says what the producer makes, for
  // the log line of a process waiting on it.
  Result<Fetched> get_or_create(const CacheKey& key, const Facts& facts, const Producer& producer,
                                std::string_view label = {});

  // Keeps `decoded` beside the memory entry under `key` while that entry holds `bytes`,
  // so that the next memory hit hands it back instead of the caller decoding again.
  void attach(const CacheKey& key, const SharedBytes& bytes, SharedDecoded decoded);

  // Entries, most recently used first.
  Result<std::vector<EntryInfo>> list(const EntryFilter& filter = {});
  // Removes the matching entries (every entry for an empty filter) from this machine's
  // tiers (memory and disk) and the blobs no other entry needs; an extra tier, shared with
  // other machines, is left alone (the CLI's `clear --remote` is its own command). Returns what was (or, dry run, would be) removed.
  Result<std::vector<EntryInfo>> remove(const EntryFilter& filter, DryRun dry_run);
  // Removes every entry of this machine (memory and disk; an extra tier, shared with
  // others, is left alone). Succeeds on any index SQLite can open: one that cannot be
  // read or changed is moved to quarantine/ (as a corrupt one is) and every blob file
  // removed with it.
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
  Result<bool> remove_orphan_blob(const BlobDigest& digest,
                                  std::chrono::milliseconds min_age = k_publish_grace);

  Result<Stats> stats();
  StoreMode mode() const { return m_disk ? m_disk->mode() : StoreMode::memory_only; }
  // Why the store is read_only (names the directory); empty otherwise.
  const std::string& mode_reason() const;
  // Whether the index has an entry under `key` (its blob is not read).
  Result<bool> contains(const CacheKey& key);
  // What this Store object did since it was opened.
  Counters session_counters() const;
  // Hits and errors of each tier in this session, in lookup order (memory first).
  std::vector<TierStats> tier_stats() const;
  // Writes batched uses and counters to the index (appended to usage_log; list, remove
  // and eviction fold them into the entries' hits and last_used).
  Status flush();

  const std::filesystem::path& root() const;
  std::filesystem::path blob_path(const BlobDigest& digest) const;
  std::filesystem::path index_path() const;

 private:
  // A tier below the memory tier: the disk, then the extra tiers.
  struct Lower {
    StorageTier* tier;
    bool is_disk;
    std::uint64_t hits = 0;      // under m_stats_mutex
    std::uint64_t errors = 0;    // under m_stats_mutex
    bool failing_reads = false;  // an episode of read failures is under way (m_stats_mutex)
    bool failing_writes = false;
    // The tier cannot be reached at all (ErrorCode::unavailable: down, paused, password
    // refused, breaker open): its reads and writes then fail as one episode, one warning.
    bool unreachable = false;
  };
  enum class Op { read, write };
  struct Found {
    std::size_t slot;
    TierHit hit;
  };
  struct LowerRead {
    std::optional<Found> found;
    std::optional<Error> disk_error;  // the disk tier could not look
  };

  explicit Store(StoreOptions options);
  void wire_lower_tiers();
  Error needs_writable(const std::string& what) const;
  Status check_facts(const CacheKey& key, const Facts& facts) const;
  // Asks the tiers below memory, in order, from `first` on.
  LowerRead read_lower(const CacheKey& key, std::size_t first = 0);
  void count_hit(std::size_t slot, double compile_ms);
  void count_error(std::size_t slot, Op op, const std::string& what, const Error& error);
  void count_success(std::size_t slot, Op op);
  // Puts the entry into the tiers below memory in [0, end), then into the memory tier.
  void write_through(const CacheKey& key, const TierEntry& entry, std::size_t end, bool disk_writable);
  Result<Fetched> lead(const CacheKey& key, const Facts& facts, const Producer& producer,
                       std::string_view label);
  // Asks the extra tiers to claim `key` before it is produced (StorageTier::claim): a hit
  // one of them found while waiting, else the leases to hold while producing.
  struct Claims {
    std::optional<Found> found;
    std::vector<std::unique_ptr<TierLease>> leases;
  };
  Claims claim_extra(const CacheKey& key, std::string_view label);
  void maybe_flush();

  StoreOptions m_options;
  Tally m_tally;
  std::unique_ptr<MemoryTier> m_memory;
  std::unique_ptr<DiskTier> m_disk;  // null in memory_only mode
  std::vector<Lower> m_lower;        // the disk (when present) first, then the extra tiers
  mutable std::mutex m_stats_mutex;
  SingleFlight<CacheKey, Result<Fetched>> m_flights;
  std::once_flag m_unstored_warning;
};

}  // namespace jitcache::cache
