#include "cache/store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <future>
#include <unordered_set>

#include "cache/index.hpp"
#include "cache/key_lock.hpp"
#include "jitcache/log.hpp"

namespace jitcache::cache {
namespace {

constexpr std::int64_t k_flush_interval_ms = 30'000;
constexpr std::size_t k_flush_pending_limit = 4096;
constexpr const char* k_index_name = "index.db";

constexpr std::string_view k_cachedir_tag =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by jitcache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n";

Counters one(std::uint64_t Counters::*field) {
  Counters c;
  c.*field = 1;
  return c;
}

// The index is this user's regular file, whatever else was put at its name.
Status check_index_file(const struct stat& st, const std::filesystem::path& path) {
  if (!S_ISREG(st.st_mode)) return make_error(ErrorCode::unsafe, path.string() + ": not a regular file");
  if (st.st_uid != ::geteuid())
    return make_error(ErrorCode::unsafe, path.string() + ": owned by uid " + std::to_string(st.st_uid) +
                                             ", not by the current user");
  return {};
}

// The index file must exist with mode 0600 before SQLite opens it: SQLite creates files
// with 0644 minus the umask, and gives the -wal and -shm files the database's mode.
Status prepare_index_file(int root_fd, const std::filesystem::path& path) {
  const int raw = ::openat(root_fd, k_index_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (raw < 0) {
    if (errno == ELOOP) return make_error(ErrorCode::unsafe, path.string() + ": is a symbolic link");
    return std::unexpected(errno_error(path.string(), errno));
  }
  UniqueFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return std::unexpected(errno_error(path.string(), errno));
  JC_TRY(check_index_file(st, path));
  if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0)
    return std::unexpected(errno_error("chmod 600 " + path.string(), errno));
  // SQLite opens index.db-wal and -shm by name. Anything but a regular file there (a FIFO,
  // a socket, a link) was planted: SQLite would fail on it with "disk I/O error" at best.
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string name = std::string(k_index_name) + suffix;
    const std::filesystem::path shown = path.parent_path() / name;
    const auto removed = JC_TRY(remove_unless_regular(root_fd, name, shown, "file"));
    if (removed) log_warning(shown.string() + ": was " + *removed + ", not SQLite's file; removed it");
  }
  return {};
}

void write_cachedir_tag(int root_fd) {
  const int raw = ::openat(root_fd, "CACHEDIR.TAG", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0) return;  // present already, or not worth failing over
  UniqueFd fd(raw);
  ::fchmod(fd.get(), 0600);
  (void)write_all(fd.get(), std::as_bytes(std::span(k_cachedir_tag)), "CACHEDIR.TAG");
}

}  // namespace

const char* to_string(Tier tier) {
  switch (tier) {
    case Tier::memory: return "memory";
    case Tier::disk: return "disk";
  }
  return "?";
}

const char* to_string(Source source) {
  switch (source) {
    case Source::memory: return "memory";
    case Source::disk: return "disk";
    case Source::coalesced: return "coalesced";
    case Source::produced: return "produced";
  }
  return "?";
}

struct Store::Flight {
  std::promise<Result<Fetched>> promise;
  std::shared_future<Result<Fetched>> future = promise.get_future().share();
};

const char* to_string(StoreMode mode) {
  switch (mode) {
    case StoreMode::read_write: return "read-write";
    case StoreMode::read_only: return "read-only";
    case StoreMode::memory_only: return "memory-only";
  }
  return "?";
}

Store::Store(std::filesystem::path root, StoreOptions options, StoreMode mode, UniqueFd root_fd, BlobFiles blobs,
             UniqueFd locks_fd)
    : m_root(std::move(root)),
      m_options(std::move(options)),
      m_mode(mode),
      m_root_fd(std::move(root_fd)),
      m_blobs(std::move(blobs)),
      m_locks_fd(std::move(locks_fd)) {
  m_last_flush_ms = unix_now_ms();
  m_blobs.set_fault_hook(m_options.blob_fault_hook);
}

