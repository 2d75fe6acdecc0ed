// The SQLite wrapper on its own: typed binds and columns, errors that name the file, what
// was being done, SQLite's message and code, and transactions that roll back unless
// committed -- including the ways each of these fails.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <string>

#include "cache/sqlite.hpp"
#include "cache_test_support.hpp"
#include "test_support.hpp"

namespace jitcache::cache::sql {
namespace {

using jitcache::cache::testing::sql_query;
using jitcache::cache::testing::write_file;

constexpr int k_read_write = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;

class SqliteTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_OK(db.open(path().string(), k_read_write, path()));
    ASSERT_OK(db.exec("CREATE TABLE t (name TEXT PRIMARY KEY, n INTEGER, x REAL)", "creating t"));
  }
  std::filesystem::path path() const { return dir() / "test.db"; }
  std::vector<std::string> names() { return sql_query(path(), "SELECT name FROM t ORDER BY name"); }

  Status insert(const std::string& name) {
    auto stmt = JC_TRY(db.prepare("INSERT INTO t (name, n, x) VALUES (?1, ?2, ?3)", "inserting"));
    JC_TRY(stmt.bind(name, std::int64_t{1}, 0.5));
    return stmt.run("inserting " + name);
  }

  Database db;
};

// The error's text names the file, then what, then SQLite's words.
void expect_error(const Error& error, const std::filesystem::path& path, const std::string& what,
                  const std::string& sqlite_says) {
  EXPECT_EQ(error.code, ErrorCode::database);
  EXPECT_TRUE(error.message.starts_with(path.string() + ": " + what + ": ")) << error.message;
  EXPECT_NE(error.message.find(sqlite_says), std::string::npos) << error.message;
}

