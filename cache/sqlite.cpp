#include "cache/sqlite.hpp"

#include "support/fork_guard.hpp"

// Every function here that calls into SQLite does so inside a ToolSection
// (support/fork_guard.hpp): SQLite's global mutexes (its allocator's, the file system
// layer's list of open files) held by one thread when another forks stay locked in the
// child for ever, and the child's first open of a cache would wait for ever.

namespace jitcache::cache::sql {

bool is_corruption(int code) {
  const int primary = code & 0xFF;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

bool is_busy(int code) {
  const int primary = code & 0xFF;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

namespace {
constexpr std::string_view k_closed = "the database is not open";
}  // namespace

Status Database::open(const std::string& filename, int flags, const std::filesystem::path& path) {
  const ToolSection section;
  close();
  m_path = path;
  m_last_code = SQLITE_OK;
  m_corrupt = false;
  const int code = sqlite3_open_v2(filename.c_str(), &m_db, flags, nullptr);
  if (code != SQLITE_OK) return std::unexpected(error("cannot open", code));
  sqlite3_extended_result_codes(m_db, 1);
  return {};
}

void Database::close() {
  const ToolSection section;
  // close_v2: statements still alive keep the connection as a zombie until finalized.
  if (m_db != nullptr) sqlite3_close_v2(m_db);
  m_db = nullptr;
}

void Database::set_busy_timeout(int timeout_ms) {
  const ToolSection section;
  if (m_db != nullptr) sqlite3_busy_timeout(m_db, timeout_ms);
}

Status Database::define_function(const char* name, int args, ScalarFunction fn, std::string_view what) {
  const ToolSection section;
  if (m_db == nullptr) return std::unexpected(failure(what, k_closed));
  const int code = sqlite3_create_function_v2(m_db, name, args, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr, fn,
                                              nullptr, nullptr, nullptr);
  if (code != SQLITE_OK) return std::unexpected(error(what, code));
  return {};
}

Status Database::exec(const std::string& sql, std::string_view what) {
  const ToolSection section;
  if (m_db == nullptr) return std::unexpected(failure(what, k_closed));
  const int code = sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr);
  if (code != SQLITE_OK) return std::unexpected(error(what, code));
  return {};
}

void Database::exec_best_effort(const std::string& sql) {
  const ToolSection section;
  if (m_db != nullptr) sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr);
}

Result<Statement> Database::prepare(std::string_view sql, std::string_view what, Persistence persistence) {
  const ToolSection section;
  if (m_db == nullptr) return std::unexpected(failure(what, k_closed));
  sqlite3_stmt* stmt = nullptr;
  const unsigned flags = persistence == Persistence::persistent ? SQLITE_PREPARE_PERSISTENT : 0;
  const int code = sqlite3_prepare_v3(m_db, sql.data(), static_cast<int>(sql.size()), flags, &stmt, nullptr);
  if (code != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return std::unexpected(error(what, code));
  }
  return Statement(*this, stmt, what);
}

Error Database::error(std::string_view what, int code) {
  const ToolSection section;
  m_last_code = code;
  if (is_corruption(code)) m_corrupt = true;
  return failure(what, m_db != nullptr ? sqlite3_errmsg(m_db) : sqlite3_errstr(code));
}

Error Database::failure(std::string_view what, std::string_view message) const {
  std::string text = m_path.string();
  text.append(": ").append(what).append(": ").append(message);
  return Error{ErrorCode::database, std::move(text), {}};
}

std::string Database::last_message() const {
  const ToolSection section;
  return m_db != nullptr ? sqlite3_errmsg(m_db) : std::string(k_closed);
}

Statement::~Statement() {
  const ToolSection section;
  if (m_stmt != nullptr) sqlite3_finalize(m_stmt);
}

Statement& Statement::operator=(Statement&& other) noexcept {
  const ToolSection section;
  if (this != &other) {
    if (m_stmt != nullptr) sqlite3_finalize(m_stmt);
    m_db = std::exchange(other.m_db, nullptr);
    m_stmt = std::exchange(other.m_stmt, nullptr);
    m_what = std::move(other.m_what);
  }
  return *this;
}

Status Statement::bind_result(int index, int code) {
  if (code == SQLITE_OK) return {};
  return std::unexpected(m_db->error(m_what + ": binding ?" + std::to_string(index), code));
}

Status Statement::bind_at(int index, std::string_view text) {
  const ToolSection section;
  if (m_stmt == nullptr) return make_error(ErrorCode::database, std::string("binding to no statement"));
  return bind_result(
      index, sqlite3_bind_text(m_stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
}

Status Statement::bind_int64(int index, sqlite3_int64 value) {
  const ToolSection section;
  if (m_stmt == nullptr) return make_error(ErrorCode::database, std::string("binding to no statement"));
  return bind_result(index, sqlite3_bind_int64(m_stmt, index, value));
}

Status Statement::bind_at(int index, double value) {
  const ToolSection section;
  if (m_stmt == nullptr) return make_error(ErrorCode::database, std::string("binding to no statement"));
  return bind_result(index, sqlite3_bind_double(m_stmt, index, value));
}

void Statement::reset() {
  const ToolSection section;
  if (m_stmt != nullptr) sqlite3_reset(m_stmt);
}

Result<Step> Statement::step() { return step(m_what); }

Result<Step> Statement::step(std::string_view what) {
  const ToolSection section;
  if (m_stmt == nullptr) return make_error(ErrorCode::database, std::string(what) + ": no statement");
  const int code = sqlite3_step(m_stmt);
  if (code == SQLITE_ROW) return Step::row;
  if (code == SQLITE_DONE) return Step::done;
  return std::unexpected(m_db->error(what, code));
}

Status Statement::step_row(std::string_view what) {
  if (JC_TRY(step(what)) == Step::row) return {};
  return std::unexpected(m_db->failure(what, "no row"));
}

Status Statement::run(std::string_view what) {
  if (JC_TRY(step(what)) == Step::done) return {};
  return std::unexpected(m_db->failure(what, "returned a row where none was expected"));
}

std::string Statement::text(int column) const {
  const ToolSection section;
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, column));
  return text == nullptr ? std::string()
                         : std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(m_stmt, column)));
}

std::int64_t Statement::int64(int column) const {
  const ToolSection section;
  return sqlite3_column_int64(m_stmt, column);
}

double Statement::real(int column) const {
  const ToolSection section;
  return sqlite3_column_double(m_stmt, column);
}

bool Statement::is_null(int column) const {
  const ToolSection section;
  return sqlite3_column_type(m_stmt, column) == SQLITE_NULL;
}

Result<Transaction> Transaction::begin(Database& db, TransactionKind kind, std::string_view what) {
  const char* sql = kind == TransactionKind::immediate ? "BEGIN IMMEDIATE" : "BEGIN";
  JC_TRY(db.exec(sql, what.empty() ? std::string_view(sql) : what));
  return Transaction(db);
}

Transaction::~Transaction() {
  // Where SQLite already rolled back itself (a full disk, an I/O error), this ROLLBACK
  // finds no transaction and changes nothing.
  if (m_db != nullptr) m_db->exec_best_effort("ROLLBACK");
}

Status Transaction::commit(std::string_view what) {
  if (m_db == nullptr) return make_error(ErrorCode::database, std::string(what) + ": no open transaction");
  JC_TRY(m_db->exec("COMMIT", what));
  m_db = nullptr;
  return {};
}

}  // namespace jitcache::cache::sql