namespace {

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

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& root, StoreOptions options) {
  const std::filesystem::path clean = JC_TRY(resolve_root_path(root));
  if (exists_nofollow(clean) && !directory_writable(clean)) return open_read_only(clean, std::move(options));
  UniqueFd root_fd = JC_TRY(open_private_dir(clean, CreateParents::yes));
  write_cachedir_tag(root_fd.get());
  BlobFiles blobs = JC_TRY(BlobFiles::open(root_fd.get(), clean));
  UniqueFd locks_fd = JC_TRY(open_private_subdir(root_fd.get(), "locks", clean / "locks"));
  std::unique_ptr<Store> store(new Store(clean, std::move(options), StoreMode::read_write, std::move(root_fd),
                                         std::move(blobs), std::move(locks_fd)));
  JC_TRY(prepare_index_file(store->m_root_fd.get(), store->index_path()));
  const auto before = file_id_of(store->index_path());
  auto index = Index::open(store->index_path(), store->m_options.busy_timeout, store->m_options.durability);
  if (index) {
    store->m_index = std::move(*index);
  } else if (index.error().corrupt ||
             (index.error().schema_damaged && store->m_options.damaged_index == DamagedIndex::quarantine)) {
    log_warning(index.error().error.message);
    store->m_index = JC_TRY(store->open_index(before, index.error().error.message));
  } else if (index.error().unwritable) {
    // A full disk still serves what is stored: read the index, write nothing.
    auto read_only = Index::open(store->index_path(), IndexOptions{store->m_options.busy_timeout,
                                                                   store->m_options.durability, IndexAccess::read_only});
    if (!read_only) return std::unexpected(index.error().error);
    log_warning("cache: " + index.error().error.message + "; using the cache read-only (nothing stored)");
    store->m_index = std::move(*read_only);
    store->m_mode = StoreMode::read_only;
    store->m_mode_reason = index.error().error.message;
  } else {
    return std::unexpected(index.error().error);
  }
  return store;
}

