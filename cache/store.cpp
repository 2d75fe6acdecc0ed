#include "cache/store.hpp"

#include "jitcache/log.hpp"
#include "support/enum_names.hpp"

namespace jitcache::cache {

const char* to_string(Tier tier) { return enum_name(tier, {"memory", "disk", "provider", "remote"}); }

const char* to_string(Source source) {
  return enum_name(source, {"memory", "disk", "provider", "remote", "coalesced", "produced"});
}

Store::Store(StoreOptions options)
    : m_options(std::move(options)), m_memory(std::make_unique<MemoryTier>(m_options.memory_max_bytes)) {}

void Store::wire_lower_tiers() {
  if (m_disk) m_lower.push_back(Lower{m_disk.get(), true});
  for (const auto& tier : m_options.extra_tiers) {
    if (!tier) continue;
    tier->count_into([this](const Counters& delta) { m_tally.add(delta); });
    m_lower.push_back(Lower{tier.get(), false});
  }
}

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& root, StoreOptions options) {
  std::unique_ptr<Store> store(new Store(std::move(options)));
  MemoryTier* memory = store->m_memory.get();
  store->m_disk = JC_TRY(DiskTier::open(root, store->m_options, store->m_tally,
                                        [memory](std::int64_t now_ms) { return memory->drain(now_ms); }));
  store->wire_lower_tiers();
  return store;
}

std::unique_ptr<Store> Store::open_memory_only(StoreOptions options) {
  std::unique_ptr<Store> store(new Store(std::move(options)));
  store->wire_lower_tiers();
  return store;
}

Store::~Store() {
  if (auto flushed = flush(); !flushed)
    log_warning("cache: could not record usage at close: " + flushed.error().to_string());
  // An extra tier may outlive this store (it is shared): it must not count into it.
  for (const auto& tier : m_options.extra_tiers)
    if (tier) tier->count_into(nullptr);
}

Error Store::needs_writable(const std::string& what) const {
  if (!m_disk)
    return Error{ErrorCode::unavailable, what + ": the cache is memory-only (no usable cache directory)", {}};
  return m_disk->needs_writable(what);
}

Status Store::check_facts(const CacheKey& key, const Facts& facts) const {
  JC_TRY(facts.validate());
  const CacheKey computed = facts.key();
  if (computed != key)
    return make_error(ErrorCode::invalid_argument,
                      "cache key " + key.to_hex() + " is not the key of the facts given with it (" +
                          computed.to_hex() + "); compute keys with Facts::key()");
  return {};
}

// ---- read-through -------------------------------------------------------------------------

Store::LowerRead Store::read_lower(const CacheKey& key, std::size_t first) {
  LowerRead read;
  for (std::size_t slot = first; slot < m_lower.size(); ++slot) {
    auto got = m_lower[slot].tier->get(key);
    if (!got) {
      if (m_lower[slot].is_disk) read.disk_error = std::move(got.error());
      else count_error(slot, Op::read, "reading " + key.to_hex(), got.error());
      continue;
    }
    if (!m_lower[slot].is_disk) count_success(slot, Op::read);
    if (*got) {
      count_hit(slot, (*got)->compile_ms);
      read.found = Found{slot, std::move(**got)};
      return read;
    }
  }
  return read;
}

void Store::count_hit(std::size_t slot, double compile_ms) {
  Counters delta;
  if (m_lower[slot].is_disk) delta.disk_hits = 1;
  delta.compile_ms_saved = compile_ms;
  m_tally.add(delta);
  std::lock_guard lock(m_stats_mutex);
  ++m_lower[slot].hits;
}

void Store::count_error(std::size_t slot, Op op, const std::string& what, const Error& error) {
  bool first;
  {
    std::lock_guard lock(m_stats_mutex);
    Lower& lower = m_lower[slot];
    ++lower.errors;
    bool& failing = op == Op::read ? lower.failing_reads : lower.failing_writes;
    // A remote that is down fails the reads and then the writes of the same call: that is
    // one episode, and the warning of the reads has said it.
    const bool unreachable = error.code == ErrorCode::unavailable;
    first = !failing && !(unreachable && lower.unreachable);
    failing = true;
    if (unreachable) lower.unreachable = true;
  }
  const std::string line = "cache: tier " + m_lower[slot].tier->name() + ": " + what + ": " + error.to_string() +
                           "; going on without it";
  if (first) log_warning(line + " (further failures of its " + (op == Op::read ? "reads" : "writes") +
                         " are logged at debug level until one succeeds)");
  else log_debug(line);
}

