// The tiers behind the Store (cache/tier.hpp): the memory tier on its own, the single
// flight, decoded forms kept beside memory entries, and a test-only remote tier wired in
// with one line (StoreOptions::extra_tiers) and served through the store: hit, miss,
// write-through, removal, and a failing tier degrading to the next one.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_checks.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;
using jitcache::testing::LogCapture;

// A remote cache as a map, with switches to make it fail.
class FakeRemoteTier final : public StorageTier {
 public:
  explicit FakeRemoteTier(std::string name = "fake-remote") : m_name(std::move(name)) {}
  Tier kind() const override { return Tier::remote; }
  std::string name() const override { return m_name; }
  Result<std::optional<TierHit>> get(const CacheKey& key) override {
    ++gets;
    if (fail_gets) return make_error(ErrorCode::unavailable, m_name + ": connection refused");
    std::lock_guard lock(m_mutex);
    const auto it = m_entries.find(key);
    if (it == m_entries.end()) return std::optional<TierHit>();
    return std::optional<TierHit>(TierHit{it->second.bytes, it->second.compile_ms, {}, {}});
  }
  Status put(const CacheKey& key, const TierEntry& entry) override {
    ++puts;
    if (fail_puts) return make_error(ErrorCode::unavailable, m_name + ": read-only replica");
    std::lock_guard lock(m_mutex);
    m_entries[key] = Stored{entry.bytes, entry.compile_ms, entry.facts.to_json()};
    return {};
  }
  Result<std::optional<TierHit>> create(const CacheKey& key, const TierEntry& entry) override {
    ++creates;
    if (fail_puts) return make_error(ErrorCode::unavailable, m_name + ": read-only replica");
    std::lock_guard lock(m_mutex);
    const auto [it, created] = m_entries.try_emplace(key, Stored{entry.bytes, entry.compile_ms, entry.facts.to_json()});
    if (created) return std::optional<TierHit>();
    return std::optional<TierHit>(TierHit{it->second.bytes, it->second.compile_ms, {}, entry.facts});
  }
  Status remove(const CacheKey& key) override {
    ++removes;
    std::lock_guard lock(m_mutex);
    m_entries.erase(key);
    return {};
  }
  bool holds(const CacheKey& key) const {
    std::lock_guard lock(m_mutex);
    return m_entries.contains(key);
  }
  std::string facts_json(const CacheKey& key) const {
    std::lock_guard lock(m_mutex);
    return m_entries.at(key).facts_json;
  }

  std::atomic<int> gets{0}, puts{0}, creates{0}, removes{0};
  std::atomic<bool> fail_gets{false}, fail_puts{false};

 private:
  struct Stored {
    SharedBytes bytes;
    double compile_ms;
    std::string facts_json;
  };
  std::string m_name;
  mutable std::mutex m_mutex;
  std::map<CacheKey, Stored> m_entries;
};

class StoreTiersTest : public StoreFixture {
 protected:
  std::uint64_t seed = jitcache::testing::test_seed("tiers");
  std::shared_ptr<FakeRemoteTier> remote = std::make_shared<FakeRemoteTier>();

  std::unique_ptr<Store> open_with_remote(StoreOptions options = {}) {
    options.extra_tiers.push_back(remote);  // the one line of wiring
    return open_store(std::move(options));
  }
  // Stores an entry in the remote tier only, as another machine would have.
  void seed_remote(const Facts& facts, const Bytes& bytes, double compile_ms = 30.0) {
    ASSERT_OK(remote->put(facts.key(), TierEntry{facts, std::make_shared<const Bytes>(bytes), compile_ms}));
    remote->puts = 0;
  }
  static const TierStats& stats_of(const std::vector<TierStats>& all, const std::string& name) {
    for (const TierStats& s : all)
      if (s.name == name) return s;
    throw std::runtime_error("no tier " + name);
  }
};

TEST_F(StoreTiersTest, TiersAreListedInLookupOrder) {
  auto store = open_with_remote();
  const auto stats = store->tier_stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].name, "memory");
  EXPECT_EQ(stats[0].kind, Tier::memory);
  EXPECT_EQ(stats[1].name, "disk");
  EXPECT_EQ(stats[1].kind, Tier::disk);
  EXPECT_EQ(stats[2].name, "fake-remote");
  EXPECT_EQ(stats[2].kind, Tier::remote);
  EXPECT_STREQ(to_string(Tier::remote), "remote");
  EXPECT_STREQ(to_string(Source::remote), "remote");
}