Result<std::unique_ptr<Store>> Store::open_read_only(const std::filesystem::path& root, StoreOptions options) {
  UniqueFd root_fd = JC_TRY(open_private_dir(root, CreateParents::no));
  const std::filesystem::path index_path = root / k_index_name;
  struct stat st;
  if (::fstatat(root_fd.get(), k_index_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return make_error(ErrorCode::io, root.string() + ": read-only to this process and holds no " +
                                         std::string(k_index_name) +
                                         ": there is nothing to read and nothing can be stored");
  JC_TRY(check_index_file(st, index_path));
  BlobFiles blobs = JC_TRY(BlobFiles::open_read_only(root_fd.get(), root));
  std::unique_ptr<Store> store(new Store(root, std::move(options), StoreMode::read_only, std::move(root_fd),
                                         std::move(blobs), UniqueFd()));
  auto index = Index::open(index_path, IndexOptions{store->m_options.busy_timeout, store->m_options.durability,
                                                    IndexAccess::read_only});
  if (!index) return std::unexpected(index.error().error);
  store->m_index = std::move(*index);
  store->m_mode_reason = root.string() + " is read-only to this process";
  log_info("cache: " + store->m_mode_reason + "; using it read-only (lookups only, nothing stored)");
  return store;
}

std::unique_ptr<Store> Store::open_memory_only(StoreOptions options) {
  return std::unique_ptr<Store>(new Store({}, std::move(options), StoreMode::memory_only, UniqueFd(),
                                          BlobFiles::detached(), UniqueFd()));
}

Error Store::needs_writable(const std::string& what) const {
  if (m_mode == StoreMode::memory_only)
    return Error{ErrorCode::unavailable, what + ": the cache is memory-only (no usable cache directory)", {}};
  return Error{ErrorCode::io, what + ": " + m_root.string() + " is read-only to this process", {}};
}

Store::~Store() {
  if (auto flushed = flush(); !flushed)
    log_warning("cache: could not record usage at close: " + flushed.error().to_string());
}

std::shared_ptr<Index> Store::index() const {
  std::lock_guard lock(m_index_mutex);
  return m_index;
}

// Opens index.db, moving a corrupt one aside first. `broken` is the file found corrupt;
// when index.db is no longer that file, another process has rebuilt it already.
Result<std::shared_ptr<Index>> Store::open_index(const std::optional<FileId>& broken,
                                                 const std::string& problem) {
  const std::filesystem::path path = index_path();
  const IndexOptions options{m_options.busy_timeout, m_options.durability, IndexAccess::read_write};
  std::optional<FileId> suspect = broken;
  std::string why = problem;
  // A fresh index another process put in place may, rarely, be damaged in its turn.
  for (int round = 0; round < 3; ++round) {
    {
      // Rebuilds are serialized across processes, so that none moves aside a fresh index
      // another one has just created. Released before Index::open, which takes it itself.
      UniqueFd lock = JC_TRY(lock_index_file(path, m_options.busy_timeout));
      const auto current = file_id_of(path);
      if (!current || current == suspect) JC_TRY(move_index_aside(why));
    }
    const auto opening = file_id_of(path);
    auto opened = Index::open(path, options);
    if (opened) return std::shared_ptr<Index>(std::move(*opened));
    if (!opened.error().corrupt) return std::unexpected(opened.error().error);
    log_warning(opened.error().error.message);
    suspect = opening;
    why = opened.error().error.message;
  }
  return make_error(ErrorCode::database,
                    path.string() + ": still not a usable index after moving it aside three times");
}

Result<std::optional<IndexRecovery>> Store::move_index_aside(const std::string& problem) {
  const std::filesystem::path path = index_path();
  IndexRecovery recovery;
  recovery.problem = problem.empty() ? "not a usable index" : problem;
  if (const std::string prefix = path.string() + ": "; recovery.problem.starts_with(prefix))
    recovery.problem.erase(0, prefix.size());  // reports name the file already
  // Counted before the move, while its -wal file still lies beside it.
  recovery.entries = Index::count_entries(path);
  const std::string stamp = std::to_string(unix_now_ms()) + "." + std::to_string(::getpid());
  recovery.moved_to = m_root / "quarantine" / ("index.db." + stamp);
  bool moved = false;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::filesystem::path from = path.string() + suffix;
    const std::filesystem::path to = recovery.moved_to.string() + suffix;
    if (::rename(from.c_str(), to.c_str()) == 0) moved = moved || *suffix == '\0';
    else if (errno != ENOENT)
      return std::unexpected(errno_error("moving the damaged index " + from.string() + " aside", errno));
  }
  if (!moved) {  // nothing to discard: only the fresh file is needed
    JC_TRY(prepare_index_file(m_root_fd.get(), path));
    return std::optional<IndexRecovery>();
  }
  const std::string held = recovery.entries ? "it held " + std::to_string(*recovery.entries) + " entries"
                                            : "its entries could not be counted";
  log_warning(path.string() + ": not a usable index; moved to " + recovery.moved_to.string() + " (" + held +
              ") and started a fresh one (entries are produced again on use; gc removes the old blobs)");
  JC_TRY(prepare_index_file(m_root_fd.get(), path));
  std::lock_guard lock(m_recoveries_mutex);
  m_recoveries.push_back(recovery);
  return std::optional<IndexRecovery>(std::move(recovery));
}

std::vector<IndexRecovery> Store::index_recoveries() const {
  std::lock_guard lock(m_recoveries_mutex);
  return m_recoveries;
}

Status Store::recover_index(const std::shared_ptr<Index>& broken, const std::string& problem) {
  std::lock_guard lock(m_recover_mutex);
  if (index() != broken) return {};  // another thread of this process recovered it
  auto fresh = JC_TRY(open_index(broken->file_id(), problem));
  std::lock_guard swap(m_index_mutex);
  m_index = std::move(fresh);
  return {};
}

// Runs f on the index; when SQLite found the file corrupt, rebuilds it and retries once.
template <class F>
auto Store::with_index(F&& f) -> decltype(f(std::declval<Index&>())) {
  std::shared_ptr<Index> current = index();
  if (!current) return std::unexpected(needs_writable("cache index"));
  auto result = f(*current);
  if (!result && current->corrupt()) {
    log_warning(result.error().message);
    if (auto recovered = recover_index(current, result.error().message); !recovered)
      return std::unexpected(recovered.error());
    current = index();
    result = f(*current);
  }
  return result;
}

void Store::count(const Counters& delta) {
  std::lock_guard lock(m_stats_mutex);
  m_session += delta;
  m_unflushed += delta;
}

std::optional<SharedBytes> Store::memory_get(const CacheKey& key) {
  std::lock_guard lock(m_memory_mutex);
  const auto it = m_memory.find(key);
  if (it == m_memory.end()) return std::nullopt;
  ++it->second.pending_uses;
  ++it->second.pending_memory_hits;
  ++m_memory_hits;
  return it->second.bytes;
}

void Store::record_disk_use(const CacheKey& key, double compile_ms) {
  Counters delta = one(&Counters::disk_hits);
  delta.compile_ms_saved = compile_ms;
  count(delta);
  if (m_options.memory_max_bytes > 0) return;  // the memory entry carries the use
  std::lock_guard lock(m_stats_mutex);
  PendingUse& use = m_pending_usage[key];
  ++use.hits;
  use.last_used_ms = unix_now_ms();
}

void Store::memory_put(const CacheKey& key, SharedBytes bytes, double compile_ms, std::uint64_t uses) {
  const std::uint64_t size = bytes->size();
  std::vector<std::pair<CacheKey, PendingUse>> dropped_uses;
  {
    std::lock_guard lock(m_memory_mutex);
    if (size > m_options.memory_max_bytes) {
      dropped_uses.push_back({key, PendingUse{uses, unix_now_ms()}});
    } else {
      auto [it, inserted] = m_memory.try_emplace(key);
      if (inserted) {
        m_memory_order.push_back(key);
      } else {
        m_memory_bytes -= it->second.bytes->size();
      }
      it->second.bytes = std::move(bytes);
      it->second.compile_ms = compile_ms;
      it->second.pending_uses += uses;
      m_memory_bytes += size;
      while (m_memory_bytes > m_options.memory_max_bytes && !m_memory_order.empty()) {
        const CacheKey victim = m_memory_order.front();
        m_memory_order.pop_front();
        const auto v = m_memory.find(victim);
        if (v == m_memory.end()) continue;
        if (v->second.pending_uses > 0)
          dropped_uses.push_back({victim, PendingUse{v->second.pending_uses, unix_now_ms()}});
        if (v->second.pending_memory_hits > 0) {
          std::lock_guard stats(m_stats_mutex);
          m_unflushed.memory_hits += v->second.pending_memory_hits;
          const double saved = static_cast<double>(v->second.pending_memory_hits) * v->second.compile_ms;
          m_unflushed.compile_ms_saved += saved;
          m_session.compile_ms_saved += saved;
        }
        m_memory_bytes -= v->second.bytes->size();
        m_memory.erase(v);
      }
    }
  }
  if (dropped_uses.empty()) return;
  std::lock_guard lock(m_stats_mutex);
  for (const auto& [k, use] : dropped_uses) {
    PendingUse& pending = m_pending_usage[k];
    pending.hits += use.hits;
    pending.last_used_ms = std::max(pending.last_used_ms, use.last_used_ms);
  }
}

Status Store::flush() {
  const std::int64_t now = unix_now_ms();
  if (m_mode != StoreMode::read_write) {
    // Nothing is recorded where nothing may be written; the session counters stay.
    std::lock_guard lock(m_stats_mutex);
    m_pending_usage.clear();
    m_unflushed = Counters{};
    return {};
  }
  m_last_flush_ms = now;
  std::vector<Usage> usage;
  Counters delta;
  double memory_saved = 0;
  {
    std::lock_guard lock(m_memory_mutex);
    for (auto& [key, entry] : m_memory) {
      if (entry.pending_uses > 0) usage.push_back(Usage{key, entry.pending_uses, now});
      delta.memory_hits += entry.pending_memory_hits;
      memory_saved += static_cast<double>(entry.pending_memory_hits) * entry.compile_ms;
      entry.pending_uses = 0;
      entry.pending_memory_hits = 0;
    }
  }
  {
    std::lock_guard lock(m_stats_mutex);
    for (const auto& [key, use] : m_pending_usage) usage.push_back(Usage{key, use.hits, use.last_used_ms});
    m_pending_usage.clear();
    delta += m_unflushed;
    m_unflushed = Counters{};
    delta.compile_ms_saved += memory_saved;
    m_session.compile_ms_saved += memory_saved;
  }
  if (usage.empty() && delta == Counters{}) return {};
  return with_index([&](Index& index) { return index.record_usage(usage, delta); });
}

void Store::maybe_flush() {
  bool due = unix_now_ms() - m_last_flush_ms.load() > k_flush_interval_ms;
  if (!due) {
    std::lock_guard lock(m_stats_mutex);
    due = m_pending_usage.size() > k_flush_pending_limit;
  }
  if (!due) return;
  if (auto flushed = flush(); !flushed)
    log_warning("cache: could not record usage: " + flushed.error().to_string());
}

Counters Store::session_counters() const {
  Counters counters;
  double memory_saved = 0;
  std::uint64_t memory_hits = 0;
  {
    std::lock_guard lock(m_memory_mutex);
    memory_hits = m_memory_hits;
    for (const auto& [key, entry] : m_memory)
      memory_saved += static_cast<double>(entry.pending_memory_hits) * entry.compile_ms;
  }
  std::lock_guard lock(m_stats_mutex);
  counters = m_session;
  counters.memory_hits = memory_hits;
  counters.compile_ms_saved += memory_saved;
  return counters;
}

void Store::quarantine(const CacheKey& key, const BlobDigest& digest, const BlobFailure& failure) {
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
  if (!removed) log_warning("cache: could not remove the entries of a bad blob: " + removed.error().to_string());
  Counters delta;
  delta.quarantined = count_removed;
  count(delta);
}

Result<std::optional<Store::DiskHit>> Store::disk_get(const CacheKey& key) {
  if (m_mode == StoreMode::memory_only) return std::optional<DiskHit>();
  const auto row = JC_TRY(with_index([&](Index& index) { return index.lookup(key); }));
  if (!row) return std::optional<DiskHit>();
  auto bytes = m_blobs.read_verified(row->digest, row->size);
  if (!bytes) {
    quarantine(key, row->digest, bytes.error());
    return std::optional<DiskHit>();
  }
  return std::optional<DiskHit>(
      DiskHit{std::make_shared<const Bytes>(std::move(*bytes)), row->compile_ms});
}

Result<std::optional<Hit>> Store::get(const CacheKey& key, CountMiss count_miss) {
  if (auto bytes = memory_get(key)) return std::optional<Hit>(Hit{std::move(*bytes), Tier::memory});
  auto disk = disk_get(key);
  if (!disk) return std::unexpected(std::move(disk.error()));
  if (!*disk) {
    if (count_miss == CountMiss::yes) count(one(&Counters::misses));
    maybe_flush();
    return std::optional<Hit>();
  }
  record_disk_use(key, (*disk)->compile_ms);
  if (m_options.memory_max_bytes > 0) memory_put(key, (*disk)->bytes, (*disk)->compile_ms, 1);
  maybe_flush();
  return std::optional<Hit>(Hit{std::move((*disk)->bytes), Tier::disk});
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

void Store::remove_blobs(const std::vector<BlobDigest>& digests) {
  for (const BlobDigest& digest : digests)
    if (auto removed = m_blobs.remove(digest); !removed)
      log_warning("cache: " + removed.error().to_string());
}

Status Store::publish(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                      double compile_ms) {
  const BlobDigest digest = JC_TRY(m_blobs.publish(bytes, m_options.durability, m_options.publish_hook));
  NewEntry entry{key, digest, bytes.size(), facts.to_json(), compile_ms, unix_now_ms()};
  std::function<void()> before_commit;
  if (m_options.publish_hook) before_commit = [this] { m_options.publish_hook(PublishStep::row_written); };
  const IndexTotals totals = JC_TRY(with_index([&](Index& index) { return index.insert(entry, before_commit); }));
  if (totals.bytes > m_options.max_bytes) {
    // Evict to 90% of the cap, so that the next few publishes do not each evict again.
    JC_TRY(flush());
    const Removed removed = JC_TRY(with_index(
        [&](Index& index) { return index.evict(m_options.max_bytes / 10 * 9, key); }));
    remove_blobs(removed.unreferenced);
    Counters delta;
    delta.evicted = removed.entries.size();
    count(delta);
  }
  return {};
}

Status Store::put(const CacheKey& key, const Facts& facts, std::span<const std::byte> bytes,
                  double compile_ms) {
  JC_TRY(check_facts(key, facts));
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("storing " + key.to_hex()));
  JC_TRY(publish(key, facts, bytes, compile_ms));
  if (m_options.memory_max_bytes > 0)
    memory_put(key, std::make_shared<const Bytes>(bytes.begin(), bytes.end()), compile_ms, 0);
  maybe_flush();
  return {};
}

Result<Fetched> Store::get_or_create(const CacheKey& key, const Facts& facts, const Producer& producer,
                                     std::string_view label) {
  if (auto bytes = memory_get(key)) return Fetched{std::move(*bytes), Source::memory};

  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::lock_guard lock(m_flights_mutex);
    auto [it, inserted] = m_flights.try_emplace(key);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (!leader) {
    Result<Fetched> result = flight->future.get();
    if (result) {
      result->source = Source::coalesced;
      Counters delta = one(&Counters::coalesced);
      delta.compile_ms_saved = 0;
      count(delta);
    }
    return result;
  }

  Result<Fetched> result = make_error(ErrorCode::internal, "cache: producer did not finish");
  try {
    result = lead(key, facts, producer, label);
  } catch (const std::exception& e) {
    result = make_error(ErrorCode::internal, std::string("cache: producer threw: ") + e.what());
  } catch (...) {
    result = make_error(ErrorCode::internal, "cache: producer threw a non-standard exception");
  }
  // Publish to waiters before leaving the flight table: a caller arriving after the erase
  // finds the bytes in the memory tier (or on disk) instead.
  flight->promise.set_value(result);
  {
    std::lock_guard lock(m_flights_mutex);
    m_flights.erase(key);
  }
  maybe_flush();
  return result;
}

Result<Fetched> Store::lead(const CacheKey& key, const Facts& facts, const Producer& producer,
                            std::string_view label) {
  // The previous leader may have finished between our memory miss and our flight.
  if (auto bytes = memory_get(key)) return Fetched{std::move(*bytes), Source::memory};
  JC_TRY(check_facts(key, facts));

  auto found = [&](DiskHit& hit) {
    record_disk_use(key, hit.compile_ms);
    if (m_options.memory_max_bytes > 0) memory_put(key, hit.bytes, hit.compile_ms, 1);
    return Fetched{std::move(hit.bytes), Source::disk};
  };
  bool index_usable = m_mode == StoreMode::read_write;
  if (auto disk = disk_get(key); !disk) {
    log_warning("cache: " + disk.error().to_string() + "; producing without the cache");
    index_usable = false;
  } else if (*disk) {
    return found(**disk);
  }

  std::optional<KeyLock> lock;
  if (index_usable) {
    auto acquired = KeyLock::acquire(m_locks_fd.get(), m_root / "locks", key, m_options.lock_timeout, label);
    if (!acquired) {
      log_warning("cache: " + acquired.error().to_string() + "; producing " + key.to_hex() + " unlocked");
    } else if (!*acquired) {
      log_warning("cache: waited " + std::to_string(m_options.lock_timeout.count()) +
                  " ms for another process producing " + key.to_hex() + "; producing it here too");
    } else {
      lock = std::move(*acquired);
      // Whoever held the lock before us has most likely published the entry.
      if (auto disk = disk_get(key); disk && *disk) return found(**disk);
    }
  }

  count(one(&Counters::misses));
  Result<Produced> produced = producer();
  if (!produced) {
    count(one(&Counters::produce_failures));
    return std::unexpected(std::move(produced.error()));
  }
  Counters delta = one(&Counters::produces);
  delta.compile_ms_spent = produced->compile_ms;
  count(delta);
  const double compile_ms = produced->compile_ms;
  auto bytes = std::make_shared<const Bytes>(std::move(produced->bytes));
  if (index_usable) {
    if (auto stored = publish(key, facts, *bytes, compile_ms); !stored)
      log_warning("cache: could not store " + key.to_hex() + ": " + stored.error().to_string());
  } else if (m_mode == StoreMode::read_only) {
    std::call_once(m_unstored_warning, [&] {
      log_warning("cache: " + m_mode_reason +
                  ": compiled kernels are kept in memory only and compiled again by the next process");
    });
  }
  if (m_options.memory_max_bytes > 0) memory_put(key, bytes, compile_ms, 0);
  return Fetched{std::move(bytes), Source::produced};
}

Status Store::flush_and_fold() {
  JC_TRY(flush());
  if (m_mode != StoreMode::read_write) return {};
  return with_index([&](Index& index) { return index.fold_usage(); });
}

Result<std::vector<EntryInfo>> Store::list(const EntryFilter& filter) {
  JC_TRY(flush_and_fold());
  return with_index([&](Index& index) { return index.list(filter); });
}

Result<std::vector<EntryInfo>> Store::remove(const EntryFilter& filter, DryRun dry_run) {
  if (m_mode != StoreMode::read_write && dry_run == DryRun::no)
    return std::unexpected(needs_writable("removing entries"));
  JC_TRY(flush_and_fold());
  if (dry_run == DryRun::yes) return with_index([&](Index& index) { return index.list(filter); });
  Removed removed = JC_TRY(with_index([&](Index& index) { return index.remove(filter); }));
  remove_blobs(removed.unreferenced);
  {
    std::lock_guard lock(m_memory_mutex);
    for (const EntryInfo& info : removed.entries) {
      const auto it = m_memory.find(info.key);
      if (it == m_memory.end()) continue;
      m_memory_bytes -= it->second.bytes->size();
      m_memory.erase(it);
      std::erase(m_memory_order, info.key);
    }
  }
  return std::move(removed.entries);
}

Result<ClearReport> Store::clear_all() {
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
    std::lock_guard recovering(m_recover_mutex);
    {
      UniqueFd lock = JC_TRY(lock_index_file(index_path(), m_options.busy_timeout));
      report.index_quarantined = JC_TRY(move_index_aside(removed.error().message));
    }
    auto fresh = Index::open(
        index_path(), IndexOptions{m_options.busy_timeout, m_options.durability, IndexAccess::read_write});
    if (!fresh) return std::unexpected(fresh.error().error);
    std::lock_guard swap(m_index_mutex);
    m_index = std::move(*fresh);
  }
  {
    std::lock_guard lock(m_memory_mutex);
    m_memory.clear();
    m_memory_order.clear();
    m_memory_bytes = 0;
  }
  {
    std::lock_guard lock(m_stats_mutex);
    m_pending_usage.clear();
  }
  // The blobs of a discarded index (now or when this Store opened) are referenced by
  // nothing: clearing everything removes them too.
  if (!index_recoveries().empty())
    for (const StoredBlob& blob : JC_TRY(orphan_blobs()))
      if (auto removed = remove_orphan_blob(blob.digest, std::chrono::milliseconds(0)); removed && *removed)
        ++report.blob_files;
  return report;
}

