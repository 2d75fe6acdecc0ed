// Damaged blobs and damaged indexes: every case is a miss and a fresh produce, counted
// and logged, never a crash and never unverified bytes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iterator>

#include "cache/key_lock.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_checks.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;
using jitcache::testing::LogCapture;

class CorruptionTest : public StoreFixture {
 protected:
  // Stores one entry in a store that is then closed; returns the blob's path.
  std::filesystem::path store_entry() {
    auto store = open_store();
    EXPECT_OK(store->put(facts.key(), facts, producer.bytes, 50.0));
    return store->blob_path(BlobDigest::of(producer.bytes));
  }

  // 300 small entries named `stem`0.. and the test's own, written in a store then closed:
  // an index of many pages.
  void store_many(const std::string& stem) {
    StoreOptions options;
    options.durability = Durability::relaxed;
    auto store = open_store(options);
    for (int i = 0; i < 300; ++i) {
      const Facts f = sample_facts(stem + std::to_string(i));
      ASSERT_OK(store->put(f.key(), f, make_bytes(64, seed + i), 1.0));
    }
    ASSERT_OK(store->put(facts.key(), facts, producer.bytes, 1.0));
  }

  // The blob at `path` replaced by a FIFO: opened for reading, it waits for a writer for
  // ever unless opened non-blocking.
  static void replace_with_fifo(const std::filesystem::path& path) {
    std::filesystem::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  }

  // A fresh store's lookup must miss and quarantine one entry; `why` is said where it hits, and
  // the log must hold `logged` where given.
  void expect_quarantined_miss(const std::string& why = {}, const std::string& logged = {}) {
    LogCapture log;
    auto store = open_store();
    auto lookup = store->get(facts.key());
    ASSERT_OK(lookup);
    EXPECT_FALSE(*lookup) << why;
    EXPECT_EQ(store->session_counters().quarantined, 1u);
    if (!logged.empty()) {
      EXPECT_GE(log.count_containing(logged), 1u) << log.all();
    }
  }

  // A fresh store must miss, produce once, count one quarantined entry, and heal.
  void expect_miss_and_reproduce(std::uint64_t quarantined = 1) {
    LogCapture log;
    auto store = open_store();
    ASSERT_TRUE(store);
    auto lookup = store->get(facts.key());
    ASSERT_OK(lookup);
    EXPECT_FALSE(*lookup) << "a damaged entry must be a miss";
    auto result = store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(result);
    EXPECT_EQ(result->source, Source::produced);
    EXPECT_EQ(*result->bytes, producer.bytes);
    EXPECT_EQ(producer.calls, 1);
    const Counters c = store->session_counters();
    EXPECT_EQ(c.quarantined, quarantined);
    EXPECT_EQ(c.misses, 2u);  // the get and the get_or_create
    EXPECT_EQ(c.produces, 1u);
    EXPECT_EQ(c.disk_hits, 0u);
    EXPECT_EQ(c.memory_hits, 0u);
    EXPECT_GE(log.count_containing("quarantined"), 1u) << log.all();
    store.reset();
    // Healed: a new process reads the re-produced entry from disk.
    store = open_store();
    ASSERT_TRUE(expect_hit(*store, facts.key(), Tier::disk, &producer.bytes));
    expect_verified_clean(*store);
  }

  std::uint64_t seed = jitcache::testing::test_seed("corruption");
  Facts facts = sample_facts("corrupt");
  CountingProducer producer{make_bytes(4096, seed)};
};

TEST_F(CorruptionTest, FlippedByte) {
  const auto blob = store_entry();
  std::string content = read_file(blob);
  content[std::mt19937_64(seed)() % content.size()] ^= 0x10;
  write_file(blob, content);
  expect_miss_and_reproduce();
  EXPECT_EQ(count_files(root() / "quarantine"), 1u) << "the bad blob is kept for inspection";
}

