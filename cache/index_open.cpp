#include "cache/index.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <unordered_set>

#include "cache/key_lock.hpp"
#include "jitcache/log.hpp"

namespace jitcache::cache {
namespace {

using sql::Step;

constexpr std::int32_t k_application_id = 0x4A43434B;  // "JCCK": identifies the file as ours

// PRAGMA user_version holds a digest of the counter names (k_counter_fields). An index
// written by a jitcache that knew other counters holds another digest; the rows it lacks
// are added, as 0, when it is next opened for writing. So a new counter needs no migration,
// while a row that goes missing later (an operator's DELETE) is not silently made again:
// check_values reports it.
constexpr std::int32_t counter_layout() {
  std::uint32_t hash = 2166136261u;  // FNV-1a
  for (const CounterField& field : k_counter_fields) {
    for (const char c : field.name) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
    hash *= 16777619u;  // a separator: {"ab", "c"} differs from {"a", "bc"}
  }
  return static_cast<std::int32_t>((hash & 0x7FFFFFFF) | 1);  // never 0, a fresh file's value
}
constexpr std::int32_t k_counter_layout = counter_layout();

// k_migrations[v] turns a version-v database into version v + 1; version 0 is empty.
// Each runs inside the same BEGIN IMMEDIATE transaction as the schema_version update.
// The rows of the store's counters are not here: add_counter_rows() makes them.
constexpr std::array<const char*, k_index_schema_version> k_migrations = {
    R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (0);
CREATE TABLE entries (
  key        TEXT    NOT NULL PRIMARY KEY,
  key_schema INTEGER NOT NULL,
  digest     TEXT    NOT NULL,
  size       INTEGER NOT NULL,
  facts      TEXT    NOT NULL,
  created    INTEGER NOT NULL,
  last_used  INTEGER NOT NULL,
  hits       INTEGER NOT NULL DEFAULT 0,
  compile_ms REAL    NOT NULL DEFAULT 0
);
CREATE INDEX entries_last_used ON entries (last_used);
CREATE INDEX entries_digest ON entries (digest);
CREATE TABLE counters (name TEXT NOT NULL PRIMARY KEY, value NOT NULL);
INSERT INTO counters (name, value) VALUES ('entries', 0), ('bytes', 0);
CREATE TRIGGER entries_after_insert AFTER INSERT ON entries BEGIN
  UPDATE counters SET value = value + 1 WHERE name = 'entries';
  UPDATE counters SET value = value + NEW.size WHERE name = 'bytes';
END;
CREATE TRIGGER entries_after_delete AFTER DELETE ON entries BEGIN
  UPDATE counters SET value = value - 1 WHERE name = 'entries';
  UPDATE counters SET value = value - OLD.size WHERE name = 'bytes';
END;
CREATE TRIGGER entries_after_update_size AFTER UPDATE OF size ON entries BEGIN
  UPDATE counters SET value = value + NEW.size - OLD.size WHERE name = 'bytes';
END;
)sql",
    // 1 -> 2: lookups and usage stop touching the wide entries rows.
    R"sql(
-- Covers the hot lookup (key -> digest, size, compile_ms).
CREATE UNIQUE INDEX IF NOT EXISTS entries_lookup ON entries (key, digest, size, compile_ms);
-- Uses appended by running processes (an append costs one page, an in-place update of a
-- random row several); folded into entries.hits/last_used by fold_usage().
CREATE TABLE usage_log (key TEXT NOT NULL, hits INTEGER NOT NULL, last_used INTEGER NOT NULL);
)sql",
};

// Within the schema transaction, after the schema checks: a row (0) for each counter the
// index lacks, unless user_version says it has them all. A current index writes nothing.
Status add_counter_rows(sql::Database& db) {
  {
    auto layout = JC_TRY(db.prepare("PRAGMA user_version", "reading user_version"));
    JC_TRY(layout.step_row("reading user_version"));
    if (layout.int64(0) == k_counter_layout) return {};
  }
  auto add =
      JC_TRY(db.prepare("INSERT OR IGNORE INTO counters (name, value) VALUES (?1, ?2)", "adding counters"));
  for (const CounterField& field : k_counter_fields) {
    add.reset();
    switch (field.kind) {
      case CounterKind::count: JC_TRY(add.bind(field.name, std::int64_t{0})); break;
      case CounterKind::milliseconds: JC_TRY(add.bind(field.name, 0.0)); break;
    }
    JC_TRY(add.run("adding counter " + std::string(field.name)));
  }
  return db.exec("PRAGMA user_version=" + std::to_string(k_counter_layout), "recording the counter layout");
}

// A stored count as read back: junk below zero reads as 0, beyond k_max_count as k_max_count
// (a REAL too large for int64 is saturated by SQLite itself).
std::uint64_t column_count(const sql::Statement& stmt, int column) {
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(stmt.int64(column), 0, k_max_count));
}

double column_ms(const sql::Statement& stmt, int column) {
  const double value = stmt.real(column);
  return std::isfinite(value) && value > 0 ? std::min(value, static_cast<double>(k_max_count)) : 0.0;
}

std::int64_t saturated(std::uint64_t value) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(value, k_max_count));
}

constexpr const char* k_entry_columns =
    "key, key_schema, digest, size, facts, created, last_used, hits, compile_ms";

