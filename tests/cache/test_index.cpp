// The SQLite index on its own: opening under contention, counters that cannot overflow,
// a check of every value, a damaged schema, and read-only access.
#include <gtest/gtest.h>

#include <grp.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <thread>

#include "cache/index.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;
using jitcache::testing::LogCapture;
using namespace std::chrono_literals;

constexpr const char* k_max_int64 = "9223372036854775807";

class IndexTest : public StoreFixture {
 protected:
  std::filesystem::path db() const { return root() / "index.db"; }

  // A closed cache holding `n` entries.
  void fill(int n) {
    auto store = open_store();
    ASSERT_TRUE(store);
    for (int i = 0; i < n; ++i) {
      const Facts f = sample_facts("e" + std::to_string(i));
      ASSERT_OK(store->put(f.key(), f, make_bytes(100 + i, seed + i), 1.0));
    }
  }

  std::uint64_t seed = jitcache::testing::test_seed("index");
};

// A raw sqlite3 connection, as another program (or an old jitcache) would hold one.
class RawConnection {
 public:
  explicit RawConnection(const std::filesystem::path& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  }
  ~RawConnection() { sqlite3_close_v2(m_db); }
  int exec(const std::string& sql) { return sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr); }

 private:
  sqlite3* m_db = nullptr;
};

// ----- opening under contention (issue 10) -----

// A connection holding RESERVED on a fresh (rollback-journal) file makes SQLite refuse
// `PRAGMA journal_mode=WAL` at once, without calling the busy handler: the interleaving of
// two ranks initialising one cache. Index::open must wait for it, not fail.
TEST_F(IndexTest, OpenWaitsForAConnectionThatHoldsTheFreshFile) {
  std::filesystem::create_directories(root());
  write_file(db(), "");
  RawConnection other(db());
  ASSERT_EQ(other.exec("BEGIN IMMEDIATE"), SQLITE_OK);
  auto release = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    return other.exec("ROLLBACK");
  });
  const auto begin = std::chrono::steady_clock::now();
  auto index = Index::open(db(), 10s, Durability::relaxed);
  const auto waited = std::chrono::steady_clock::now() - begin;
  EXPECT_EQ(release.get(), SQLITE_OK);
  ASSERT_TRUE(index.has_value()) << index.error().error.to_string();
  EXPECT_GE(waited, 250ms) << "it cannot have initialised while the other connection held the file";
  EXPECT_LT(waited, 5s);
  auto totals = (*index)->totals();
  ASSERT_OK(totals);
  EXPECT_EQ(totals->entries, 0u);
}

TEST_F(IndexTest, OpenGivesUpAfterTheBusyTimeoutNamingTheFile) {
  std::filesystem::create_directories(root());
  write_file(db(), "");
  RawConnection other(db());
  ASSERT_EQ(other.exec("BEGIN IMMEDIATE"), SQLITE_OK);
  const auto begin = std::chrono::steady_clock::now();
  auto index = Index::open(db(), 300ms, Durability::relaxed);
  const auto waited = std::chrono::steady_clock::now() - begin;
  ASSERT_FALSE(index.has_value());
  EXPECT_FALSE(index.error().corrupt);
  EXPECT_NE(index.error().error.message.find(db().string()), std::string::npos)
      << index.error().error.message;
  EXPECT_NE(index.error().error.message.find("locked"), std::string::npos) << index.error().error.message;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(other.exec("ROLLBACK"), SQLITE_OK);
}

// ----- counters that cannot overflow (issue 8) -----

