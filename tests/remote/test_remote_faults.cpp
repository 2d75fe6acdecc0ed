// A remote that fails is never a point of failure: killed, paused beyond the operation
// timeout, restarted empty, or refusing the password, every get_or_create succeeds from
// the local tiers, the first failure costs at most a timeout, the breaker makes later
// calls free, and each failure episode logs exactly one warning.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "remote_test_support.hpp"

namespace jitcache::remote {
namespace {

using namespace jitcache::remote::testing;

// Bounds on the time a call spends in the remote tier, with slack for two loaded cores: a
// failing call costs one connect or operation timeout (200 / 300 ms here); a call while
// the breaker is open costs no network at all.
constexpr double k_first_failure_max_ms = 300 + 400;
constexpr double k_breaker_open_max_ms = 50;

class RemoteFaultTest : public RedisTest {
 protected:

  Facts variant(int i) const { return sample_facts("fault" + std::to_string(i)); }

  // get_or_create of variant `i` on `node`, which must produce it; returns the time it
  // spent in the remote tier.
  double produce(Node& node, int i, const char* why) {
    SCOPED_TRACE(why);
    CountingProducer producer{make_bytes(2000, seed + i)};
    const Facts facts = variant(i);
    const double remote_before = node.timed->spent_ms();
    const auto start = std::chrono::steady_clock::now();
    auto got = node.store->get_or_create(facts.key(), facts, producer.producer());
    EXPECT_LT(ms_since(start), 3000.0) << "the whole call";
    const double ms = node.timed->spent_ms() - remote_before;
    EXPECT_TRUE(got.has_value()) << got.error().to_string();
    if (got) {
      EXPECT_EQ(got->source, Source::produced);
      EXPECT_EQ(*got->bytes, producer.bytes);
    }
    EXPECT_EQ(producer.calls, 1);
    return ms;
  }

  // Warnings of the Store about the remote tier (other warnings are counted apart).
  std::size_t remote_warnings(const jitcache::testing::LogCapture& log) const {
    std::size_t n = 0;
    for (const std::string& line : log.at(LogLevel::warning))
      if (line.find("tier redis") != std::string::npos) ++n;
    return n;
  }

  std::uint64_t seed = jitcache::testing::test_seed("remote_faults");
};

TEST_F(RemoteFaultTest, KilledBetweenOperationsThenBackAfterTheBreaker) {
  RemoteTierOptions opts = options();
  opts.redis.breaker = milliseconds(1000);
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", opts);
  produce(node, 0, "remote up");
  EXPECT_EQ(node.store->session_counters().remote_uploads, 1u);

  server->kill();
  const double first = produce(node, 1, "first call after the kill");
  EXPECT_LT(first, k_first_failure_max_ms);
  for (int i = 2; i < 6; ++i) EXPECT_LT(produce(node, i, "breaker open"), k_breaker_open_max_ms) << i;
  EXPECT_EQ(remote_warnings(log), 1u) << log.all();
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  Counters c = node.store->session_counters();
  EXPECT_GE(c.remote_errors, 1u);
  EXPECT_EQ(c.remote_uploads, 1u);
  EXPECT_EQ(c.produces, 6u);

  ASSERT_OK(server->restart());
  std::this_thread::sleep_for(milliseconds(1100));
  produce(node, 6, "after the breaker period");
  c = node.store->session_counters();
  EXPECT_EQ(c.remote_uploads, 2u) << "the restarted server is used again";
  EXPECT_GE(log.count_containing("work again"), 1u) << log.all();
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  auto exists = server->command({"EXISTS", node.tier->entry_name(variant(6).key())});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 1);
}

TEST_F(RemoteFaultTest, KilledInTheMiddleOfASequence) {
  RemoteTierOptions opts = options();
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", opts);
  std::vector<double> times;
  for (int i = 0; i < 8; ++i) {
    const Facts facts = variant(i);
    CountingProducer producer{make_bytes(2000, seed + i)};
    cache::Producer produce_it = producer.producer();
    // The server dies while variant 3 is being produced: its lease and upload fail.
    cache::Producer killing = [&]() -> Result<cache::Produced> {
      server->kill();
      return produce_it();
    };
    const double remote_before = node.timed->spent_ms();
    auto got = node.store->get_or_create(facts.key(), facts, i == 3 ? killing : produce_it);
    times.push_back(node.timed->spent_ms() - remote_before);
    ASSERT_OK(got);
    EXPECT_EQ(*got->bytes, producer.bytes);
    EXPECT_EQ(producer.calls, 1);
  }
  const Counters c = node.store->session_counters();
  EXPECT_EQ(c.produces, 8u);
  EXPECT_EQ(c.remote_uploads, 3u);
  EXPECT_GE(c.remote_errors, 1u);
  EXPECT_LT(times[3], k_first_failure_max_ms);
  for (int i = 4; i < 8; ++i) EXPECT_LT(times[i], k_breaker_open_max_ms) << i;
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  // Everything is on this node's disk.
  node.close();
  auto local = open_local_only(dir() / "n");
  for (int i = 0; i < 8; ++i) {
    auto hit = local->get(variant(i).key());
    ASSERT_OK(hit);
    EXPECT_TRUE(*hit) << i;
  }
}

TEST_F(RemoteFaultTest, PausedBeyondTheOperationTimeout) {
  RemoteTierOptions opts = options();
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", opts);
  produce(node, 0, "before the pause");
  ASSERT_OK(server->pause(milliseconds(2000)));
  const double first = produce(node, 1, "paused");
  EXPECT_GE(first, 250.0) << "it waited for the operation timeout";
  EXPECT_LT(first, k_first_failure_max_ms);
  for (int i = 2; i < 5; ++i) EXPECT_LT(produce(node, i, "breaker open"), k_breaker_open_max_ms) << i;
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("timed out"), std::string::npos) << log.all();
  EXPECT_GE(node.store->session_counters().remote_errors, 1u);
}