std::optional<EntryInfo> read_entry(const sql::Statement& stmt, const std::filesystem::path& db_path) {
  EntryInfo info;
  auto key = CacheKey::from_hex(stmt.text(0));
  auto digest = BlobDigest::from_hex(stmt.text(2));
  if (!key || !digest) {
    log_warning(db_path.string() + ": entries row with key '" + stmt.text(0) +
                "' has a malformed key or digest; ignored");
    return std::nullopt;
  }
  info.key = *key;
  info.key_schema = static_cast<std::uint32_t>(stmt.int64(1));
  info.digest = *digest;
  info.size = column_count(stmt, 3);
  info.facts_json = stmt.text(4);
  if (auto facts = Facts::from_json(info.facts_json)) info.facts = std::move(*facts);
  info.created_ms = stmt.int64(5);
  info.last_used_ms = stmt.int64(6);
  info.hits = column_count(stmt, 7);
  info.compile_ms = stmt.real(8);
  return info;
}

// The `entries` and `bytes` rows the triggers keep.
Result<IndexTotals> read_totals(sql::Database& db) {
  auto stmt = JC_TRY(
      db.prepare("SELECT name, value FROM counters WHERE name IN ('entries', 'bytes')", "reading totals"));
  IndexTotals totals;
  while (JC_TRY(stmt.step()) == Step::row)
    (stmt.text(0) == "entries" ? totals.entries : totals.bytes) = column_count(stmt, 1);
  return totals;
}

// A read-only `file:` URI for `path`; '%', '?' and '#' are escaped, as URIs require.
std::string read_only_uri(const std::filesystem::path& path, bool immutable) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  std::string uri = "file://";
  for (const char c : (ec ? path : absolute).string()) {
    if (c == '%' || c == '?' || c == '#') {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
      uri += escaped;
    } else {
      uri += c;
    }
  }
  return uri + (immutable ? "?mode=ro&immutable=1" : "?mode=ro");
}

constexpr const char* k_recovery_hint =
    "; the index is damaged: `jitcache clear --all` moves it to quarantine/ and starts a fresh one";

}  // namespace