void Store::count_success(std::size_t slot, Op op) {
  bool recovered;
  {
    std::lock_guard lock(m_stats_mutex);
    bool& failing = op == Op::read ? m_lower[slot].failing_reads : m_lower[slot].failing_writes;
    recovered = failing;
    failing = false;
    m_lower[slot].unreachable = false;
  }
  if (recovered)
    log_info("cache: tier " + m_lower[slot].tier->name() + ": " + (op == Op::read ? "reads" : "writes") +
             " work again");
}

Source source_of(Tier tier) {
  switch (tier) {
    case Tier::memory: return Source::memory;
    case Tier::disk: return Source::disk;
    case Tier::provider: return Source::provider;
    case Tier::remote: return Source::remote;
  }
  return Source::remote;
}

Result<std::optional<Hit>> Store::get(const CacheKey& key, CountMiss count_miss) {
  if (auto hit = m_memory->find(key))
    return std::optional<Hit>(Hit{std::move(hit->bytes), Tier::memory, std::move(hit->decoded)});
  LowerRead read = read_lower(key);
  if (!read.found) {
    if (read.disk_error) return std::unexpected(std::move(*read.disk_error));
    if (count_miss == CountMiss::yes) m_tally.add(one(&Counters::misses));
    maybe_flush();
    return std::optional<Hit>();
  }
  if (read.disk_error)
    log_warning("cache: " + read.disk_error->to_string() + "; served by tier " +
                m_lower[read.found->slot].tier->name());
  // Only a tier that keeps facts with its entries (checked against the key) lets the tiers
  // above it be filled; otherwise only the memory tier is.
  TierHit& hit = read.found->hit;
  if (hit.facts && hit.facts->key() == key)
    write_through(key, TierEntry{*hit.facts, hit.bytes, hit.compile_ms, /*refetchable=*/true}, read.found->slot,
                  !read.disk_error && mode() == StoreMode::read_write);
  else
    m_memory->insert(key, hit.bytes, hit.compile_ms);
  maybe_flush();
  return std::optional<Hit>(Hit{std::move(hit.bytes), m_lower[read.found->slot].tier->kind(), {}});
}

Result<std::optional<Located>> Store::locate(const CacheKey& key) {
  if (auto hit = m_memory->peek(key); hit && *hit) return std::optional<Located>(Located{Tier::memory, m_memory->name()});
  std::optional<Error> disk_error;
  for (const Lower& lower : m_lower) {
    auto got = lower.tier->peek(key);
    if (!got) {
      log_debug("cache: tier " + lower.tier->name() + " could not say whether it holds " + key.to_hex() + ": " +
                got.error().to_string());
      if (lower.is_disk) disk_error = std::move(got.error());
      continue;
    }
    if (*got) return std::optional<Located>(Located{lower.tier->kind(), lower.tier->name()});
  }
  // As get(): the disk's failure is the answer when no later tier has the key.
  if (disk_error) return std::unexpected(std::move(*disk_error));
  return std::optional<Located>();
}

std::vector<TierInfo> Store::tiers() const {
  std::vector<TierInfo> out;
  for (const StorageTier* tier : tier_objects()) out.push_back(TierInfo{tier->kind(), tier->name(), tier->writable()});
  return out;
}

std::vector<StorageTier*> Store::tier_objects() const {
  std::vector<StorageTier*> out{m_memory.get()};
  for (const Lower& lower : m_lower) out.push_back(lower.tier);
  return out;
}

void Store::attach(const CacheKey& key, const SharedBytes& bytes, SharedDecoded decoded) {
  m_memory->attach(key, bytes, std::move(decoded));
}

// ---- write-through ------------------------------------------------------------------------