TEST_F(StoreTiersTest, ARemoteHitIsServedThenKeptInMemory) {
  auto store = open_with_remote();
  const Facts facts = sample_facts("remote-hit");
  const Bytes bytes = make_bytes(700, seed);
  seed_remote(facts, bytes);
  ASSERT_TRUE(expect_hit(*store, facts.key(), Tier::remote, &bytes));
  ASSERT_TRUE(expect_hit(*store, facts.key(), Tier::memory));
  EXPECT_EQ(remote->gets, 1) << "the memory tier answers first";

  expect_counters(store->session_counters(), {{&Counters::memory_hits, 1},
                                              {&Counters::disk_hits, 0},
                                              {&Counters::misses, 0},
                                              {&Counters::compile_ms_saved, 60.0}});
  EXPECT_EQ(stats_of(store->tier_stats(), "fake-remote").hits, 1u);
  EXPECT_EQ(stats_of(store->tier_stats(), "disk").hits, 0u);
  // Without the facts, a plain get fills the memory tier only.
  auto on_disk = store->contains(facts.key());
  ASSERT_OK(on_disk);
  EXPECT_FALSE(*on_disk);
}

TEST_F(StoreTiersTest, GetOrCreateFillsTheDiskFromARemoteHit) {
  const Facts facts = sample_facts("fill");
  const Bytes bytes = make_bytes(900, seed);
  CountingProducer producer{make_bytes(10, seed + 1)};
  {
    auto store = open_with_remote();
    seed_remote(facts, bytes, 55.0);
    auto fetched = store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(fetched);
    EXPECT_EQ(fetched->source, Source::remote);
    EXPECT_EQ(*fetched->bytes, bytes);
    EXPECT_EQ(producer.calls, 0);
    EXPECT_EQ(remote->puts, 0) << "the tier that served is not written again";
  }
  // Another process without the remote tier finds it on disk, with its facts and cost.
  auto local = open_store();
  auto hit = local->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ((*hit)->tier, Tier::disk);
  EXPECT_EQ(*(*hit)->bytes, bytes);
  auto entries = local->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].facts, facts);
  EXPECT_DOUBLE_EQ((*entries)[0].compile_ms, 55.0);
}

TEST_F(StoreTiersTest, AMissEverywhereIsProducedOnceAndWrittenThrough) {
  auto store = open_with_remote();
  const Facts facts = sample_facts("through");
  CountingProducer producer{make_bytes(400, seed)};
  auto miss = store->get(facts.key());
  ASSERT_OK(miss);
  EXPECT_FALSE(*miss);
  EXPECT_EQ(remote->gets, 1);
  auto produced = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(produced);
  EXPECT_EQ(produced->source, Source::produced);
  EXPECT_EQ(producer.calls, 1);
  EXPECT_TRUE(remote->holds(facts.key()));
  EXPECT_EQ(remote->facts_json(facts.key()), facts.to_json()) << "a tier is given the entry's facts";
  auto on_disk = store->contains(facts.key());
  ASSERT_OK(on_disk);
  EXPECT_TRUE(*on_disk);
  const Counters c = store->session_counters();
  EXPECT_EQ(c.misses, 2u);  // the plain get, then the produce
  EXPECT_EQ(c.produces, 1u);

  const Facts other = sample_facts("put");
  ASSERT_OK(store->put(other.key(), other, make_bytes(50, seed + 1), 2.0));
  EXPECT_TRUE(remote->holds(other.key())) << "put writes through";
}