Result<UniqueFd> lock_index_file(const std::filesystem::path& db_path, std::chrono::milliseconds timeout) {
  const std::filesystem::path lock_path = db_path.parent_path() / "index.lock";
  const int dir_raw = ::open(db_path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_raw < 0) return std::unexpected(errno_error(db_path.parent_path().string(), errno));
  const UniqueFd dir(dir_raw);
  // Never blocks on, nor locks, anything but a regular file (cache/key_lock.hpp).
  UniqueFd fd = JC_TRY(open_lock_file(dir.get(), "index.lock", lock_path));
  ::fchmod(fd.get(), 0600);  // the creation mode passed through the umask
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return std::unexpected(errno_error("flock " + lock_path.string(), errno));
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error(ErrorCode::database, lock_path.string() + ": held by another process for more than " +
                                                 std::to_string(timeout.count()) +
                                                 " ms (it is creating, migrating or rebuilding the index)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return fd;
}

std::expected<std::unique_ptr<Index>, Index::OpenFailure> Index::open(const std::filesystem::path& db_path,
                                                                      const IndexOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + options.busy_timeout;
  // Held until the schema is committed: one initialiser at a time, the others then find
  // a finished index. A read-only opener can neither create the lock file nor change
  // anything, so it takes none.
  UniqueFd lock;
  if (options.access == IndexAccess::read_write) {
    auto held = lock_index_file(db_path, options.busy_timeout);
    if (!held) {
      const bool unwritable = held.error().code == ErrorCode::io;
      return std::unexpected(OpenFailure{std::move(held.error()), false, false, unwritable});
    }
    lock = std::move(*held);
  }
  std::minstd_rand jitter(static_cast<std::uint32_t>(::getpid()) ^
                          static_cast<std::uint32_t>(started.time_since_epoch().count()));
  auto pause = std::chrono::milliseconds(2);
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<Index> index(new Index());
    index->m_path = db_path;
    index->m_access = options.access;
    auto connected = index->connect(options);
    if (connected) return index;
    OpenFailure failure = std::move(connected.error().failure);
    const int primary = connected.error().rc & 0xFF;
    failure.unwritable = primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_READONLY ||
                         primary == SQLITE_CANTOPEN || primary == SQLITE_PERM;
    const auto now = std::chrono::steady_clock::now();
    // SQLite answers BUSY without waiting where waiting could deadlock; start again from
    // nothing (a fresh connection holds no lock) after a pause that grows, with jitter so
    // that openers who collided do not collide again.
    if (!sql::is_busy(connected.error().rc) || now >= deadline) {
      if (sql::is_busy(connected.error().rc))
        failure.error.message +=
            " (tried " + std::to_string(attempt) + " times for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count()) +
            " ms)";
      return std::unexpected(std::move(failure));
    }
    index.reset();
    const auto sleep = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                                pause + std::chrono::milliseconds(jitter() % (pause.count() + 1)));
    std::this_thread::sleep_for(sleep);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

Index::ConnectFailure Index::sqlite_failure(Error error) const {
  const int code = m_db.last_error_code();
  return ConnectFailure{OpenFailure{std::move(error), sql::is_corruption(code)}, code};
}

std::expected<void, Index::ConnectFailure> Index::connect(const IndexOptions& options) {
  if (m_access == IndexAccess::read_only) return connect_read_only(options);
  auto fail = [&](Error error) { return std::unexpected(sqlite_failure(std::move(error))); };
  // NOMUTEX: the connection is only used under m_mutex. NOFOLLOW: the index is never a link.
  if (auto opened = m_db.open(
          m_path.string(),
          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, m_path);
      !opened)
    return fail(std::move(opened.error()));
  m_file_id = file_id_of(m_path);
  m_db.set_busy_timeout(static_cast<int>(options.busy_timeout.count()));

  // The first statement that reads the file is where garbage is noticed.
  if (auto wal = m_db.exec("PRAGMA journal_mode=WAL", "enabling WAL"); !wal)
    return fail(std::move(wal.error()));
  m_db.exec_best_effort(options.durability == Durability::full ? "PRAGMA synchronous=NORMAL"
                                                               : "PRAGMA synchronous=OFF");
  // A larger page cache and memory-mapped reads keep lookups flat as the index grows.
  m_db.exec_best_effort("PRAGMA cache_size=-16384");
  m_db.exec_best_effort("PRAGMA mmap_size=268435456");

  {
    // Rolled back on every early return, after the error has taken SQLite's message.
    auto txn =
        sql::Transaction::begin(m_db, sql::TransactionKind::immediate, "starting the schema transaction");
    if (!txn) return fail(std::move(txn.error()));
    int version = 0;
    JC_TRY(read_schema(version));
    if (version > k_index_schema_version)
      return std::unexpected(ConnectFailure{OpenFailure{
          Error{ErrorCode::database,
                m_path.string() + ": schema_version " + std::to_string(version) +
                    " is newer than this jitcache understands (" + std::to_string(k_index_schema_version) +
                    "); use a newer jitcache or another cache directory",
                {}}}});
    for (; version < k_index_schema_version; ++version) {
      auto migrated =
          m_db.exec(k_migrations[static_cast<std::size_t>(version)],
                    "migrating schema " + std::to_string(version) + " to " + std::to_string(version + 1));
      if (migrated)
        migrated = m_db.exec("UPDATE schema_version SET version = " + std::to_string(version + 1),
                             "updating schema_version");
      if (!migrated) return fail(std::move(migrated.error()));
    }
    JC_TRY(check_schema());
    if (auto added = add_counter_rows(m_db); !added) return fail(std::move(added.error()));
    // Written only when it differs: a transaction that changes nothing writes nothing, so a
    // current index still opens on a full disk.
    bool id_set = false;
    if (auto id = m_db.prepare("PRAGMA application_id", "reading application_id");
        id && id->step() == Step::row)
      id_set = id->int64(0) == k_application_id;
    if (!id_set) m_db.exec_best_effort("PRAGMA application_id=" + std::to_string(k_application_id));
    if (auto committed = txn->commit("committing the schema"); !committed)
      return fail(std::move(committed.error()));
  }
  if (auto prepared = prepare_lookup(); !prepared) return fail(std::move(prepared.error()));
  return {};
}

std::expected<void, Index::ConnectFailure> Index::connect_read_only(const IndexOptions& options) {
  auto fail = [&](Error error) { return std::unexpected(sqlite_failure(std::move(error))); };
  auto refuse = [&](const std::string& why) {
    return std::unexpected(
        ConnectFailure{OpenFailure{Error{ErrorCode::database, m_path.string() + ": " + why, {}}}});
  };
  std::error_code ec;
  if (!std::filesystem::exists(m_path, ec) && !ec)
    return std::unexpected(ConnectFailure{
        OpenFailure{Error{ErrorCode::not_found,
                          m_path.string() + ": no such file; an index opened read-only is never created",
                          {}}}});
  auto try_open = [&](bool immutable) {
    auto opened = m_db.open(
        read_only_uri(m_path, immutable),
        SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, m_path);
    if (!opened) return m_db.last_error_code();
    m_db.set_busy_timeout(static_cast<int>(options.busy_timeout.count()));
    // The first read is where a WAL file that cannot be read shows.
    if (!m_db.exec("SELECT count(*) FROM sqlite_master", "cannot open read-only"))
      return m_db.last_error_code();
    return SQLITE_OK;
  };
  int rc = try_open(false);
  const int primary = rc & 0xFF;
  if (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR ||
      primary == SQLITE_FULL) {
    // A WAL database whose -shm neither exists nor can be created (or, on a full disk,
    // cannot be sized). Without WAL content
    // there is nothing a -shm would coordinate: no writer runs (a writer keeps -wal and
    // -shm while it runs), so the file may be read as immutable.
    const std::filesystem::path wal = m_path.string() + "-wal";
    const auto wal_size = std::filesystem::file_size(wal, ec);
    if (!ec && wal_size > 0)
      return refuse(
          "index.db-wal holds changes not yet written to index.db, and they cannot be read without "
          "index.db-shm, which this process cannot create; checkpoint the index where it is writable "
          "before making it read-only (run any jitcache command there, or "
          "`sqlite3 index.db 'PRAGMA wal_checkpoint(TRUNCATE)'`)");
    rc = try_open(true);
  }
  if (rc != SQLITE_OK) return fail(m_db.error("cannot open read-only", rc));
  m_file_id = file_id_of(m_path);
  m_db.exec_best_effort("PRAGMA query_only=1");
  m_db.exec_best_effort("PRAGMA cache_size=-16384");
  m_db.exec_best_effort("PRAGMA mmap_size=268435456");

  {
    // One read transaction: the schema checks see one consistent snapshot.
    auto txn = sql::Transaction::begin(m_db, sql::TransactionKind::read, "starting a read transaction");
    if (!txn) return fail(std::move(txn.error()));
    int version = 0;
    JC_TRY(read_schema(version));
    if (version == 0)
      return refuse("holds no jitcache index yet; an index opened read-only is never initialised");
    if (version < k_index_schema_version)
      return refuse("schema_version " + std::to_string(version) + " is older than this jitcache's (" +
                    std::to_string(k_index_schema_version) +
                    ") and an index opened read-only cannot be migrated; run any jitcache command once where "
                    "the cache is writable to migrate it");
    if (version > k_index_schema_version)
      return refuse("schema_version " + std::to_string(version) +
                    " is newer than this jitcache understands (" + std::to_string(k_index_schema_version) +
                    "); use a newer jitcache or another cache directory");
    JC_TRY(check_schema());
  }  // a read transaction ends the same by ROLLBACK as by COMMIT
  if (auto prepared = prepare_lookup(); !prepared) return fail(std::move(prepared.error()));
  return {};
}

// Within an open transaction: the schema version (0 for an empty database).
std::expected<void, Index::ConnectFailure> Index::read_schema(int& version) {
  auto fail = [&](Error error) { return std::unexpected(sqlite_failure(std::move(error))); };
  version = 0;
  bool any_table = false, has_version = false;
  {
    auto tables = m_db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'", "reading the schema");
    if (!tables) return fail(std::move(tables.error()));
    for (;;) {
      auto step = tables->step();
      if (!step) return fail(std::move(step.error()));
      if (*step == Step::done) break;
      any_table = true;
      if (tables->text(0) == "schema_version") has_version = true;
    }
  }
  if (any_table && !has_version)
    return std::unexpected(ConnectFailure{
        OpenFailure{Error{ErrorCode::database,
                          m_path.string() + ": a SQLite database without a schema_version table is not a "
                                            "jitcache index; move it away or choose another cache directory",
                          {}}}});
  if (!has_version) return {};
  auto read = m_db.prepare("SELECT version FROM schema_version", "reading schema_version");
  if (!read) return fail(std::move(read.error()));
  int rows = 0;
  for (;;) {
    auto step = read->step();
    if (!step) return fail(std::move(step.error()));
    if (*step == Step::done) break;
    version = static_cast<int>(read->int64(0));
    ++rows;
  }
  if (rows != 1 || version < 0)
    // Only a damaged file has anything but one row: our writes are transactional.
    return std::unexpected(ConnectFailure{OpenFailure{
        Error{ErrorCode::database,
              m_path.string() + ": schema_version holds " + std::to_string(rows) + " rows, expected 1",
              {}},
        true}});
  return {};
}

// Every table and column the statements use, and the triggers that keep the totals.
std::expected<void, Index::ConnectFailure> Index::check_schema() {
  for (const char* sql : {"SELECT version FROM schema_version",
                          "SELECT key, key_schema, digest, size, facts, created, last_used, hits, compile_ms "
                          "FROM entries",
                          "SELECT name, value FROM counters", "SELECT key, hits, last_used FROM usage_log"}) {
    auto probe = m_db.prepare(sql, "reading the schema");
    if (probe) continue;
    if (sql::is_corruption(m_db.last_error_code()))
      return std::unexpected(sqlite_failure(std::move(probe.error())));
    return std::unexpected(ConnectFailure{
        OpenFailure{
            Error{ErrorCode::database, m_path.string() + ": " + m_db.last_message() + k_recovery_hint, {}},
            false, true},
        m_db.last_error_code()});
  }
  for (const char* trigger : {"entries_after_insert", "entries_after_delete", "entries_after_update_size"}) {
    auto found = [&]() -> Result<Step> {
      auto probe = JC_TRY(m_db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
                                       "reading the schema"));
      JC_TRY(probe.bind(trigger));
      return probe.step();
    }();
    if (!found) return std::unexpected(sqlite_failure(std::move(found.error())));
    if (*found == Step::row) continue;
    return std::unexpected(
        ConnectFailure{OpenFailure{Error{ErrorCode::database,
                                         m_path.string() + ": trigger " + trigger +
                                             " is missing, so the totals would drift" + k_recovery_hint,
                                         {}},
                                   false, true},
                       SQLITE_OK});
  }
  return {};
}