void Store::write_through(const CacheKey& key, const TierEntry& entry, std::size_t end, bool disk_writable) {
  for (std::size_t slot = 0; slot < end && slot < m_lower.size(); ++slot) {
    if (m_lower[slot].is_disk) {
      if (!disk_writable) continue;
      if (auto stored = m_disk->put(key, entry); !stored)
        log_warning("cache: could not store " + key.to_hex() + ": " + stored.error().to_string());
    } else if (!m_lower[slot].tier->writable()) {
      continue;
    } else if (auto stored = m_lower[slot].tier->put(key, entry); !stored) {
      count_error(slot, Op::write, "storing " + key.to_hex(), stored.error());
    } else {
      count_success(slot, Op::write);
    }
  }
  m_memory->insert(key, entry.bytes, entry.compile_ms);
}

Status Store::put(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                  double compile_ms) {
  JC_TRY(check_facts(key, facts));
  if (mode() != StoreMode::read_write) return std::unexpected(needs_writable("storing " + key.to_hex()));
  const TierEntry entry{facts, std::make_shared<const Bytes>(bytes.begin(), bytes.end()), compile_ms};
  // The disk's error is the caller's; the other tiers follow it.
  JC_TRY(m_disk->put(key, entry));
  write_through(key, entry, m_lower.size(), /*disk_writable=*/false);
  maybe_flush();
  return {};
}

Result<FirstWrite> Store::put_if_absent(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                                        double compile_ms) {
  JC_TRY(check_facts(key, facts));
  if (mode() != StoreMode::read_write) return std::unexpected(needs_writable("storing " + key.to_hex()));
  const TierEntry entry{facts, std::make_shared<const Bytes>(bytes.begin(), bytes.end()), compile_ms};
  // The widest tier first: a record the fleet agreed on must not be decided by one disk.
  for (std::size_t slot = m_lower.size(); slot-- > 0;) {
    if (!m_lower[slot].tier->writable()) continue;
    auto made = m_lower[slot].tier->create(key, entry);
    if (!made) {
      if (m_lower[slot].is_disk) return std::unexpected(std::move(made.error()));
      count_error(slot, Op::write, "creating " + key.to_hex(), made.error());
      continue;
    }
    if (!m_lower[slot].is_disk) count_success(slot, Op::write);
    FirstWrite first{true, entry.bytes};
    double first_ms = compile_ms;
    if (*made) {
      first.ours = *(*made)->bytes == *entry.bytes;
      first.bytes = std::move((*made)->bytes);
      first_ms = (*made)->compile_ms;
    }
    // The tiers above the one that decided hold what it holds, which may replace a
    // record a concurrent writer put there (it lost in this tier, or will).
    write_through(key, TierEntry{facts, first.bytes, first_ms, !m_lower[slot].is_disk}, slot,
                  /*disk_writable=*/true);
    maybe_flush();
    return first;
  }
  return std::unexpected(needs_writable("storing " + key.to_hex()));  // no lower tier: unreachable in read_write
}

// ---- get_or_create ------------------------------------------------------------------------

Result<Fetched> Store::get_or_create(const CacheKey& key, const Facts& facts, const Producer& producer,
                                     std::string_view label) {
  if (auto hit = m_memory->find(key))
    return Fetched{std::move(hit->bytes), Source::memory, std::move(hit->decoded)};
  auto outcome = m_flights.run(key, [&]() -> Result<Fetched> {
    try {
      return lead(key, facts, producer, label);
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, std::string("cache: producer threw: ") + e.what());
    } catch (...) {
      return make_error(ErrorCode::internal, "cache: producer threw a non-standard exception");
    }
  });
  if (outcome.role == SingleFlight<CacheKey, Result<Fetched>>::Role::waited) {
    if (outcome.value) {
      outcome.value->source = Source::coalesced;
      m_tally.add(one(&Counters::coalesced));
    }
    return std::move(outcome.value);
  }
  maybe_flush();
  return std::move(outcome.value);
}

