#include "cache/index.hpp"

#include <algorithm>
#include <array>
#include <unordered_set>

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
  info.size = static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 3));
  info.facts_json = column_text(stmt, 4);
  if (auto facts = Facts::from_json(info.facts_json)) info.facts = std::move(*facts);
  info.created_ms = sqlite3_column_int64(stmt, 5);
  info.last_used_ms = sqlite3_column_int64(stmt, 6);
  info.hits = static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 7));
  info.compile_ms = sqlite3_column_double(stmt, 8);
  return info;
}

}  // namespace

Error Index::db_error(const std::string& what, int rc) {
  if (is_corruption(rc)) m_corrupt = true;
  const char* message = m_db != nullptr ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
  return Error{ErrorCode::database, m_path.string() + ": " + what + ": " + message, {}};
}

std::expected<std::unique_ptr<Index>, Index::OpenFailure> Index::open(
    const std::filesystem::path& db_path, std::chrono::milliseconds busy_timeout,
    Durability durability, IndexAccess access) {
  std::unique_ptr<Index> index(new Index());
  index->m_path = db_path;
  auto fail = [&](const std::string& what, int rc) {
    const bool corrupt = is_corruption(rc);
    const int primary = rc & 0xFF;
    const bool unwritable = primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_READONLY ||
                            primary == SQLITE_CANTOPEN || primary == SQLITE_PERM;
    return std::unexpected(OpenFailure{index->db_error(what, rc), corrupt, unwritable});
  };
  if (access == IndexAccess::read_only) {
    // TEMPORARY until the index's own read-only mode lands: immutable, as a baked image is.
    std::error_code ec;
    const auto wal_size = std::filesystem::file_size(db_path.string() + "-wal", ec);
    const bool wal = !ec && wal_size > 0;
    const std::string uri = "file:" + db_path.string() + (wal ? "?mode=ro" : "?immutable=1");
    int rc = sqlite3_open_v2(uri.c_str(), &index->m_db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) return fail("cannot open read-only", rc);
    index->m_file_id = file_id_of(db_path);
    sqlite3_extended_result_codes(index->m_db, 1);
    rc = sqlite3_prepare_v3(index->m_db, "SELECT digest, size, compile_ms FROM entries WHERE key = ?1", -1,
                            SQLITE_PREPARE_PERSISTENT, &index->m_lookup, nullptr);
    if (rc != SQLITE_OK) return fail("preparing the lookup", rc);
    return index;
  }
  // NOMUTEX: the connection is only used under m_mutex. NOFOLLOW: the index is never a link.
  int rc = sqlite3_open_v2(db_path.c_str(), &index->m_db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                               SQLITE_OPEN_NOFOLLOW,
                           nullptr);
  if (rc != SQLITE_OK) return fail("cannot open", rc);
  index->m_file_id = file_id_of(db_path);
  sqlite3_extended_result_codes(index->m_db, 1);
  sqlite3_busy_timeout(index->m_db, static_cast<int>(busy_timeout.count()));

  auto exec = [&](const std::string& sql) {
    return sqlite3_exec(index->m_db, sql.c_str(), nullptr, nullptr, nullptr);
  };
  // The first statement that reads the file is where garbage is noticed.
  if ((rc = exec("PRAGMA journal_mode=WAL")) != SQLITE_OK) return fail("enabling WAL", rc);
  exec(durability == Durability::full ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=OFF");
  // A larger page cache and memory-mapped reads keep lookups flat as the index grows.
  exec("PRAGMA cache_size=-16384");
  exec("PRAGMA mmap_size=268435456");

  if ((rc = exec("BEGIN IMMEDIATE")) != SQLITE_OK) return fail("starting the schema transaction", rc);
  auto rollback_and_fail = [&](const std::string& what, int code) {
    auto failure = fail(what, code);  // before ROLLBACK replaces SQLite's message
    exec("ROLLBACK");
    return failure;
  };
  int version = 0;
  {
    Statement tables;
    if ((rc = tables.prepare(index->m_db, "SELECT name FROM sqlite_master WHERE type = 'table'")) != SQLITE_OK)
      return rollback_and_fail("reading the schema", rc);
    bool any_table = false, has_version = false;
    while ((rc = sqlite3_step(tables.get())) == SQLITE_ROW) {
      any_table = true;
      if (column_text(tables.get(), 0) == "schema_version") has_version = true;
    }
    if (rc != SQLITE_DONE) return rollback_and_fail("reading the schema", rc);
    if (any_table && !has_version) {
      exec("ROLLBACK");
      return std::unexpected(OpenFailure{
          Error{ErrorCode::database,
                db_path.string() + ": a SQLite database without a schema_version table is not a "
                                   "jitcache index; move it away or choose another cache directory",
                {}},
          false});
    }
    if (has_version) {
      Statement read;
      if ((rc = read.prepare(index->m_db, "SELECT version FROM schema_version")) != SQLITE_OK)
        return rollback_and_fail("reading schema_version", rc);
      int rows = 0;
      while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
        version = sqlite3_column_int(read.get(), 0);
        ++rows;
      }
      if (rc != SQLITE_DONE) return rollback_and_fail("reading schema_version", rc);
      if (rows != 1 || version < 0) {
        exec("ROLLBACK");
        // Only a damaged file has anything but one row: our writes are transactional.
        return std::unexpected(OpenFailure{
            Error{ErrorCode::database,
                  db_path.string() + ": schema_version holds " + std::to_string(rows) +
                      " rows, expected 1",
                  {}},
            true});
      }
    }
  }
  if (version > k_index_schema_version) {
    exec("ROLLBACK");
    return std::unexpected(OpenFailure{
        Error{ErrorCode::database,
              db_path.string() + ": schema_version " + std::to_string(version) +
                  " is newer than this jitcache understands (" +
                  std::to_string(k_index_schema_version) +
                  "); use a newer jitcache or another cache directory",
              {}},
        false});
  }
  for (; version < k_index_schema_version; ++version) {
    if ((rc = exec(k_migrations[static_cast<std::size_t>(version)])) != SQLITE_OK)
      return rollback_and_fail("migrating schema " + std::to_string(version) + " to " +
                                   std::to_string(version + 1),
                               rc);
    if ((rc = exec("UPDATE schema_version SET version = " + std::to_string(version + 1))) != SQLITE_OK)
      return rollback_and_fail("updating schema_version", rc);
  }
  exec("PRAGMA application_id=" + std::to_string(k_application_id));
  if ((rc = exec("COMMIT")) != SQLITE_OK) return rollback_and_fail("committing the schema", rc);

  // Without statistics SQLite would pick the primary key index and then read the wide row.
  rc = sqlite3_prepare_v3(index->m_db,
                          "SELECT digest, size, compile_ms FROM entries INDEXED BY entries_lookup WHERE key = ?1", -1,
                          SQLITE_PREPARE_PERSISTENT, &index->m_lookup, nullptr);
  if (rc != SQLITE_OK)  // an operator dropped the index: slower, still correct
    rc = sqlite3_prepare_v3(index->m_db, "SELECT digest, size, compile_ms FROM entries WHERE key = ?1", -1,
                            SQLITE_PREPARE_PERSISTENT, &index->m_lookup, nullptr);
  if (rc != SQLITE_OK) return fail("preparing the lookup", rc);
  return index;
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
  row.size = static_cast<std::uint64_t>(sqlite3_column_int64(m_lookup, 1));
  row.compile_ms = sqlite3_column_double(m_lookup, 2);
  sqlite3_reset(m_lookup);
  if (!digest)
    return make_error(ErrorCode::database,
                      m_path.string() + ": entry " + hex + ", field digest: " + digest.error().message);
  row.digest = *digest;
  return std::optional<IndexRow>(row);
}