Status Index::prepare_lookup() {
  // Without statistics SQLite would pick the primary key index and then read the wide row.
  auto lookup =
      m_db.prepare("SELECT digest, size, compile_ms FROM entries INDEXED BY entries_lookup WHERE key = ?1",
                   "preparing the lookup", sql::Persistence::persistent);
  if (!lookup)  // an operator dropped the index: slower, still correct
    lookup = m_db.prepare("SELECT digest, size, compile_ms FROM entries WHERE key = ?1",
                          "preparing the lookup", sql::Persistence::persistent);
  if (!lookup) return std::unexpected(std::move(lookup.error()));
  m_lookup = std::move(*lookup);
  return {};
}

std::optional<std::uint64_t> Index::count_entries(const std::filesystem::path& db_path) {
  sql::Database db;
  if (!db.open(read_only_uri(db_path, false), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOFOLLOW,
               db_path))
    return std::nullopt;
  db.set_busy_timeout(1000);
  auto stmt = db.prepare("SELECT count(*) FROM entries", "counting entries");
  if (!stmt || !stmt->step_row("counting entries")) return std::nullopt;
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, stmt->int64(0)));
}

Status Index::writable(const std::string& what) const {
  if (m_access == IndexAccess::read_write) return {};
  return make_error(ErrorCode::database, m_path.string() + ": opened read-only; cannot " + what);
}

Index::~Index() = default;

bool Index::corrupt() const {
  std::lock_guard lock(m_mutex);
  return m_db.corrupt();
}

