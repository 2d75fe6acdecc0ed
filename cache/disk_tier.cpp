#include "cache/disk_tier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "jitcache/log.hpp"
#include "support/enum_names.hpp"

namespace jitcache::cache {
namespace {

constexpr std::int64_t k_flush_interval_ms = 30'000;
constexpr std::size_t k_flush_pending_limit = 4096;

constexpr std::string_view k_cachedir_tag =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by jitcache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n";

void write_cachedir_tag(int root_fd) {
  const int raw =
      ::openat(root_fd, "CACHEDIR.TAG", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) return;  // present already, or not worth failing over
  UniqueFd fd(raw);
  ::fchmod(fd.get(), 0600);
  (void)write_all(fd.get(), std::as_bytes(std::span(k_cachedir_tag)), "CACHEDIR.TAG");
}

// Whether this process may create files in an existing directory: a read-only mount
// (EROFS) or missing write permission (EACCES) say no; root passes the permission check.
bool directory_writable(const std::filesystem::path& path) {
  return ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0 || (errno != EROFS && errno != EACCES);
}

bool exists_nofollow(const std::filesystem::path& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

const char* to_string(StoreMode mode) { return enum_name(mode, {"read-write", "read-only", "memory-only"}); }

DiskTier::DiskTier(std::filesystem::path root, DiskTierOptions options, StoreMode mode, UniqueFd root_fd,
                   BlobFiles blobs, UniqueFd locks_fd, Tally& tally, UpstreamUses upstream)
    : m_root(std::move(root)),
      m_options(std::move(options)),
      m_mode(mode),
      m_root_fd(std::move(root_fd)),
      m_journal(m_root_fd.get(), m_root / k_usage_journal_name),
      m_blobs(std::move(blobs)),
      m_locks_fd(std::move(locks_fd)),
      m_tally(tally),
      m_upstream(std::move(upstream)) {
  m_last_flush_ms = unix_now_ms();
  m_blobs.set_fault_hook(m_options.blob_fault_hook);
}

RecoveringIndex::Settings DiskTier::index_settings() const {
  return {m_options.busy_timeout, m_options.durability, m_options.damaged_index};
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const std::filesystem::path& root, DiskTierOptions options,
                                                 Tally& tally, UpstreamUses upstream) {
  const std::filesystem::path clean = JC_TRY(resolve_root_path(root));
  if (exists_nofollow(clean) && !directory_writable(clean))
    return open_read_only(clean, std::move(options), tally, std::move(upstream));
  UniqueFd root_fd = JC_TRY(open_private_dir(clean, CreateParents::yes));
  write_cachedir_tag(root_fd.get());
  BlobFiles blobs = JC_TRY(BlobFiles::open(root_fd.get(), clean));
  UniqueFd locks_fd = JC_TRY(open_private_subdir(root_fd.get(), "locks", clean / "locks"));
  std::unique_ptr<DiskTier> tier(new DiskTier(clean, std::move(options), StoreMode::read_write,
                                              std::move(root_fd), std::move(blobs), std::move(locks_fd),
                                              tally, std::move(upstream)));
  auto opened = JC_TRY(RecoveringIndex::open(tier->m_root_fd.get(), clean, tier->index_settings()));
  tier->m_index = std::move(opened.index);
  if (opened.read_only_reason) {
    tier->m_mode = StoreMode::read_only;
    tier->m_mode_reason = *opened.read_only_reason;
  }
  return tier;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open_read_only(const std::filesystem::path& root,
                                                           DiskTierOptions options, Tally& tally,
                                                           UpstreamUses upstream) {
  UniqueFd root_fd = JC_TRY(open_private_dir(root, CreateParents::no));
  const RecoveringIndex::Settings settings{options.busy_timeout, options.durability, options.damaged_index};
  auto index = JC_TRY(RecoveringIndex::open_read_only(root_fd.get(), root, settings));
  BlobFiles blobs = JC_TRY(BlobFiles::open_read_only(root_fd.get(), root));
  std::unique_ptr<DiskTier> tier(new DiskTier(root, std::move(options), StoreMode::read_only,
                                              std::move(root_fd), std::move(blobs), UniqueFd(), tally,
                                              std::move(upstream)));
  tier->m_index = std::move(index);
  tier->m_mode_reason = root.string() + " is read-only to this process";
  log_info("cache: " + tier->m_mode_reason + "; using it read-only (lookups only, nothing stored)");
  return tier;
}

Error DiskTier::needs_writable(const std::string& what) const {
  return Error{ErrorCode::io, what + ": " + m_root.string() + " is read-only to this process", {}};
}

Result<std::optional<TierHit>> DiskTier::get(const CacheKey& key) {
  const auto row = JC_TRY(with_index([&](Index& index) { return index.lookup(key); }));
  if (!row) return std::optional<TierHit>();
  auto bytes = m_blobs.read_verified(row->digest, row->size);
  if (!bytes) {
    quarantine(key, row->digest, bytes.error());
    return std::optional<TierHit>();
  }
  {
    std::lock_guard lock(m_usage_mutex);
    PendingUse& use = m_pending_usage[key];
    ++use.hits;
    use.last_used_ms = unix_now_ms();
  }
  return std::optional<TierHit>(
      TierHit{std::make_shared<const Bytes>(std::move(*bytes)), row->compile_ms, {}, {}});
}

Result<std::optional<TierHit>> DiskTier::peek(const CacheKey& key) {
  const auto row = JC_TRY(with_index([&](Index& index) { return index.lookup(key); }));
  if (!row) return std::optional<TierHit>();
  auto bytes = m_blobs.read_verified(row->digest, row->size);
  if (!bytes) return std::optional<TierHit>();
  return std::optional<TierHit>(
      TierHit{std::make_shared<const Bytes>(std::move(*bytes)), row->compile_ms, {}, {}});
}

Result<NewEntry> DiskTier::publish(const CacheKey& key, const TierEntry& entry) {
  const BlobDigest digest =
      JC_TRY(m_blobs.publish(*entry.bytes, entry.refetchable ? Durability::relaxed : m_options.durability,
                             m_options.publish_hook));
  return NewEntry{key, digest, entry.bytes->size(), entry.facts.to_json(), entry.compile_ms, unix_now_ms()};
}

Status DiskTier::evict_if_over(const IndexTotals& totals, const CacheKey& key) {
  if (totals.bytes <= m_options.max_bytes) return {};
  // Evict to 90% of the cap, so that the next few publishes do not each evict again.
  // Uses are written first, so that eviction sees what was used recently.
  JC_TRY(flush_and_settle());
  const Removed removed =
      JC_TRY(with_index([&](Index& index) { return index.evict(m_options.max_bytes / 10 * 9, key); }));
  remove_blobs(removed.unreferenced);
  Counters delta;
  delta.evicted = removed.entries.size();
  m_tally.add(delta);
  return {};
}

Status DiskTier::put(const CacheKey& key, const TierEntry& entry) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("storing " + key.to_hex()));
  const NewEntry row = JC_TRY(publish(key, entry));
  std::function<void()> before_commit;
  if (m_options.publish_hook) before_commit = [this] { m_options.publish_hook(PublishStep::row_written); };
  const IndexTotals totals =
      JC_TRY(with_index([&](Index& index) { return index.insert(row, before_commit); }));
  return evict_if_over(totals, key);
}

Result<std::optional<TierHit>> DiskTier::create(const CacheKey& key, const TierEntry& entry) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("storing " + key.to_hex()));
  std::optional<KeyLock> lock;
  if (auto acquired = lock_key(key, "recording " + key.to_hex()); acquired && *acquired) lock = std::move(*acquired);
  else log_debug("cache: creating " + key.to_hex() + " without its key lock (" +
                 (acquired ? std::string("timed out") : acquired.error().to_string()) + ")");
  // Two rounds at most: a create that loses to an unlocked writer reads what it stored;
  // a third would mean entries come and go under us faster than we can read them.
  for (int round = 0; round < 3; ++round) {
    // A damaged blob is quarantined here (its row removed), so it counts as nothing stored.
    if (auto stored = JC_TRY(get(key))) return stored;
    const NewEntry row = JC_TRY(publish(key, entry));
    const bool inserted = JC_TRY(with_index([&](Index& index) { return index.insert_new(row, {}); }));
    if (inserted) {
      JC_TRY(evict_if_over(JC_TRY(with_index([](Index& index) { return index.totals(); })), key));
      return std::optional<TierHit>();
    }
  }
  return make_error(ErrorCode::io, "cache: creating " + key.to_hex() + " in " + m_root.string() +
                                       ": another writer's entry kept appearing and vanishing; gave up");
}