TEST_F(IndexTest, JunkUsageRowsSaturateInsteadOfFailingEveryFold) {
  fill(2);
  const Facts f = sample_facts("e0");
  const std::string key = f.key().to_hex();
  ASSERT_TRUE(sql_query(db(), "INSERT INTO usage_log (key, hits, last_used) VALUES ('" + key + "', " +
                                  k_max_int64 + ", 1), ('" + key + "', " + k_max_int64 + ", 2)")
                  .empty());
  auto store = open_store();
  ASSERT_TRUE(store);
  auto entries = store->list();  // folds usage_log
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 2u);
  for (const EntryInfo& e : *entries) {
    if (e.key != f.key()) continue;
    EXPECT_EQ(e.hits, static_cast<std::uint64_t>(k_max_count)) << "hits saturate at k_max_count";
  }
  // A second fold on top of a saturated row saturates again.
  ASSERT_TRUE(sql_query(db(), "INSERT INTO usage_log (key, hits, last_used) VALUES ('" + key + "', " +
                                  k_max_int64 + ", 3)")
                  .empty());
  ASSERT_OK(store->list());
  GcOptions gc;
  gc.max_bytes = 1;
  ASSERT_OK(store->gc(gc));
  EXPECT_EQ(sql_query(db(), "SELECT count(*) FROM usage_log"), std::vector<std::string>{"0"});
}

TEST_F(IndexTest, CountersSaturate) {
  fill(1);
  ASSERT_TRUE(
      sql_query(db(), std::string("UPDATE counters SET value = ") + k_max_int64 + " WHERE name = 'misses'")
          .empty());
  {
    auto store = open_store();
    ASSERT_TRUE(store);
    auto lookup = store->get(sample_facts("absent").key());
    ASSERT_OK(lookup);
    ASSERT_OK(store->flush());
    auto stats = store->stats();
    ASSERT_OK(stats);
    EXPECT_EQ(stats->totals.misses, static_cast<std::uint64_t>(k_max_count));
  }
  EXPECT_EQ(sql_query(db(), "SELECT typeof(value) || ' ' || value FROM counters WHERE name = 'misses'"),
            std::vector<std::string>{"integer " + std::to_string(k_max_count)});
}

// ----- read-only access -----

// Every way a read-only Index is used, run where it cannot write; "" when all held.
std::string read_only_checks(const std::filesystem::path& db, const std::vector<Facts>& stored) {
  IndexOptions options;
  options.access = IndexAccess::read_only;
  options.busy_timeout = 2s;
  auto opened = Index::open(db, options);
  if (!opened) return "open: " + opened.error().error.to_string();
  Index& index = **opened;
  if (index.access() != IndexAccess::read_only) return "access() is not read_only";
  for (const Facts& f : stored) {
    auto row = index.lookup(f.key());
    if (!row) return "lookup: " + row.error().to_string();
    if (!*row) return "lookup: " + f.key().to_hex() + " not found";
  }
  auto listed = index.list({});
  if (!listed || listed->size() != stored.size()) return "list: wrong result";
  auto totals = index.totals();
  if (!totals || totals->entries != stored.size()) return "totals: wrong result";
  if (auto counters = index.counters(); !counters) return "counters: " + counters.error().to_string();
  if (auto problems = index.integrity_check(); !problems || !problems->empty())
    return "integrity_check failed";
  if (auto problems = index.check_values(); !problems || !problems->empty()) return "check_values failed";
  // Every write is refused, saying why.
  const Facts extra = sample_facts("extra");
  std::vector<std::string> refusals;
  auto record = [&](const auto& result) {
    refusals.push_back(result ? std::string("succeeded") : result.error().message);
  };
  record(
      index.insert(NewEntry{extra.key(), BlobDigest::of(make_bytes(1, 1)), 1, extra.to_json(), 1.0, 1}, {}));
  const Usage use{stored.front().key(), 1, 1};
  Counters delta;
  delta.misses = 1;
  record(index.record_usage(std::span(&use, 1), delta));
  record(index.fold_usage());
  record(index.remove({}));
  record(index.remove_key(stored.front().key()));
  record(index.evict(0, std::nullopt));
  for (const std::string& refusal : refusals)
    if (refusal.find("opened read-only") == std::string::npos ||
        refusal.find(db.string()) == std::string::npos)
      return "a write was not refused clearly: " + refusal;
  return "";
}

using jitcache::testing::ReadOnlyMeans;
using jitcache::testing::run_read_only;

