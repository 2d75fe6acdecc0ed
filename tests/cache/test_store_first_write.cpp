// Store::put_if_absent and the tiers' create (cache/tier.hpp): the first writer of a key
// wins and every later one is handed its bytes, across threads and stores (processes) of
// one directory; an entry that is damaged or gone counts as none; the memory tier's own
// create; what needs a writable store. The extra tiers' part: test_store_tiers.cpp; Redis:
// tests/remote/test_remote_store.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <latch>
#include <thread>

#include "cache/memory_tier.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_checks.hpp"
#include "seeded_fixture.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;

using FirstWriteTest = Seeded<StoreFixture>;

TEST_F(FirstWriteTest, TheFirstWriterWinsAndLaterOnesGetItsBytes) {
  auto store = open_store();
  const Facts facts = sample_facts("record");
  const Bytes first = make_bytes(300, seed);
  const Bytes second = make_bytes(300, seed + 1);
  auto made = store->put_if_absent(facts.key(), facts, first, 1.0);
  ASSERT_OK(made);
  EXPECT_TRUE(made->ours);
  EXPECT_EQ(*made->bytes, first);

  auto lost = store->put_if_absent(facts.key(), facts, second, 1.0);
  ASSERT_OK(lost);
  EXPECT_FALSE(lost->ours);
  EXPECT_EQ(*lost->bytes, first);
  auto same = store->put_if_absent(facts.key(), facts, first, 1.0);  // identical bytes: ours too
  ASSERT_OK(same);
  EXPECT_TRUE(same->ours);

  // Another process's view of the directory (no memory tier in common) agrees.
  auto other = open_store();
  auto theirs = other->put_if_absent(facts.key(), facts, second, 1.0);
  ASSERT_OK(theirs);
  EXPECT_FALSE(theirs->ours);
  EXPECT_EQ(*theirs->bytes, first);
  auto stored = other->get(facts.key());
  ASSERT_OK(stored);
  ASSERT_TRUE(*stored);
  EXPECT_EQ(*(*stored)->bytes, first);
  auto entries = other->list();
  ASSERT_OK(entries);
  EXPECT_EQ(entries->size(), 1u);
  // A put still replaces (the record that must be rewritten).
  ASSERT_OK(other->put(facts.key(), facts, second, 1.0));
  auto replaced = open_store()->get(facts.key());
  ASSERT_OK(replaced);
  ASSERT_TRUE(*replaced);
  EXPECT_EQ(*(*replaced)->bytes, second);
}

TEST_F(FirstWriteTest, ADamagedOrRemovedFirstEntryCountsAsNone) {
  const Facts facts = sample_facts("damaged");
  const Bytes first = make_bytes(4096, seed);
  const Bytes mine = make_bytes(4096, seed + 1);
  {
    auto store = open_store();
    ASSERT_OK(store->put_if_absent(facts.key(), facts, first, 1.0));
    auto entries = store->list();
    ASSERT_OK(entries);
    ASSERT_EQ(entries->size(), 1u);
    const auto path = store->blob_path((*entries)[0].digest);
    std::filesystem::permissions(path, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  auto store = open_store();  // nothing in memory: the damaged blob is read
  auto made = store->put_if_absent(facts.key(), facts, mine, 1.0);
  ASSERT_OK(made);
  EXPECT_TRUE(made->ours) << "a damaged entry is quarantined, not handed back as the first writer's";
  EXPECT_EQ(store->session_counters().quarantined, 1u);
  auto stored = open_store()->get(facts.key());
  ASSERT_OK(stored);
  ASSERT_TRUE(*stored);
  EXPECT_EQ(*(*stored)->bytes, mine);

  // Removed (evicted, cleared): the next writer is the first again.
  EntryFilter only;
  only.key_prefix = facts.key().to_hex();
  ASSERT_OK(store->remove(only, DryRun::no));
  auto again = store->put_if_absent(facts.key(), facts, first, 1.0);
  ASSERT_OK(again);
  EXPECT_TRUE(again->ours);
  expect_verified_clean(*store);
}

// Eight writers of different bytes, each with its own store over one directory (as
// processes have), released together, round after round: exactly one is first, and every
// other is handed the first's bytes; no blob is left over by the losers.
TEST_F(FirstWriteTest, RacingStoresHaveExactlyOneFirstWriter) {
  constexpr int k_writers = 8;
  constexpr int k_rounds = 10;
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < k_writers; ++i) stores.push_back(open_store());
  for (int round = 0; round < k_rounds; ++round) {
    const Facts facts = sample_facts("race" + std::to_string(round));
    std::latch start(k_writers);
    std::vector<Result<FirstWrite>> results(k_writers, make_error(ErrorCode::internal, "not run"));
    std::vector<std::thread> writers;
    for (int i = 0; i < k_writers; ++i)
      writers.emplace_back([&, i] {
        const Bytes mine = make_bytes(256, seed + 100 * round + i);
        start.arrive_and_wait();
        results[i] = stores[i]->put_if_absent(facts.key(), facts, mine, 1.0);
      });
    for (auto& t : writers) t.join();
    int firsts = 0;
    Bytes winner;
    for (int i = 0; i < k_writers; ++i) {
      ASSERT_OK(results[i]);
      if (results[i]->ours) {
        ++firsts;
        winner = *results[i]->bytes;
      }
    }
    EXPECT_EQ(firsts, 1) << "round " << round;
    for (int i = 0; i < k_writers; ++i) EXPECT_EQ(*results[i]->bytes, winner) << "round " << round << ", writer " << i;
  }
  auto orphans = stores[0]->orphan_blobs();
  ASSERT_OK(orphans);
  EXPECT_TRUE(orphans->empty()) << orphans->size() << " blobs of losers left behind";
}

TEST_F(FirstWriteTest, NeedsAWritableStoreAndTheKeyOfItsFacts) {
  const Facts facts = sample_facts("memory");
  auto memory_only = Store::open_memory_only();
  auto refused = memory_only->put_if_absent(facts.key(), facts, make_bytes(10, seed), 1.0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable);
  EXPECT_NE(refused.error().message.find("memory-only"), std::string::npos) << refused.error().message;

  auto store = open_store();
  auto wrong = store->put_if_absent(sample_facts("other").key(), facts, make_bytes(10, seed), 1.0);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::invalid_argument);
}

TEST(MemoryTierCreate, FirstInsertWinsAndADisabledTierKeepsNothing) {
  const Facts facts = sample_facts("memory-create");
  auto bytes_of = [](std::uint64_t seed) { return std::make_shared<const Bytes>(make_bytes(64, seed)); };
  MemoryTier tier(1 << 20);
  const SharedBytes first = bytes_of(1);
  auto made = tier.create(facts.key(), TierEntry{facts, first, 2.0});
  ASSERT_OK(made);
  EXPECT_FALSE(*made);
  auto lost = tier.create(facts.key(), TierEntry{facts, bytes_of(2), 3.0});
  ASSERT_OK(lost);
  ASSERT_TRUE(*lost);
  EXPECT_EQ((*lost)->bytes, first);
  EXPECT_DOUBLE_EQ((*lost)->compile_ms, 2.0);

  MemoryTier disabled(0);
  for (int i = 0; i < 2; ++i) {
    auto kept = disabled.create(facts.key(), TierEntry{facts, bytes_of(3 + i), 1.0});
    ASSERT_OK(kept);
    EXPECT_FALSE(*kept) << "nothing kept, nothing to disagree with";
  }
  EXPECT_FALSE(disabled.find(facts.key()));
}

}  // namespace
}  // namespace jitcache::cache
