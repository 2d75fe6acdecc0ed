#include <gtest/gtest.h>

#include <sys/stat.h>

#include <thread>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "store_checks.hpp"
#include "seeded_fixture.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;

using StoreTest = Seeded<StoreFixture>;

TEST_F(StoreTest, MissThenPutThenDiskThenMemoryHit) {
  auto store = open_store();
  ASSERT_TRUE(store);
  const Facts facts = sample_facts("a");
  const Bytes bytes = make_bytes(5000, seed);
  auto miss = store->get(facts.key());
  ASSERT_OK(miss);
  EXPECT_FALSE(*miss);
  ASSERT_OK(store->put(facts.key(), facts, bytes, 40.0));
  store.reset();

  store = open_store();
  const SharedBytes first = expect_hit(*store, facts.key(), Tier::disk, &bytes);
  ASSERT_TRUE(first);
  const SharedBytes second = expect_hit(*store, facts.key(), Tier::memory);
  ASSERT_TRUE(second);
  EXPECT_EQ(second, first) << "a memory hit shares the bytes, no copy";

  expect_counters(store->session_counters(), {{&Counters::disk_hits, 1},
                                              {&Counters::memory_hits, 1},
                                              {&Counters::misses, 0},
                                              {&Counters::produces, 0},
                                              {&Counters::compile_ms_saved, 80.0}});
}

TEST_F(StoreTest, GetOrCreateProducesOnceThenHits) {
  auto store = open_store();
  const Facts facts = sample_facts("b");
  CountingProducer producer{make_bytes(3000, seed)};
  auto produced = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(produced);
  EXPECT_EQ(produced->source, Source::produced);
  EXPECT_EQ(*produced->bytes, producer.bytes);
  auto again = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(again);
  EXPECT_EQ(again->source, Source::memory);
  EXPECT_EQ(producer.calls, 1);
  Counters c = store->session_counters();
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.produces, 1u);
  EXPECT_EQ(c.memory_hits, 1u);
  EXPECT_DOUBLE_EQ(c.compile_ms_spent, 12.5);

  store = open_store();
  auto from_disk = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(from_disk);
  EXPECT_EQ(from_disk->source, Source::disk);
  EXPECT_EQ(*from_disk->bytes, producer.bytes);
  EXPECT_EQ(producer.calls, 1);
  c = store->session_counters();
  EXPECT_EQ(c.disk_hits, 1u);
  EXPECT_EQ(c.misses, 0u);
}

TEST_F(StoreTest, IdentityAndDynamicEntriesNeverServeEachOther) {
  auto store = open_store();
  const Facts identity = sample_facts("k", "identity");
  const Facts dynamic = sample_facts("k", "dynamic");
  CountingProducer identity_producer{make_bytes(100, seed)};
  CountingProducer dynamic_producer{make_bytes(100, seed + 1)};
  ASSERT_OK(store->get_or_create(identity.key(), identity, identity_producer.producer()));
  auto result = store->get_or_create(dynamic.key(), dynamic, dynamic_producer.producer());
  ASSERT_OK(result);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_EQ(*result->bytes, dynamic_producer.bytes);
  EXPECT_EQ(dynamic_producer.calls, 1);
}

TEST_F(StoreTest, ProducerErrorReachesCallerAndStoresNothing) {
  auto store = open_store();
  const Facts facts = sample_facts("err");
  int calls = 0;
  auto failing = [&]() -> Result<Produced> {
    ++calls;
    return make_error(ErrorCode::compile, "kernel.cu(3): error: expected a ';'");
  };
  auto result = store->get_or_create(facts.key(), facts, failing);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::compile);
  auto lookup = store->get(facts.key());
  ASSERT_OK(lookup);
  EXPECT_FALSE(*lookup);
  // A failed produce is not cached: the next call tries again.
  EXPECT_FALSE(store->get_or_create(facts.key(), facts, failing));
  EXPECT_EQ(calls, 2);
  const Counters c = store->session_counters();
  EXPECT_EQ(c.produce_failures, 2u);
  EXPECT_EQ(c.produces, 0u);
}

TEST_F(StoreTest, ThrowingProducerBecomesAnError) {
  auto store = open_store();
  const Facts facts = sample_facts("throw");
  auto result = store->get_or_create(facts.key(), facts, []() -> Result<Produced> {
    throw std::runtime_error("out of device memory");
  });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::internal);
  EXPECT_NE(result.error().message.find("out of device memory"), std::string::npos);
}

