// Store::locate: which tier holds a key, asked of every tier in lookup order without
// counting, recording a use, filling a tier or producing; and the tiers a store names.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_checks.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;

// A tier as a map, of any kind; counts its reads as a remote counts its hits.
class MapTier final : public StorageTier {
 public:
  MapTier(Tier kind, std::string name, bool writable) : m_kind(kind), m_name(std::move(name)), m_writable(writable) {}
  Tier kind() const override { return m_kind; }
  std::string name() const override { return m_name; }
  Result<std::optional<TierHit>> get(const CacheKey& key) override {
    ++gets;
    return find(key);
  }
  Result<std::optional<TierHit>> peek(const CacheKey& key) override {
    ++peeks;
    if (fail) return make_error(ErrorCode::unavailable, m_name + ": connection refused");
    return find(key);
  }
  Status put(const CacheKey& key, const TierEntry& entry) override {
    ++puts;
    std::lock_guard lock(m_mutex);
    m_entries[key] = entry.bytes;
    return {};
  }
  Result<std::optional<TierHit>> create(const CacheKey& key, const TierEntry& entry) override {
    JC_TRY(put(key, entry));
    return std::optional<TierHit>();
  }
  Status remove(const CacheKey& key) override {
    std::lock_guard lock(m_mutex);
    m_entries.erase(key);
    return {};
  }
  bool writable() const override { return m_writable; }
  void hold(const CacheKey& key, const Bytes& bytes) {
    std::lock_guard lock(m_mutex);
    m_entries[key] = std::make_shared<const Bytes>(bytes);
  }

  int gets = 0, peeks = 0, puts = 0;
  bool fail = false;

 private:
  Result<std::optional<TierHit>> find(const CacheKey& key) {
    std::lock_guard lock(m_mutex);
    const auto it = m_entries.find(key);
    if (it == m_entries.end()) return std::optional<TierHit>();
    return std::optional<TierHit>(TierHit{it->second, 1.0, {}, {}});
  }
  Tier m_kind;
  std::string m_name;
  bool m_writable;
  std::mutex m_mutex;
  std::map<CacheKey, SharedBytes> m_entries;
};

class StoreLocateTest : public StoreFixture {
 protected:
  std::uint64_t seed = jitcache::testing::test_seed("locate");
  std::shared_ptr<MapTier> provider = std::make_shared<MapTier>(Tier::provider, "wheel", false);
  std::shared_ptr<MapTier> remote = std::make_shared<MapTier>(Tier::remote, "fake-redis", true);

  std::unique_ptr<Store> open_tiered() {
    StoreOptions options;
    options.extra_tiers = {provider, remote};
    return open_store(std::move(options));
  }

  static void expect_no_counts(const Counters& c) {
    expect_counters(c, {{&Counters::memory_hits, 0},
                        {&Counters::disk_hits, 0},
                        {&Counters::misses, 0},
                        {&Counters::produces, 0},
                        {&Counters::compile_ms_saved, 0.0}});
  }
};

TEST_F(StoreLocateTest, NamesTheFirstTierHoldingTheKeyAndCountsNothing) {
  auto store = open_tiered();
  const Facts on_disk = sample_facts("disk");
  const Facts in_provider = sample_facts("provider");
  const Facts in_remote = sample_facts("remote");
  const Facts in_both = sample_facts("both");
  const Facts nowhere = sample_facts("nowhere");
  ASSERT_OK(store->put(on_disk.key(), on_disk, make_bytes(300, seed), 3.0));
  provider->hold(in_provider.key(), make_bytes(200, seed + 1));
  remote->hold(in_remote.key(), make_bytes(100, seed + 2));
  provider->hold(in_both.key(), make_bytes(50, seed + 3));
  remote->hold(in_both.key(), make_bytes(50, seed + 3));
  remote->puts = 0;
  const Counters before = store->session_counters();

  auto located = store->locate(on_disk.key());
  ASSERT_OK(located);
  ASSERT_TRUE(*located);
  EXPECT_EQ((*located)->kind, Tier::memory) << "put keeps the entry in this process's memory too";

  auto fresh = open_tiered();
  for (const auto& [facts, kind, name] :
       {std::tuple{on_disk, Tier::disk, "disk"}, std::tuple{in_provider, Tier::provider, "wheel"},
        std::tuple{in_remote, Tier::remote, "fake-redis"}, std::tuple{in_both, Tier::provider, "wheel"}}) {
    auto where = fresh->locate(facts.key());
    ASSERT_OK(where);
    ASSERT_TRUE(*where) << name;
    EXPECT_EQ((*where)->kind, kind) << name;
    EXPECT_EQ((*where)->name, name);
  }
  auto none = fresh->locate(nowhere.key());
  ASSERT_OK(none);
  EXPECT_FALSE(*none);

  expect_no_counts(fresh->session_counters());
  for (const TierStats& s : fresh->tier_stats()) EXPECT_EQ(s.hits, 0u) << s.name;
  EXPECT_EQ(provider->gets + remote->gets, 0) << "locate peeks; it never reads as a lookup";
  EXPECT_EQ(remote->puts, 0) << "nothing is filled";
  // Nothing was copied above the tier that holds it: the next locate says the same.
  auto again = fresh->locate(in_remote.key());
  ASSERT_OK(again);
  ASSERT_TRUE(*again);
  EXPECT_EQ((*again)->kind, Tier::remote);
  auto on_disk_now = fresh->contains(in_remote.key());
  ASSERT_OK(on_disk_now);
  EXPECT_FALSE(*on_disk_now);
  EXPECT_EQ(store->session_counters().memory_hits, before.memory_hits);
}

