// Opening the index (cache/index.hpp): the index.lock flock, the read-write and read-only
// connections, the schema's migrations and checks, and the counter rows.
#include "cache/index.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <thread>

#include "cache/index_rows.hpp"
#include "cache/key_lock.hpp"

namespace jitcache::cache {

using namespace index_detail;

namespace {

using sql::Step;

constexpr std::int32_t k_application_id = 0x4A43434B;  // "JCCK": identifies the file as ours

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

}  // namespace jitcache::cache