TEST_F(StoreTest, PutRejectsKeyThatIsNotTheFactsKey) {
  auto store = open_store();
  const Facts facts = sample_facts("x");
  const CacheKey other = sample_facts("y").key();
  auto put = store->put(other, facts, make_bytes(10, seed), 1.0);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(put.error().message.find("is not the key of the facts"), std::string::npos);
  int calls = 0;
  auto result = store->get_or_create(other, facts, [&]() -> Result<Produced> {
    ++calls;
    return Produced{};
  });
  ASSERT_FALSE(result);
  EXPECT_EQ(calls, 0) << "a key/facts mismatch is refused before producing";
}

TEST_F(StoreTest, PutRejectsInvalidFacts) {
  auto store = open_store();
  Facts facts = sample_facts("x");
  facts.set("bad name", "v");
  auto put = store->put(facts.key(), facts, make_bytes(10, seed), 1.0);
  ASSERT_FALSE(put);
  EXPECT_NE(put.error().message.find("fact name 'bad name'"), std::string::npos);
  auto entries = store->list();
  ASSERT_OK(entries);
  EXPECT_TRUE(entries->empty());
}

TEST_F(StoreTest, EmptyBlobIsAValidEntry) {
  auto store = open_store();
  const Facts facts = sample_facts("empty");
  ASSERT_OK(store->put(facts.key(), facts, {}, 0.0));
  store = open_store();
  auto hit = store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_TRUE((*hit)->bytes->empty());
}

TEST_F(StoreTest, FactsAreStoredReadably) {
  auto store = open_store();
  const Facts facts = sample_facts("readable", "identity");
  ASSERT_OK(store->put(facts.key(), facts, make_bytes(64, seed), 3.0));
  ASSERT_OK(store->flush());
  // What an operator sees with sqlite3.
  const auto rows = sql_query(store->index_path(),
                              "SELECT json_extract(facts, '$.latent_scale') FROM entries WHERE key = '" +
                                  facts.key().to_hex() + "'");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], "identity");
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].facts, facts);
  EXPECT_EQ((*entries)[0].key, facts.key());
  EXPECT_EQ((*entries)[0].size, 64u);
  EXPECT_EQ((*entries)[0].key_schema, k_key_schema_version);
  EXPECT_DOUBLE_EQ((*entries)[0].compile_ms, 3.0);
}

TEST_F(StoreTest, ListFiltersByFactsAndKeyPrefix) {
  auto store = open_store();
  for (const char* scale : {"identity", "dynamic"})
    for (const char* id : {"1", "2", "3"}) {
      const Facts facts = sample_facts(id, scale);
      ASSERT_OK(store->put(facts.key(), facts, make_bytes(32, seed), 1.0));
    }
  EntryFilter identity;
  identity.facts = {{"latent_scale", "identity"}};
  auto entries = store->list(identity);
  ASSERT_OK(entries);
  EXPECT_EQ(entries->size(), 3u);
  for (const auto& e : *entries) EXPECT_EQ(e.facts.get("latent_scale"), "identity");

  EntryFilter both;
  both.facts = {{"latent_scale", "dynamic"}, {"id", "2"}};
  entries = store->list(both);
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].key, sample_facts("2", "dynamic").key());

  EntryFilter by_prefix;
  by_prefix.key_prefix = sample_facts("3", "identity").key().to_hex().substr(0, 12);
  entries = store->list(by_prefix);
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);

  EntryFilter nothing;
  nothing.facts = {{"target", "sm_90"}};
  entries = store->list(nothing);
  ASSERT_OK(entries);
  EXPECT_TRUE(entries->empty());
}

TEST_F(StoreTest, ListRejectsBadFilters) {
  auto store = open_store();
  EntryFilter bad_prefix;
  bad_prefix.key_prefix = "xyz";
  auto entries = store->list(bad_prefix);
  ASSERT_FALSE(entries);
  EXPECT_EQ(entries.error().code, ErrorCode::invalid_input);
  EntryFilter bad_name;
  bad_name.facts = {{"a') OR 1=1 --", "x"}};
  entries = store->list(bad_name);
  ASSERT_FALSE(entries);
  EXPECT_EQ(entries.error().code, ErrorCode::invalid_input);
}

