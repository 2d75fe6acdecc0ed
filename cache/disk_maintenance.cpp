// The disk tier's maintenance: list, remove, clear, verify, gc and the orphan blobs
// (what `jitcache inspect | clear | verify | gc` and the audit ask of the directory).
#include <algorithm>
#include <unordered_set>

#include "cache/disk_tier.hpp"
#include "jitcache/log.hpp"

namespace jitcache::cache {

Result<std::vector<EntryInfo>> DiskTier::list(const EntryFilter& filter) {
  JC_TRY(flush_and_fold());
  return with_index([&](Index& index) { return index.list(filter); });
}

Result<std::optional<std::vector<ListedEntry>>> DiskTier::list_entries() {
  const std::vector<EntryInfo> entries = JC_TRY(list({}));
  std::vector<ListedEntry> listed;
  listed.reserve(entries.size());
  for (const EntryInfo& entry : entries) listed.push_back(ListedEntry{entry.key, entry.facts});
  return std::optional<std::vector<ListedEntry>>(std::move(listed));
}

Result<std::vector<EntryInfo>> DiskTier::remove(const EntryFilter& filter, DryRun dry_run) {
  if (m_mode != StoreMode::read_write && dry_run == DryRun::no)
    return std::unexpected(needs_writable("removing entries"));
  JC_TRY(flush_and_fold());
  if (dry_run == DryRun::yes) return with_index([&](Index& index) { return index.list(filter); });
  Removed removed = JC_TRY(with_index([&](Index& index) { return index.remove(filter); }));
  remove_blobs(removed.unreferenced);
  return std::move(removed.entries);
}

Result<ClearReport> DiskTier::clear_all() {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("clearing the cache"));
  ClearReport report;
  auto removed = [&]() -> Result<Removed> {
    JC_TRY(flush_and_fold());
    return with_index([&](Index& index) { return index.remove({}); });
  }();
  if (removed) {
    remove_blobs(removed->unreferenced);
    report.removed = std::move(removed->entries);
  } else {
    // An index that opens but cannot be read or changed (a column of junk, a trigger that
    // fails): clearing it means starting a fresh one, as for a corrupt file.
    log_warning("cache: " + removed.error().to_string() + "; moving the index aside to clear it");
    report.index_quarantined = JC_TRY(m_index->replace(removed.error().message));
  }
  {
    std::lock_guard lock(m_usage_mutex);
    m_pending_usage.clear();
  }
  // The blobs of a discarded index (now or when this Store opened) are referenced by
  // nothing: clearing everything removes them too.
  if (!index_recoveries().empty())
    for (const StoredBlob& blob : JC_TRY(orphan_blobs(std::chrono::milliseconds(0))))
      if (auto gone = remove_orphan_blob(blob.digest, std::chrono::milliseconds(0)); gone && *gone)
        ++report.blob_files;
  return report;
}

Result<VerifyReport> DiskTier::verify() {
  JC_TRY(flush_and_settle());
  VerifyReport report;
  report.integrity_problems = JC_TRY(with_index([&](Index& index) { return index.integrity_check(); }));
  for (std::string& problem : JC_TRY(with_index([&](Index& index) { return index.check_values(); })))
    report.integrity_problems.push_back(std::move(problem));
  const std::vector<EntryInfo> entries = JC_TRY(with_index([&](Index& index) { return index.list({}); }));
  std::unordered_set<BlobDigest> quarantined;
  for (const EntryInfo& info : entries) {
    ++report.checked;
    if (quarantined.contains(info.digest)) {
      report.bad.push_back({info.key, info.digest,
                            m_blobs.path_of(info.digest).string() + ": quarantined with another entry"});
      continue;
    }
    auto bytes = m_blobs.read_verified(info.digest, info.size);
    if (!bytes) {
      report.bad.push_back({info.key, info.digest, bytes.error().detail});
      quarantined.insert(info.digest);
      quarantine(info.key, info.digest, bytes.error());
      continue;
    }
    // The row's facts must still be the facts its key was made from.
    if (info.key_schema == k_key_schema_version) {
      auto facts = Facts::from_json(info.facts_json);
      std::string problem;
      if (!facts) problem = "field facts: " + facts.error().message;
      else if (facts->key() != info.key)
        problem = "field facts: hash to " + facts->key().to_hex() + ", not to the key";
      if (!problem.empty()) {
        report.bad.push_back(
            {info.key, info.digest, index_path().string() + ": entry " + info.key.to_hex() + ", " + problem});
        auto removed = with_index([&](Index& index) { return index.remove_key(info.key); });
        if (removed) remove_blobs(removed->unreferenced);
        Counters delta;
        delta.quarantined = 1;
        m_tally.add(delta);
      }
    }
  }
  report.orphan_blobs = JC_TRY(orphan_blobs(std::chrono::milliseconds(0))).size();
  JC_TRY(flush_and_settle());
  // Last: a damaged page met during this run is recovered (and recorded) on the way.
  report.index_quarantined = index_recoveries();
  return report;
}