TEST_F(SqliteTest, BindsStepsAndReadsEachType) {
  auto insert = db.prepare("INSERT INTO t (name, n, x) VALUES (?1, ?2, ?3)", "inserting");
  ASSERT_OK(insert);
  const std::string with_nul("a\0b", 3);  // text is bound with its length, not up to a NUL
  ASSERT_OK(insert->bind(with_nul, std::int64_t{-9'000'000'000}, 2.25));
  ASSERT_OK(insert->run("inserting"));
  insert->reset();
  ASSERT_OK(insert->bind("second", 7, 0.0));
  ASSERT_OK(insert->run("inserting"));

  auto select = db.prepare("SELECT name, n, x, NULL FROM t ORDER BY n", "selecting");
  ASSERT_OK(select);
  auto step = select->step();
  ASSERT_OK(step);
  ASSERT_EQ(*step, Step::row);
  EXPECT_EQ(select->text(0), with_nul);
  EXPECT_EQ(select->int64(1), -9'000'000'000);
  EXPECT_DOUBLE_EQ(select->real(2), 2.25);
  EXPECT_TRUE(select->is_null(3));
  EXPECT_EQ(select->text(3), "");
  ASSERT_EQ(select->step().value(), Step::row);
  EXPECT_EQ(select->text(0), "second");
  EXPECT_FALSE(select->is_null(0));
  EXPECT_EQ(select->step().value(), Step::done);
  EXPECT_EQ(select->parameter_count(), 0);
}

TEST_F(SqliteTest, PrepareErrorCarriesFileWhatMessageAndCode) {
  auto stmt = db.prepare("SELECT nope FROM missing", "reading missing");
  ASSERT_FALSE(stmt.has_value());
  expect_error(stmt.error(), path(), "reading missing", "no such table: missing");
  EXPECT_EQ(db.last_error_code(), SQLITE_ERROR);
  EXPECT_EQ(db.last_message(), "no such table: missing");
  EXPECT_FALSE(db.corrupt());
}

TEST_F(SqliteTest, BindingAParameterThatDoesNotExistIsAnError) {
  auto stmt = db.prepare("SELECT ?1", "selecting one");
  ASSERT_OK(stmt);
  auto bound = stmt->bind("one", "two");
  ASSERT_FALSE(bound.has_value());
  expect_error(bound.error(), path(), "selecting one: binding ?2", "out of range");
  EXPECT_EQ(db.last_error_code(), SQLITE_RANGE);
  ASSERT_FALSE(stmt->bind_at(0, 1.0).has_value()) << "parameters count from 1";
}

TEST_F(SqliteTest, StepErrorCarriesTheExtendedCode) {
  ASSERT_OK(insert("a"));
  auto again = insert("a");
  ASSERT_FALSE(again.has_value());
  expect_error(again.error(), path(), "inserting a", "UNIQUE constraint failed: t.name");
  EXPECT_EQ(db.last_error_code(), SQLITE_CONSTRAINT_PRIMARYKEY)
      << "extended codes, not only SQLITE_CONSTRAINT";
}

TEST_F(SqliteTest, RunAndStepRowRefuseTheWrongShapeOfResult) {
  auto select = db.prepare("SELECT 1", "selecting");
  ASSERT_OK(select);
  auto ran = select->run("running a select");
  ASSERT_FALSE(ran.has_value());
  expect_error(ran.error(), path(), "running a select", "returned a row");
  auto empty = db.prepare("SELECT 1 WHERE 0", "selecting nothing");
  ASSERT_OK(empty);
  auto row = empty->step_row("expecting a row");
  ASSERT_FALSE(row.has_value());
  expect_error(row.error(), path(), "expecting a row", "no row");
}

// A write whose caller returns early: the destructor's ROLLBACK leaves nothing behind.
TEST_F(SqliteTest, TransactionRolledBackByAnEarlyReturn) {
  auto write_then_fail = [&]() -> Status {
    auto txn = JC_TRY(Transaction::begin(db));
    JC_TRY(insert("kept?"));
    JC_TRY(insert("kept?"));  // fails: the same key again
    return txn.commit();
  };
  auto result = write_then_fail();
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("UNIQUE"), std::string::npos) << result.error().message;
  EXPECT_TRUE(names().empty()) << names()[0];
  // The connection is out of the transaction: a new one begins and commits.
  auto txn = Transaction::begin(db);
  ASSERT_OK(txn);
  ASSERT_OK(insert("b"));
  ASSERT_OK(txn->commit());
  EXPECT_FALSE(txn->open());
  EXPECT_EQ(names(), std::vector<std::string>{"b"});
}

TEST_F(SqliteTest, CommittedTransactionIsVisibleToOtherConnections) {
  {
    auto txn = Transaction::begin(db);
    ASSERT_OK(txn);
    ASSERT_OK(insert("a"));
    EXPECT_TRUE(names().empty()) << "not visible before COMMIT";
    ASSERT_OK(txn->commit());
  }
  EXPECT_EQ(names(), std::vector<std::string>{"a"});
}

// COMMIT itself fails (a deferred foreign key is checked there): the error says so, and the
// still open transaction is rolled back when the guard goes.
TEST_F(SqliteTest, CommitFailureIsReportedAndRolledBack) {
  ASSERT_OK(
      db.exec("PRAGMA foreign_keys=ON; CREATE TABLE parent (id INTEGER PRIMARY KEY); "
              "CREATE TABLE child (parent REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
              "creating tables"));
  {
    auto txn = Transaction::begin(db);
    ASSERT_OK(txn);
    ASSERT_OK(db.exec("INSERT INTO child VALUES (42)", "inserting an orphan"));
    auto committed = txn->commit("committing the orphan");
    ASSERT_FALSE(committed.has_value());
    expect_error(committed.error(), path(), "committing the orphan", "FOREIGN KEY constraint failed");
    EXPECT_EQ(db.last_error_code(), SQLITE_CONSTRAINT_FOREIGNKEY);
    EXPECT_TRUE(txn->open()) << "a failed commit leaves the transaction to the guard";
  }
  EXPECT_EQ(sql_query(path(), "SELECT count(*) FROM child"), std::vector<std::string>{"0"});
  auto again = Transaction::begin(db);
  ASSERT_OK(again);  // the guard ended the failed transaction
  auto twice = again->commit();
  ASSERT_OK(twice);
  auto third = again->commit();
  ASSERT_FALSE(third.has_value()) << "nothing left to commit";
  EXPECT_NE(third.error().message.find("no open transaction"), std::string::npos) << third.error().message;
}

TEST_F(SqliteTest, BeginWaitsForTheBusyTimeoutThenSaysLocked) {
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path().c_str(), &other, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  db.set_busy_timeout(50);
  auto txn = Transaction::begin(db, TransactionKind::immediate, "starting a write");
  ASSERT_FALSE(txn.has_value());
  expect_error(txn.error(), path(), "starting a write", "locked");
  EXPECT_TRUE(is_busy(db.last_error_code()));
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close_v2(other);
  auto retried = Transaction::begin(db);
  EXPECT_OK(retried);
}

TEST(SqliteClosedTest, EveryCallOnAClosedDatabaseFailsSayingSo) {
  Database db;
  EXPECT_FALSE(db.is_open());
  auto stmt = db.prepare("SELECT 1", "selecting");
  ASSERT_FALSE(stmt.has_value());
  EXPECT_NE(stmt.error().message.find("selecting: the database is not open"), std::string::npos)
      << stmt.error().message;
  auto exec = db.exec("SELECT 1", "executing");
  ASSERT_FALSE(exec.has_value());
  EXPECT_NE(exec.error().message.find("not open"), std::string::npos) << exec.error().message;
  auto txn = Transaction::begin(db);
  ASSERT_FALSE(txn.has_value());
  EXPECT_NE(txn.error().message.find("BEGIN IMMEDIATE: the database is not open"), std::string::npos)
      << txn.error().message;
  db.exec_best_effort("SELECT 1");
  db.set_busy_timeout(10);
  EXPECT_EQ(db.last_error_code(), SQLITE_OK);
  EXPECT_FALSE(db.corrupt());
  // A statement that was never prepared fails too, without touching SQLite.
  Statement none;
  EXPECT_FALSE(none.bind("x").has_value());
  EXPECT_FALSE(none.step().has_value());
  EXPECT_FALSE(none.run("running").has_value());
  EXPECT_EQ(none.parameter_count(), 0);
  none.reset();
}

TEST_F(SqliteTest, GarbageFileIsCorruptOnFirstRead) {
  const std::filesystem::path garbage = dir() / "garbage.db";
  write_file(garbage, std::string(8192, 'x'));
  Database bad;
  ASSERT_OK(bad.open(garbage.string(), k_read_write, garbage));  // SQLite reads nothing at open
  EXPECT_FALSE(bad.corrupt());
  auto stmt = bad.prepare("SELECT count(*) FROM sqlite_master", "reading the schema");
  ASSERT_FALSE(stmt.has_value());
  expect_error(stmt.error(), garbage, "reading the schema", "not a database");
  EXPECT_TRUE(is_corruption(bad.last_error_code()));
  EXPECT_TRUE(bad.corrupt());
  auto txn = Transaction::begin(bad);
  ASSERT_FALSE(txn.has_value());
  EXPECT_TRUE(bad.corrupt()) << "stays corrupt";
  // Opening again starts a fresh record.
  ASSERT_OK(bad.open(path().string(), k_read_write, path()));
  EXPECT_FALSE(bad.corrupt());
  EXPECT_EQ(bad.last_error_code(), SQLITE_OK);
}

TEST_F(SqliteTest, OpenFailureNamesTheFile) {
  Database missing;
  const std::filesystem::path nowhere = dir() / "no" / "such" / "dir.db";
  auto opened = missing.open(nowhere.string(), k_read_write, nowhere);
  ASSERT_FALSE(opened.has_value());
  expect_error(opened.error(), nowhere, "cannot open", "unable to open");
  EXPECT_EQ(missing.last_error_code() & 0xFF, SQLITE_CANTOPEN);
}

TEST_F(SqliteTest, BestEffortExecRecordsNothing) {
  db.exec_best_effort("SELECT nope FROM missing");
  EXPECT_EQ(db.last_error_code(), SQLITE_OK);
  EXPECT_FALSE(db.corrupt());
}

TEST_F(SqliteTest, MovedStatementKeepsWorkingAndTheSourceIsEmpty) {
  auto prepared = db.prepare("SELECT ?1", "selecting");
  ASSERT_OK(prepared);
  Statement moved = std::move(*prepared);
  EXPECT_FALSE(prepared->step().has_value()) << "the moved-from statement holds nothing";
  ASSERT_OK(moved.bind("v"));
  ASSERT_EQ(moved.step().value(), Step::row);
  EXPECT_EQ(moved.text(0), "v");
  Statement assigned;
  assigned = std::move(moved);
  assigned.reset();
  ASSERT_EQ(assigned.step().value(), Step::row);
  EXPECT_EQ(assigned.text(0), "v") << "reset keeps the bindings";
}

}  // namespace
}  // namespace jitcache::cache::sql