TEST_F(StoreTest, RemoveDeletesEntriesAndTheirBlobs) {
  auto store = open_store();
  std::vector<Facts> all;
  for (const char* id : {"1", "2", "3"}) {
    all.push_back(sample_facts(id));
    ASSERT_OK(store->put(all.back().key(), all.back(), make_bytes(100, seed + all.size()), 1.0));
  }
  EntryFilter one;
  one.facts = {{"id", "2"}};
  auto dry = store->remove(one, DryRun::yes);
  ASSERT_OK(dry);
  EXPECT_EQ(dry->size(), 1u);
  EXPECT_EQ(store->list()->size(), 3u) << "a dry run removes nothing";
  auto removed = store->remove(one, DryRun::no);
  ASSERT_OK(removed);
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(store->blob_path((*removed)[0].digest)));
  auto gone = store->get(all[1].key());
  ASSERT_OK(gone);
  EXPECT_FALSE(*gone) << "removed entries leave the memory tier too";
  auto all_removed = store->remove({}, DryRun::no);
  ASSERT_OK(all_removed);
  EXPECT_EQ(all_removed->size(), 2u);
  EXPECT_EQ(count_files(root() / "blobs"), 0u);
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->entries, 0u);
  EXPECT_EQ(stats->bytes, 0u);
}

TEST_F(StoreTest, SharedBlobSurvivesRemovalOfOneEntry) {
  auto store = open_store();
  const Bytes same = make_bytes(256, seed);
  const Facts a = sample_facts("a");
  const Facts b = sample_facts("b");
  ASSERT_OK(store->put(a.key(), a, same, 1.0));
  ASSERT_OK(store->put(b.key(), b, same, 1.0));
  EntryFilter only_a;
  only_a.facts = {{"id", "a"}};
  ASSERT_OK(store->remove(only_a, DryRun::no));
  store = open_store();
  auto hit = store->get(b.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ(*(*hit)->bytes, same);
}

TEST_F(StoreTest, MemoryHitsAreNotWrittenUntilFlush) {
  auto store = open_store();
  const Facts facts = sample_facts("hot");
  ASSERT_OK(store->put(facts.key(), facts, make_bytes(128, seed), 2.0));
  ASSERT_OK(store->flush());
  const std::string hits_sql = "SELECT hits FROM entries WHERE key = '" + facts.key().to_hex() + "'";
  const std::string used_sql = "SELECT last_used FROM entries WHERE key = '" + facts.key().to_hex() + "'";
  const auto used_before = sql_query(store->index_path(), used_sql);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 0; i < 1000; ++i) {
    auto hit = store->get(facts.key());
    ASSERT_OK(hit);
    ASSERT_TRUE(*hit);
    ASSERT_EQ((*hit)->tier, Tier::memory);
  }
  EXPECT_EQ(sql_query(store->index_path(), hits_sql), std::vector<std::string>{"0"});
  EXPECT_EQ(sql_query(store->index_path(), used_sql), used_before);
  EXPECT_EQ(sql_query(store->index_path(), "SELECT count(*) FROM usage_log"), std::vector<std::string>{"0"});
  // A flush appends one line for the thousand hits to the usage journal; the index is
  // untouched.
  ASSERT_OK(store->flush());
  const JournalContents journal = parse_journal(read_file(root() / k_usage_journal_name));
  EXPECT_EQ(journal.batches, 1u);
  ASSERT_EQ(journal.uses.size(), 1u);
  EXPECT_EQ(journal.uses[0].key, facts.key());
  EXPECT_EQ(journal.uses[0].hits, 1000u);
  EXPECT_EQ(sql_query(store->index_path(), "SELECT count(*) FROM usage_log"), std::vector<std::string>{"0"});
  EXPECT_EQ(sql_query(store->index_path(), hits_sql), std::vector<std::string>{"0"});
  // Listing (inspect) folds the journal and the log into the entry, and empties both.
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].hits, 1000u);
  EXPECT_EQ(sql_query(store->index_path(), hits_sql), std::vector<std::string>{"1000"});
  EXPECT_EQ(sql_query(store->index_path(), "SELECT count(*) FROM usage_log"), std::vector<std::string>{"0"});
  EXPECT_EQ(std::filesystem::file_size(root() / k_usage_journal_name), 0u);
  EXPECT_GT(std::stoll(sql_query(store->index_path(), used_sql).at(0)), std::stoll(used_before.at(0)));
}

TEST_F(StoreTest, UsesFromSeveralProcessesAddUp) {
  const Facts facts = sample_facts("shared");
  {
    auto writer = open_store();
    ASSERT_OK(writer->put(facts.key(), facts, make_bytes(128, seed), 2.0));
  }
  for (int process = 0; process < 3; ++process) {
    auto store = open_store();
    for (int i = 0; i < 5; ++i) ASSERT_OK(store->get(facts.key()));
  }
  auto store = open_store();
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].hits, 15u);
}