TEST_F(StoreTiersTest, AFailingRemoteDegradesToTheNextTierAndIsCounted) {
  auto store = open_with_remote();
  remote->fail_gets = true;
  remote->fail_puts = true;
  LogCapture log;
  const Facts facts = sample_facts("down");
  CountingProducer producer{make_bytes(300, seed)};
  auto produced = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(produced);  // a remote tier that fails never fails a call
  EXPECT_EQ(produced->source, Source::produced);
  auto plain = store->get(sample_facts("absent").key());
  ASSERT_OK(plain);
  EXPECT_FALSE(*plain);
  const Facts other = sample_facts("down-put");
  ASSERT_OK(store->put(other.key(), other, make_bytes(20, seed), 1.0));
  const TierStats& stats = stats_of(store->tier_stats(), "fake-remote");
  EXPECT_EQ(stats.errors, 4u);  // two lookups, two writes
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_GE(log.count_containing("tier fake-remote"), 4u) << log.all();
  EXPECT_GE(log.count_containing("connection refused"), 1u) << log.all();

  // The next tier still serves: a second process finds the entry on disk.
  auto second = open_with_remote();
  auto hit = second->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ((*hit)->tier, Tier::disk);
}

TEST_F(StoreTiersTest, AFailingTierFallsThroughToALaterOne) {
  auto broken = std::make_shared<FakeRemoteTier>("broken");
  broken->fail_gets = true;
  StoreOptions options;
  options.extra_tiers.push_back(broken);
  auto store = open_with_remote(std::move(options));
  const Facts facts = sample_facts("later");
  const Bytes bytes = make_bytes(123, seed);
  seed_remote(facts, bytes);
  LogCapture log;
  auto hit = store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ((*hit)->tier, Tier::remote);
  EXPECT_EQ(*(*hit)->bytes, bytes);
  EXPECT_EQ(stats_of(store->tier_stats(), "broken").errors, 1u);
  EXPECT_EQ(stats_of(store->tier_stats(), "fake-remote").hits, 1u);
  EXPECT_EQ(log.count_containing("tier broken"), 1u) << log.all();
}

// remove() and clear_all() are this machine's: a shared tier is cleared by its own
// command (`jitcache clear --remote`), never as a side effect of a local one.
TEST_F(StoreTiersTest, RemoveAndClearAllLeaveTheSharedTierAlone) {
  auto store = open_with_remote();
  const Facts a = sample_facts("a");
  const Facts b = sample_facts("b");
  ASSERT_OK(store->put(a.key(), a, make_bytes(10, seed), 1.0));
  ASSERT_OK(store->put(b.key(), b, make_bytes(10, seed + 1), 1.0));
  EntryFilter only_a;
  only_a.facts = {{"id", "a"}};
  ASSERT_OK(store->remove(only_a, DryRun::yes));
  EXPECT_EQ(remote->removes, 0) << "a dry run removes nothing";
  ASSERT_OK(store->remove(only_a, DryRun::no));
  EXPECT_EQ(remote->removes, 0);
  EXPECT_TRUE(remote->holds(a.key()));
  auto local = store->contains(a.key());
  ASSERT_OK(local);
  EXPECT_FALSE(*local) << "removed from the disk";
  auto again = store->get(a.key());
  ASSERT_OK(again);
  ASSERT_TRUE(*again);
  EXPECT_EQ((*again)->tier, Tier::remote) << "removed from memory and disk; the shared tier still has it";

  ASSERT_OK(store->clear_all());
  EXPECT_TRUE(remote->holds(b.key())) << "a shared remote is not this machine's to clear";
}

TEST_F(StoreTiersTest, AMemoryOnlyStoreStillUsesItsExtraTiers) {
  StoreOptions options;
  options.extra_tiers.push_back(remote);
  auto store = Store::open_memory_only(std::move(options));
  const Facts facts = sample_facts("memory-only");
  const Bytes bytes = make_bytes(64, seed);
  seed_remote(facts, bytes);
  CountingProducer producer{make_bytes(1, seed)};
  auto fetched = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(fetched);
  EXPECT_EQ(fetched->source, Source::remote);
  EXPECT_EQ(producer.calls, 0);
  const Facts fresh = sample_facts("memory-only-produced");
  ASSERT_OK(store->get_or_create(fresh.key(), fresh, producer.producer()));
  EXPECT_TRUE(remote->holds(fresh.key()));
  EXPECT_EQ(store->tier_stats().size(), 2u) << "memory, then the remote: no disk tier";
}