TEST_F(RemoteFaultTest, RestartedEmpty) {
  RemoteTierOptions opts = options();
  jitcache::testing::LogCapture log;
  Node a = open_node(dir() / "a", opts);
  produce(a, 0, "before the restart");
  ASSERT_OK(server->restart());

  // A node connecting afresh finds an empty remote: a plain miss, no failure.
  Node b = open_node(dir() / "b", opts);
  produce(b, 0, "the entry went with the old server");
  EXPECT_EQ(b.store->session_counters().remote_errors, 0u);
  EXPECT_EQ(b.store->session_counters().remote_uploads, 1u);

  // A's pooled connection died with the old server. The client retries once on a fresh
  // connection, which finds the restarted server: no failure, no warning, no breaker.
  produce(a, 1, "stale pooled connection");
  produce(a, 2, "and the next");
  EXPECT_EQ(a.store->session_counters().remote_errors, 0u);
  EXPECT_EQ(a.store->session_counters().remote_uploads, 3u);
  EXPECT_EQ(log.warnings(), 0u) << log.all();
}

TEST_F(RemoteFaultTest, WrongPassword) {
  server.reset();
  server = start_server({.password = "the-right-one"});
  ASSERT_TRUE(server);
  const std::string url = "redis://:not-the-right-one@127.0.0.1:" + std::to_string(server->port());
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", fast_options(url, std::string(32, 'K')));
  EXPECT_LT(produce(node, 0, "refused"), k_first_failure_max_ms);
  for (int i = 1; i < 4; ++i) EXPECT_LT(produce(node, i, "breaker open"), k_breaker_open_max_ms) << i;
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("AUTH refused"), std::string::npos) << log.all();
  EXPECT_EQ(log.all().find("not-the-right-one"), std::string::npos) << "the password is never logged";
  const Counters c = node.store->session_counters();
  EXPECT_GE(c.remote_errors, 1u);
  EXPECT_EQ(c.remote_uploads, 0u);
  EXPECT_EQ(c.produces, 4u);

  // The right password works.
  Node good = open_node(dir() / "good", options());
  produce(good, 10, "right password");
  EXPECT_EQ(good.store->session_counters().remote_uploads, 1u);
}

// A server that wants a password the node does not send answers every command with
// NOAUTH: the connection is failing, so the breaker opens as for a refused password.
TEST_F(RemoteFaultTest, NoPasswordForAServerThatWantsOne) {
  server.reset();
  server = start_server({.password = "the-right-one"});
  ASSERT_TRUE(server);
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", fast_options(server->url(/*with_password=*/false), std::string(32, 'K')));
  produce(node, 0, "no password");
  for (int i = 1; i < 4; ++i) EXPECT_LT(produce(node, i, "breaker open"), k_breaker_open_max_ms) << i;
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("NOAUTH"), std::string::npos) << log.all();
  EXPECT_EQ(node.store->session_counters().remote_uploads, 0u);
  EXPECT_EQ(node.store->session_counters().produces, 4u);
}

TEST_F(RemoteFaultTest, NoServerAtAllCostsOneConnectTimeout) {
  const int port = server->port();
  server.reset();
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", fast_options("redis://127.0.0.1:" + std::to_string(port), std::string(32, 'K')));
  EXPECT_LT(produce(node, 0, "nothing listens"), k_first_failure_max_ms);
  for (int i = 1; i < 4; ++i) EXPECT_LT(produce(node, i, "breaker open"), k_breaker_open_max_ms) << i;
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("cannot connect"), std::string::npos) << log.all();
}

TEST_F(RemoteFaultTest, FullServerRefusingWritesWarnsOnce) {
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", options());
  // A Redis out of memory answers reads and refuses every write (OOM): leases and uploads.
  ASSERT_OK(server->command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}));
  ASSERT_OK(server->command({"CONFIG", "SET", "maxmemory", "1"}));
  for (int i = 0; i < 4; ++i) produce(node, i, "full");
  const Counters c = node.store->session_counters();
  EXPECT_EQ(c.remote_uploads, 0u);
  EXPECT_EQ(c.remote_misses, 4u) << "reads go on";
  EXPECT_GE(c.remote_errors, 4u);
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  EXPECT_NE(log.all().find("OOM"), std::string::npos) << log.all();
  EXPECT_EQ(log.count_containing("work again"), 0u) << log.all();

  // Room again: the writes work again, and a later outage is a new episode with its warning.
  ASSERT_OK(server->command({"CONFIG", "SET", "maxmemory", "0"}));
  produce(node, 4, "room again");
  EXPECT_EQ(node.store->session_counters().remote_uploads, 1u);
  EXPECT_EQ(log.count_containing("writes work again"), 1u) << log.all();
  server->kill();
  produce(node, 5, "down");
  EXPECT_EQ(log.warnings(), 2u) << log.all();
}

}  // namespace
}  // namespace jitcache::remote