TEST_F(StoreTest, OlderIndexSchemaIsMigrated) {
  const Facts facts = sample_facts("old");
  {
    auto store = open_store();
    ASSERT_OK(store->put(facts.key(), facts, make_bytes(128, seed), 2.0));
  }
  // Turn the index back into schema 1, as the first release wrote it.
  ASSERT_TRUE(sql_query(root() / "index.db",
                        "DROP TABLE usage_log; DROP INDEX entries_lookup; UPDATE schema_version SET version = 1")
                  .empty());
  auto store = open_store();
  ASSERT_TRUE(store);
  EXPECT_EQ(sql_query(root() / "index.db", "SELECT version FROM schema_version"), std::vector<std::string>{"2"});
  auto hit = store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit) << "entries survive a migration";
  ASSERT_OK(store->flush());
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].hits, 1u) << "the migrated index takes the journal's uses";
}

TEST_F(StoreTest, CountersPersistAcrossProcessesAndSessions) {
  const Facts facts = sample_facts("persist");
  CountingProducer producer{make_bytes(200, seed)};
  producer.compile_ms = 100.0;
  {
    auto store = open_store();
    ASSERT_OK(store->get_or_create(facts.key(), facts, producer.producer()));
    for (int i = 0; i < 3; ++i) ASSERT_OK(store->get_or_create(facts.key(), facts, producer.producer()));
    auto miss = store->get(sample_facts("absent").key());
    ASSERT_OK(miss);
  }
  {
    auto store = open_store();
    ASSERT_OK(store->get_or_create(facts.key(), facts, producer.producer()));
    auto stats = store->stats();
    ASSERT_OK(stats);
    EXPECT_EQ(stats->entries, 1u);
    EXPECT_EQ(stats->bytes, 200u);
    EXPECT_EQ(stats->totals.produces, 1u);
    EXPECT_EQ(stats->totals.misses, 2u);  // one produce, one plain get
    EXPECT_EQ(stats->totals.memory_hits, 3u);
    EXPECT_EQ(stats->totals.disk_hits, 1u);
    EXPECT_DOUBLE_EQ(stats->totals.compile_ms_spent, 100.0);
    EXPECT_DOUBLE_EQ(stats->totals.compile_ms_saved, 400.0);
  }
}