Result<IndexTotals> Index::insert(const NewEntry& entry, const std::function<void()>& before_commit) {
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
    const auto value = static_cast<std::uint64_t>(sqlite3_column_int64(totals.get(), 1));
    (name == "entries" ? result.entries : result.bytes) = value;
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

constexpr const char* k_fold_sql =
    "UPDATE entries SET hits = entries.hits + folded.uses, last_used = max(entries.last_used, folded.latest) "
    "FROM (SELECT key, sum(hits) AS uses, max(last_used) AS latest FROM usage_log GROUP BY key) AS folded "
    "WHERE entries.key = folded.key; "
    "DELETE FROM usage_log;";

// Beyond this many pending rows a flush folds the log itself, so it never grows unbounded
// in a cache that no maintenance command ever touches.
constexpr sqlite3_int64 k_fold_threshold_rows = 100'000;

}  // namespace

Result<Removed> Index::evict(std::uint64_t target_bytes, const std::optional<CacheKey>& keep) {
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
  std::uint64_t bytes = static_cast<std::uint64_t>(sqlite3_column_int64(total.get(), 0));
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
    sqlite3_bind_int64(append.get(), 2, static_cast<sqlite3_int64>(u.hits));
    sqlite3_bind_int64(append.get(), 3, u.last_used_ms);
    if ((rc = sqlite3_step(append.get())) != SQLITE_DONE)
      return std::unexpected(db_error("recording usage of " + u.key.to_hex(), rc));
  }
  Statement add;
  if ((rc = add.prepare(m_db, "UPDATE counters SET value = value + ?2 WHERE name = ?1")) != SQLITE_OK)
    return std::unexpected(db_error("preparing counter update", rc));
  auto bump = [&](const char* name, auto value, auto bind) -> int {
    if (value == 0) return SQLITE_DONE;
    sqlite3_reset(add.get());
    sqlite3_bind_text(add.get(), 1, name, -1, SQLITE_STATIC);
    bind(add.get(), value);
    return sqlite3_step(add.get());
  };
  for (const IntCounter& c : k_int_counters)
    if ((rc = bump(c.name, delta.*c.field, [](sqlite3_stmt* s, std::uint64_t v) {
           sqlite3_bind_int64(s, 2, static_cast<sqlite3_int64>(v));
         })) != SQLITE_DONE)
      return std::unexpected(db_error(std::string("updating counter ") + c.name, rc));
  for (const RealCounter& c : k_real_counters)
    if ((rc = bump(c.name, delta.*c.field, [](sqlite3_stmt* s, double v) { sqlite3_bind_double(s, 2, v); })) !=
        SQLITE_DONE)
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
    const auto value = static_cast<std::uint64_t>(sqlite3_column_int64(stmt.get(), 1));
    (column_text(stmt.get(), 0) == "entries" ? totals.entries : totals.bytes) = value;
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
      if (name == c.name) counters.*c.field = static_cast<std::uint64_t>(sqlite3_column_int64(stmt.get(), 1));
    for (const RealCounter& c : k_real_counters)
      if (name == c.name) counters.*c.field = sqlite3_column_double(stmt.get(), 1);
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
    if (line != "ok") problems.push_back(std::move(line));
  }
  if (rc != SQLITE_DONE) return std::unexpected(db_error("PRAGMA integrity_check", rc));
  return problems;
}

}  // namespace jitcache::cache
