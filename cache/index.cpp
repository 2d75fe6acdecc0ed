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

constexpr std::int32_t k_application_id = 0x4A43434B;  // "JCCK": identifies the file as ours

struct IntCounter {
  const char* name;
  std::uint64_t Counters::*field;
};
struct RealCounter {
  const char* name;
  double Counters::*field;
};
constexpr std::array k_int_counters = {
    IntCounter{"memory_hits", &Counters::memory_hits},
    IntCounter{"disk_hits", &Counters::disk_hits},
    IntCounter{"coalesced", &Counters::coalesced},
    IntCounter{"misses", &Counters::misses},
    IntCounter{"produces", &Counters::produces},
    IntCounter{"produce_failures", &Counters::produce_failures},
    IntCounter{"quarantined", &Counters::quarantined},
    IntCounter{"evicted", &Counters::evicted},
};
constexpr std::array k_real_counters = {
    RealCounter{"compile_ms_spent", &Counters::compile_ms_spent},
    RealCounter{"compile_ms_saved", &Counters::compile_ms_saved},
};

// k_migrations[v] turns a version-v database into version v + 1; version 0 is empty.
// Each runs inside the same BEGIN IMMEDIATE transaction as the schema_version update.
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
INSERT INTO counters (name, value) VALUES
  ('entries', 0), ('bytes', 0), ('memory_hits', 0), ('disk_hits', 0), ('coalesced', 0),
  ('misses', 0), ('produces', 0), ('produce_failures', 0), ('quarantined', 0),
  ('evicted', 0), ('compile_ms_spent', 0.0), ('compile_ms_saved', 0.0);
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

bool is_corruption(int rc) {
  const int primary = rc & 0xFF;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() {
    if (m_stmt != nullptr) sqlite3_finalize(m_stmt);
  }
  int prepare(sqlite3* db, const std::string& sql) {
    return sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &m_stmt, nullptr);
  }
  sqlite3_stmt* get() const { return m_stmt; }

 private:
  sqlite3_stmt* m_stmt = nullptr;
};

void bind_text(sqlite3_stmt* stmt, int index, const std::string& text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

std::string column_text(sqlite3_stmt* stmt, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, column));
  return text == nullptr ? std::string() : std::string(text, sqlite3_column_bytes(stmt, column));
}

// A stored count as read back: junk below zero reads as 0, beyond k_max_count as k_max_count
// (a REAL too large for int64 is saturated by SQLite itself).
std::uint64_t column_count(sqlite3_stmt* stmt, int column) {
  return static_cast<std::uint64_t>(
      std::clamp<sqlite3_int64>(sqlite3_column_int64(stmt, column), 0, k_max_count));
}

double column_ms(sqlite3_stmt* stmt, int column) {
  const double value = sqlite3_column_double(stmt, column);
  return std::isfinite(value) && value > 0 ? std::min(value, static_cast<double>(k_max_count)) : 0.0;
}

sqlite3_int64 saturated(std::uint64_t value) {
  return static_cast<sqlite3_int64>(std::min<std::uint64_t>(value, k_max_count));
}

constexpr const char* k_entry_columns =
    "key, key_schema, digest, size, facts, created, last_used, hits, compile_ms";

std::optional<EntryInfo> read_entry(sqlite3_stmt* stmt, const std::filesystem::path& db_path) {
  EntryInfo info;
  auto key = CacheKey::from_hex(column_text(stmt, 0));
  auto digest = BlobDigest::from_hex(column_text(stmt, 2));
  if (!key || !digest) {
    log_warning(db_path.string() + ": entries row with key '" + column_text(stmt, 0) +
                "' has a malformed key or digest; ignored");
    return std::nullopt;
  }
  info.key = *key;
  info.key_schema = static_cast<std::uint32_t>(sqlite3_column_int64(stmt, 1));
  info.digest = *digest;
  info.size = column_count(stmt, 3);
  info.facts_json = column_text(stmt, 4);
  if (auto facts = Facts::from_json(info.facts_json)) info.facts = std::move(*facts);
  info.created_ms = sqlite3_column_int64(stmt, 5);
  info.last_used_ms = sqlite3_column_int64(stmt, 6);
  info.hits = column_count(stmt, 7);
  info.compile_ms = sqlite3_column_double(stmt, 8);
  return info;
}

}  // namespace

Error Index::db_error(const std::string& what, int rc) {
  if (is_corruption(rc)) m_corrupt = true;
  const char* message = m_db != nullptr ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
  return Error{ErrorCode::database, m_path.string() + ": " + what + ": " + message, {}};
}