TEST_F(StoreTiersTest, ADecodedFormIsKeptBesideItsMemoryEntry) {
  struct Parsed final : Decoded {
    int value = 7;
  };
  auto store = open_store();
  const Facts facts = sample_facts("decoded");
  CountingProducer producer{make_bytes(100, seed)};
  auto produced = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(produced);
  EXPECT_FALSE(produced->decoded);
  auto parsed = std::make_shared<const Parsed>();
  store->attach(facts.key(), produced->bytes, parsed);
  auto hit = store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ((*hit)->decoded, parsed);
  auto again = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(again);
  EXPECT_EQ(again->decoded, parsed);

  // Bytes that are not the entry's (a replaced entry) take nothing.
  const Facts other = sample_facts("decoded-other");
  ASSERT_OK(store->put(other.key(), other, make_bytes(10, seed), 1.0));
  store->attach(other.key(), std::make_shared<const Bytes>(make_bytes(10, seed)), parsed);
  auto plain = store->get(other.key());
  ASSERT_OK(plain);
  ASSERT_TRUE(*plain);
  EXPECT_FALSE((*plain)->decoded);
}

TEST_F(StoreTiersTest, WithoutAMemoryTierNothingIsAttached) {
  auto store = open_store(without_memory_tier());
  const Facts facts = sample_facts("no-memory");
  ASSERT_OK(store->put(facts.key(), facts, make_bytes(10, seed), 1.0));
  auto hit = store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  store->attach(facts.key(), (*hit)->bytes, std::make_shared<const Decoded>());
  auto again = store->get(facts.key());
  ASSERT_OK(again);
  ASSERT_TRUE(*again);
  EXPECT_EQ((*again)->tier, Tier::disk);
  EXPECT_FALSE((*again)->decoded);
}

// ---- the memory tier alone ----------------------------------------------------------------

TEST(MemoryTier, EvictsFirstInFirstOutBeyondItsCap) {
  MemoryTier tier(250);
  const Facts facts = sample_facts("m");
  std::vector<CacheKey> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(sample_facts("m" + std::to_string(i)).key());
    ASSERT_OK(
        tier.put(keys.back(), TierEntry{facts, std::make_shared<const Bytes>(make_bytes(100, i)), 1.0}));
  }
  EXPECT_FALSE(tier.find(keys[0])) << "the first in went first";
  EXPECT_TRUE(tier.find(keys[1]));
  EXPECT_TRUE(tier.find(keys[2]));
  ASSERT_OK(tier.remove(keys[1]));
  EXPECT_FALSE(tier.find(keys[1]));
  ASSERT_OK(tier.remove(keys[1]));  // removing an absent entry is no error
}

TEST(MemoryTier, ADisabledTierKeepsNothingNotEvenAnEmptyBlob) {
  MemoryTier tier(0);
  EXPECT_FALSE(tier.enabled());
  const CacheKey key = sample_facts("empty").key();
  tier.insert(key, std::make_shared<const Bytes>(), 1.0);
  auto got = tier.get(key);
  ASSERT_OK(got);
  EXPECT_FALSE(*got);
}

TEST(MemoryTier, CountsHitsAndHandsUsesOverOnce) {
  MemoryTier tier(1 << 20);
  const CacheKey kept = sample_facts("kept").key();
  tier.insert(kept, std::make_shared<const Bytes>(make_bytes(10, 1)), 20.0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier.find(kept));
  EXPECT_FALSE(tier.find(sample_facts("other").key()));
  EXPECT_EQ(tier.session().memory_hits, 3u);
  EXPECT_DOUBLE_EQ(tier.session().compile_ms_saved, 60.0);
  const PendingUses pending = tier.drain(1234);
  ASSERT_EQ(pending.uses.size(), 1u);
  EXPECT_EQ(pending.uses[0].key, kept);
  EXPECT_EQ(pending.uses[0].hits, 3u);
  EXPECT_EQ(pending.uses[0].last_used_ms, 1234);
  EXPECT_EQ(pending.counters.memory_hits, 3u);
  const PendingUses empty = tier.drain(1235);
  EXPECT_TRUE(empty.uses.empty());
  EXPECT_EQ(empty.counters, Counters{});
  EXPECT_EQ(tier.session().memory_hits, 3u) << "the session figures stay";
}

TEST(MemoryTier, UsesOfAnEvictedEntryAreNotLost) {
  MemoryTier tier(100);
  const CacheKey first = sample_facts("first").key();
  tier.insert(first, std::make_shared<const Bytes>(make_bytes(80, 1)), 1.0);
  ASSERT_TRUE(tier.find(first));
  tier.insert(sample_facts("second").key(), std::make_shared<const Bytes>(make_bytes(80, 2)), 1.0);
  const PendingUses pending = tier.drain(99);
  ASSERT_EQ(pending.uses.size(), 1u);
  EXPECT_EQ(pending.uses[0].key, first);
  EXPECT_EQ(pending.uses[0].hits, 1u);
}

