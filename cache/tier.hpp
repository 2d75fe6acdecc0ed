// The storage tiers of a Store (cache/store.hpp) and the one interface they share.
//
// A tier keeps blobs under their keys: this process's memory (cache/memory_tier.hpp), the
// cache directory (cache/disk_tier.hpp), and any further tier a caller wires in through
// StoreOptions::extra_tiers (a remote service). The Store reads through the tiers in
// order and writes through to all of them; a tier knows nothing of the others.
//
// Absent is a value: a miss is std::nullopt. An error is a tier that could not answer
// (its index failed, its server is down); what the Store does with it is its policy
// (cache/store.hpp), not the tier's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/blob_files.hpp"
#include "cache/entry.hpp"
#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

using SharedBytes = std::shared_ptr<const Bytes>;

// What a reader made of an entry's bytes (the kernel cache's parsed artifact), kept beside
// them in the memory tier so that a memory hit decodes nothing again. Derive from it.
class Decoded {
 public:
  virtual ~Decoded() = default;
};
using SharedDecoded = std::shared_ptr<const Decoded>;

// The kind of tier that served a hit. A provider is a read-only directory of prebuilt
// entries installed on the node (a cache wheel); a remote is a store shared by a fleet.
enum class Tier { memory, disk, provider, remote };
const char* to_string(Tier tier);

struct TierHit {
  SharedBytes bytes;
  double compile_ms = 0;  // what producing the entry cost: the compile time this hit saves
  SharedDecoded decoded;  // set by the memory tier only, when a reader attached one
  // The entry's facts, verified against the key, from a tier that keeps them with the
  // entry (the remote one): they let a plain lookup fill the tiers above it.
  std::optional<Facts> facts;
};

// An entry a tier can name without reading its bytes (to explain a miss).
struct ListedEntry {
  CacheKey key;
  Facts facts;
};

// A claim on producing one key, held while the producer runs; released when destroyed.
class TierLease {
 public:
  virtual ~TierLease() = default;
};

// What a shared tier says before a miss is produced (StorageTier::claim).
struct Claim {
  std::optional<TierHit> found;       // another node stored the entry while this one waited
  std::unique_ptr<TierLease> lease;   // this node produces; null: no coordination, produce anyway
};

// Where a tier counts its own events (the remote_* counters of cache/entry.hpp).
using CountSink = std::function<void(const Counters&)>;

// What a put stores: the entry's facts (the disk tier keeps them in its index; their key
// is the entry's key, checked by the Store), its bytes and what producing them cost.
struct TierEntry {
  const Facts& facts;
  SharedBytes bytes;
  double compile_ms = 0;
  // A copy of an entry that a lower, shared tier keeps (a remote hit being backfilled): the
  // disk tier need not fsync it. A copy lost to a crash is fetched again, and one damaged
  // by it fails verification on read; the two fsyncs would be most of the hit's cost.
  bool refetchable = false;
};

class StorageTier {
 public:
  virtual ~StorageTier() = default;
  virtual Tier kind() const = 0;
  // A short name for logs and per-tier figures: "memory", "disk", "redis".
  virtual std::string name() const = 0;
  // The bytes stored under `key`, verified, or std::nullopt.
  virtual Result<std::optional<TierHit>> get(const CacheKey& key) = 0;
  // Stores `entry` under `key`, replacing what was there.
  virtual Status put(const CacheKey& key, const TierEntry& entry) = 0;
  // Stores `entry` under `key` only if the key holds nothing, atomically for every writer
  // of the tier (threads, processes, nodes): std::nullopt when this call stored it, else
  // the verified entry stored first (possibly the same bytes). An entry there that fails
  // verification is no entry: the tier replaces it where it can, or returns an error when
  // it cannot tell what was stored first. The first write of a record that must have one
  // author (the source cache's spec record, Store::put_if_absent).
  virtual Result<std::optional<TierHit>> create(const CacheKey& key, const TierEntry& entry) = 0;
  // Removes what is stored under `key`; removing an absent entry is no error.
  virtual Status remove(const CacheKey& key) = 0;

  // Fleet-wide single production. Asked by the Store on a miss of every tier, after the
  // process-wide key lock is held and before the producer runs: a shared tier may make
  // this node wait while another one produces (and return what it stored), or hand it a
  // lease that keeps the others waiting until the entry is stored. The default: no
  // coordination.
  virtual Result<Claim> claim(const CacheKey& key, std::string_view label) {
    (void)key;
    (void)label;
    return Claim{};
  }
  // Called once by the Store that uses the tier, before any other call.
  virtual void count_into(CountSink sink) { (void)sink; }
  // The bytes stored under `key`, verified like get()'s, for a question about the cache
  // (Store::locate: which tier holds a key): counts no hit or miss and records no use. The
  // default is get(), for a tier that counts nothing on a read.
  virtual Result<std::optional<TierHit>> peek(const CacheKey& key) { return get(key); }
  // Whether the Store may write to it. A read-only tier (a provider) is only read: the
  // Store never calls its put, create or claim.
  virtual bool writable() const { return true; }
  // The entries it holds, with their facts, for explaining a miss; std::nullopt when the
  // tier cannot list them cheaply (a remote store is not scanned).
  virtual Result<std::optional<std::vector<ListedEntry>>> list_entries() {
    return std::optional<std::vector<ListedEntry>>();
  }
};

}  // namespace jitcache::cache