Result<std::optional<IndexRow>> Index::lookup(const CacheKey& key) {
  std::lock_guard lock(m_mutex);
  const std::string hex = key.to_hex();
  m_lookup.reset();
  auto step = [&]() -> Result<Step> {
    JC_TRY(m_lookup.bind(hex));
    return m_lookup.step("looking up " + hex);
  }();
  if (!step || *step == Step::done) {
    m_lookup.reset();  // a statement left mid-way would keep its read snapshot
    if (!step) return std::unexpected(std::move(step.error()));
    return std::optional<IndexRow>();
  }
  IndexRow row;
  auto digest = BlobDigest::from_hex(m_lookup.text(0));
  row.size = column_count(m_lookup, 1);
  row.compile_ms = m_lookup.real(2);
  m_lookup.reset();
  if (!digest)
    return make_error(ErrorCode::database,
                      m_path.string() + ": entry " + hex + ", field digest: " + digest.error().message);
  row.digest = *digest;
  return std::optional<IndexRow>(row);
}

Result<IndexTotals> Index::insert(const NewEntry& entry, const std::function<void()>& before_commit) {
  JC_TRY(writable("insert entry " + entry.key.to_hex()));
  // The index never holds a row that verify would call damaged, whoever hands it in.
  if (auto fields = check_incoming_fields({entry.size, entry.compile_ms, entry.facts_json}); !fields)
    return make_error(ErrorCode::invalid_input,
                      m_path.string() + ": entry " + entry.key.to_hex() + " not stored: " + fields.error().message);
  std::lock_guard lock(m_mutex);
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  auto stmt =
      JC_TRY(m_db.prepare("INSERT INTO entries (key, key_schema, digest, size, facts, created, last_used, "
                          "hits, compile_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, ?7) "
                          "ON CONFLICT (key) DO UPDATE SET key_schema = excluded.key_schema, "
                          "digest = excluded.digest, size = excluded.size, facts = excluded.facts, "
                          "last_used = excluded.last_used, compile_ms = excluded.compile_ms",
                          "preparing insert"));
  JC_TRY(stmt.bind(entry.key.to_hex(), static_cast<std::int64_t>(k_key_schema_version), entry.digest.to_hex(),
                   static_cast<std::int64_t>(entry.size), entry.facts_json, entry.now_ms, entry.compile_ms));
  JC_TRY(stmt.run("inserting entry " + entry.key.to_hex()));
  const IndexTotals totals = JC_TRY(read_totals(m_db));
  if (before_commit) before_commit();
  JC_TRY(txn.commit());
  return totals;
}

namespace {

// Appends " AND ..." conditions for a filter, with the values to bind in order.
void filter_sql(const EntryFilter& filter, std::string& sql, std::vector<std::string>& binds) {
  if (filter.key_prefix) {
    std::string prefix = *filter.key_prefix;
    for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    sql += " AND key GLOB ?";
    binds.push_back(prefix + "*");
  }
  for (const auto& [name, value] : filter.facts) {
    // Names are checked by is_valid_fact_name, so quoting them in the path is safe.
    sql += " AND (CASE WHEN json_valid(facts) THEN json_extract(facts, ?) END) = ?";
    binds.push_back("$.\"" + name + "\"");
    binds.push_back(value);
  }
}

Status check_filter(const EntryFilter& filter) {
  if (filter.key_prefix && (filter.key_prefix->empty() || filter.key_prefix->size() > k_hash_hex_chars ||
                            !detail::is_hex(*filter.key_prefix)))
    return make_error(ErrorCode::invalid_input,
                      "key prefix '" + *filter.key_prefix + "': expected 1 to 32 hex digits");
  for (const auto& [name, value] : filter.facts)
    if (!is_valid_fact_name(name))
      return make_error(ErrorCode::invalid_input, "filter: '" + name + "' is not a valid fact name");
  return {};
}

// The entries a statement selects (its ?N bound to `binds`); malformed rows are skipped.
Result<std::vector<EntryInfo>> select_entries(sql::Database& db, const std::string& sql,
                                              const std::vector<std::string>& binds,
                                              std::string_view preparing, std::string_view selecting) {
  auto stmt = JC_TRY(db.prepare(sql, preparing));
  for (std::size_t i = 0; i < binds.size(); ++i) JC_TRY(stmt.bind_at(static_cast<int>(i + 1), binds[i]));
  std::vector<EntryInfo> entries;
  while (JC_TRY(stmt.step(selecting)) == Step::row)
    if (auto info = read_entry(stmt, db.path())) entries.push_back(std::move(*info));
  return entries;
}

}  // namespace

Result<std::vector<EntryInfo>> Index::list(const EntryFilter& filter) {
  JC_TRY(check_filter(filter));
  std::lock_guard lock(m_mutex);
  std::string sql = std::string("SELECT ") + k_entry_columns + " FROM entries WHERE 1";
  std::vector<std::string> binds;
  filter_sql(filter, sql, binds);
  sql += " ORDER BY last_used DESC, key";
  return select_entries(m_db, sql, binds, "preparing list", "listing entries");
}

namespace {

// Deletes the selected rows inside an open transaction and finds the digests left
// without any entry.
Result<Removed> delete_selected(sql::Database& db, std::vector<EntryInfo> selected) {
  Removed removed;
  auto del = JC_TRY(db.prepare("DELETE FROM entries WHERE key = ?1", "preparing delete"));
  std::unordered_set<BlobDigest> digests;
  for (EntryInfo& info : selected) {
    del.reset();
    JC_TRY(del.bind(info.key.to_hex()));
    JC_TRY(del.run("deleting entry " + info.key.to_hex()));
    digests.insert(info.digest);
    removed.entries.push_back(std::move(info));
  }
  auto ref =
      JC_TRY(db.prepare("SELECT 1 FROM entries WHERE digest = ?1 LIMIT 1", "preparing reference check"));
  for (const BlobDigest& digest : digests) {
    ref.reset();
    JC_TRY(ref.bind(digest.to_hex()));
    if (JC_TRY(ref.step("checking blob references")) == Step::done) removed.unreferenced.push_back(digest);
  }
  return removed;
}

}  // namespace

