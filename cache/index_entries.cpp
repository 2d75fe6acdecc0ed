// The Index's entries (cache/index.hpp): lookup and insert, listing by a filter, and
// removal of entries with the blobs they leave unreferenced.
#include "cache/index.hpp"

#include <cctype>
#include <unordered_set>

#include "cache/index_rows.hpp"
#include "jitcache/log.hpp"

namespace jitcache::cache {

using sql::Step;

namespace index_detail {

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

Result<IndexTotals> read_totals(sql::Database& db) {
  auto stmt = JC_TRY(
      db.prepare("SELECT name, value FROM counters WHERE name IN ('entries', 'bytes')", "reading totals"));
  IndexTotals totals;
  while (JC_TRY(stmt.step()) == Step::row)
    (stmt.text(0) == "entries" ? totals.entries : totals.bytes) = column_count(stmt, 1);
  return totals;
}

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

}  // namespace index_detail

using namespace index_detail;

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

Result<std::vector<EntryInfo>> Index::list(const EntryFilter& filter) {
  JC_TRY(check_filter(filter));
  std::lock_guard lock(m_mutex);
  std::string sql = std::string("SELECT ") + k_entry_columns + " FROM entries WHERE 1";
  std::vector<std::string> binds;
  filter_sql(filter, sql, binds);
  sql += " ORDER BY last_used DESC, key";
  return select_entries(m_db, sql, binds, "preparing list", "listing entries");
}

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

}  // namespace jitcache::cache
