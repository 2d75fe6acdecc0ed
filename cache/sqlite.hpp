// A thin SQLite layer whose every failure is a Result: a connection (Database), a prepared
// statement with typed bind/step/column helpers (Statement) and a write transaction that
// rolls back unless committed (Transaction). Internal to cache/; the index is its user.
//
// Every error is ErrorCode::database with the message "<file>: <what>: <SQLite's message>",
// built at the moment of the failure (a later ROLLBACK would replace SQLite's message).
// The extended result code of the latest failure stays readable on the Database
// (last_error_code), and a code meaning "corrupt" or "not a database" marks the
// connection corrupt() for good: callers decide from these whether to retry (busy),
// fall back (unwritable) or rebuild (corrupt).
#pragma once

#include <sqlite3.h>

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "jitcache/error.hpp"

namespace jitcache::cache::sql {

// SQLite's primary code of `code` means the file is damaged or no database at all.
bool is_corruption(int code);
// Another connection holds a lock this one needs.
bool is_busy(int code);

enum class Persistence { transient, persistent };  // SQLITE_PREPARE_PERSISTENT: kept for reuse
enum class Step { row, done };

class Statement;

class Database {
 public:
  Database() = default;  // closed: every call fails with an error saying so
  ~Database() { close(); }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // sqlite3_open_v2 of `filename` (a path or, with SQLITE_OPEN_URI, a file: URI); errors
  // name `path`. Closes what was open before. Extended result codes are switched on.
  Status open(const std::string& filename, int flags, const std::filesystem::path& path);
  void close();
  bool is_open() const { return m_db != nullptr; }
  // Waits up to `timeout_ms` for other connections' locks (sqlite3_busy_timeout).
  void set_busy_timeout(int timeout_ms);

  // Makes `fn` callable from this connection's SQL as name(...) with `args` arguments, a
  // deterministic function (the index's value rules call the C++ predicates through it).
  using ScalarFunction = void (*)(sqlite3_context*, int, sqlite3_value**);
  Status define_function(const char* name, int args, ScalarFunction fn, std::string_view what);

  // Runs one or more statements without results.
  Status exec(const std::string& sql, std::string_view what);
  // For settings whose failure costs only speed (cache sizes, mmap): the outcome is
  // deliberately dropped, and neither the last error nor corrupt() changes.
  void exec_best_effort(const std::string& sql);
  Result<Statement> prepare(std::string_view sql, std::string_view what,
                            Persistence persistence = Persistence::transient);

  // The error for `code`, which the call described by `what` returned; records it.
  Error error(std::string_view what, int code);
  int last_error_code() const { return m_last_code; }
  // SQLite's own text for the latest failure on this connection.
  std::string last_message() const;
  bool corrupt() const { return m_corrupt; }
  const std::filesystem::path& path() const { return m_path; }

 private:
  friend class Statement;
  // The error for a failure SQLite has no code for (a statement on a closed connection,
  // a missing row); leaves the last code alone.
  Error failure(std::string_view what, std::string_view message) const;

  sqlite3* m_db = nullptr;
  std::filesystem::path m_path;
  int m_last_code = SQLITE_OK;
  bool m_corrupt = false;
};

// One prepared statement of a Database, which must outlive it. Parameters are ?1, ?2, ...;
// columns are numbered from 0, as in SQLite.
class Statement {
 public:
  Statement() = default;
  ~Statement();
  Statement(Statement&& other) noexcept
      : m_db(std::exchange(other.m_db, nullptr)),
        m_stmt(std::exchange(other.m_stmt, nullptr)),
        m_what(std::move(other.m_what)) {}
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds ?1, ?2, ... in order: text (copied), integers, doubles.
  template <class... Values>
  Status bind(const Values&... values) {
    int index = 0;
    Status status;
    ((status = status ? bind_at(++index, values) : status), ...);
    return status;
  }
  Status bind_at(int index, std::string_view text);
  Status bind_at(int index, const std::string& text) { return bind_at(index, std::string_view(text)); }
  Status bind_at(int index, const char* text) { return bind_at(index, std::string_view(text)); }
  // Signed only: an unsigned count is saturated by the caller before it becomes an int64.
  template <std::signed_integral Integer>
  Status bind_at(int index, Integer value) {
    return bind_int64(index, static_cast<sqlite3_int64>(value));
  }
  Status bind_at(int index, double value);

  // Ready to run again with new bindings (old ones stay until rebound); releases the read
  // lock a statement that has not run to its end still holds.
  void reset();
  // Step::row: a row is ready to read; Step::done: the statement ran to its end. Errors
  // say `what` (else what the statement was prepared for).
  Result<Step> step();
  Result<Step> step(std::string_view what);
  // Runs a statement expected to yield one row (a SELECT of aggregates, a PRAGMA).
  Status step_row(std::string_view what);
  // Runs a statement that yields no rows (INSERT, UPDATE, DELETE) to its end.
  Status run(std::string_view what);

  int parameter_count() const { return m_stmt != nullptr ? sqlite3_bind_parameter_count(m_stmt) : 0; }
  // Columns of the current row (after Step::row).
  std::string text(int column) const;  // "" for NULL
  std::int64_t int64(int column) const;
  double real(int column) const;
  bool is_null(int column) const;

 private:
  friend class Database;
  Statement(Database& db, sqlite3_stmt* stmt, std::string_view what)
      : m_db(&db), m_stmt(stmt), m_what(what) {}
  Status bind_int64(int index, sqlite3_int64 value);
  Status bind_result(int index, int code);

  Database* m_db = nullptr;
  sqlite3_stmt* m_stmt = nullptr;
  std::string m_what;
};

enum class TransactionKind {
  immediate,  // BEGIN IMMEDIATE: takes the write lock now, so writers queue on the busy timeout
  read,       // BEGIN: one consistent snapshot for several reads
};

// BEGIN ... COMMIT. Destroyed without a successful commit() it rolls back, so an early
// return leaves nothing behind; a failed commit() reports the error and still rolls back
// on destruction.
class Transaction {
 public:
  static Result<Transaction> begin(Database& db, TransactionKind kind = TransactionKind::immediate,
                                   std::string_view what = {});
  ~Transaction();
  Transaction(Transaction&& other) noexcept : m_db(std::exchange(other.m_db, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status commit(std::string_view what = "COMMIT");
  bool open() const { return m_db != nullptr; }

 private:
  explicit Transaction(Database& db) : m_db(&db) {}
  Database* m_db;  // null once committed
};

}  // namespace jitcache::cache::sql