Result<VerifyReport> Store::verify() {
  JC_TRY(flush());
  VerifyReport report;
  report.integrity_problems = JC_TRY(with_index([&](Index& index) { return index.integrity_check(); }));
  for (std::string& problem : JC_TRY(with_index([&](Index& index) { return index.check_values(); })))
    report.integrity_problems.push_back(std::move(problem));
  const std::vector<EntryInfo> entries = JC_TRY(with_index([&](Index& index) { return index.list({}); }));
  std::unordered_set<BlobDigest> quarantined;
  for (const EntryInfo& info : entries) {
    ++report.checked;
    if (quarantined.contains(info.digest)) {
      report.bad.push_back({info.key, info.digest, m_blobs.path_of(info.digest).string() + ": quarantined with another entry"});
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
      else if (facts->key() != info.key) problem = "field facts: hash to " + facts->key().to_hex() + ", not to the key";
      if (!problem.empty()) {
        report.bad.push_back({info.key, info.digest, index_path().string() + ": entry " + info.key.to_hex() + ", " + problem});
        auto removed = with_index([&](Index& index) { return index.remove_key(info.key); });
        if (removed) remove_blobs(removed->unreferenced);
        Counters delta;
        delta.quarantined = 1;
        count(delta);
      }
    }
  }
  report.orphan_blobs = JC_TRY(orphan_blobs()).size();
  JC_TRY(flush());
  // Last: a damaged page met during this run is recovered (and recorded) on the way.
  report.index_quarantined = index_recoveries();
  return report;
}