Result<Fetched> Store::lead(const CacheKey& key, const Facts& facts, const Producer& producer,
                            std::string_view label) {
  // The previous leader may have finished between our memory miss and our flight.
  if (auto hit = m_memory->find(key))
    return Fetched{std::move(hit->bytes), Source::memory, std::move(hit->decoded)};
  JC_TRY(check_facts(key, facts));

  bool disk_writable = mode() == StoreMode::read_write;
  auto serve = [&](Found& found) {
    // Filling the tiers above a provider or a shared one: they hold copies of what that tier
    // keeps (TierEntry::refetchable).
    const TierEntry entry{facts, found.hit.bytes, found.hit.compile_ms, !m_lower[found.slot].is_disk};
    write_through(key, entry, found.slot, disk_writable);
    return Fetched{std::move(found.hit.bytes), source_of(m_lower[found.slot].tier->kind()), {}};
  };
  LowerRead read = read_lower(key);
  if (read.disk_error) {
    log_warning("cache: " + read.disk_error->to_string() +
                (read.found ? "; served by tier " + m_lower[read.found->slot].tier->name()
                            : std::string("; producing without the cache")));
    disk_writable = false;
  }
  if (read.found) return serve(*read.found);

  std::optional<KeyLock> lock;
  if (disk_writable) {
    auto acquired = m_disk->lock_key(key, label);
    if (!acquired) {
      log_warning("cache: " + acquired.error().to_string() + "; producing " + key.to_hex() + " unlocked");
    } else if (!*acquired) {
      log_warning("cache: waited " + std::to_string(m_options.lock_timeout.count()) +
                  " ms for another process producing " + key.to_hex() + "; producing it here too");
    } else {
      lock = std::move(*acquired);
      // Whoever held the lock before us has most likely published the entry.
      if (auto disk = m_disk->get(key); disk && *disk) {
        count_hit(0, (*disk)->compile_ms);
        Found found{0, std::move(**disk)};
        return serve(found);
      }
    }
  }

  // Another node may be producing it: wait for its entry, or hold the lease while we do.
  Claims claims = claim_extra(key, label);
  if (claims.found) return serve(*claims.found);

  m_tally.add(one(&Counters::misses));
  Result<Produced> produced = producer();
  if (!produced) {
    m_tally.add(one(&Counters::produce_failures));
    return std::unexpected(std::move(produced.error()));
  }
  Counters delta = one(&Counters::produces);
  delta.compile_ms_spent = produced->compile_ms;
  m_tally.add(delta);
  const TierEntry entry{facts, std::make_shared<const Bytes>(std::move(produced->bytes)),
                        produced->compile_ms};
  if (m_disk && m_disk->mode() == StoreMode::read_only) {
    std::call_once(m_unstored_warning, [&] {
      log_warning("cache: " + m_disk->mode_reason() +
                  ": compiled kernels are kept in memory only and compiled again by the next process");
    });
  }
  // Published locally first, then to the extra tiers; the leases go when `claims` does,
  // after the entry is stored where the waiting nodes look for it.
  write_through(key, entry, m_lower.size(), disk_writable);
  return Fetched{entry.bytes, Source::produced, {}};
}

Store::Claims Store::claim_extra(const CacheKey& key, std::string_view label) {
  Claims claims;
  for (std::size_t slot = 0; slot < m_lower.size(); ++slot) {
    if (m_lower[slot].is_disk || !m_lower[slot].tier->writable()) continue;
    // Taking a lease writes: a remote that refuses writes (full, read-only) but answers
    // reads must not start and end an episode of read failures on every call.
    auto claimed = m_lower[slot].tier->claim(key, label);
    if (!claimed) {
      count_error(slot, Op::write, "claiming " + key.to_hex(), claimed.error());
      continue;
    }
    count_success(slot, Op::write);
    if (claimed->found) {
      count_hit(slot, claimed->found->compile_ms);
      claims.found = Found{slot, std::move(*claimed->found)};
      claims.leases.clear();
      return claims;
    }
    if (claimed->lease) claims.leases.push_back(std::move(claimed->lease));
  }
  return claims;
}

// ---- usage and counters -------------------------------------------------------------------