TEST_F(StoreLocateTest, RecordsNoUseOfADiskEntry) {
  const Facts facts = sample_facts("use");
  {
    auto store = open_store();
    ASSERT_OK(store->put(facts.key(), facts, make_bytes(64, seed), 1.0));
  }
  {
    auto store = open_store();
    for (int i = 0; i < 3; ++i) {
      auto where = store->locate(facts.key());
      ASSERT_OK(where);
      ASSERT_TRUE(*where);
      EXPECT_EQ((*where)->kind, Tier::disk);
    }
    expect_no_counts(store->session_counters());
  }
  auto store = open_store();
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].hits, 0u) << "a question about the cache is not a use of its entry";
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->totals.disk_hits, 0u);
  EXPECT_EQ(stats->totals.misses, 0u);
}

TEST_F(StoreLocateTest, ADamagedDiskEntryIsNoEntryAndIsLeftForTheNextRead) {
  auto store = open_store();
  const Facts facts = sample_facts("damaged");
  ASSERT_OK(store->put(facts.key(), facts, make_bytes(128, seed), 1.0));
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  {
    // One byte changed in place: the blob no longer hashes to its digest.
    std::fstream blob(store->blob_path((*entries)[0].digest), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(blob);
    char first = 0;
    blob.read(&first, 1);
    blob.seekp(0);
    first = static_cast<char>(first ^ 0x5a);
    blob.write(&first, 1);
  }
  auto fresh = open_store();
  auto where = fresh->locate(facts.key());
  ASSERT_OK(where);
  EXPECT_FALSE(*where);
  EXPECT_EQ(fresh->session_counters().quarantined, 0u);
}

TEST_F(StoreLocateTest, ATierThatCannotAnswerIsSkipped) {
  auto store = open_tiered();
  const Facts facts = sample_facts("skip");
  remote->hold(facts.key(), make_bytes(32, seed));
  provider->fail = true;
  auto where = store->locate(facts.key());
  ASSERT_OK(where);
  ASSERT_TRUE(*where);
  EXPECT_EQ((*where)->kind, Tier::remote);
  EXPECT_EQ(provider->peeks, 1);
}

TEST_F(StoreLocateTest, TiersAreNamedInLookupOrderWithWhetherTheyAreWritten) {
  auto store = open_tiered();
  const auto tiers = store->tiers();
  ASSERT_EQ(tiers.size(), 4u);
  EXPECT_EQ(tiers[0].kind, Tier::memory);
  EXPECT_EQ(tiers[1].kind, Tier::disk);
  EXPECT_EQ(tiers[2].kind, Tier::provider);
  EXPECT_EQ(tiers[2].name, "wheel");
  EXPECT_FALSE(tiers[2].writable);
  EXPECT_EQ(tiers[3].kind, Tier::remote);
  EXPECT_TRUE(tiers[3].writable);
  EXPECT_EQ(store->tier_objects().size(), 4u);
  auto memory_only = Store::open_memory_only();
  ASSERT_EQ(memory_only->tiers().size(), 1u);
  EXPECT_EQ(memory_only->tiers()[0].kind, Tier::memory);
}

}  // namespace
}  // namespace jitcache::cache