Status DiskTier::remove(const CacheKey& key) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("removing " + key.to_hex()));
  const Removed removed = JC_TRY(with_index([&](Index& index) { return index.remove_key(key); }));
  remove_blobs(removed.unreferenced);
  return {};
}

void DiskTier::quarantine(const CacheKey& key, const BlobDigest& digest, const BlobFailure& failure) {
  if (m_mode != StoreMode::read_write) {
    log_warning("cache: entry " + key.to_hex() + ": " + failure.detail + " (" + to_string(failure.problem) +
                "); not served, and left in place (the cache is " + to_string(m_mode) + ")");
    return;
  }
  if (failure.problem != BlobProblem::missing) m_blobs.quarantine(digest);
  auto removed = with_index([&](Index& index) { return index.remove_digest(digest); });
  std::uint64_t count_removed = removed ? removed->entries.size() : 0;
  log_warning("cache: entry " + key.to_hex() + ": " + failure.detail + " (" + to_string(failure.problem) +
              "); quarantined " + std::to_string(count_removed) + " entr" +
              (count_removed == 1 ? "y" : "ies") + ", to be produced again");
  if (!removed)
    log_warning("cache: could not remove the entries of a bad blob: " + removed.error().to_string());
  Counters delta;
  delta.quarantined = count_removed;
  m_tally.add(delta);
}