class ReadOnlyIndexTest : public IndexTest, public ::testing::WithParamInterface<ReadOnlyMeans> {
 protected:
  std::vector<Facts> stored() const { return {sample_facts("e0"), sample_facts("e1"), sample_facts("e2")}; }
  static std::string verdict(const std::string& text) { return jitcache::testing::read_only_verdict(text); }

  // Two entries, then a third written while another connection holds the WAL open, so that
  // it stays in index.db-wal; `files` of the directory then copied to dir()/baked, which is
  // returned.
  std::filesystem::path bake_with_wal(std::initializer_list<const char*> files) {
    fill(2);
    const std::filesystem::path baked = dir() / "baked";
    RawConnection writer(db());
    // Reading keeps this connection attached to the WAL, so the store's close does not
    // checkpoint it away.
    EXPECT_EQ(writer.exec("PRAGMA wal_autocheckpoint=0; SELECT count(*) FROM entries"), SQLITE_OK);
    auto store = open_store();
    const Facts third = sample_facts("e2");
    EXPECT_OK(store->put(third.key(), third, make_bytes(102, seed + 2), 1.0));
    store.reset();
    EXPECT_GT(std::filesystem::file_size(root() / "index.db-wal"), 0u);
    std::filesystem::create_directory(baked);
    for (const char* name : files) std::filesystem::copy_file(root() / name, baked / name);
    return baked;
  }
};

TEST_P(ReadOnlyIndexTest, ServesABakedCacheWithoutWritingAnything) {
  fill(3);
  ASSERT_FALSE(std::filesystem::exists(root() / "index.db-wal")) << "a clean close leaves no -wal";
  const std::string before = read_file(db());
  const std::string text =
      run_read_only(root(), GetParam(), [&] { return read_only_checks(db(), stored()); });
  if (text.starts_with("SKIP: ")) GTEST_SKIP() << text;
  EXPECT_EQ(verdict(text), "") << text;
  std::cout << "[read-only] write probe: " << text.substr(0, text.find('\n')) << "\n";
  EXPECT_EQ(read_file(db()), before);
  EXPECT_FALSE(std::filesystem::exists(root() / "index.db-wal"));
  EXPECT_FALSE(std::filesystem::exists(root() / "index.db-shm"));
}

TEST_P(ReadOnlyIndexTest, ReadsWalContentThroughAnExistingShm) {
  // Baked while a writer was still open: index.db, -wal (with the third entry) and -shm.
  const std::filesystem::path baked = bake_with_wal({"index.db", "index.db-wal", "index.db-shm"});
  ASSERT_FALSE(HasFailure());
  const std::string text =
      run_read_only(baked, GetParam(), [&] { return read_only_checks(baked / "index.db", stored()); });
  if (text.starts_with("SKIP: ")) GTEST_SKIP() << text;
  EXPECT_EQ(verdict(text), "") << text;
}

