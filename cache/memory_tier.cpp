#include "cache/memory_tier.hpp"

#include <algorithm>

#include "cache/files.hpp"

namespace jitcache::cache {

std::optional<TierHit> MemoryTier::find(const CacheKey& key) {
  std::lock_guard lock(m_mutex);
  const auto it = m_entries.find(key);
  if (it == m_entries.end()) return std::nullopt;
  Entry& entry = it->second;
  ++entry.pending_uses;
  ++m_session.memory_hits;
  ++m_pending.memory_hits;
  m_session.compile_ms_saved += entry.compile_ms;
  m_pending.compile_ms_saved += entry.compile_ms;
  return TierHit{entry.bytes, entry.compile_ms, entry.decoded, {}};
}

Result<std::optional<TierHit>> MemoryTier::peek(const CacheKey& key) {
  std::lock_guard lock(m_mutex);
  const auto it = m_entries.find(key);
  if (it == m_entries.end()) return std::optional<TierHit>();
  return std::optional<TierHit>(TierHit{it->second.bytes, it->second.compile_ms, it->second.decoded, {}});
}

Status MemoryTier::put(const CacheKey& key, const TierEntry& entry) {
  insert(key, entry.bytes, entry.compile_ms);
  return {};
}

Result<std::optional<TierHit>> MemoryTier::create(const CacheKey& key, const TierEntry& entry) {
  std::lock_guard lock(m_mutex);
  if (const auto it = m_entries.find(key); it != m_entries.end())
    return std::optional<TierHit>(TierHit{it->second.bytes, it->second.compile_ms, it->second.decoded, {}});
  insert_locked(key, entry.bytes, entry.compile_ms);
  return std::optional<TierHit>();
}

void MemoryTier::insert(const CacheKey& key, SharedBytes bytes, double compile_ms) {
  std::lock_guard lock(m_mutex);
  insert_locked(key, std::move(bytes), compile_ms);
}

void MemoryTier::insert_locked(const CacheKey& key, SharedBytes bytes, double compile_ms) {
  const std::uint64_t size = bytes->size();
  if (m_max_bytes == 0 || size > m_max_bytes) return;
  auto [it, inserted] = m_entries.try_emplace(key);
  if (inserted) m_order.push_back(key);
  else m_bytes -= it->second.bytes->size();
  it->second.bytes = std::move(bytes);
  it->second.decoded.reset();
  it->second.compile_ms = compile_ms;
  m_bytes += size;
  while (m_bytes > m_max_bytes && !m_order.empty()) {
    const CacheKey victim = m_order.front();
    m_order.pop_front();
    const auto v = m_entries.find(victim);
    if (v == m_entries.end()) continue;
    if (v->second.pending_uses > 0)
      m_evicted_uses.push_back(Usage{victim, v->second.pending_uses, unix_now_ms()});
    m_bytes -= v->second.bytes->size();
    m_entries.erase(v);
  }
}

void MemoryTier::attach(const CacheKey& key, const SharedBytes& bytes, SharedDecoded decoded) {
  std::lock_guard lock(m_mutex);
  const auto it = m_entries.find(key);
  if (it != m_entries.end() && it->second.bytes == bytes) it->second.decoded = std::move(decoded);
}

Status MemoryTier::remove(const CacheKey& key) {
  std::lock_guard lock(m_mutex);
  const auto it = m_entries.find(key);
  if (it == m_entries.end()) return {};
  m_bytes -= it->second.bytes->size();
  m_entries.erase(it);
  std::erase(m_order, key);
  return {};
}

void MemoryTier::clear() {
  std::lock_guard lock(m_mutex);
  m_entries.clear();
  m_order.clear();
  m_bytes = 0;
  m_evicted_uses.clear();  // uses of entries that are gone from every tier
}

Counters MemoryTier::session() const {
  std::lock_guard lock(m_mutex);
  return m_session;
}

PendingUses MemoryTier::drain(std::int64_t now_ms) {
  std::lock_guard lock(m_mutex);
  PendingUses pending;
  pending.uses = std::exchange(m_evicted_uses, {});
  for (auto& [key, entry] : m_entries)
    if (entry.pending_uses > 0)
      pending.uses.push_back(Usage{key, std::exchange(entry.pending_uses, 0), now_ms});
  pending.counters = std::exchange(m_pending, Counters{});
  return pending;
}

}  // namespace jitcache::cache