TEST_F(CorruptionTest, Truncated) {
  const auto blob = store_entry();
  std::filesystem::resize_file(blob, 1000);
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, ZeroLength) {
  const auto blob = store_entry();
  std::filesystem::resize_file(blob, 0);
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, Extended) {
  const auto blob = store_entry();
  std::ofstream(blob, std::ios::app | std::ios::binary) << "trailing";
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, Deleted) {
  const auto blob = store_entry();
  std::filesystem::remove(blob);
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, ShardDirectoryDeleted) {
  const auto blob = store_entry();
  std::filesystem::remove_all(blob.parent_path());
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, ReplacedBySymlinkIsNotFollowed) {
  const auto blob = store_entry();
  // Someone points the blob at a file of their own with the right content and size.
  const auto planted = dir() / "planted";
  std::filesystem::copy_file(blob, planted);
  std::filesystem::remove(blob);
  std::filesystem::create_symlink(planted, blob);
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, ShardReplacedBySymlinkIsNotFollowed) {
  const auto blob = store_entry();
  const auto planted = dir() / "planted-shard";
  std::filesystem::create_directory(planted);
  std::filesystem::copy_file(blob, planted / blob.filename());
  std::filesystem::remove_all(blob.parent_path());
  std::filesystem::create_directory_symlink(planted, blob.parent_path());
  expect_quarantined_miss("a blob was read through a symlinked shard directory", "symbolic link");
}

TEST_F(CorruptionTest, ReplacedByDirectory) {
  const auto blob = store_entry();
  std::filesystem::remove(blob);
  std::filesystem::create_directory(blob);
  expect_quarantined_miss();
}

// A FIFO opened for reading waits for a writer for ever unless opened non-blocking: in
// place of a blob it must be a bad blob like any other, found at once.
TEST_F(CorruptionTest, ReplacedByFifoIsABadBlobNotAHang) {
  const auto blob = store_entry();
  ASSERT_NO_FATAL_FAILURE(replace_with_fifo(blob));
  const jitcache::testing::HangGuard guard(60);
  expect_quarantined_miss("", "is a FIFO (not a regular file)");
  const auto moved = std::filesystem::directory_iterator(root() / "quarantine");
  EXPECT_EQ(std::distance(begin(moved), end(moved)), 1) << "the FIFO is moved aside";
  std::filesystem::remove(blob);  // nothing left in the way, if the quarantine failed
  ASSERT_OK(open_store()->put(facts.key(), facts, producer.bytes, 1.0));
  ASSERT_NO_FATAL_FAILURE(replace_with_fifo(blob));
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, ReplacedBySocketIsABadBlob) {
  const auto blob = store_entry();
  std::filesystem::remove(blob);
  ASSERT_TRUE(jitcache::testing::make_unix_socket(blob));
  const jitcache::testing::HangGuard guard(60);
  {
    LogCapture log;
    auto lookup = open_store()->get(facts.key());
    ASSERT_OK(lookup);
    EXPECT_FALSE(*lookup);
    EXPECT_GE(log.count_containing("is a socket (not a regular file)"), 1u) << log.all();
  }
  std::filesystem::remove(blob);
  ASSERT_OK(open_store()->put(facts.key(), facts, producer.bytes, 1.0));
  std::filesystem::remove(blob);
  ASSERT_TRUE(jitcache::testing::make_unix_socket(blob));
  expect_miss_and_reproduce();
}

TEST_F(CorruptionTest, VerifyWithAFifoBlobFinishesAndFindsIt) {
  const auto blob = store_entry();
  ASSERT_NO_FATAL_FAILURE(replace_with_fifo(blob));
  const jitcache::testing::HangGuard guard(60);
  auto store = open_store();
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_FALSE(report->clean());
  expect_verified_clean(*store, "the bad entry was dropped by the first verify");
}