void DiskTier::remove_blobs(const std::vector<BlobDigest>& digests) {
  for (const BlobDigest& digest : digests)
    if (auto removed = m_blobs.remove(digest); !removed)
      log_warning("cache: " + removed.error().to_string());
}

Result<std::optional<KeyLock>> DiskTier::lock_key(const CacheKey& key, std::string_view label) {
  return KeyLock::acquire(m_locks_fd.get(), m_root / "locks", key, m_options.lock_timeout, label);
}

Result<bool> DiskTier::contains(const CacheKey& key) {
  const auto row = JC_TRY(with_index([&](Index& index) { return index.lookup(key); }));
  return row.has_value();
}

Status DiskTier::flush() {
  const std::int64_t now = unix_now_ms();
  PendingUses pending = m_upstream ? m_upstream(now) : PendingUses{};
  Counters delta = m_tally.take_unflushed();
  std::vector<Usage>& usage = pending.uses;
  {
    std::lock_guard lock(m_usage_mutex);
    if (m_mode == StoreMode::read_write)
      for (const auto& [key, use] : m_pending_usage) usage.push_back(Usage{key, use.hits, use.last_used_ms});
    m_pending_usage.clear();
  }
  // Nothing is recorded where nothing may be written; the session counters stay.
  if (m_mode != StoreMode::read_write) return {};
  m_last_flush_ms = now;
  delta += pending.counters;
  if (usage.empty() && delta == Counters{}) return {};
  switch (m_journal.append(usage, delta)) {
    case AppendResult::appended: return {};
    case AppendResult::full: JC_TRY(fold_journal()); break;
    case AppendResult::unavailable: break;
  }
  return with_index([&](Index& index) { return index.record_usage(usage, delta); });
}

Status DiskTier::fold_journal() {
  if (m_mode != StoreMode::read_write) return {};
  return m_journal.fold([&](const JournalContents& contents) {
    return with_index([&](Index& index) { return index.record_usage(contents.uses, contents.counters); });
  });
}

Status DiskTier::flush_and_settle() {
  JC_TRY(flush());
  return fold_journal();
}

void DiskTier::maybe_flush() {
  bool due = unix_now_ms() - m_last_flush_ms.load() > k_flush_interval_ms;
  if (!due) {
    std::lock_guard lock(m_usage_mutex);
    due = m_pending_usage.size() > k_flush_pending_limit;
  }
  if (!due) return;
  if (auto flushed = flush(); !flushed)
    log_warning("cache: could not record usage: " + flushed.error().to_string());
}

Status DiskTier::flush_and_fold() {
  JC_TRY(flush_and_settle());
  if (m_mode != StoreMode::read_write) return {};
  return with_index([&](Index& index) { return index.fold_usage(); });
}

}  // namespace jitcache::cache
