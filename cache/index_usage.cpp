// Usage and counters of the Index (cache/index.hpp): recording uses, folding usage_log
// into entries, eviction of the least recently used, and reading the totals and counters.
#include "cache/index.hpp"

#include <algorithm>
#include <cmath>

#include "cache/index_rows.hpp"

namespace jitcache::cache {

using namespace index_detail;

namespace {

using sql::Step;

double column_ms(const sql::Statement& stmt, int column) {
  const double value = stmt.real(column);
  return std::isfinite(value) && value > 0 ? std::min(value, static_cast<double>(k_max_count)) : 0.0;
}

std::int64_t saturated(std::uint64_t value) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(value, k_max_count));
}

// total(), not sum(): sum() fails with "integer overflow" on rows a writer never made
// (junk an operator or a bug put there), and a failing fold would fail every command.
// Hits saturate at k_max_count.
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

}  // namespace jitcache::cache
