// The usage journal (cache/usage_journal.hpp): a read-only session writes one line and no
// index transaction, the readers fold it, damaged lines are skipped, concurrent appenders
// and folds lose and double nothing, and a journal someone else could have written is
// neither read nor appended to.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "cache/store.hpp"
#include "cache/usage_journal.hpp"
#include "cache_test_support.hpp"
#include "seeded_fixture.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;

class UsageJournalTest : public Seeded<StoreFixture> {
 protected:
  std::filesystem::path journal() const { return root() / k_usage_journal_name; }

  // One entry stored by a first session; returns its facts.
  Facts stored(const std::string& id) {
    const Facts facts = sample_facts(id);
    auto store = open_store();
    EXPECT_OK(store->put(facts.key(), facts, make_bytes(256, seed), 10.0));
    EXPECT_OK(store->list());  // settles the put's counters into the index
    return facts;
  }

  // A session that only reads: what a warm start does to the cache.
  void warm_session(const Facts& facts, int hits) {
    auto store = open_store();
    for (int i = 0; i < hits; ++i) {
      auto hit = store->get(facts.key());
      ASSERT_OK(hit);
      ASSERT_TRUE(*hit);
    }
  }

  std::uint64_t listed_hits() {
    auto store = open_store();
    auto entries = store->list();
    EXPECT_OK(entries);
    std::uint64_t hits = 0;
    if (entries)
      for (const EntryInfo& e : *entries) hits += e.hits;
    return hits;
  }
};

TEST_F(UsageJournalTest, LinesRoundTripAndEveryCounterKindSurvives) {
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    std::vector<Usage> uses;
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i)
      uses.push_back(Usage{CacheKey::of("key" + std::to_string(rng())), rng() % 1'000'000,
                           static_cast<std::int64_t>(rng() % 2'000'000'000'000)});
    Counters counters;
    counters.disk_hits = rng() % 100;
    counters.memory_hits = rng() % 100;
    counters.compile_ms_saved = static_cast<double>(rng() % 100000) / 7.0;
    const JournalContents read = parse_journal(journal_line(uses, counters));
    ASSERT_EQ(read.batches, 1u);
    EXPECT_EQ(read.damaged, 0u);
    ASSERT_EQ(read.uses.size(), uses.size());
    for (std::size_t i = 0; i < uses.size(); ++i) {
      EXPECT_EQ(read.uses[i].key, uses[i].key);
      EXPECT_EQ(read.uses[i].hits, uses[i].hits);
      EXPECT_EQ(read.uses[i].last_used_ms, uses[i].last_used_ms);
    }
    EXPECT_EQ(read.counters, counters);
  }
}

TEST_F(UsageJournalTest, TornAlteredAndForeignLinesAreSkippedAndTheRestIsRead) {
  Counters one;
  one.disk_hits = 1;
  const std::vector<Usage> uses{Usage{CacheKey::of("k"), 3, 1000}};
  const std::string good = journal_line(uses, one);
  std::string altered = good;
  altered[altered.size() - 3] ^= 0x01;  // inside the JSON: the digest no longer matches
  const std::string torn = good.substr(0, good.size() / 2);
  // A torn line followed by another writer's line (which starts with its own '\n'), a line
  // whose digest matches JSON of another shape, and plain junk.
  const std::string other_shape_json = R"({"u":"no","c":{}})";
  const std::string other_shape = "\n" + CacheKey::of("x").to_hex() + " " + other_shape_json;
  const std::string bytes = good + torn + good + altered + other_shape + "\nnot a line at all" + good;
  const JournalContents read = parse_journal(bytes);
  EXPECT_EQ(read.batches, 3u);
  EXPECT_EQ(read.damaged, 4u);
  EXPECT_EQ(read.counters.disk_hits, 3u);
  ASSERT_EQ(read.uses.size(), 3u);
  EXPECT_EQ(read.uses[2].hits, 3u);
}

