// The remote tier under a Store, two cache directories standing for two nodes of a fleet:
// write-behind and read-through with backfill, then every way a value in Redis can be
// poisoned. A poisoned value is rejected, counted, logged with its key, and the node
// produces the entry itself: what it serves and stores is what its producer made.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "cache/store_checks.hpp"
#include "cache/seeded_fixture.hpp"
#include "remote_test_support.hpp"

namespace jitcache::remote {
namespace {

using namespace jitcache::remote::testing;

class RemoteStoreTest : public RedisTest {
 protected:

  Node node(const std::string& name, RemoteTierOptions opts) { return open_node(dir() / name, opts); }
  Node node(const std::string& name) { return node(name, options()); }

  std::string stored(const std::string& name) {
    auto reply = server->command({"GET", name});
    EXPECT_TRUE(reply.has_value()) << reply.error().to_string();
    return reply ? reply->str : std::string();
  }
  void store_raw(const std::string& name, const std::string& value) {
    auto reply = server->command({"SET", name, value});
    ASSERT_TRUE(reply.has_value()) << reply.error().to_string();
  }

  // Node `name` asks for `facts` while Redis holds a poisoned value for it: the value is
  // rejected for `why`, and the node serves (and keeps) what its own producer makes.
  void expect_poison_refused(const std::string& name, const Facts& facts, const std::string& why,
                             RemoteTierOptions opts) {
    SCOPED_TRACE(name + ": " + why);
    const std::string before = stored(RemoteTier(opts).entry_name(facts.key()));
    jitcache::testing::LogCapture log;
    Node b = node(name, opts);
    CountingProducer producer{make_bytes(3000, seed + 99)};
    auto got = b.store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(got);
    EXPECT_EQ(got->source, Source::produced);
    EXPECT_EQ(*got->bytes, producer.bytes) << "the poisoned value must not be served";
    EXPECT_EQ(producer.calls, 1);
    const Counters c = b.store->session_counters();
    EXPECT_EQ(c.remote_rejects, 1u);
    EXPECT_EQ(c.remote_hits, 0u);
    EXPECT_EQ(c.produces, 1u);
    const std::string key_hex = facts.key().to_hex();
    std::size_t rejected_lines = 0;
    for (const std::string& line : log.at(LogLevel::warning))
      if (line.find("rejected") != std::string::npos && line.find(key_hex) != std::string::npos &&
          line.find(why) != std::string::npos)
        ++rejected_lines;
    EXPECT_EQ(rejected_lines, 1u) << log.all();
    b.close();
    // The poisoned value is never overwritten (SET NX), nor taken into the local cache.
    EXPECT_EQ(stored(RemoteTier(opts).entry_name(facts.key())), before);
    auto local = open_local_only(dir() / name);
    auto hit = local->get(facts.key());
    ASSERT_OK(hit);
    ASSERT_TRUE(*hit);
    EXPECT_EQ(*(*hit)->bytes, producer.bytes);
  }