TEST_F(StoreTest, SizeCapEvictsLeastRecentlyUsed) {
  StoreOptions options;
  options.max_bytes = 10 * 1000;
  options.durability = Durability::relaxed;
  auto store = open_store(options);
  std::vector<Facts> facts;
  for (int i = 0; i < 4; ++i) {
    facts.push_back(sample_facts("lru" + std::to_string(i)));
    ASSERT_OK(store->put(facts.back().key(), facts.back(), make_bytes(2000, seed + i), 1.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  // Entry 0 is the oldest but was used most recently.
  ASSERT_OK(store->get(facts[0].key()));
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  for (int i = 4; i < 7; ++i) {
    facts.push_back(sample_facts("lru" + std::to_string(i)));
    ASSERT_OK(store->put(facts.back().key(), facts.back(), make_bytes(2000, seed + i), 1.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_LE(stats->bytes, options.max_bytes);
  EXPECT_GT(stats->totals.evicted, 0u);
  auto entries = store->list();
  ASSERT_OK(entries);
  std::set<std::string> ids;
  for (const auto& e : *entries) ids.insert(std::string(*e.facts.get("id")));
  EXPECT_TRUE(ids.contains("lru0")) << "recently used entry was evicted";
  EXPECT_TRUE(ids.contains("lru6")) << "the newest entry was evicted";
  EXPECT_FALSE(ids.contains("lru1")) << "the least recently used entry survived";
  EXPECT_EQ(count_files(root() / "blobs"), entries->size()) << "evicted blobs are deleted";
}

TEST_F(StoreTest, GcShrinksToRequestedSize) {
  StoreOptions options;
  options.durability = Durability::relaxed;
  auto store = open_store(options);
  for (int i = 0; i < 10; ++i) {
    const Facts f = sample_facts("gc" + std::to_string(i));
    ASSERT_OK(store->put(f.key(), f, make_bytes(1000, seed + i), 1.0));
  }
  GcOptions gc;
  gc.max_bytes = 3500;
  auto report = store->gc(gc);
  ASSERT_OK(report);
  EXPECT_EQ(report->evicted_entries, 7u);
  EXPECT_EQ(report->evicted_bytes, 7000u);
  EXPECT_EQ(report->bytes_after, 3000u);
  EXPECT_EQ(count_files(root() / "blobs"), 3u);
}

TEST_F(StoreTest, GcRemovesOldLeftoversButSparesYoungOnes) {
  auto store = open_store();
  // Leftovers of crashed writers: a temporary file and an orphan blob.
  write_file(root() / "tmp" / "blob.abc123", "partial");
  const Bytes orphan = make_bytes(50, seed);
  const BlobDigest digest = BlobDigest::of(orphan);
  std::filesystem::create_directories(store->blob_path(digest).parent_path());
  write_file(store->blob_path(digest), std::string(reinterpret_cast<const char*>(orphan.data()), orphan.size()));
  write_file(root() / "locks" / (sample_facts("l").key().to_hex() + ".lock"), "");
  auto young = store->gc({});
  ASSERT_OK(young);
  EXPECT_EQ(young->orphan_blobs, 0u);
  EXPECT_EQ(young->temp_files, 0u);
  EXPECT_EQ(young->lock_files, 0u);
  GcOptions now;
  now.grace = std::chrono::milliseconds(-1000);
  auto old = store->gc(now);
  ASSERT_OK(old);
  EXPECT_EQ(old->orphan_blobs, 1u);
  EXPECT_EQ(old->temp_files, 1u);
  EXPECT_EQ(old->lock_files, 1u);
  EXPECT_FALSE(std::filesystem::exists(store->blob_path(digest)));
}

TEST_F(StoreTest, MemoryTierRespectsItsCap) {
  StoreOptions options;
  options.memory_max_bytes = 2500;
  auto store = open_store(options);
  std::vector<Facts> facts;
  for (int i = 0; i < 3; ++i) {
    facts.push_back(sample_facts("m" + std::to_string(i)));
    ASSERT_OK(store->put(facts.back().key(), facts.back(), make_bytes(1000, seed + i), 1.0));
  }
  // Only two fit: the first one went back to disk-only.
  EXPECT_TRUE(expect_hit(*store, facts[0].key(), Tier::disk));
  EXPECT_TRUE(expect_hit(*store, facts[2].key(), Tier::memory));
}

TEST_F(StoreTest, DisabledMemoryTierServesEveryHitFromDisk) {
  auto store = open_store(without_memory_tier());
  const Facts facts = sample_facts("nomem");
  ASSERT_OK(store->put(facts.key(), facts, make_bytes(100, seed), 1.0));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(expect_hit(*store, facts.key(), Tier::disk));
  EXPECT_EQ(store->session_counters().disk_hits, 3u);
  EXPECT_EQ(store->session_counters().memory_hits, 0u);
  auto entries = store->list();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].hits, 3u);
}

TEST_F(StoreTest, VerifyOnHealthyStoreIsClean) {
  auto store = open_store();
  for (int i = 0; i < 5; ++i) {
    const Facts f = sample_facts("v" + std::to_string(i));
    ASSERT_OK(store->put(f.key(), f, make_bytes(300, seed + i), 1.0));
  }
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_TRUE(report->clean());
  EXPECT_EQ(report->checked, 5u);
  EXPECT_EQ(report->orphan_blobs, 0u);
}

TEST(ParseSize, AcceptsUnits) {
  EXPECT_EQ(parse_size("4096").value(), 4096u);
  EXPECT_EQ(parse_size("500M").value(), 500ull << 20);
  EXPECT_EQ(parse_size("2G").value(), 2ull << 30);
  EXPECT_EQ(parse_size("2g").value(), 2ull << 30);
  EXPECT_EQ(parse_size("1.5GiB").value(), 3ull << 29);
  EXPECT_EQ(parse_size("10KB").value(), 10240u);
  EXPECT_EQ(parse_size("1T").value(), 1ull << 40);
  EXPECT_EQ(parse_size("0").value(), 0u);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* text : {"", "G", "-1G", "2X", "1.2.3M", "2 G", "abc", "99999999999T", "nan"}) {
    auto size = parse_size(text);
    ASSERT_FALSE(size) << text;
    EXPECT_EQ(size.error().code, ErrorCode::invalid_input);
    EXPECT_NE(size.error().message.find("size '"), std::string::npos);
  }
}

TEST(FormatSize, ReadsNaturally) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(2ull << 30), "2.0 GiB");
}

}  // namespace
}  // namespace jitcache::cache