TEST_F(UsageJournalTest, AWarmSessionWritesOneLineAndNoIndexTransaction) {
  const Facts facts = stored("warm");
  const auto counters_sql = "SELECT value FROM counters WHERE name = 'disk_hits'";
  const auto index_before = read_file(root() / "index.db");
  const auto counted_before = sql_query(root() / "index.db", counters_sql);
  warm_session(facts, 7);
  // The index file is byte for byte what it was, and no WAL holds a change for it.
  EXPECT_EQ(read_file(root() / "index.db"), index_before);
  std::error_code ec;
  const auto wal = std::filesystem::file_size(root() / "index.db-wal", ec);
  EXPECT_TRUE(ec || wal == 0) << "index.db-wal holds " << wal << " bytes";
  const JournalContents journal_now = parse_journal(read_file(journal()));
  EXPECT_EQ(journal_now.batches, 1u);
  // The disk tier's use (the first hit) and the memory tier's (the six after it).
  std::uint64_t hits = 0;
  for (const Usage& use : journal_now.uses) {
    EXPECT_EQ(use.key, facts.key());
    hits += use.hits;
  }
  EXPECT_EQ(hits, 7u);
  EXPECT_EQ(journal_now.counters.disk_hits, 1u);
  EXPECT_EQ(journal_now.counters.memory_hits, 6u);
  struct stat st;
  ASSERT_EQ(::lstat(journal().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // stats folds it: the counters are the index's plus the journal's, and the journal is
  // emptied so that nothing is counted twice.
  auto store = open_store();
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->totals.disk_hits, std::stoull(counted_before.at(0)) + 1);
  EXPECT_EQ(std::filesystem::file_size(journal()), 0u);
  auto again = store->stats();
  ASSERT_OK(again);
  EXPECT_EQ(again->totals.disk_hits, stats->totals.disk_hits);
  store.reset();
  EXPECT_EQ(listed_hits(), 7u);
}

TEST_F(UsageJournalTest, ConcurrentSessionsAndFoldsLoseAndDoubleNothing) {
  const Facts facts = stored("shared");
  constexpr int k_children = 4;
  constexpr int k_sessions = 25;
  constexpr int k_hits = 3;
  std::vector<pid_t> children;
  for (int c = 0; c < k_children; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      bool ok = true;
      for (int s = 0; s < k_sessions && ok; ++s) {
        auto store = Store::open(root(), {});
        if (!store) ok = false;
        for (int i = 0; ok && i < k_hits; ++i) {
          auto hit = (*store)->get(facts.key());
          ok = hit && *hit;
        }
      }
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  // Folds race the appenders.
  for (int i = 0; i < 20; ++i) {
    auto store = open_store();
    ASSERT_OK(store->list());
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(listed_hits(), static_cast<std::uint64_t>(k_children * k_sessions * k_hits));
}

TEST_F(UsageJournalTest, AJournalThatIsALinkIsNeitherFollowedNorRead) {
  const Facts facts = stored("link");
  const auto target = dir() / "elsewhere";
  write_file(target, "somebody's file\n");
  std::filesystem::create_symlink(target, journal());
  jitcache::testing::LogCapture log;
  warm_session(facts, 2);
  EXPECT_EQ(read_file(target), "somebody's file\n");
  EXPECT_GE(log.count_containing("is a symbolic link"), 1u) << log.all();
  // The uses went to the index instead.
  EXPECT_EQ(listed_hits(), 2u);
  EXPECT_EQ(read_file(target), "somebody's file\n");
}

TEST_F(UsageJournalTest, AJournalOthersCouldWriteIsNotCounted) {
  const Facts facts = stored("shared-mode");
  // Lines that look right, in a file group and others may write: not to be believed.
  const std::vector<Usage> forged{Usage{facts.key(), 1'000'000, 1}};
  Counters counters;
  counters.disk_hits = 1'000'000;
  write_file(journal(), journal_line(forged, counters));
  ASSERT_EQ(::chmod(journal().c_str(), 0666), 0);
  jitcache::testing::LogCapture log;
  warm_session(facts, 1);
  EXPECT_EQ(listed_hits(), 1u);
  EXPECT_GE(log.count_containing("writable by other users"), 1u) << log.all();
  auto store = open_store();
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_LT(stats->totals.disk_hits, 1000u);
}

TEST_F(UsageJournalTest, AFullJournalIsFoldedBeforeTheNextBatchIsWritten) {
  const Facts facts = stored("full");
  // Damaged filler past the fold size, then one real line: the next flush folds it all.
  std::string filler(k_usage_journal_fold_bytes, 'x');
  filler += journal_line(std::vector<Usage>{Usage{facts.key(), 5, 1}}, Counters{});
  write_file(journal(), filler);
  ASSERT_EQ(::chmod(journal().c_str(), 0600), 0);
  jitcache::testing::LogCapture log;
  warm_session(facts, 2);
  EXPECT_EQ(std::filesystem::file_size(journal()), 0u);
  EXPECT_GE(log.count_containing("damaged line"), 1u) << log.all();
  EXPECT_EQ(sql_query(root() / "index.db", "SELECT total(hits) FROM usage_log"), std::vector<std::string>{"7.0"});
  EXPECT_EQ(listed_hits(), 7u);
}

}  // namespace
}  // namespace jitcache::cache
