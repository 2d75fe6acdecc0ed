// Maintenance checks of the Index (cache/index.hpp): the digests entries reference,
// SQLite's integrity check, and every stored value against its rule.
#include "cache/index.hpp"

#include "cache/index_rows.hpp"

namespace jitcache::cache {

using namespace index_detail;
using sql::Step;

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