Result<Removed> Index::remove_where(const std::string& where_sql, const std::vector<std::string>& binds) {
  JC_TRY(writable("remove entries"));
  std::lock_guard lock(m_mutex);
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  std::vector<EntryInfo> selected = JC_TRY(
      select_entries(m_db, std::string("SELECT ") + k_entry_columns + " FROM entries WHERE " + where_sql,
                     binds, "preparing remove", "selecting entries"));
  Removed removed = JC_TRY(delete_selected(m_db, std::move(selected)));
  JC_TRY(txn.commit());
  return removed;
}

Result<Removed> Index::remove(const EntryFilter& filter) {
  JC_TRY(check_filter(filter));
  std::string sql = "1";
  std::vector<std::string> binds;
  filter_sql(filter, sql, binds);
  return remove_where(sql, binds);
}

Result<Removed> Index::remove_key(const CacheKey& key) {
  EntryFilter filter;
  filter.key_prefix = key.to_hex();
  return remove(filter);
}

Result<Removed> Index::remove_digest(const BlobDigest& digest) {
  return remove_where("digest = ?1", {digest.to_hex()});
}

namespace {

// total(), not sum(): sum() fails with "integer overflow" on rows a writer never made
// (junk an operator or a bug put there), and a failing fold would fail every command.
// Hits saturate at k_max_count.
#define JC_MAX_COUNT_SQL "1000000000000000"
static_assert(k_max_count == 1'000'000'000'000'000, "JC_MAX_COUNT_SQL spells k_max_count");
constexpr const char* k_fold_sql =
    "UPDATE entries SET hits = CAST(max(0, min(entries.hits + folded.uses, " JC_MAX_COUNT_SQL
    ")) AS INTEGER), "
    "last_used = max(entries.last_used, folded.latest) "
    "FROM (SELECT key, total(max(hits, 0)) AS uses, max(last_used) AS latest FROM usage_log GROUP BY key) AS "
    "folded "
    "WHERE entries.key = folded.key; "
    "DELETE FROM usage_log;";
constexpr const char* k_folding = "folding usage_log into entries";

// Beyond this many pending rows a flush folds the log itself, so it never grows unbounded
// in a cache that no maintenance command ever touches.
constexpr std::int64_t k_fold_threshold_rows = 100'000;

}  // namespace

Result<Removed> Index::evict(std::uint64_t target_bytes, const std::optional<CacheKey>& keep) {
  JC_TRY(writable("evict entries"));
  std::lock_guard lock(m_mutex);
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  // Every process's recorded uses count, not only what entries.last_used says so far.
  JC_TRY(m_db.exec(k_fold_sql, k_folding));
  auto total =
      JC_TRY(m_db.prepare("SELECT value FROM counters WHERE name = 'bytes'", "reading the byte total"));
  JC_TRY(total.step_row("reading the byte total"));
  std::uint64_t bytes = column_count(total, 0);
  std::vector<EntryInfo> selected;
  if (bytes > target_bytes) {
    auto stmt = JC_TRY(m_db.prepare(
        std::string("SELECT ") + k_entry_columns + " FROM entries ORDER BY last_used ASC, created ASC",
        "preparing eviction"));
    const std::string spared = keep ? keep->to_hex() : std::string();
    while (bytes > target_bytes && JC_TRY(stmt.step("selecting LRU entries")) == Step::row) {
      if (stmt.text(0) == spared) continue;
      auto info = read_entry(stmt, m_path);
      if (!info) continue;
      bytes -= std::min(bytes, info->size);
      selected.push_back(std::move(*info));
    }
  }
  Removed removed = JC_TRY(delete_selected(m_db, std::move(selected)));
  JC_TRY(txn.commit());
  return removed;
}

Status Index::record_usage(std::span<const Usage> usage, const Counters& delta) {
  JC_TRY(writable("record usage"));
  std::lock_guard lock(m_mutex);
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  auto append = JC_TRY(m_db.prepare("INSERT INTO usage_log (key, hits, last_used) VALUES (?1, ?2, ?3)",
                                    "preparing usage update"));
  for (const Usage& u : usage) {
    append.reset();
    JC_TRY(append.bind(u.key.to_hex(), saturated(u.hits), u.last_used_ms));
    JC_TRY(append.run("recording usage of " + u.key.to_hex()));
  }
  // Counters saturate: an addition beyond int64 would turn the value into a REAL, and a
  // junk value must not make every later update fail.
  auto add_count =
      JC_TRY(m_db.prepare("UPDATE counters SET value = CAST(max(0, min(value + ?2, " JC_MAX_COUNT_SQL
                          ")) AS INTEGER) WHERE name = ?1",
                          "preparing counter update"));
  auto add_ms = JC_TRY(m_db.prepare("UPDATE counters SET value = max(0.0, min(value + ?2, " JC_MAX_COUNT_SQL
                                    ".0)) WHERE name = ?1",
                                    "preparing counter update"));
  for (const CounterField& field : k_counter_fields) {
    if (counter_value(field, delta) == 0) continue;
    sql::Statement* add = nullptr;
    switch (field.kind) {
      case CounterKind::count:
        add = &add_count;
        add->reset();
        JC_TRY(add->bind(field.name, saturated(delta.*field.count)));
        break;
      case CounterKind::milliseconds: {
        add = &add_ms;
        add->reset();
        const double value = delta.*field.milliseconds;
        JC_TRY(add->bind(field.name, std::isfinite(value) ? value : 0.0));
        break;
      }
    }
    JC_TRY(add->run("updating counter " + std::string(field.name)));
  }
  auto pending = JC_TRY(m_db.prepare("SELECT max(rowid) FROM usage_log", "sizing usage_log"));
  JC_TRY(pending.step_row("sizing usage_log"));
  if (pending.int64(0) > k_fold_threshold_rows) JC_TRY(m_db.exec(k_fold_sql, k_folding));
  JC_TRY(txn.commit());
  return {};
}

Status Index::fold_usage() {
  JC_TRY(writable("fold usage_log into entries"));
  std::lock_guard lock(m_mutex);
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  JC_TRY(m_db.exec(k_fold_sql, k_folding));
  return txn.commit();
}

Result<IndexTotals> Index::totals() {
  std::lock_guard lock(m_mutex);
  return read_totals(m_db);
}

Result<Counters> Index::counters() {
  std::lock_guard lock(m_mutex);
  auto stmt = JC_TRY(m_db.prepare("SELECT name, value FROM counters", "reading counters"));
  // A counter without a row (an index older than the counter, read-only) stays 0.
  Counters counters;
  while (JC_TRY(stmt.step()) == Step::row) {
    const std::string name = stmt.text(0);
    for (const CounterField& field : k_counter_fields) {
      if (name != field.name) continue;
      switch (field.kind) {
        case CounterKind::count: counters.*field.count = column_count(stmt, 1); break;
        case CounterKind::milliseconds: counters.*field.milliseconds = column_ms(stmt, 1); break;
      }
    }
  }
  return counters;
}

Result<std::vector<BlobDigest>> Index::referenced_digests() {
  std::lock_guard lock(m_mutex);
  auto stmt = JC_TRY(m_db.prepare("SELECT DISTINCT digest FROM entries", "reading digests"));
  std::vector<BlobDigest> digests;
  while (JC_TRY(stmt.step()) == Step::row)
    if (auto digest = BlobDigest::from_hex(stmt.text(0))) digests.push_back(*digest);
  return digests;
}

Result<std::vector<std::string>> Index::integrity_check() {
  std::lock_guard lock(m_mutex);
  auto stmt = JC_TRY(m_db.prepare("PRAGMA integrity_check", "PRAGMA integrity_check"));
  std::vector<std::string> problems;
  while (JC_TRY(stmt.step()) == Step::row) {
    std::string line = stmt.text(0);
    if (line != "ok") problems.push_back(m_path.string() + ": " + line);
  }
  return problems;
}

namespace {

struct ValueRule {
  std::string table;
  std::string field;
  std::string row_name;  // the column that names an offending row
  std::string broken;    // SQL condition a row breaking the rule meets (?1: the latest sane time)
  std::string rule;
};

#define JC_HEX_BROKEN(f) "typeof(" f ") != 'text' OR length(" f ") != 32 OR " f " GLOB '*[^0-9a-f]*'"
#define JC_COUNT_BROKEN(f) "typeof(" f ") != 'integer' OR " f " < 0 OR " f " > " JC_MAX_COUNT_SQL
#define JC_TIME_BROKEN(f) "typeof(" f ") != 'integer' OR " f " < 0 OR " f " > ?1"

constexpr const char* k_hex_rule = "32 lowercase hex digits";
constexpr const char* k_count_rule = "an integer from 0 to 10^15";
constexpr const char* k_time_rule = "Unix milliseconds, not negative and not in the future";

const std::vector<ValueRule>& value_rules() {
  static const std::vector<ValueRule> rules = [] {
    // The counters in milliseconds, as an SQL list: 'compile_ms_spent', ...
    std::string ms_names;
    for (const CounterField& field : k_counter_fields)
      if (field.kind == CounterKind::milliseconds)
        ms_names += (ms_names.empty() ? "'" : ", '") + std::string(field.name) + "'";
    return std::vector<ValueRule>{
        {"entries", "key", "key", JC_HEX_BROKEN("key"), k_hex_rule},
        {"entries", "digest", "key", JC_HEX_BROKEN("digest"), k_hex_rule},
        {"entries", "key_schema", "key", "typeof(key_schema) != 'integer' OR key_schema < 0",
         "a non-negative integer"},
        // The fields an entry brings from another tier or a file: the predicates that
        // check it on its way in (cache/entry.hpp), called from SQL.
        {"entries", "size", "key", "NOT jc_entry_size_ok(size)", std::string(k_entry_size_rule)},
        {"entries", "facts", "key", "NOT jc_facts_ok(facts)", std::string(k_facts_json_rule)},
        {"entries", "created", "key", JC_TIME_BROKEN("created"), k_time_rule},
        {"entries", "last_used", "key", JC_TIME_BROKEN("last_used"), k_time_rule},
        {"entries", "hits", "key", JC_COUNT_BROKEN("hits"), k_count_rule},
        {"entries", "compile_ms", "key", "NOT jc_compile_ms_ok(compile_ms)", std::string(k_compile_ms_rule)},
        {"usage_log", "key", "key", JC_HEX_BROKEN("key"), k_hex_rule},
        {"usage_log", "hits", "key", JC_COUNT_BROKEN("hits"), k_count_rule},
        {"usage_log", "last_used", "key", JC_TIME_BROKEN("last_used"), k_time_rule},
        {"counters", "value", "name", "name NOT IN (" + ms_names + ") AND (" JC_COUNT_BROKEN("value") ")",
         k_count_rule},
        {"counters", "value", "name",
         "name IN (" + ms_names +
             ") AND (typeof(value) NOT IN ('integer', 'real') OR value < 0 OR value > " JC_MAX_COUNT_SQL ")",
         "milliseconds from 0 to 10^15"},
    };
  }();
  return rules;
}

#undef JC_HEX_BROKEN
#undef JC_COUNT_BROKEN
#undef JC_TIME_BROKEN

// The SQL faces of cache/entry.hpp's predicates: a stored value of the wrong type breaks
// the rule too (SQLite keeps whatever type a writer gave).
void sql_entry_size_ok(sqlite3_context* context, int, sqlite3_value** argv) {
  const bool ok = sqlite3_value_type(argv[0]) == SQLITE_INTEGER && sqlite3_value_int64(argv[0]) >= 0 &&
                  entry_size_in_range(static_cast<std::uint64_t>(sqlite3_value_int64(argv[0])));
  sqlite3_result_int(context, ok ? 1 : 0);
}

void sql_compile_ms_ok(sqlite3_context* context, int, sqlite3_value** argv) {
  const int type = sqlite3_value_type(argv[0]);
  const bool ok = (type == SQLITE_INTEGER || type == SQLITE_FLOAT) && compile_ms_in_range(sqlite3_value_double(argv[0]));
  sqlite3_result_int(context, ok ? 1 : 0);
}

void sql_facts_ok(sqlite3_context* context, int, sqlite3_value** argv) {
  bool ok = false;
  if (sqlite3_value_type(argv[0]) == SQLITE_TEXT) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_value_text(argv[0]));
    ok = text != nullptr &&
         facts_json_in_rule(std::string_view(text, static_cast<std::size_t>(sqlite3_value_bytes(argv[0]))));
  }
  sqlite3_result_int(context, ok ? 1 : 0);
}