// ---- the first writer (put_if_absent) with an extra tier ----------------------------------

TEST_F(StoreTiersTest, TheWidestTierDecidesTheFirstWriterAndTheDiskFollows) {
  auto store = open_with_remote();
  const Facts facts = sample_facts("fleet-record");
  const Bytes fleet = make_bytes(120, seed);
  const Bytes mine = make_bytes(120, seed + 1);
  // Another node recorded the key first; this directory has nothing yet.
  seed_remote(facts, fleet);
  auto lost = store->put_if_absent(facts.key(), facts, mine, 1.0);
  ASSERT_OK(lost);
  EXPECT_FALSE(lost->ours);
  EXPECT_EQ(*lost->bytes, fleet);
  EXPECT_EQ(remote->creates, 1);
  // The disk holds the fleet's record, not this process's: a process without the remote
  // tier finds it there.
  auto local = open_store()->get(facts.key());
  ASSERT_OK(local);
  ASSERT_TRUE(*local);
  EXPECT_EQ(*(*local)->bytes, fleet);

  // A disk record a local writer put there loses to the remote's decision.
  const Facts other = sample_facts("local-only");
  ASSERT_OK(open_store()->put(other.key(), other, make_bytes(80, seed + 2), 1.0));
  auto won = store->put_if_absent(other.key(), other, mine, 1.0);
  ASSERT_OK(won);
  EXPECT_TRUE(won->ours);
  EXPECT_TRUE(remote->holds(other.key()));
  auto replaced = open_store()->get(other.key());
  ASSERT_OK(replaced);
  ASSERT_TRUE(*replaced);
  EXPECT_EQ(*(*replaced)->bytes, mine);
}

TEST_F(StoreTiersTest, AFailingExtraTierLetsTheDiskDecide) {
  LogCapture log;
  auto store = open_with_remote();
  remote->fail_puts = true;
  const Facts facts = sample_facts("remote-down");
  const Bytes first = make_bytes(90, seed);
  auto made = store->put_if_absent(facts.key(), facts, first, 1.0);
  ASSERT_OK(made);
  EXPECT_TRUE(made->ours);
  auto lost = open_with_remote()->put_if_absent(facts.key(), facts, make_bytes(90, seed + 1), 1.0);
  ASSERT_OK(lost);
  EXPECT_FALSE(lost->ours);
  EXPECT_EQ(*lost->bytes, first);
  EXPECT_FALSE(remote->holds(facts.key()));
  EXPECT_EQ(stats_of(store->tier_stats(), "fake-remote").errors, 1u);
  // One warning per store (each its own episode of write failures).
  EXPECT_EQ(log.count_containing("creating " + facts.key().to_hex()), 2u) << log.all();
}

// ---- single flight ------------------------------------------------------------------------

using Flights = SingleFlight<int, int>;

TEST(SingleFlight, OneRunPerKeyAndWaitersGetItsValue) {
  Flights flights;
  std::atomic<int> runs{0};
  std::atomic<bool> release{false};
  std::atomic<int> waiting{0};
  std::vector<std::thread> threads;
  std::vector<int> values(6, 0);
  std::vector<int> led(6, 0);
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      ++waiting;
      auto outcome = flights.run(1, [&] {
        ++runs;
        while (!release) std::this_thread::yield();
        return 42;
      });
      values[t] = outcome.value;
      led[t] = outcome.role == Flights::Role::led;
    });
  while (waiting < 6) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release = true;
  for (auto& t : threads) t.join();
  EXPECT_GE(runs, 1);
  EXPECT_EQ(std::count(led.begin(), led.end(), 1), runs.load()) << "every run is led by one caller";
  for (int v : values) EXPECT_EQ(v, 42);
  // Finished flights leave the table: the next call runs again.
  auto next = flights.run(1, [] { return 7; });
  EXPECT_EQ(next.value, 7);
  EXPECT_EQ(next.role, Flights::Role::led);
}

}  // namespace
}  // namespace jitcache::cache