Result<GcReport> DiskTier::gc(const GcOptions& options) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("gc"));
  JC_TRY(flush_and_settle());
  GcReport report;
  const std::uint64_t cap = options.max_bytes.value_or(m_options.max_bytes);
  report.max_bytes = cap;
  const Removed removed = JC_TRY(with_index([&](Index& index) { return index.evict(cap, std::nullopt); }));
  remove_blobs(removed.unreferenced);
  report.evicted_entries = removed.entries.size();
  for (const EntryInfo& info : removed.entries) report.evicted_bytes += info.size;
  Counters delta;
  delta.evicted = report.evicted_entries;
  m_tally.add(delta);

  const std::int64_t cutoff = unix_now_ms() - options.grace.count();
  for (const StoredBlob& blob : JC_TRY(orphan_blobs(options.grace)))
    if (auto gone = remove_orphan_blob(blob.digest, options.grace); gone && *gone) ++report.orphan_blobs;
  report.temp_files = JC_TRY(m_blobs.sweep_tmp(cutoff));
  report.quarantine_files = JC_TRY(m_blobs.sweep_quarantine(cutoff));
  report.lock_files = JC_TRY(KeyLock::sweep(m_locks_fd.get(), m_root / "locks", cutoff));
  JC_TRY(flush_and_settle());
  report.bytes_after = JC_TRY(with_index([&](Index& index) { return index.totals(); })).bytes;
  return report;
}

Result<Stats> DiskTier::stats() {
  JC_TRY(flush_and_settle());
  Stats stats;
  const IndexTotals totals = JC_TRY(with_index([&](Index& index) { return index.totals(); }));
  stats.entries = totals.entries;
  stats.bytes = totals.bytes;
  stats.max_bytes = m_options.max_bytes;
  stats.totals = JC_TRY(with_index([&](Index& index) { return index.counters(); }));
  // A store that may not write folds nothing: the journal's counts are added as read.
  if (m_mode != StoreMode::read_write) stats.totals += JC_TRY(m_journal.read()).counters;
  return stats;
}

Result<std::expected<SharedBytes, BlobFailure>> DiskTier::read_blob(const BlobDigest& digest,
                                                                    std::uint64_t size) {
  using Inner = std::expected<SharedBytes, BlobFailure>;
  auto bytes = m_blobs.read_verified(digest, size);
  if (!bytes) return Inner(std::unexpected(bytes.error()));
  return Inner(std::make_shared<const Bytes>(std::move(*bytes)));
}

Result<std::vector<StoredBlob>> DiskTier::orphan_blobs(std::chrono::milliseconds min_age) {
  // Blobs are listed before the rows are read: a blob published after the listing is not
  // in it, and one published before it has its row committed or is still young.
  const std::vector<StoredBlob> blobs = JC_TRY(m_blobs.list());
  const auto referenced = JC_TRY(with_index([&](Index& index) { return index.referenced_digests(); }));
  const std::unordered_set<BlobDigest> in_use(referenced.begin(), referenced.end());
  const std::int64_t cutoff = unix_now_ms() - min_age.count();
  std::vector<StoredBlob> orphans;
  for (const StoredBlob& blob : blobs)
    if (!in_use.contains(blob.digest) && blob.mtime_ms < cutoff) orphans.push_back(blob);
  return orphans;
}

Result<bool> DiskTier::remove_orphan_blob(const BlobDigest& digest, std::chrono::milliseconds min_age) {
  if (m_mode != StoreMode::read_write)
    return std::unexpected(needs_writable("removing blob " + digest.to_hex()));
  return m_blobs.remove_unless(digest, [&](std::int64_t mtime_ms) -> Result<bool> {
    if (mtime_ms >= unix_now_ms() - min_age.count()) return true;
    const auto referenced = JC_TRY(with_index([&](Index& index) { return index.referenced_digests(); }));
    return std::find(referenced.begin(), referenced.end(), digest) != referenced.end();
  });
}

}  // namespace jitcache::cache