// Clock skew between the writers of one local cache is small; a day is generous.
constexpr std::int64_t k_future_slack_ms = 24 * 3600 * 1000;

}  // namespace

Result<std::vector<std::string>> Index::check_values() {
  std::lock_guard lock(m_mutex);
  std::vector<std::string> problems;
  const std::string file = m_path.string() + ": ";
  const std::int64_t latest = unix_now_ms() + k_future_slack_ms;
  JC_TRY(m_db.define_function("jc_entry_size_ok", 1, sql_entry_size_ok, "defining jc_entry_size_ok"));
  JC_TRY(m_db.define_function("jc_compile_ms_ok", 1, sql_compile_ms_ok, "defining jc_compile_ms_ok"));
  JC_TRY(m_db.define_function("jc_facts_ok", 1, sql_facts_ok, "defining jc_facts_ok"));
  for (const ValueRule& r : value_rules()) {
    const std::string where = " FROM " + r.table + " WHERE " + r.broken;
    const std::string checking = "checking " + r.table + "." + r.field;
    auto stmt = JC_TRY(m_db.prepare("SELECT count(*), (SELECT quote(" + r.row_name + ") || ' = ' || quote(" +
                                        r.field + ")" + where + " LIMIT 1)" + where,
                                    checking));
    if (stmt.parameter_count() > 0) JC_TRY(stmt.bind(latest));
    JC_TRY(stmt.step_row(checking));
    const std::int64_t count = stmt.int64(0);
    if (count == 0) continue;
    problems.push_back(file + r.table + "." + r.field + ": " + std::to_string(count) +
                       (count == 1 ? " row breaks" : " rows break") + " the rule (" + r.rule +
                       "); first: " + r.row_name + " " + stmt.text(1));
  }
  // Every counter present, and the totals the triggers keep equal to the table. An index
  // older than some counter (read-only, so never given its row) reads it as 0.
  std::vector<std::string_view> names = {"entries", "bytes"};
  {
    auto layout = JC_TRY(m_db.prepare("PRAGMA user_version", "checking counters"));
    JC_TRY(layout.step_row("checking counters"));
    if (layout.int64(0) == k_counter_layout)
      for (const CounterField& field : k_counter_fields) names.push_back(field.name);
  }
  auto present = JC_TRY(m_db.prepare("SELECT 1 FROM counters WHERE name = ?1", "checking counters"));
  for (const std::string_view name : names) {
    present.reset();
    JC_TRY(present.bind(name));
    if (JC_TRY(present.step()) == Step::done)
      problems.push_back(file + "counters: row '" + std::string(name) + "' is missing");
  }
  auto totals = JC_TRY(m_db.prepare(
      "SELECT (SELECT quote(value) FROM counters WHERE name = 'entries'), (SELECT count(*) FROM entries), "
      "(SELECT quote(value) FROM counters WHERE name = 'bytes'), "
      "(SELECT CAST(total(size) AS INTEGER) FROM entries)",
      "checking the totals"));
  JC_TRY(totals.step_row("checking the totals"));
  const std::string rows = std::to_string(totals.int64(1));
  const std::string bytes = std::to_string(totals.int64(3));
  if (!totals.is_null(0) && totals.text(0) != rows)
    problems.push_back(file + "counters.entries: " + totals.text(0) + ", but table entries holds " + rows +
                       " rows");
  if (!totals.is_null(2) && totals.text(2) != bytes)
    problems.push_back(file + "counters.bytes: " + totals.text(2) + ", but the entries' sizes add up to " +
                       bytes);
  return problems;
}

}  // namespace jitcache::cache
