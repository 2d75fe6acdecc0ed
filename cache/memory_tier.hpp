// The memory tier: verified entries of this process, shared without copying, evicted
// first-in first-out beyond a byte cap (0 disables the tier: nothing is kept).
//
// A memory hit is the hot path (tens of nanoseconds), so the tier counts its own hits and
// the uses of its entries under the one lock a lookup takes anyway; the disk tier collects
// them at its next flush (drain()), which is how a hit served from memory still moves its
// entry up the least-recently-used order on disk.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cache/tally.hpp"
#include "cache/tier.hpp"

namespace jitcache::cache {

inline constexpr std::uint64_t k_default_memory_max_bytes = 256ull << 20;  // per process

class MemoryTier final : public StorageTier {
 public:
  explicit MemoryTier(std::uint64_t max_bytes) : m_max_bytes(max_bytes) {}

  Tier kind() const override { return Tier::memory; }
  std::string name() const override { return "memory"; }
  // Never fails.
  Result<std::optional<TierHit>> get(const CacheKey& key) override { return find(key); }
  Status put(const CacheKey& key, const TierEntry& entry) override;
  // find() without counting a hit or a use.
  Result<std::optional<TierHit>> peek(const CacheKey& key) override;
  // Under the tier's lock; a tier that keeps nothing (cap 0, or an entry over the cap)
  // stores nothing and says so as if it had (there is nothing to disagree with).
  Result<std::optional<TierHit>> create(const CacheKey& key, const TierEntry& entry) override;
  Status remove(const CacheKey& key) override;

  bool enabled() const { return m_max_bytes > 0; }
  // get() without the Result: counts a hit and a use of the entry.
  std::optional<TierHit> find(const CacheKey& key);
  void insert(const CacheKey& key, SharedBytes bytes, double compile_ms);
  // Keeps `decoded` beside the entry under `key` if that entry still holds `bytes` (an
  // entry replaced or evicted meanwhile is left alone).
  void attach(const CacheKey& key, const SharedBytes& bytes, SharedDecoded decoded);
  void clear();

  // Hits since the tier was made and the compile time they saved.
  Counters session() const;
  // The uses and counts not yet collected, which the caller now records; they start again.
  PendingUses drain(std::int64_t now_ms);

 private:
  struct Entry {
    SharedBytes bytes;
    SharedDecoded decoded;
    double compile_ms = 0;
    std::uint64_t pending_uses = 0;  // hits not yet collected by drain()
  };

  // insert() with m_mutex held.
  void insert_locked(const CacheKey& key, SharedBytes bytes, double compile_ms);

  const std::uint64_t m_max_bytes;
  mutable std::mutex m_mutex;
  std::unordered_map<CacheKey, Entry> m_entries;
  std::deque<CacheKey> m_order;  // insertion order: eviction is first-in first-out
  std::uint64_t m_bytes = 0;
  std::vector<Usage> m_evicted_uses;  // uses of entries evicted before drain()
  Counters m_session;
  Counters m_pending;
};

}  // namespace jitcache::cache