// A key's lock file is only ever a regular file the store made: a FIFO, a socket or a
// symlink at its name is no lock, so it is replaced, and the produce goes ahead.
TEST_F(CorruptionTest, ForeignFileAtALockNameIsReplacedByALock) {
  const auto lock = root() / "locks" / (facts.key().to_hex() + ".lock");
  for (const char* kind : {"fifo", "socket", "symlink"}) {
    SCOPED_TRACE(kind);
    { auto store = open_store(); }  // creates locks/
    std::filesystem::remove(lock);
    const std::string k = kind;
    if (k == "fifo") {
      ASSERT_EQ(::mkfifo(lock.c_str(), 0600), 0);
    } else if (k == "socket") {
      ASSERT_TRUE(jitcache::testing::make_unix_socket(lock));
    } else {
      std::filesystem::create_symlink(dir() / "elsewhere", lock);
    }
    const jitcache::testing::HangGuard guard(60);
    LogCapture log;
    auto store = open_store();
    producer.calls = 0;
    auto result = store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(result);
    EXPECT_EQ(producer.calls, 1);
    EXPECT_GE(log.count_containing("not a lock file; removing it"), 1u) << log.all();
    struct stat st {};
    if (::lstat(lock.c_str(), &st) == 0) {
      EXPECT_TRUE(S_ISREG(st.st_mode));
    }
    EXPECT_FALSE(std::filesystem::exists(dir() / "elsewhere"));
    store.reset();
    std::filesystem::remove_all(root());
  }
}

TEST_F(CorruptionTest, OpenLockFileRefusesADirectoryItCannotRemove) {
  { auto store = open_store(); }
  const auto locks = root() / "locks";
  std::filesystem::create_directories(locks / "x.lock" / "child");
  const int locks_fd = ::open(locks.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(locks_fd, 0);
  LogCapture log;
  const auto opened = open_lock_file(locks_fd, "x.lock", locks / "x.lock");
  ::close(locks_fd);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, ErrorCode::unsafe);
  EXPECT_NE(opened.error().message.find("is a directory, not a regular lock file"), std::string::npos)
      << opened.error().message;
}

TEST_F(CorruptionTest, SharedBlobQuarantinesEveryEntryUsingIt) {
  const Facts other = sample_facts("same-bytes");
  {
    auto store = open_store();
    ASSERT_OK(store->put(facts.key(), facts, producer.bytes, 1.0));
    ASSERT_OK(store->put(other.key(), other, producer.bytes, 1.0));
  }
  const auto blob = root() / "blobs" / BlobDigest::of(producer.bytes).to_hex().substr(0, 2) /
                    BlobDigest::of(producer.bytes).to_hex();
  std::filesystem::resize_file(blob, 10);
  expect_miss_and_reproduce(2);
  auto store = open_store();
  auto lookup = store->get(other.key());
  ASSERT_OK(lookup);
  EXPECT_FALSE(*lookup) << "the second entry pointed to the same damaged blob";
}

TEST_F(CorruptionTest, VerifyFindsAndQuarantinesEveryBadBlob) {
  std::vector<Facts> all;
  {
    auto store = open_store();
    for (int i = 0; i < 6; ++i) {
      all.push_back(sample_facts("v" + std::to_string(i)));
      ASSERT_OK(store->put(all.back().key(), all.back(), make_bytes(512, seed + i), 1.0));
    }
  }
  auto blob_of = [&](int i) {
    const std::string hex = BlobDigest::of(make_bytes(512, seed + i)).to_hex();
    return root() / "blobs" / hex.substr(0, 2) / hex;
  };
  std::filesystem::remove(blob_of(1));
  std::filesystem::resize_file(blob_of(3), 0);
  std::string flipped = read_file(blob_of(5));
  flipped[7] ^= 1;
  write_file(blob_of(5), flipped);

  LogCapture log;
  auto store = open_store();
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_FALSE(report->clean());
  EXPECT_EQ(report->checked, 6u);
  ASSERT_EQ(report->bad.size(), 3u);
  std::set<CacheKey> bad;
  for (const auto& finding : report->bad) {
    bad.insert(finding.key);
    EXPECT_NE(finding.problem.find(root().string()), std::string::npos) << "names the file: " << finding.problem;
  }
  EXPECT_EQ(bad, (std::set<CacheKey>{all[1].key(), all[3].key(), all[5].key()}));
  EXPECT_EQ(store->session_counters().quarantined, 3u);
  auto again = store->verify();
  ASSERT_OK(again);
  EXPECT_TRUE(again->clean()) << "verify quarantined what it found";
  EXPECT_EQ(again->checked, 3u);
}