TEST_P(ReadOnlyIndexTest, WalContentWithoutShmIsAClearError) {
  const std::filesystem::path baked = bake_with_wal({"index.db", "index.db-wal"});
  ASSERT_FALSE(HasFailure());
  const std::string text = run_read_only(baked, GetParam(), [&] {
    IndexOptions options;
    options.access = IndexAccess::read_only;
    auto index = Index::open(baked / "index.db", options);
    if (index) return std::string("opened, although its WAL cannot be read");
    return index.error().error.message;
  });
  if (text.starts_with("SKIP: ")) GTEST_SKIP() << text;
  EXPECT_NE(verdict(text).find("index.db-wal holds changes"), std::string::npos) << text;
  EXPECT_NE(verdict(text).find("checkpoint"), std::string::npos) << text;
  EXPECT_NE(verdict(text).find((baked / "index.db").string()), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Means, ReadOnlyIndexTest,
                         ::testing::Values(ReadOnlyMeans::bind_mount, ReadOnlyMeans::other_user),
                         [](const auto& info) {
                           return std::string(info.param == ReadOnlyMeans::bind_mount ? "BindMount"
                                                                                      : "OtherUser");
                         });

TEST_F(IndexTest, ReadOnlyRefusesAnOlderSchemaAndLeavesItAlone) {
  fill(1);
  ASSERT_TRUE(
      sql_query(db(),
                "DROP TABLE usage_log; DROP INDEX entries_lookup; UPDATE schema_version SET version = 1")
          .empty());
  const std::string before = read_file(db());
  IndexOptions options;
  options.access = IndexAccess::read_only;
  auto index = Index::open(db(), options);
  ASSERT_FALSE(index.has_value());
  const std::string& message = index.error().error.message;
  EXPECT_NE(message.find(db().string()), std::string::npos) << message;
  EXPECT_NE(message.find("schema_version 1 is older"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot be migrated"), std::string::npos) << message;
  EXPECT_FALSE(index.error().corrupt);
  EXPECT_EQ(read_file(db()), before);
  EXPECT_EQ(sql_query(db(), "SELECT version FROM schema_version"), std::vector<std::string>{"1"});
}

TEST_F(IndexTest, ReadOnlyRefusesANewerSchema) {
  fill(1);
  ASSERT_TRUE(sql_query(db(), "UPDATE schema_version SET version = 99").empty());
  IndexOptions options;
  options.access = IndexAccess::read_only;
  auto index = Index::open(db(), options);
  ASSERT_FALSE(index.has_value());
  EXPECT_NE(index.error().error.message.find("schema_version 99 is newer"), std::string::npos)
      << index.error().error.message;
}

TEST_F(IndexTest, ReadOnlyNeverCreatesAnIndex) {
  std::filesystem::create_directories(root());
  IndexOptions options;
  options.access = IndexAccess::read_only;
  auto missing = Index::open(db(), options);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().error.code, ErrorCode::not_found);
  EXPECT_NE(missing.error().error.message.find("never created"), std::string::npos)
      << missing.error().error.message;
  EXPECT_FALSE(std::filesystem::exists(db()));
  write_file(db(), "");
  auto empty = Index::open(db(), options);
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().error.message.find("never initialised"), std::string::npos)
      << empty.error().error.message;
  EXPECT_EQ(std::filesystem::file_size(db()), 0u);
  EXPECT_FALSE(std::filesystem::exists(root() / "index.lock")) << "a read-only opener takes no lock file";
}

TEST_F(IndexTest, ReadOnlyInAWritableDirectoryRefusesWrites) {
  fill(3);
  const std::string before = read_file(db());
  EXPECT_EQ(read_only_checks(db(), {sample_facts("e0"), sample_facts("e1"), sample_facts("e2")}), "");
  EXPECT_EQ(read_file(db()), before);
}

// ----- a damaged schema (issue 10, item 8) -----

TEST_F(IndexTest, DroppedTablesAndTriggersNameTheRecovery) {
  for (const char* drop :
       {"DROP TABLE entries", "DROP TABLE usage_log", "DROP TABLE counters",
        "DROP TRIGGER entries_after_insert", "ALTER TABLE usage_log DROP COLUMN last_used"}) {
    SCOPED_TRACE(drop);
    std::filesystem::remove_all(root());
    fill(1);
    ASSERT_TRUE(sql_query(db(), drop).empty());
    for (IndexAccess access : {IndexAccess::read_write, IndexAccess::read_only}) {
      IndexOptions options;
      options.access = access;
      auto index = Index::open(db(), options);
      ASSERT_FALSE(index.has_value());
      EXPECT_TRUE(index.error().schema_damaged);
      EXPECT_FALSE(index.error().corrupt);
      EXPECT_NE(index.error().error.message.find("jitcache clear --all"), std::string::npos)
          << index.error().error.message;
    }
    auto store = Store::open(root());
    ASSERT_FALSE(store.has_value()) << "a damaged schema is not rebuilt behind the operator's back";
    StoreOptions quarantine;
    quarantine.damaged_index = DamagedIndex::quarantine;
    auto recovered = Store::open(root(), quarantine);
    ASSERT_OK(recovered);
    ASSERT_EQ((*recovered)->index_recoveries().size(), 1u);
    auto cleared = (*recovered)->clear_all();
    ASSERT_OK(cleared);
    EXPECT_EQ(cleared->blob_files, 1u);
    auto report = (*recovered)->verify();
    ASSERT_OK(report);
    EXPECT_EQ(report->index_quarantined.size(), 1u);
    EXPECT_TRUE(report->integrity_problems.empty()) << report->integrity_problems[0];
  }
}

TEST_F(IndexTest, ClearAllMovesAsideAnIndexItCannotChange) {
  fill(3);
  // An index that opens and reads but refuses every delete (a trigger an operator added).
  ASSERT_TRUE(sql_query(db(), "CREATE TRIGGER keep BEFORE DELETE ON entries BEGIN SELECT RAISE(ABORT, 'kept'); END")
                  .empty());
  auto store = open_store();
  ASSERT_TRUE(store);
  ASSERT_FALSE(store->remove({}, DryRun::no).has_value()) << "the trigger must make a plain remove fail";
  LogCapture log;
  auto cleared = store->clear_all();
  ASSERT_OK(cleared);
  ASSERT_TRUE(cleared->index_quarantined.has_value());
  EXPECT_EQ(cleared->index_quarantined->entries, std::optional<std::uint64_t>(3));
  EXPECT_NE(cleared->index_quarantined->problem.find("kept"), std::string::npos) << cleared->index_quarantined->problem;
  EXPECT_TRUE(std::filesystem::exists(cleared->index_quarantined->moved_to));
  EXPECT_EQ(cleared->blob_files, 3u);
  EXPECT_EQ(count_files(root() / "blobs"), 0u);
  EXPECT_EQ(log.count_containing("not a usable index"), 1u) << log.all();
  auto listed = store->list();
  ASSERT_OK(listed);
  EXPECT_TRUE(listed->empty());
  // The store goes on working on its fresh index.
  const Facts f = sample_facts("after");
  ASSERT_OK(store->put(f.key(), f, make_bytes(10, seed), 1.0));
  auto hit = store->get(f.key());
  ASSERT_OK(hit);
  EXPECT_TRUE(hit->has_value());
}

TEST_F(IndexTest, ClearAllOnAHealthyIndexMovesNothingAside) {
  fill(3);
  auto store = open_store();
  ASSERT_TRUE(store);
  auto cleared = store->clear_all();
  ASSERT_OK(cleared);
  EXPECT_EQ(cleared->removed.size(), 3u);
  EXPECT_FALSE(cleared->index_quarantined.has_value());
  EXPECT_EQ(cleared->blob_files, 0u);
  EXPECT_EQ(count_files(root() / "blobs"), 0u) << "the removed entries' blobs go with them";
  EXPECT_TRUE(store->index_recoveries().empty());
}

TEST_F(IndexTest, CheckValuesNamesEveryBrokenRule) {
  fill(2);
  const std::string k0 = sample_facts("e0").key().to_hex(), k1 = sample_facts("e1").key().to_hex();
  ASSERT_TRUE(
      sql_query(db(),
                "UPDATE entries SET size = -1, hits = -2, created = -3, compile_ms = -4, "
                "digest = 'XYZ', facts = '[1]' WHERE key = '" +
                    k0 +
                    "'; "
                    "UPDATE entries SET last_used = 99999999999999999, key_schema = 'x' WHERE key = '" +
                    k1 +
                    "'; "
                    "INSERT INTO usage_log VALUES ('short', -1, -1); "
                    "UPDATE counters SET value = 'junk' WHERE name = 'disk_hits'; "
                    "UPDATE counters SET value = 7 WHERE name = 'entries'; "
                    "UPDATE counters SET value = 5 WHERE name = 'bytes'; "
                    "DELETE FROM counters WHERE name = 'coalesced'")
          .empty());
  auto index = Index::open(db(), 2s, Durability::relaxed);
  ASSERT_TRUE(index.has_value()) << index.error().error.to_string();
  auto problems = (*index)->check_values();
  ASSERT_OK(problems);
  std::string all;
  for (const std::string& p : *problems) all += p + "\n";
  for (const char* field :
       {"entries.size", "entries.hits", "entries.created", "entries.compile_ms", "entries.digest",
        "entries.facts", "entries.last_used", "entries.key_schema", "usage_log.key", "usage_log.hits",
        "usage_log.last_used", "counters.value", "'disk_hits'", "row 'coalesced' is missing",
        "counters.entries: 7", "counters.bytes"})
    EXPECT_NE(all.find(field), std::string::npos) << field << " in:\n" << all;
  EXPECT_EQ(all.find("entries.key:"), std::string::npos) << all;
  for (const std::string& p : *problems) EXPECT_TRUE(p.starts_with(db().string() + ": ")) << p;
}

TEST_F(IndexTest, CheckValuesOnAHealthyIndexIsEmpty) {
  fill(5);
  auto index = Index::open(db(), 2s, Durability::relaxed);
  ASSERT_TRUE(index.has_value()) << index.error().error.to_string();
  auto problems = (*index)->check_values();
  ASSERT_OK(problems);
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// What enters the index keeps verify's rules (issue 24): insert refuses a row verify would
// call damaged (NaN used to fail on "NOT NULL constraint failed", the rest to make verify
// report the index damaged forever), naming the field; and verify's rule is the same
// predicate, boundaries included.
TEST_F(IndexTest, InsertRefusesWhatVerifyWouldCallDamaged) {
  fill(1);
  auto index = Index::open(db(), 2s, Durability::relaxed);
  ASSERT_TRUE(index.has_value()) << index.error().error.to_string();
  const Facts f = sample_facts("incoming");
  const BlobDigest digest = BlobDigest::of(make_bytes(10, seed));
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 1e300, k_max_compile_ms * 1.000001}) {
    auto inserted = (*index)->insert(NewEntry{f.key(), digest, 10, f.to_json(), bad, 1}, {});
    ASSERT_FALSE(inserted.has_value()) << bad << " stored";
    EXPECT_EQ(inserted.error().code, ErrorCode::invalid_input);
    EXPECT_NE(inserted.error().message.find("compile_ms: "), std::string::npos) << inserted.error().message;
    EXPECT_NE(inserted.error().message.find(f.key().to_hex()), std::string::npos) << inserted.error().message;
  }
  auto too_big = (*index)->insert(NewEntry{f.key(), digest, k_max_entry_bytes + 1, f.to_json(), 1.0, 1}, {});
  ASSERT_FALSE(too_big.has_value());
  EXPECT_NE(too_big.error().message.find("size: "), std::string::npos) << too_big.error().message;
  auto not_object = (*index)->insert(NewEntry{f.key(), digest, 10, "[1]", 1.0, 1}, {});
  ASSERT_FALSE(not_object.has_value());
  EXPECT_NE(not_object.error().message.find("facts: "), std::string::npos) << not_object.error().message;
  auto problems = (*index)->check_values();
  ASSERT_OK(problems);
  EXPECT_TRUE(problems->empty()) << (*problems)[0];

  // The boundaries: verify flags a stored value exactly when the intake refuses it.
  const std::string k0 = sample_facts("e0").key().to_hex();
  for (const char* value : {"0", "1e9", "1000000000.5", "-0.001", "1e300", "'abc'"}) {
    index->reset();
    ASSERT_TRUE(sql_query(db(), std::string("UPDATE entries SET compile_ms = ") + value + " WHERE key = '" + k0 + "'")
                    .empty());
    index = Index::open(db(), 2s, Durability::relaxed);
    ASSERT_TRUE(index.has_value()) << index.error().error.to_string();
    auto found = (*index)->check_values();
    ASSERT_OK(found);
    const bool flagged = !found->empty();
    const bool number = value[0] != '\'';
    EXPECT_EQ(flagged, !(number && compile_ms_in_range(std::strtod(value, nullptr)))) << value;
  }
}

}  // namespace
}  // namespace jitcache::cache