Result<GcReport> Store::gc(const GcOptions& options) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("gc"));
  JC_TRY(flush());
  GcReport report;
  const std::uint64_t cap = options.max_bytes.value_or(m_options.max_bytes);
  report.max_bytes = cap;
  const Removed removed = JC_TRY(with_index([&](Index& index) { return index.evict(cap, std::nullopt); }));
  remove_blobs(removed.unreferenced);
  report.evicted_entries = removed.entries.size();
  for (const EntryInfo& info : removed.entries) report.evicted_bytes += info.size;
  Counters delta;
  delta.evicted = report.evicted_entries;
  count(delta);

  const std::int64_t cutoff = unix_now_ms() - options.grace.count();
  for (const StoredBlob& blob : JC_TRY(orphan_blobs(options.grace)))
    if (auto removed = remove_orphan_blob(blob.digest, options.grace); removed && *removed) ++report.orphan_blobs;
  report.temp_files = JC_TRY(m_blobs.sweep_tmp(cutoff));
  report.quarantine_files = JC_TRY(m_blobs.sweep_quarantine(cutoff));
  report.lock_files = JC_TRY(KeyLock::sweep(m_locks_fd.get(), m_root / "locks", cutoff));
  JC_TRY(flush());
  report.bytes_after = JC_TRY(with_index([&](Index& index) { return index.totals(); })).bytes;
  return report;
}