TEST_F(CorruptionTest, VerifyFindsFactsThatDoNotHashToTheKey) {
  store_entry();
  // An edited row: the facts no longer say what the key was made from.
  auto rows = sql_query(root() / "index.db",
                        "UPDATE entries SET facts = json_set(facts, '$.latent_scale', 'identity')");
  ASSERT_TRUE(rows.empty()) << rows[0];
  auto store = open_store();
  auto report = store->verify();
  ASSERT_OK(report);
  ASSERT_EQ(report->bad.size(), 1u);
  EXPECT_NE(report->bad[0].problem.find("field facts"), std::string::npos) << report->bad[0].problem;
  auto lookup = store->get(facts.key());
  ASSERT_OK(lookup);
  EXPECT_FALSE(*lookup);
}

TEST_F(CorruptionTest, StrayFilesInBlobsAreIgnored) {
  store_entry();
  std::filesystem::create_directories(root() / "blobs" / "zz");
  write_file(root() / "blobs" / "zz" / "evil", "x");
  write_file(root() / "blobs" / "ab" / "not-a-digest", "x");
  auto store = open_store();
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_TRUE(report->clean());
  EXPECT_EQ(report->orphan_blobs, 0u) << "names that are not digests are not blobs";
  GcOptions gc;
  gc.grace = std::chrono::milliseconds(-1000);
  ASSERT_OK(store->gc(gc));
  EXPECT_TRUE(std::filesystem::exists(root() / "blobs" / "zz" / "evil")) << "gc touches only digest names";
}

// ----- the index itself -----

TEST_F(CorruptionTest, GarbageIndexIsRebuilt) {
  store_entry();
  write_file(root() / "index.db", std::string(8192, 'G'));
  std::filesystem::remove(root() / "index.db-wal");
  std::filesystem::remove(root() / "index.db-shm");
  LogCapture log;
  auto store = open_store();
  ASSERT_TRUE(store);
  EXPECT_EQ(log.count_containing("not a usable index"), 1u) << log.all();
  auto result = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(result);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_EQ(producer.calls, 1);
  bool moved_aside = false;
  for (const auto& entry : std::filesystem::directory_iterator(root() / "quarantine"))
    moved_aside |= entry.path().filename().string().starts_with("index.db.");
  EXPECT_TRUE(moved_aside);
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_FALSE(report->clean()) << "entries were lost with the index: verify must say so";
  ASSERT_EQ(report->index_quarantined.size(), 1u);
  EXPECT_FALSE(report->index_quarantined[0].entries) << "garbage holds no countable entries";
  EXPECT_TRUE(std::filesystem::exists(report->index_quarantined[0].moved_to));
  EXPECT_TRUE(report->bad.empty());
  EXPECT_TRUE(report->integrity_problems.empty()) << report->integrity_problems[0];
  store.reset();
  auto reopened = open_store();
  expect_verified_clean(*reopened, "the fresh index itself is sound");
}

TEST_F(CorruptionTest, TruncatedIndexIsRebuilt) {
  store_many("t");
  ASSERT_FALSE(HasFailure());
  const auto size = std::filesystem::file_size(root() / "index.db");
  ASSERT_GT(size, 8192u);
  for (std::uintmax_t cut : {size / 2, std::uintmax_t{100}}) {
    std::filesystem::resize_file(root() / "index.db", cut);
    LogCapture log;
    auto store = open_store();
    ASSERT_TRUE(store);
    // Whatever survived, a caller gets the right bytes and no error.
    auto result = store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(result);
    EXPECT_EQ(*result->bytes, producer.bytes);
    for (int i = 0; i < 300; i += 37) {
      const Facts f = sample_facts("t" + std::to_string(i));
      auto hit = store->get(f.key());
      ASSERT_OK(hit);
      if (*hit) {
        EXPECT_EQ(*(*hit)->bytes, make_bytes(64, seed + i));
      }
    }
    auto report = store->verify();
    ASSERT_OK(report);
    EXPECT_TRUE(report->integrity_problems.empty()) << report->integrity_problems[0];
    EXPECT_EQ(log.count_containing("not a usable index"), 1u) << "cut at " << cut << ": " << log.all();
  }
}