Status Store::flush() {
  if (m_disk) return m_disk->flush();
  // Nothing is recorded without a directory; the session counters stay.
  (void)m_memory->drain(unix_now_ms());
  (void)m_tally.take_unflushed();
  return {};
}

void Store::maybe_flush() {
  if (m_disk) m_disk->maybe_flush();
}

Counters Store::session_counters() const {
  Counters counters = m_tally.session();
  counters += m_memory->session();
  return counters;
}

std::vector<TierStats> Store::tier_stats() const {
  std::vector<TierStats> stats;
  stats.push_back(TierStats{m_memory->name(), Tier::memory, m_memory->session().memory_hits, 0});
  std::lock_guard lock(m_stats_mutex);
  for (const Lower& lower : m_lower)
    stats.push_back(TierStats{lower.tier->name(), lower.tier->kind(), lower.hits, lower.errors});
  return stats;
}

// ---- the disk tier's jobs, offered through the store ---------------------------------------

Result<std::vector<EntryInfo>> Store::list(const EntryFilter& filter) {
  if (!m_disk) return std::unexpected(needs_writable("cache index"));
  return m_disk->list(filter);
}

Result<std::vector<EntryInfo>> Store::remove(const EntryFilter& filter, DryRun dry_run) {
  if (!m_disk)
    return std::unexpected(needs_writable(dry_run == DryRun::no ? "removing entries" : "cache index"));
  std::vector<EntryInfo> removed = JC_TRY(m_disk->remove(filter, dry_run));
  if (dry_run == DryRun::yes) return removed;
  for (const EntryInfo& info : removed) (void)m_memory->remove(info.key);
  return removed;
}

Result<ClearReport> Store::clear_all() {
  if (!m_disk) return std::unexpected(needs_writable("clearing the cache"));
  ClearReport report = JC_TRY(m_disk->clear_all());
  m_memory->clear();
  return report;
}

Result<VerifyReport> Store::verify() {
  if (!m_disk) return std::unexpected(needs_writable("cache index"));
  return m_disk->verify();
}

std::vector<IndexRecovery> Store::index_recoveries() const {
  return m_disk ? m_disk->index_recoveries() : std::vector<IndexRecovery>();
}

Result<GcReport> Store::gc(const GcOptions& options) {
  if (!m_disk) return std::unexpected(needs_writable("gc"));
  return m_disk->gc(options);
}

Result<std::expected<SharedBytes, BlobFailure>> Store::read_blob(const BlobDigest& digest,
                                                                 std::uint64_t size) {
  if (m_disk) return m_disk->read_blob(digest, size);
  using Inner = std::expected<SharedBytes, BlobFailure>;
  return Inner(std::unexpected(BlobFiles::detached().read_verified(digest, size).error()));
}

Result<std::vector<StoredBlob>> Store::orphan_blobs(std::chrono::milliseconds min_age) {
  if (!m_disk) return std::vector<StoredBlob>();
  return m_disk->orphan_blobs(min_age);
}

Result<bool> Store::remove_orphan_blob(const BlobDigest& digest, std::chrono::milliseconds min_age) {
  if (!m_disk) return std::unexpected(needs_writable("removing blob " + digest.to_hex()));
  return m_disk->remove_orphan_blob(digest, min_age);
}

Result<Stats> Store::stats() {
  if (!m_disk) return std::unexpected(needs_writable("cache index"));
  return m_disk->stats();
}

Result<bool> Store::contains(const CacheKey& key) {
  if (!m_disk) return false;
  return m_disk->contains(key);
}

const std::string& Store::mode_reason() const {
  static const std::string none;
  return m_disk ? m_disk->mode_reason() : none;
}

const std::filesystem::path& Store::root() const {
  static const std::filesystem::path none;
  return m_disk ? m_disk->root() : none;
}

std::filesystem::path Store::blob_path(const BlobDigest& digest) const {
  return m_disk ? m_disk->blob_path(digest) : BlobFiles::detached().path_of(digest);
}

std::filesystem::path Store::index_path() const {
  return m_disk ? m_disk->index_path() : std::filesystem::path("index.db");
}

}  // namespace jitcache::cache