Result<bool> Store::contains(const CacheKey& key) {
  if (m_mode == StoreMode::memory_only) return false;
  const auto row = JC_TRY(with_index([&](Index& index) { return index.lookup(key); }));
  return row.has_value();
}

Result<Stats> Store::stats() {
  JC_TRY(flush());
  Stats stats;
  const IndexTotals totals = JC_TRY(with_index([&](Index& index) { return index.totals(); }));
  stats.entries = totals.entries;
  stats.bytes = totals.bytes;
  stats.max_bytes = m_options.max_bytes;
  stats.totals = JC_TRY(with_index([&](Index& index) { return index.counters(); }));
  return stats;
}

Result<std::uint64_t> parse_size(std::string_view text) {
  const std::string original(text);
  auto invalid = [&] {
    return make_error(ErrorCode::invalid_input,
                      "size '" + original + "': expected a number with an optional unit K, M, G or T "
                                            "(powers of 1024), such as 500M or 2G");
  };
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  std::size_t digits = 0;
  bool dot = false;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) ||
                                   (text[digits] == '.' && !dot))) {
    dot = dot || text[digits] == '.';
    ++digits;
  }
  if (digits == 0) return invalid();
  const std::string number(text.substr(0, digits));
  std::string unit(text.substr(digits));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.resize(1);
  double scale;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else return invalid();
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) return invalid();
  const double bytes = std::floor(value * scale);
  if (bytes > 1.8e19) return invalid();
  return static_cast<std::uint64_t>(bytes);
}