TEST_F(CorruptionTest, IndexDamagedBehindItsHeaderIsRebuiltOnUse) {
  store_many("d");
  ASSERT_FALSE(HasFailure());
  // Damage only the root pages of the key indexes: opening reads the schema and
  // succeeds, the first lookup meets the damage.
  const auto root_pages = sql_query(root() / "index.db",
                                    "SELECT rootpage FROM sqlite_master WHERE name IN "
                                    "('sqlite_autoindex_entries_1', 'entries_lookup')");
  ASSERT_EQ(root_pages.size(), 2u);
  std::string db = read_file(root() / "index.db");
  for (const std::string& root_page : root_pages) {
    const std::size_t page = std::stoul(root_page);
    ASSERT_GE(db.size(), page * 4096);
    for (std::size_t i = (page - 1) * 4096; i < page * 4096; ++i) db[i] = static_cast<char>(0xA5 ^ (i * 7));
  }
  write_file(root() / "index.db", db);
  LogCapture log;
  auto store = open_store();
  ASSERT_TRUE(store);
  EXPECT_EQ(log.count_containing("not a usable index"), 0u) << "damage found too early: " << log.all();
  auto result = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(result);
  EXPECT_EQ(*result->bytes, producer.bytes);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_EQ(log.count_containing("not a usable index"), 1u) << log.all();
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_FALSE(report->clean());
  ASSERT_EQ(report->index_quarantined.size(), 1u) << "recovered on use, reported by verify";
  EXPECT_NE(report->index_quarantined[0].problem.find("malformed"), std::string::npos)
      << report->index_quarantined[0].problem;
  EXPECT_TRUE(report->integrity_problems.empty()) << report->integrity_problems[0];
  EXPECT_EQ(report->checked, 1u) << "the fresh index holds the re-produced entry only";
}

TEST_F(CorruptionTest, NewerSchemaVersionIsAClearErrorAndLeftAlone) {
  store_entry();
  ASSERT_TRUE(sql_query(root() / "index.db", "UPDATE schema_version SET version = 99").empty());
  const std::string before = read_file(root() / "index.db");
  auto store = Store::open(root());
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::database);
  EXPECT_NE(store.error().message.find("schema_version 99 is newer"), std::string::npos) << store.error().message;
  EXPECT_NE(store.error().message.find("index.db"), std::string::npos);
  EXPECT_EQ(read_file(root() / "index.db"), before) << "a newer index must not be rewritten";
}

TEST_F(CorruptionTest, ForeignSqliteDatabaseIsAClearError) {
  std::filesystem::create_directories(root());
  std::filesystem::permissions(root(), std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  ASSERT_TRUE(sql_query(root() / "index.db", "CREATE TABLE photos (id INTEGER)").empty());
  auto store = Store::open(root());
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::database);
  EXPECT_NE(store.error().message.find("not a jitcache index"), std::string::npos) << store.error().message;
  EXPECT_EQ(sql_query(root() / "index.db", "SELECT count(*) FROM photos"), std::vector<std::string>{"0"});
}

TEST_F(CorruptionTest, SchemaVersionTableWithoutRowIsRebuilt) {
  store_entry();
  ASSERT_TRUE(sql_query(root() / "index.db", "DELETE FROM schema_version").empty());
  LogCapture log;
  auto store = open_store();
  ASSERT_TRUE(store);
  EXPECT_EQ(log.count_containing("schema_version holds 0 rows"), 1u) << log.all();
  auto lookup = store->get(facts.key());
  ASSERT_OK(lookup);
  EXPECT_FALSE(*lookup);
}

TEST_F(CorruptionTest, IndexThatIsASymlinkIsRefused) {
  std::filesystem::create_directories(root());
  std::filesystem::permissions(root(), std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  write_file(dir() / "elsewhere.db", "");
  std::filesystem::create_symlink(dir() / "elsewhere.db", root() / "index.db");
  auto store = Store::open(root());
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::unsafe);
  EXPECT_NE(store.error().message.find("symbolic link"), std::string::npos) << store.error().message;
}

}  // namespace
}  // namespace jitcache::cache