  std::uint64_t seed = jitcache::testing::test_seed("remote_store");
};

TEST_F(RemoteStoreTest, NodeAProducesAndUploadsNodeBHitsAndBackfills) {
  std::vector<Facts> variants;
  std::vector<cache::Bytes> blobs;
  for (int i = 0; i < 4; ++i) {
    variants.push_back(sample_facts("variant" + std::to_string(i), i % 2 ? "identity" : "dynamic"));
    blobs.push_back(make_bytes(4000 + 1000 * i, seed + i));
  }
  Node a = node("a");
  for (int i = 0; i < 4; ++i) {
    CountingProducer producer{blobs[i]};
    auto got = a.store->get_or_create(variants[i].key(), variants[i], producer.producer());
    ASSERT_OK(got);
    EXPECT_EQ(got->source, Source::produced);
    EXPECT_EQ(producer.calls, 1);
  }
  cache::testing::expect_counters(a.store->session_counters(), {{&Counters::produces, 4},
                                                                {&Counters::remote_uploads, 4},
                                                                {&Counters::remote_misses, 4},
                                                                {&Counters::remote_hits, 0},
                                                                {&Counters::remote_rejects, 0},
                                                                {&Counters::remote_errors, 0}});
  a.close();

  Node b = node("b");
  for (int i = 0; i < 4; ++i) {
    CountingProducer producer{make_bytes(10, 1)};
    auto got = b.store->get_or_create(variants[i].key(), variants[i], producer.producer());
    ASSERT_OK(got);
    EXPECT_EQ(got->source, Source::remote);
    EXPECT_EQ(*got->bytes, blobs[i]);
    EXPECT_EQ(producer.calls, 0);
  }
  cache::testing::expect_counters(
      b.store->session_counters(),
      {{&Counters::remote_hits, 4},
       {&Counters::produces, 0},
       {&Counters::misses, 0},
       {&Counters::remote_uploads, 0},
       {&Counters::compile_ms_saved, 4 * 12.5, "a remote hit saves what the producer spent"}});
  b.close();

  // B's disk now has all four: with the remote gone it compiles nothing.
  server->kill();
  auto local = open_local_only(dir() / "b");
  for (int i = 0; i < 4; ++i) {
    CountingProducer producer{make_bytes(10, 1)};
    auto got = local->get_or_create(variants[i].key(), variants[i], producer.producer());
    ASSERT_OK(got);
    EXPECT_EQ(got->source, Source::disk);
    EXPECT_EQ(*got->bytes, blobs[i]);
    EXPECT_EQ(producer.calls, 0);
  }
  EXPECT_EQ(local->session_counters().disk_hits, 4u);
}

TEST_F(RemoteStoreTest, PlainGetOfARemoteHitBackfillsTheDisk) {
  const Facts facts = sample_facts("plain-get");
  const cache::Bytes bytes = make_bytes(5000, seed);
  Node a = node("a");
  ASSERT_OK(a.store->put(facts.key(), facts, bytes, 3.5));
  EXPECT_EQ(a.store->session_counters().remote_uploads, 1u);
  a.close();

  Node c = node("c");
  auto hit = c.store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ((*hit)->tier, cache::Tier::remote);
  EXPECT_EQ(*(*hit)->bytes, bytes);
  EXPECT_EQ(c.store->session_counters().remote_hits, 1u);
  c.close();

  auto local = open_local_only(dir() / "c");
  auto disk = local->get(facts.key());
  ASSERT_OK(disk);
  ASSERT_TRUE(*disk) << "the facts carried by the remote value let get() fill the disk";
  EXPECT_EQ((*disk)->tier, cache::Tier::disk);
  EXPECT_EQ(*(*disk)->bytes, bytes);
}

TEST_F(RemoteStoreTest, FirstWriterWinsAcrossNodes) {
  const Facts facts = sample_facts("race");
  Node a = node("a");
  Node b = node("b");
  ASSERT_OK(a.store->put(facts.key(), facts, make_bytes(100, seed), 1));
  ASSERT_OK(b.store->put(facts.key(), facts, make_bytes(100, seed + 1), 1));
  EXPECT_EQ(a.store->session_counters().remote_uploads, 1u);
  EXPECT_EQ(b.store->session_counters().remote_uploads, 0u) << "SET NX: B's entry is not written";
  Node c = node("c");
  auto hit = c.store->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ(*(*hit)->bytes, make_bytes(100, seed));
}

class PoisonTest : public RemoteStoreTest {
 protected:
  // Node A produces and uploads `facts` honestly; returns the Redis name of the value.
  std::string upload_honestly(const Facts& facts) {
    Node a = node("a-" + facts.key().to_hex().substr(0, 8));
    CountingProducer producer{make_bytes(3000, seed)};
    auto got = a.store->get_or_create(facts.key(), facts, producer.producer());
    EXPECT_TRUE(got.has_value());
    EXPECT_EQ(a.store->session_counters().remote_uploads, 1u);
    return a.tier->entry_name(facts.key());
  }
};

TEST_F(PoisonTest, FlippedByte) {
  const Facts facts = sample_facts("flip");
  const std::string name = upload_honestly(facts);
  std::string value = stored(name);
  ASSERT_GT(value.size(), 1000u);
  value[value.size() - 1000] ^= 0x10;  // inside the entry's bytes
  store_raw(name, value);
  expect_poison_refused("b", facts, "bad signature", options());
}

TEST_F(PoisonTest, TruncatedValue) {
  const Facts facts = sample_facts("truncate");
  const std::string name = upload_honestly(facts);
  store_raw(name, stored(name).substr(0, 1500));
  expect_poison_refused("b", facts, "truncated", options());
}

TEST_F(PoisonTest, ValueMovedToAnotherKey) {
  const Facts identity = sample_facts("moved", "identity");
  const Facts dynamic = sample_facts("moved", "dynamic");
  const std::string from = upload_honestly(identity);
  const std::string to = RemoteTier(options()).entry_name(dynamic.key());
  ASSERT_OK(server->command({"RENAME", from, to}));
  expect_poison_refused("b", dynamic, "bad signature", options());

  const Facts other = sample_facts("copied", "dynamic");
  ASSERT_OK(server->command({"COPY", to, RemoteTier(options()).entry_name(other.key())}));
  expect_poison_refused("c", other, "bad signature", options());
}

TEST_F(PoisonTest, IdentityBundleUnderADynamicKeySignedWithAnotherFleetKey) {
  const Facts identity = sample_facts("bundle", "identity");
  const Facts dynamic = sample_facts("bundle", "dynamic");
  const std::string name = RemoteTier(options()).entry_name(dynamic.key());
  const std::string attacker_key(32, 'X');
  store_raw(name, encode_signed_entry(name, attacker_key, identity, make_bytes(3000, seed + 5), 1.0));
  expect_poison_refused("b", dynamic, "bad signature", options());
}

TEST_F(PoisonTest, IdentityBundleUnderADynamicKeySignedWithTheFleetKey) {
  // A holder of the key who stores the wrong variant: the facts inside give it away.
  const Facts identity = sample_facts("bundle2", "identity");
  const Facts dynamic = sample_facts("bundle2", "dynamic");
  const std::string name = RemoteTier(options()).entry_name(dynamic.key());
  store_raw(name, encode_signed_entry(name, fleet_key, identity, make_bytes(3000, seed + 6), 1.0));
  expect_poison_refused("b", dynamic, "facts of another key", options());
}

TEST_F(PoisonTest, UnsignedValue) {
  const Facts facts = sample_facts("raw");
  const std::string name = RemoteTier(options()).entry_name(facts.key());
  store_raw(name, bytes_string(make_bytes(3000, seed + 7)));
  expect_poison_refused("b", facts, "not a signed jitcache entry", options());
}

TEST_F(PoisonTest, EmptyValue) {
  const Facts facts = sample_facts("empty");
  store_raw(RemoteTier(options()).entry_name(facts.key()), "");
  expect_poison_refused("b", facts, "truncated", options());
}

TEST_F(PoisonTest, OversizedValueIsRejectedUnread) {
  const Facts facts = sample_facts("big");
  const std::string name = RemoteTier(options()).entry_name(facts.key());
  // Honestly signed, only too big for this node's bound.
  store_raw(name, encode_signed_entry(name, fleet_key, facts, make_bytes(10000, seed + 8), 1.0));
  RemoteTierOptions small = options();
  small.max_entry_bytes = 4096;
  expect_poison_refused("b", facts, "more than the 4096 allowed", small);

  // read() reports it the same way, with the stored size.
  RemoteTier tier(small);
  auto read = tier.read(name);
  ASSERT_OK(read);
  ASSERT_TRUE(*read);
  ASSERT_TRUE((*read)->rejected);
  EXPECT_EQ((*read)->rejected->why, Rejection::oversized);
  EXPECT_GT((*read)->stored_bytes, 10000u);
}

TEST_F(PoisonTest, OversizedEntryIsNotUploaded) {
  RemoteTierOptions small = options();
  small.max_entry_bytes = 4096;
  const Facts facts = sample_facts("too-big-to-upload");
  jitcache::testing::LogCapture log;
  Node b = node("b", small);
  CountingProducer producer{make_bytes(10000, seed)};
  ASSERT_OK(b.store->get_or_create(facts.key(), facts, producer.producer()));
  EXPECT_EQ(b.store->session_counters().remote_uploads, 0u);
  EXPECT_EQ(log.count_containing("JITCACHE_REMOTE_MAX_ENTRY_BYTES"), 1u) << log.all();
  auto exists = server->command({"EXISTS", b.tier->entry_name(facts.key())});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 0);
}

TEST_F(PoisonTest, ContentCheckRejectsWhatTheReaderCannotUse) {
  const Facts facts = sample_facts("content");
  upload_honestly(facts);
  RemoteTierOptions checking = options();
  int checked = 0;
  checking.check_content = [&](const Facts& f, std::span<const std::byte> bytes) -> Status {
    ++checked;
    EXPECT_EQ(f, facts);
    EXPECT_EQ(bytes.size(), 3000u);
    return make_error(ErrorCode::invalid_input, "the bundle's embedded facts disagree");
  };
  expect_poison_refused("b", facts, "unusable content: the bundle's embedded facts disagree", checking);
  EXPECT_GE(checked, 1);
}

TEST_F(PoisonTest, ReadReportsEachRejectionWithoutCounting) {
  const Facts facts = sample_facts("audit");
  const std::string name = upload_honestly(facts);
  RemoteTier tier(options());
  auto good = tier.read(name);
  ASSERT_OK(good);
  ASSERT_TRUE(*good);
  ASSERT_TRUE((*good)->entry);
  EXPECT_EQ((*good)->entry->facts, facts);
  EXPECT_EQ((*good)->stored_bytes, stored(name).size());
  auto absent = tier.read(tier.entry_name(sample_facts("nothing").key()));
  ASSERT_OK(absent);
  EXPECT_FALSE(*absent);
  // A name that is not an entry name cannot be checked against a key.
  ASSERT_OK(server->command({"COPY", name, "jitcache:v1:entry:NOT-HEX"}));
  auto foreign = tier.read("jitcache:v1:entry:NOT-HEX");
  ASSERT_OK(foreign);
  ASSERT_TRUE(*foreign && (*foreign)->rejected);
  EXPECT_EQ((*foreign)->rejected->why, Rejection::wrong_key);
  auto names = tier.list_entry_names();
  ASSERT_OK(names);
  EXPECT_EQ(names->size(), 2u);
  EXPECT_EQ(tier.key_of(name), facts.key());
  EXPECT_EQ(tier.key_of(tier.lease_name(facts.key())), std::nullopt);
  const std::string hex = facts.key().to_hex();
  std::string shouted = "jitcache:v1:entry:";
  for (char ch : hex) shouted += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  ASSERT_NE(shouted, name) << "a key with no letter in its hex";
  EXPECT_EQ(tier.key_of(shouted), std::nullopt) << "only the canonical spelling is signed";
}

// A list where a value belongs is a rejection like any bad value, not an error of the tier
// (before: WRONGTYPE failed the read, counted as an error with a "tier redis" warning).
TEST_F(RemoteStoreTest, ValueOfAnotherRedisTypeIsRejected) {
  const Facts facts = sample_facts("listed");
  const std::string name = RemoteTier(options()).entry_name(facts.key());
  ASSERT_OK(server->command({"RPUSH", name, "a", "b"}));
  jitcache::testing::LogCapture log;
  Node b = node("b");
  CountingProducer producer{make_bytes(3000, seed + 7)};
  auto got = b.store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(got);
  EXPECT_EQ(got->source, Source::produced);
  const Counters c = b.store->session_counters();
  EXPECT_EQ(c.remote_rejects, 1u);
  EXPECT_EQ(c.remote_errors, 0u);
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("not a string value: a Redis list"), std::string::npos) << log.all();
  // Never overwritten: the list is still there (the audit reports it, clear --stale removes it).
  auto type = server->command({"TYPE", name});
  ASSERT_OK(type);
  EXPECT_EQ(type->str, "list");
}