std::string format_size(std::uint64_t bytes) {
  static constexpr const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(k_units)) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  if (unit == 0) std::snprintf(buffer, sizeof buffer, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buffer, sizeof buffer, "%.1f %s", value, k_units[unit]);
  return buffer;
}

Result<std::expected<SharedBytes, BlobFailure>> Store::read_blob(const BlobDigest& digest, std::uint64_t size) {
  using Inner = std::expected<SharedBytes, BlobFailure>;
  auto bytes = m_blobs.read_verified(digest, size);
  if (!bytes) return Inner(std::unexpected(bytes.error()));
  return Inner(std::make_shared<const Bytes>(std::move(*bytes)));
}

Result<std::vector<StoredBlob>> Store::orphan_blobs(std::chrono::milliseconds min_age) {
  if (m_mode == StoreMode::memory_only) return std::vector<StoredBlob>();
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

Result<bool> Store::remove_orphan_blob(const BlobDigest& digest, std::chrono::milliseconds min_age) {
  if (m_mode != StoreMode::read_write) return std::unexpected(needs_writable("removing blob " + digest.to_hex()));
  return m_blobs.remove_unless(digest, [&](std::int64_t mtime_ms) -> Result<bool> {
    if (mtime_ms >= unix_now_ms() - min_age.count()) return true;
    const auto referenced = JC_TRY(with_index([&](Index& index) { return index.referenced_digests(); }));
    return std::find(referenced.begin(), referenced.end(), digest) != referenced.end();
  });
}

}  // namespace jitcache::cache