namespace {

bool is_busy(int rc) {
  const int primary = rc & 0xFF;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
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
    if (!is_busy(connected.error().rc) || now >= deadline) {
      if (is_busy(connected.error().rc))
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

std::expected<void, Index::ConnectFailure> Index::connect(const IndexOptions& options) {
  if (m_access == IndexAccess::read_only) return connect_read_only(options);
  auto fail = [&](const std::string& what, int rc) {
    return std::unexpected(ConnectFailure{OpenFailure{db_error(what, rc), is_corruption(rc)}, rc});
  };
  // NOMUTEX: the connection is only used under m_mutex. NOFOLLOW: the index is never a link.
  int rc = sqlite3_open_v2(
      m_path.c_str(), &m_db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  if (rc != SQLITE_OK) return fail("cannot open", rc);
  m_file_id = file_id_of(m_path);
  sqlite3_extended_result_codes(m_db, 1);
  sqlite3_busy_timeout(m_db, static_cast<int>(options.busy_timeout.count()));

  auto exec = [&](const std::string& sql) {
    return sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr);
  };
  // The first statement that reads the file is where garbage is noticed.
  if ((rc = exec("PRAGMA journal_mode=WAL")) != SQLITE_OK) return fail("enabling WAL", rc);
  exec(options.durability == Durability::full ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=OFF");
  // A larger page cache and memory-mapped reads keep lookups flat as the index grows.
  exec("PRAGMA cache_size=-16384");
  exec("PRAGMA mmap_size=268435456");

  if ((rc = exec("BEGIN IMMEDIATE")) != SQLITE_OK) return fail("starting the schema transaction", rc);
  auto rollback_and_fail = [&](const std::string& what, int code) {
    auto failure = fail(what, code);  // before ROLLBACK replaces SQLite's message
    exec("ROLLBACK");
    return failure;
  };
  auto rollback = [&](std::expected<void, ConnectFailure> failed) {
    exec("ROLLBACK");
    return failed;
  };
  int version = 0;
  if (auto read = read_schema(version); !read) return rollback(std::move(read));
  if (version > k_index_schema_version)
    return rollback(std::unexpected(ConnectFailure{OpenFailure{
        Error{ErrorCode::database,
              m_path.string() + ": schema_version " + std::to_string(version) +
                  " is newer than this jitcache understands (" + std::to_string(k_index_schema_version) +
                  "); use a newer jitcache or another cache directory",
              {}}}}));
  for (; version < k_index_schema_version; ++version) {
    if ((rc = exec(k_migrations[static_cast<std::size_t>(version)])) != SQLITE_OK)
      return rollback_and_fail(
          "migrating schema " + std::to_string(version) + " to " + std::to_string(version + 1), rc);
    if ((rc = exec("UPDATE schema_version SET version = " + std::to_string(version + 1))) != SQLITE_OK)
      return rollback_and_fail("updating schema_version", rc);
  }
  if (auto checked = check_schema(); !checked) return rollback(std::move(checked));
  // Written only when it differs: a transaction that changes nothing writes nothing, so a
  // current index still opens on a full disk.
  bool id_set = false;
  {
    Statement id;
    if (id.prepare(m_db, "PRAGMA application_id") == SQLITE_OK && sqlite3_step(id.get()) == SQLITE_ROW)
      id_set = sqlite3_column_int(id.get(), 0) == k_application_id;
  }
  if (!id_set) exec("PRAGMA application_id=" + std::to_string(k_application_id));
  if ((rc = exec("COMMIT")) != SQLITE_OK) return rollback_and_fail("committing the schema", rc);
  if ((rc = prepare_lookup()) != SQLITE_OK) return fail("preparing the lookup", rc);
  return {};
}

std::expected<void, Index::ConnectFailure> Index::connect_read_only(const IndexOptions& options) {
  auto fail = [&](const std::string& what, int rc) {
    return std::unexpected(ConnectFailure{OpenFailure{db_error(what, rc), is_corruption(rc)}, rc});
  };
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
  auto exec = [&](const std::string& sql) {
    return sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr);
  };
  auto try_open = [&](bool immutable) {
    if (m_db != nullptr) sqlite3_close_v2(m_db);
    m_db = nullptr;
    const std::string uri = read_only_uri(m_path, immutable);
    int rc = sqlite3_open_v2(
        uri.c_str(), &m_db,
        SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
    if (rc != SQLITE_OK) return rc;
    sqlite3_extended_result_codes(m_db, 1);
    sqlite3_busy_timeout(m_db, static_cast<int>(options.busy_timeout.count()));
    // The first read is where a WAL file that cannot be read shows.
    return exec("SELECT count(*) FROM sqlite_master");
  };
  int rc = try_open(false);
  const int primary = rc & 0xFF;
  if (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR || primary == SQLITE_FULL) {
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
  if (rc != SQLITE_OK) return fail("cannot open read-only", rc);
  m_file_id = file_id_of(m_path);
  exec("PRAGMA query_only=1");
  exec("PRAGMA cache_size=-16384");
  exec("PRAGMA mmap_size=268435456");

  // One read transaction: the schema checks see one consistent snapshot.
  if ((rc = exec("BEGIN")) != SQLITE_OK) return fail("starting a read transaction", rc);
  int version = 0;
  auto read = read_schema(version);
  if (read && version == 0)
    read = refuse("holds no jitcache index yet; an index opened read-only is never initialised");
  else if (read && version < k_index_schema_version)
    read = refuse(
        "schema_version " + std::to_string(version) + " is older than this jitcache's (" +
        std::to_string(k_index_schema_version) +
        ") and an index opened read-only cannot be migrated; run any jitcache command once where the cache "
        "is writable to migrate it");
  else if (read && version > k_index_schema_version)
    read =
        refuse("schema_version " + std::to_string(version) + " is newer than this jitcache understands (" +
               std::to_string(k_index_schema_version) + "); use a newer jitcache or another cache directory");
  if (read) read = check_schema();
  exec("COMMIT");
  if (!read) return read;
  if ((rc = prepare_lookup()) != SQLITE_OK) return fail("preparing the lookup", rc);
  return {};
}

// Within an open transaction: the schema version (0 for an empty database).
std::expected<void, Index::ConnectFailure> Index::read_schema(int& version) {
  auto fail = [&](const std::string& what, int rc) {
    return std::unexpected(ConnectFailure{OpenFailure{db_error(what, rc), is_corruption(rc)}, rc});
  };
  version = 0;
  Statement tables;
  int rc = tables.prepare(m_db, "SELECT name FROM sqlite_master WHERE type = 'table'");
  if (rc != SQLITE_OK) return fail("reading the schema", rc);
  bool any_table = false, has_version = false;
  while ((rc = sqlite3_step(tables.get())) == SQLITE_ROW) {
    any_table = true;
    if (column_text(tables.get(), 0) == "schema_version") has_version = true;
  }
  if (rc != SQLITE_DONE) return fail("reading the schema", rc);
  if (any_table && !has_version)
    return std::unexpected(ConnectFailure{
        OpenFailure{Error{ErrorCode::database,
                          m_path.string() + ": a SQLite database without a schema_version table is not a "
                                            "jitcache index; move it away or choose another cache directory",
                          {}}}});
  if (!has_version) return {};
  Statement read;
  if ((rc = read.prepare(m_db, "SELECT version FROM schema_version")) != SQLITE_OK)
    return fail("reading schema_version", rc);
  int rows = 0;
  while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
    version = sqlite3_column_int(read.get(), 0);
    ++rows;
  }
  if (rc != SQLITE_DONE) return fail("reading schema_version", rc);
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
    Statement probe;
    const int rc = probe.prepare(m_db, sql);
    if (rc == SQLITE_OK) continue;
    if (is_corruption(rc))
      return std::unexpected(ConnectFailure{OpenFailure{db_error("reading the schema", rc), true}, rc});
    return std::unexpected(ConnectFailure{
        OpenFailure{
            Error{ErrorCode::database, m_path.string() + ": " + sqlite3_errmsg(m_db) + k_recovery_hint, {}},
            false, true},
        rc});
  }
  for (const char* trigger : {"entries_after_insert", "entries_after_delete", "entries_after_update_size"}) {
    Statement probe;
    int rc = probe.prepare(m_db, "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?1");
    if (rc == SQLITE_OK) {
      sqlite3_bind_text(probe.get(), 1, trigger, -1, SQLITE_STATIC);
      rc = sqlite3_step(probe.get());
    }
    if (rc == SQLITE_ROW) continue;
    if (rc != SQLITE_DONE)
      return std::unexpected(
          ConnectFailure{OpenFailure{db_error("reading the schema", rc), is_corruption(rc)}, rc});
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

int Index::prepare_lookup() {
  // Without statistics SQLite would pick the primary key index and then read the wide row.
  int rc = sqlite3_prepare_v3(
      m_db, "SELECT digest, size, compile_ms FROM entries INDEXED BY entries_lookup WHERE key = ?1", -1,
      SQLITE_PREPARE_PERSISTENT, &m_lookup, nullptr);
  if (rc != SQLITE_OK)  // an operator dropped the index: slower, still correct
    rc = sqlite3_prepare_v3(m_db, "SELECT digest, size, compile_ms FROM entries WHERE key = ?1", -1,
                            SQLITE_PREPARE_PERSISTENT, &m_lookup, nullptr);
  return rc;
}

std::optional<std::uint64_t> Index::count_entries(const std::filesystem::path& db_path) {
  sqlite3* db = nullptr;
  const std::string uri = read_only_uri(db_path, false);
  std::optional<std::uint64_t> count;
  if (sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOFOLLOW,
                      nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM entries", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
      count = static_cast<std::uint64_t>(std::max<sqlite3_int64>(0, sqlite3_column_int64(stmt, 0)));
    sqlite3_finalize(stmt);
  }
  sqlite3_close_v2(db);
  return count;
}

Status Index::writable(const std::string& what) const {
  if (m_access == IndexAccess::read_write) return {};
  return make_error(ErrorCode::database, m_path.string() + ": opened read-only; cannot " + what);
}

Index::~Index() {
  if (m_lookup != nullptr) sqlite3_finalize(m_lookup);
  if (m_db != nullptr) sqlite3_close_v2(m_db);
}

bool Index::corrupt() const {
  std::lock_guard lock(m_mutex);
  return m_corrupt;
}

namespace {

// One BEGIN IMMEDIATE ... COMMIT; rolls back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : m_db(db) {}
  ~Transaction() {
    if (m_open) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  int begin() {
    const int rc = sqlite3_exec(m_db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    m_open = rc == SQLITE_OK;
    return rc;
  }
  int commit() {
    const int rc = sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) m_open = false;
    return rc;
  }

 private:
  sqlite3* m_db;
  bool m_open = false;
};

}  // namespace

Result<std::optional<IndexRow>> Index::lookup(const CacheKey& key) {
  std::lock_guard lock(m_mutex);
  const std::string hex = key.to_hex();
  sqlite3_reset(m_lookup);
  sqlite3_bind_text(m_lookup, 1, hex.data(), static_cast<int>(hex.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(m_lookup);
  if (rc == SQLITE_DONE) {
    sqlite3_reset(m_lookup);
    return std::optional<IndexRow>();
  }
  if (rc != SQLITE_ROW) {
    auto error = db_error("looking up " + hex, rc);
    sqlite3_reset(m_lookup);
    return std::unexpected(std::move(error));
  }
  IndexRow row;
  auto digest = BlobDigest::from_hex(column_text(m_lookup, 0));
  row.size = column_count(m_lookup, 1);
  row.compile_ms = sqlite3_column_double(m_lookup, 2);
  sqlite3_reset(m_lookup);
  if (!digest)
    return make_error(ErrorCode::database,
                      m_path.string() + ": entry " + hex + ", field digest: " + digest.error().message);
  row.digest = *digest;
  return std::optional<IndexRow>(row);
}

Result<IndexTotals> Index::insert(const NewEntry& entry, const std::function<void()>& before_commit) {
  JC_TRY(writable("insert entry " + entry.key.to_hex()));
  std::lock_guard lock(m_mutex);
  Transaction txn(m_db);
  int rc = txn.begin();
  if (rc != SQLITE_OK) return std::unexpected(db_error("BEGIN IMMEDIATE", rc));
  Statement stmt;
  rc = stmt.prepare(m_db,
                    "INSERT INTO entries (key, key_schema, digest, size, facts, created, last_used, "
                    "hits, compile_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, ?7) "
                    "ON CONFLICT (key) DO UPDATE SET key_schema = excluded.key_schema, "
                    "digest = excluded.digest, size = excluded.size, facts = excluded.facts, "
                    "last_used = excluded.last_used, compile_ms = excluded.compile_ms");
  if (rc != SQLITE_OK) return std::unexpected(db_error("preparing insert", rc));
  bind_text(stmt.get(), 1, entry.key.to_hex());
  sqlite3_bind_int64(stmt.get(), 2, k_key_schema_version);
  bind_text(stmt.get(), 3, entry.digest.to_hex());
  sqlite3_bind_int64(stmt.get(), 4, static_cast<sqlite3_int64>(entry.size));
  bind_text(stmt.get(), 5, entry.facts_json);
  sqlite3_bind_int64(stmt.get(), 6, entry.now_ms);
  sqlite3_bind_double(stmt.get(), 7, entry.compile_ms);
  if ((rc = sqlite3_step(stmt.get())) != SQLITE_DONE)
    return std::unexpected(db_error("inserting entry " + entry.key.to_hex(), rc));
  Statement totals;
  if ((rc = totals.prepare(m_db, "SELECT name, value FROM counters WHERE name IN ('entries', 'bytes')")) != SQLITE_OK)
    return std::unexpected(db_error("reading totals", rc));
  IndexTotals result;
  while ((rc = sqlite3_step(totals.get())) == SQLITE_ROW) {
    const std::string name = column_text(totals.get(), 0);
    (name == "entries" ? result.entries : result.bytes) = column_count(totals.get(), 1);
  }
  if (rc != SQLITE_DONE) return std::unexpected(db_error("reading totals", rc));
  if (before_commit) before_commit();
  if ((rc = txn.commit()) != SQLITE_OK) return std::unexpected(db_error("COMMIT", rc));
  return result;
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

}  // namespace

Result<std::vector<EntryInfo>> Index::list(const EntryFilter& filter) {
  JC_TRY(check_filter(filter));
  std::lock_guard lock(m_mutex);
  std::string sql = std::string("SELECT ") + k_entry_columns + " FROM entries WHERE 1";
  std::vector<std::string> binds;
  filter_sql(filter, sql, binds);
  sql += " ORDER BY last_used DESC, key";
  Statement stmt;
  int rc = stmt.prepare(m_db, sql);
  if (rc != SQLITE_OK) return std::unexpected(db_error("preparing list", rc));
  for (std::size_t i = 0; i < binds.size(); ++i) bind_text(stmt.get(), static_cast<int>(i + 1), binds[i]);
  std::vector<EntryInfo> entries;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW)
    if (auto info = read_entry(stmt.get(), m_path)) entries.push_back(std::move(*info));
  if (rc != SQLITE_DONE) return std::unexpected(db_error("listing entries", rc));
  return entries;
}

namespace {

// Deletes the selected rows inside an open transaction and finds the digests left
// without any entry.
Result<Removed> delete_selected(sqlite3* db, std::vector<EntryInfo> selected,
                                const std::function<Error(const std::string&, int)>& error) {
  Removed removed;
  Statement del;
  int rc = del.prepare(db, "DELETE FROM entries WHERE key = ?1");
  if (rc != SQLITE_OK) return std::unexpected(error("preparing delete", rc));
  std::unordered_set<BlobDigest> digests;
  for (EntryInfo& info : selected) {
    sqlite3_reset(del.get());
    bind_text(del.get(), 1, info.key.to_hex());
    if ((rc = sqlite3_step(del.get())) != SQLITE_DONE)
      return std::unexpected(error("deleting entry " + info.key.to_hex(), rc));
    digests.insert(info.digest);
    removed.entries.push_back(std::move(info));
  }
  Statement ref;
  rc = ref.prepare(db, "SELECT 1 FROM entries WHERE digest = ?1 LIMIT 1");
  if (rc != SQLITE_OK) return std::unexpected(error("preparing reference check", rc));
  for (const BlobDigest& digest : digests) {
    sqlite3_reset(ref.get());
    bind_text(ref.get(), 1, digest.to_hex());
    rc = sqlite3_step(ref.get());
    if (rc == SQLITE_DONE) removed.unreferenced.push_back(digest);
    else if (rc != SQLITE_ROW) return std::unexpected(error("checking blob references", rc));
  }
  return removed;
}

}  // namespace

Result<Removed> Index::remove_where(const std::string& where_sql, const std::vector<std::string>& binds) {
  JC_TRY(writable("remove entries"));
  std::lock_guard lock(m_mutex);
  Transaction txn(m_db);
  int rc = txn.begin();
  if (rc != SQLITE_OK) return std::unexpected(db_error("BEGIN IMMEDIATE", rc));
  Statement stmt;
  if ((rc = stmt.prepare(m_db, std::string("SELECT ") + k_entry_columns + " FROM entries WHERE " + where_sql)) !=
      SQLITE_OK)
    return std::unexpected(db_error("preparing remove", rc));
  for (std::size_t i = 0; i < binds.size(); ++i) bind_text(stmt.get(), static_cast<int>(i + 1), binds[i]);
  std::vector<EntryInfo> selected;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW)
    if (auto info = read_entry(stmt.get(), m_path)) selected.push_back(std::move(*info));
  if (rc != SQLITE_DONE) return std::unexpected(db_error("selecting entries", rc));
  auto error = [this](const std::string& what, int code) { return db_error(what, code); };
  Removed removed = JC_TRY(delete_selected(m_db, std::move(selected), error));
  if ((rc = txn.commit()) != SQLITE_OK) return std::unexpected(db_error("COMMIT", rc));
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

// Beyond this many pending rows a flush folds the log itself, so it never grows unbounded
// in a cache that no maintenance command ever touches.
constexpr sqlite3_int64 k_fold_threshold_rows = 100'000;

}  // namespace

Result<Removed> Index::evict(std::uint64_t target_bytes, const std::optional<CacheKey>& keep) {
  JC_TRY(writable("evict entries"));
  std::lock_guard lock(m_mutex);
  Transaction txn(m_db);
  int rc = txn.begin();
  if (rc != SQLITE_OK) return std::unexpected(db_error("BEGIN IMMEDIATE", rc));
  // Every process's recorded uses count, not only what entries.last_used says so far.
  if ((rc = sqlite3_exec(m_db, k_fold_sql, nullptr, nullptr, nullptr)) != SQLITE_OK)
    return std::unexpected(db_error("folding usage_log into entries", rc));
  Statement total;
  if ((rc = total.prepare(m_db, "SELECT value FROM counters WHERE name = 'bytes'")) != SQLITE_OK ||
      (rc = sqlite3_step(total.get())) != SQLITE_ROW)
    return std::unexpected(db_error("reading the byte total", rc));
  std::uint64_t bytes = column_count(total.get(), 0);
  std::vector<EntryInfo> selected;
  if (bytes > target_bytes) {
    Statement stmt;
    if ((rc = stmt.prepare(m_db, std::string("SELECT ") + k_entry_columns +
                                     " FROM entries ORDER BY last_used ASC, created ASC")) != SQLITE_OK)
      return std::unexpected(db_error("preparing eviction", rc));
    const std::string spared = keep ? keep->to_hex() : std::string();
    while (bytes > target_bytes && (rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      if (column_text(stmt.get(), 0) == spared) continue;
      auto info = read_entry(stmt.get(), m_path);
      if (!info) continue;
      bytes -= std::min(bytes, info->size);
      selected.push_back(std::move(*info));
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return std::unexpected(db_error("selecting LRU entries", rc));
  }
  auto error = [this](const std::string& what, int code) { return db_error(what, code); };
  Removed removed = JC_TRY(delete_selected(m_db, std::move(selected), error));
  if ((rc = txn.commit()) != SQLITE_OK) return std::unexpected(db_error("COMMIT", rc));
  return removed;
}


Status Index::record_usage(std::span<const Usage> usage, const Counters& delta) {
  JC_TRY(writable("record usage"));
  std::lock_guard lock(m_mutex);
  Transaction txn(m_db);
  int rc = txn.begin();
  if (rc != SQLITE_OK) return std::unexpected(db_error("BEGIN IMMEDIATE", rc));
  Statement append;
  if ((rc = append.prepare(m_db, "INSERT INTO usage_log (key, hits, last_used) VALUES (?1, ?2, ?3)")) != SQLITE_OK)
    return std::unexpected(db_error("preparing usage update", rc));
  for (const Usage& u : usage) {
    sqlite3_reset(append.get());
    bind_text(append.get(), 1, u.key.to_hex());
    sqlite3_bind_int64(append.get(), 2, saturated(u.hits));
    sqlite3_bind_int64(append.get(), 3, u.last_used_ms);
    if ((rc = sqlite3_step(append.get())) != SQLITE_DONE)
      return std::unexpected(db_error("recording usage of " + u.key.to_hex(), rc));
  }
  // Counters saturate: an addition beyond int64 would turn the value into a REAL, and a
  // junk value must not make every later update fail.
  Statement add_int, add_real;
  if ((rc = add_int.prepare(m_db, "UPDATE counters SET value = CAST(max(0, min(value + ?2, " JC_MAX_COUNT_SQL
                                  ")) AS INTEGER) WHERE name = ?1")) != SQLITE_OK ||
      (rc = add_real.prepare(m_db, "UPDATE counters SET value = max(0.0, min(value + ?2, " JC_MAX_COUNT_SQL
                                   ".0)) WHERE name = ?1")) != SQLITE_OK)
    return std::unexpected(db_error("preparing counter update", rc));
  auto bump = [&](sqlite3_stmt* add, const char* name, auto value, auto bind) -> int {
    if (value == 0) return SQLITE_DONE;
    sqlite3_reset(add);
    sqlite3_bind_text(add, 1, name, -1, SQLITE_STATIC);
    bind(add, value);
    return sqlite3_step(add);
  };
  for (const IntCounter& c : k_int_counters)
    if ((rc = bump(add_int.get(), c.name, delta.*c.field, [](sqlite3_stmt* s, std::uint64_t v) {
           sqlite3_bind_int64(s, 2, saturated(v));
         })) != SQLITE_DONE)
      return std::unexpected(db_error(std::string("updating counter ") + c.name, rc));
  for (const RealCounter& c : k_real_counters)
    if ((rc = bump(add_real.get(), c.name, delta.*c.field, [](sqlite3_stmt* s, double v) {
           sqlite3_bind_double(s, 2, std::isfinite(v) ? v : 0.0);
         })) != SQLITE_DONE)
      return std::unexpected(db_error(std::string("updating counter ") + c.name, rc));
  Statement pending;
  if ((rc = pending.prepare(m_db, "SELECT max(rowid) FROM usage_log")) != SQLITE_OK ||
      (rc = sqlite3_step(pending.get())) != SQLITE_ROW)
    return std::unexpected(db_error("sizing usage_log", rc));
  if (sqlite3_column_int64(pending.get(), 0) > k_fold_threshold_rows &&
      (rc = sqlite3_exec(m_db, k_fold_sql, nullptr, nullptr, nullptr)) != SQLITE_OK)
    return std::unexpected(db_error("folding usage_log into entries", rc));
  if ((rc = txn.commit()) != SQLITE_OK) return std::unexpected(db_error("COMMIT", rc));
  return {};
}

Status Index::fold_usage() {
  JC_TRY(writable("fold usage_log into entries"));
  std::lock_guard lock(m_mutex);
  Transaction txn(m_db);
  int rc = txn.begin();
  if (rc != SQLITE_OK) return std::unexpected(db_error("BEGIN IMMEDIATE", rc));
  if ((rc = sqlite3_exec(m_db, k_fold_sql, nullptr, nullptr, nullptr)) != SQLITE_OK)
    return std::unexpected(db_error("folding usage_log into entries", rc));
  if ((rc = txn.commit()) != SQLITE_OK) return std::unexpected(db_error("COMMIT", rc));
  return {};
}

Result<IndexTotals> Index::totals() {
  std::lock_guard lock(m_mutex);
  Statement stmt;
  int rc = stmt.prepare(m_db, "SELECT name, value FROM counters WHERE name IN ('entries', 'bytes')");
  if (rc != SQLITE_OK) return std::unexpected(db_error("reading totals", rc));
  IndexTotals totals;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    (column_text(stmt.get(), 0) == "entries" ? totals.entries : totals.bytes) = column_count(stmt.get(), 1);
  }
  if (rc != SQLITE_DONE) return std::unexpected(db_error("reading totals", rc));
  return totals;
}

Result<Counters> Index::counters() {
  std::lock_guard lock(m_mutex);
  Statement stmt;
  int rc = stmt.prepare(m_db, "SELECT name, value FROM counters");
  if (rc != SQLITE_OK) return std::unexpected(db_error("reading counters", rc));
  Counters counters;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const std::string name = column_text(stmt.get(), 0);
    for (const IntCounter& c : k_int_counters)
      if (name == c.name) counters.*c.field = column_count(stmt.get(), 1);
    for (const RealCounter& c : k_real_counters)
      if (name == c.name) counters.*c.field = column_ms(stmt.get(), 1);
  }
  if (rc != SQLITE_DONE) return std::unexpected(db_error("reading counters", rc));
  return counters;
}

Result<std::vector<BlobDigest>> Index::referenced_digests() {
  std::lock_guard lock(m_mutex);
  Statement stmt;
  int rc = stmt.prepare(m_db, "SELECT DISTINCT digest FROM entries");
  if (rc != SQLITE_OK) return std::unexpected(db_error("reading digests", rc));
  std::vector<BlobDigest> digests;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW)
    if (auto digest = BlobDigest::from_hex(column_text(stmt.get(), 0))) digests.push_back(*digest);
  if (rc != SQLITE_DONE) return std::unexpected(db_error("reading digests", rc));
  return digests;
}

Result<std::vector<std::string>> Index::integrity_check() {
  std::lock_guard lock(m_mutex);
  Statement stmt;
  int rc = stmt.prepare(m_db, "PRAGMA integrity_check");
  if (rc != SQLITE_OK) return std::unexpected(db_error("PRAGMA integrity_check", rc));
  std::vector<std::string> problems;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    std::string line = column_text(stmt.get(), 0);
    if (line != "ok") problems.push_back(m_path.string() + ": " + line);
  }
  if (rc != SQLITE_DONE) return std::unexpected(db_error("PRAGMA integrity_check", rc));
  return problems;
}

namespace {

struct ValueRule {
  const char* table;
  const char* field;
  const char* row_name;  // the column that names an offending row
  const char* broken;    // SQL condition a row breaking the rule meets (?1: the latest sane time)
  const char* rule;
};

#define JC_HEX_BROKEN(f) "typeof(" f ") != 'text' OR length(" f ") != 32 OR " f " GLOB '*[^0-9a-f]*'"
#define JC_COUNT_BROKEN(f) "typeof(" f ") != 'integer' OR " f " < 0 OR " f " > " JC_MAX_COUNT_SQL
#define JC_TIME_BROKEN(f) "typeof(" f ") != 'integer' OR " f " < 0 OR " f " > ?1"

constexpr const char* k_hex_rule = "32 lowercase hex digits";
constexpr const char* k_count_rule = "an integer from 0 to 10^15";
constexpr const char* k_time_rule = "Unix milliseconds, not negative and not in the future";

const ValueRule k_value_rules[] = {
    {"entries", "key", "key", JC_HEX_BROKEN("key"), k_hex_rule},
    {"entries", "digest", "key", JC_HEX_BROKEN("digest"), k_hex_rule},
    {"entries", "key_schema", "key", "typeof(key_schema) != 'integer' OR key_schema < 0",
     "a non-negative integer"},
    {"entries", "size", "key", "typeof(size) != 'integer' OR size < 0 OR size > 1099511627776",
     "a byte count from 0 to 1 TiB"},
    {"entries", "facts", "key",
     "CASE WHEN typeof(facts) = 'text' AND json_valid(facts) THEN json_type(facts) != 'object' ELSE 1 END",
     "a JSON object"},
    {"entries", "created", "key", JC_TIME_BROKEN("created"), k_time_rule},
    {"entries", "last_used", "key", JC_TIME_BROKEN("last_used"), k_time_rule},
    {"entries", "hits", "key", JC_COUNT_BROKEN("hits"), k_count_rule},
    {"entries", "compile_ms", "key",
     "typeof(compile_ms) NOT IN ('integer', 'real') OR compile_ms < 0 OR compile_ms > 1e9",
     "milliseconds from 0 to 10^9"},
    {"usage_log", "key", "key", JC_HEX_BROKEN("key"), k_hex_rule},
    {"usage_log", "hits", "key", JC_COUNT_BROKEN("hits"), k_count_rule},
    {"usage_log", "last_used", "key", JC_TIME_BROKEN("last_used"), k_time_rule},
    {"counters", "value", "name",
     "name NOT IN ('compile_ms_spent', 'compile_ms_saved') AND (" JC_COUNT_BROKEN("value") ")", k_count_rule},
    {"counters", "value", "name",
     "name IN ('compile_ms_spent', 'compile_ms_saved') AND (typeof(value) NOT IN ('integer', 'real') OR "
     "value < 0 "
     "OR value > " JC_MAX_COUNT_SQL ")",
     "milliseconds from 0 to 10^15"},
};

#undef JC_HEX_BROKEN
#undef JC_COUNT_BROKEN
#undef JC_TIME_BROKEN

// Clock skew between the writers of one local cache is small; a day is generous.
constexpr std::int64_t k_future_slack_ms = 24 * 3600 * 1000;

}  // namespace

Result<std::vector<std::string>> Index::check_values() {
  std::lock_guard lock(m_mutex);
  std::vector<std::string> problems;
  const std::string file = m_path.string() + ": ";
  const sqlite3_int64 latest = unix_now_ms() + k_future_slack_ms;
  for (const ValueRule& r : k_value_rules) {
    const std::string where = std::string(" FROM ") + r.table + " WHERE " + r.broken;
    Statement stmt;
    int rc = stmt.prepare(m_db, std::string("SELECT count(*), (SELECT quote(") + r.row_name +
                                    ") || ' = ' || quote(" + r.field + ")" + where + " LIMIT 1)" + where);
    if (rc == SQLITE_OK) {
      sqlite3_bind_int64(stmt.get(), 1, latest);
      rc = sqlite3_step(stmt.get());
    }
    if (rc != SQLITE_ROW)
      return std::unexpected(db_error(std::string("checking ") + r.table + "." + r.field, rc));
    const sqlite3_int64 count = sqlite3_column_int64(stmt.get(), 0);
    if (count == 0) continue;
    problems.push_back(file + r.table + "." + r.field + ": " + std::to_string(count) +
                       (count == 1 ? " row breaks" : " rows break") + " the rule (" + r.rule +
                       "); first: " + r.row_name + " " + column_text(stmt.get(), 1));
  }
  // Every counter present, and the totals the triggers keep equal to the table.
  std::vector<const char*> names = {"entries", "bytes"};
  for (const IntCounter& c : k_int_counters) names.push_back(c.name);
  for (const RealCounter& c : k_real_counters) names.push_back(c.name);
  Statement present;
  int rc = present.prepare(m_db, "SELECT 1 FROM counters WHERE name = ?1");
  if (rc != SQLITE_OK) return std::unexpected(db_error("checking counters", rc));
  for (const char* name : names) {
    sqlite3_reset(present.get());
    sqlite3_bind_text(present.get(), 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(present.get());
    if (rc == SQLITE_DONE)
      problems.push_back(file + "counters: row '" + name + "' is missing");
    else if (rc != SQLITE_ROW)
      return std::unexpected(db_error("checking counters", rc));
  }
  Statement totals;
  rc = totals.prepare(
      m_db,
      "SELECT (SELECT quote(value) FROM counters WHERE name = 'entries'), (SELECT count(*) FROM entries), "
      "(SELECT quote(value) FROM counters WHERE name = 'bytes'), "
      "(SELECT CAST(total(size) AS INTEGER) FROM entries)");
  if (rc == SQLITE_OK) rc = sqlite3_step(totals.get());
  if (rc != SQLITE_ROW) return std::unexpected(db_error("checking the totals", rc));
  const std::string rows = std::to_string(sqlite3_column_int64(totals.get(), 1));
  const std::string bytes = std::to_string(sqlite3_column_int64(totals.get(), 3));
  if (sqlite3_column_type(totals.get(), 0) != SQLITE_NULL && column_text(totals.get(), 0) != rows)
    problems.push_back(file + "counters.entries: " + column_text(totals.get(), 0) +
                       ", but table entries holds " + rows + " rows");
  if (sqlite3_column_type(totals.get(), 2) != SQLITE_NULL && column_text(totals.get(), 2) != bytes)
    problems.push_back(file + "counters.bytes: " + column_text(totals.get(), 2) +
                       ", but the entries' sizes add up to " + bytes);
  return problems;
}

}  // namespace jitcache::cache