// A lookup probes the tiers and the fetch that follows asks them again: one poisoned value
// is one rejection and one warning per request (before: two of each).
TEST_F(RemoteStoreTest, ProbeThenFetchReportsOnePoisonedValueOnce) {
  const Facts facts = sample_facts("probed");
  store_raw(RemoteTier(options()).entry_name(facts.key()), "not a signed value");
  jitcache::testing::LogCapture log;
  Node b = node("b");
  auto probed = b.store->get(facts.key(), cache::CountMiss::no);
  ASSERT_OK(probed);
  EXPECT_FALSE(*probed);
  CountingProducer producer{make_bytes(3000, seed + 8)};
  ASSERT_OK(b.store->get_or_create(facts.key(), facts, producer.producer()));
  const Counters c = b.store->session_counters();
  EXPECT_EQ(c.remote_rejects, 1u);
  EXPECT_EQ(log.warnings(), 1u) << log.all();
}

}  // namespace
}  // namespace jitcache::remote

namespace jitcache::remote {
namespace {

using namespace jitcache::remote::testing;

// Store::put_if_absent across two nodes: SET NX decides, the loser is handed the winner's
// verified value and its own disk takes it; a value that fails verification cannot decide,
// so the node's disk does, and the value is neither overwritten nor counted twice.
using RemoteFirstWriteTest = cache::testing::Seeded<RedisTest>;

TEST_F(RemoteFirstWriteTest, SetNxDecidesAndTheLoserTakesTheWinnersValue) {
  Node a = open_node(dir() / "a", options());
  Node b = open_node(dir() / "b", options());
  const cache::Facts facts = sample_facts("spec-record");
  const cache::Bytes first = make_bytes(200, seed);
  auto won = a.store->put_if_absent(facts.key(), facts, first, 1.0);
  ASSERT_OK(won);
  EXPECT_TRUE(won->ours);
  auto lost = b.store->put_if_absent(facts.key(), facts, make_bytes(200, seed + 1), 1.0);
  ASSERT_OK(lost);
  EXPECT_FALSE(lost->ours);
  EXPECT_EQ(*lost->bytes, first);
  b.close();
  auto local = open_local_only(dir() / "b");
  auto hit = local->get(facts.key());
  ASSERT_OK(hit);
  ASSERT_TRUE(*hit);
  EXPECT_EQ(*(*hit)->bytes, first) << "node b's disk names the fleet's first writer";
}

TEST_F(RemoteFirstWriteTest, AValueThatFailsVerificationLetsTheDiskDecide) {
  Node a = open_node(dir() / "a", options());
  const cache::Facts facts = sample_facts("poisoned-record");
  const std::string name = a.tier->entry_name(facts.key());
  ASSERT_OK(server->command({"SET", name, "not a signed value"}));
  jitcache::testing::LogCapture log;
  const cache::Bytes mine = make_bytes(150, seed);
  auto made = a.store->put_if_absent(facts.key(), facts, mine, 1.0);
  ASSERT_OK(made);
  EXPECT_TRUE(made->ours);
  EXPECT_EQ(a.store->session_counters().remote_rejects, 0u) << "the lookup before a create reports a bad value";
  EXPECT_EQ(a.store->tier_stats().back().errors, 1u);
  auto value = server->command({"GET", name});
  ASSERT_OK(value);
  EXPECT_EQ(value->str, "not a signed value") << "never overwritten";
  // The disk decided: a second writer of this directory loses to the first.
  auto lost = a.store->put_if_absent(facts.key(), facts, make_bytes(150, seed + 1), 1.0);
  ASSERT_OK(lost);
  EXPECT_FALSE(lost->ours);
  EXPECT_EQ(*lost->bytes, mine);
}

}  // namespace
}  // namespace jitcache::remote
