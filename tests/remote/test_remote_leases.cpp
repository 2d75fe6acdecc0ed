// One production per key across the fleet: a node producing a key holds a lease in Redis
// that the others wait on; the lease is renewed while its holder works, expires when the
// holder dies, and a waiting node gives up after its bounded wait.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "remote_test_support.hpp"

namespace jitcache::remote {
namespace {

using namespace jitcache::remote::testing;
using jitcache::testing::HangGuard;

class RemoteLeaseTest : public RedisTest {
 protected:
  // Starts `node` producing `facts` on another thread with `slow` (which the caller keeps
  // alive) and returns once the producer runs: by then the node holds the lease.
  std::future<Result<cache::Fetched>> start_producing(Node& node, const Facts& facts, CountingProducer& slow) {
    auto started = std::make_shared<std::promise<void>>();
    auto running = started->get_future();
    cache::Producer signalling = [started, inner = slow.producer()]() -> Result<cache::Produced> {
      started->set_value();
      return inner();
    };
    auto result = std::async(std::launch::async, [&node, facts, signalling] {
      return node.store->get_or_create(facts.key(), facts, signalling);
    });
    running.wait();
    return result;
  }

  bool lease_exists(const RemoteTier& tier, const Facts& facts) {
    auto reply = server->command({"EXISTS", tier.lease_name(facts.key())});
    EXPECT_TRUE(reply.has_value()) << reply.error().to_string();
    return reply && reply->integer == 1;
  }

  // `node` gets `facts` while a lease on it is held elsewhere: it produces the entry itself,
  // once. Returns how long the call took (ms).
  double produce_past_lease(Node& node, const Facts& facts) {
    CountingProducer producer{make_bytes(2000, seed)};
    const auto start = std::chrono::steady_clock::now();
    auto got = node.store->get_or_create(facts.key(), facts, producer.producer());
    const double ms = ms_since(start);
    EXPECT_OK(got);
    if (got) {
      EXPECT_EQ(got->source, Source::produced);
    }
    EXPECT_EQ(producer.calls, 1);
    return ms;
  }

  // Holds `facts`' lease as someone else for a minute (longer than any test waits) and
  // returns options that wait `wait` for a lease.
  RemoteTierOptions lease_held_elsewhere(const Facts& facts, milliseconds wait) {
    RemoteTierOptions impatient = options();
    impatient.wait = wait;
    EXPECT_OK(server->command({"SET", RemoteTier(impatient).lease_name(facts.key()), "someone-else", "PX", "60000"}));
    return impatient;
  }

  std::uint64_t seed = jitcache::testing::test_seed("remote_leases");
};

TEST_F(RemoteLeaseTest, SecondNodeWaitsForTheFirstAndProducesNothing) {
  HangGuard guard(30);
  const Facts facts = sample_facts("lease");
  Node a = open_node(dir() / "a", options());
  Node b = open_node(dir() / "b", options());
  CountingProducer slow{make_bytes(3000, seed)};
  slow.delay = milliseconds(300);
  auto first = start_producing(a, facts, slow);
  EXPECT_TRUE(lease_exists(*a.tier, facts)) << "A holds the lease while it produces";

  CountingProducer other{make_bytes(3000, seed + 1)};
  auto second = b.store->get_or_create(facts.key(), facts, other.producer());
  auto first_result = first.get();
  ASSERT_OK(first_result);
  ASSERT_OK(second);
  EXPECT_EQ(first_result->source, Source::produced);
  EXPECT_EQ(second->source, Source::remote);
  EXPECT_EQ(*second->bytes, slow.bytes);
  EXPECT_EQ(slow.calls + other.calls, 1);
  const Counters cb = b.store->session_counters();
  EXPECT_EQ(cb.remote_lease_waits, 1u);
  EXPECT_EQ(cb.remote_hits, 1u);
  EXPECT_EQ(cb.produces, 0u);
  EXPECT_EQ(a.store->session_counters().remote_lease_waits, 0u);
  EXPECT_FALSE(lease_exists(*a.tier, facts)) << "the lease is given back once the entry is stored";
}

TEST_F(RemoteLeaseTest, TwoNodesRacingProduceOnce) {
  HangGuard guard(30);
  // Several rounds with fresh keys: whichever node wins, exactly one produces.
  Node a = open_node(dir() / "a", options());
  Node b = open_node(dir() / "b", options());
  for (int round = 0; round < 3; ++round) {
    const Facts facts = sample_facts("race" + std::to_string(round));
    CountingProducer pa{make_bytes(1000, seed + round)}, pb{make_bytes(1000, seed + round)};
    pa.delay = pb.delay = milliseconds(300);
    std::atomic<bool> go{false};
    auto run = [&](Node& node, CountingProducer& producer) {
      while (!go) std::this_thread::yield();
      return node.store->get_or_create(facts.key(), facts, producer.producer());
    };
    auto fa = std::async(std::launch::async, [&] { return run(a, pa); });
    auto fb = std::async(std::launch::async, [&] { return run(b, pb); });
    go = true;
    auto ra = fa.get();
    auto rb = fb.get();
    ASSERT_OK(ra);
    ASSERT_OK(rb);
    EXPECT_EQ(pa.calls + pb.calls, 1) << "round " << round;
    EXPECT_EQ(*ra->bytes, *rb->bytes);
  }
  const Counters ca = a.store->session_counters(), cb = b.store->session_counters();
  EXPECT_EQ(ca.produces + cb.produces, 3u);
  EXPECT_EQ(ca.remote_uploads + cb.remote_uploads, 3u);
  EXPECT_EQ(ca.remote_hits + cb.remote_hits, 3u);
  // The loser normally waits on the winner's lease; on a machine slow enough that it looks
  // only after the winner has stored the entry, it finds it without waiting.
  EXPECT_LE(ca.remote_lease_waits + cb.remote_lease_waits, 3u);
}

TEST_F(RemoteLeaseTest, HolderKilledWhileProducingLetsAnotherNodeProduceAfterExpiry) {
  HangGuard guard(30);
  const Facts facts = sample_facts("killed-holder");
  RemoteTierOptions child_options = options();
  child_options.lease = milliseconds(500);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child is another node: its own cache directory and connection. It never returns.
    ::close(ready[0]);
    Node holder = open_node(dir() / "holder", child_options);
    cache::Producer stuck = [&]() -> Result<cache::Produced> {
      const char byte = 'r';
      if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    };
    if (holder.store) (void)holder.store->get_or_create(facts.key(), facts, stuck);
    ::_exit(2);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the child did not start producing";
  ::close(ready[0]);
  RemoteTier probe(options());
  ASSERT_TRUE(lease_exists(probe, facts)) << "the child holds the lease while it produces";
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto pttl = server->command({"PTTL", probe.lease_name(facts.key())});
  ASSERT_OK(pttl);
  const long long left_ms = pttl->integer;
  EXPECT_GT(left_ms, 0) << "the lease outlives its dead holder until it expires";
  EXPECT_LE(left_ms, 500);

  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", options());
  const double ms = produce_past_lease(node, facts);
  EXPECT_GE(ms, static_cast<double>(left_ms) - 50) << "it waited for the lease to expire";
  EXPECT_LT(ms, 5000.0);
  const Counters c = node.store->session_counters();
  EXPECT_EQ(c.remote_lease_waits, 1u);
  EXPECT_EQ(c.produces, 1u);
  EXPECT_EQ(c.remote_uploads, 1u);
  EXPECT_GE(log.count_containing("another node is compiling"), 1u) << log.all();
}

TEST_F(RemoteLeaseTest, WaitIsBoundedWhenTheLeaseNeverGoes) {
  HangGuard guard(30);
  const Facts facts = sample_facts("stuck-lease");
  const RemoteTierOptions impatient = lease_held_elsewhere(facts, milliseconds(300));
  RemoteTier probe(impatient);
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", impatient);
  const double ms = produce_past_lease(node, facts);
  EXPECT_GE(ms, 290.0);
  EXPECT_LT(ms, 300.0 + 700.0);
  EXPECT_EQ(node.store->session_counters().remote_lease_waits, 1u);
  EXPECT_EQ(node.store->session_counters().remote_uploads, 1u);
  EXPECT_EQ(log.count_containing("waited 300 ms for another node"), 1u) << log.all();
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  // Someone else's lease is theirs: this node does not delete it.
  auto owner = server->command({"GET", probe.lease_name(facts.key())});
  ASSERT_OK(owner);
  EXPECT_EQ(owner->str, "someone-else");
}

TEST_F(RemoteLeaseTest, LeaseIsRenewedWhileItsHolderWorks) {
  HangGuard guard(30);
  const Facts facts = sample_facts("long-compile");
  RemoteTierOptions short_lease = options();
  short_lease.lease = milliseconds(300);
  Node a = open_node(dir() / "a", short_lease);
  Node b = open_node(dir() / "b", short_lease);
  CountingProducer slow{make_bytes(3000, seed)};
  slow.delay = milliseconds(900);  // three lifetimes of the lease
  auto first = start_producing(a, facts, slow);
  CountingProducer other{make_bytes(3000, seed + 1)};
  auto second = std::async(std::launch::async,
                           [&] { return b.store->get_or_create(facts.key(), facts, other.producer()); });
  // Past the lease's first lifetime, it is still there and still A's.
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_TRUE(lease_exists(*a.tier, facts));
  auto ra = first.get();
  auto rb = second.get();
  ASSERT_OK(ra);
  ASSERT_OK(rb);
  EXPECT_EQ(slow.calls, 1);
  EXPECT_EQ(other.calls, 0) << "B took over a lease that was still being renewed";
  EXPECT_EQ(rb->source, Source::remote);
  EXPECT_EQ(*rb->bytes, slow.bytes);
  EXPECT_EQ(b.store->session_counters().remote_lease_waits, 1u);
}

TEST_F(RemoteLeaseTest, PoisonedValueIsReportedOnceWhileWaiting) {
  HangGuard guard(30);
  const Facts facts = sample_facts("poison-wait");
  const RemoteTierOptions impatient = lease_held_elsewhere(facts, milliseconds(400));
  RemoteTier probe(impatient);
  ASSERT_OK(server->command({"SET", probe.entry_name(facts.key()), "not a signed value"}));
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", impatient);
  CountingProducer producer{make_bytes(2000, seed)};
  auto got = node.store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(got);
  EXPECT_EQ(*got->bytes, producer.bytes);
  const Counters c = node.store->session_counters();
  EXPECT_EQ(c.remote_rejects, 1u) << "polling the same poisoned value is not a new rejection";
  EXPECT_EQ(c.remote_lease_waits, 1u);
  std::size_t rejection_warnings = 0;
  for (const std::string& line : log.at(LogLevel::warning))
    if (line.find("rejected the value of " + facts.key().to_hex()) != std::string::npos) ++rejection_warnings;
  EXPECT_EQ(rejection_warnings, 1u) << log.all();
  EXPECT_EQ(log.warnings(), 2u) << "the rejection and the end of the wait\n" << log.all();
}

// A lease with no expiry (set by hand, or by a client that lost its PX) is held by no node:
// a cold node compiles at once rather than waiting the whole wait, and says so once per
// tier (before: it waited `wait` for each key, counted as lease waits).
TEST_F(RemoteLeaseTest, LeaseWithoutExpiryIsIgnoredWithOneWarning) {
  HangGuard guard(30);
  RemoteTierOptions patient = options();
  patient.wait = milliseconds(20000);
  RemoteTier probe(patient);
  const Facts first = sample_facts("broken-lease-1"), second = sample_facts("broken-lease-2");
  for (const Facts& facts : {first, second})
    ASSERT_OK(server->command({"SET", probe.lease_name(facts.key()), "held-by-nobody"}));
  jitcache::testing::LogCapture log;
  Node node = open_node(dir() / "n", patient);
  const auto start = std::chrono::steady_clock::now();
  for (const Facts& facts : {first, second}) {
    CountingProducer producer{make_bytes(2000, seed)};
    auto got = node.store->get_or_create(facts.key(), facts, producer.producer());
    ASSERT_OK(got);
    EXPECT_EQ(got->source, Source::produced);
    EXPECT_EQ(producer.calls, 1);
  }
  EXPECT_LT(ms_since(start), 5000.0) << "waited for a lease no node holds";
  const Counters c = node.store->session_counters();
  EXPECT_EQ(c.remote_lease_waits, 0u);
  EXPECT_EQ(c.remote_uploads, 2u);
  EXPECT_EQ(log.warnings(), 1u) << log.all();
  std::size_t named = 0;
  for (const std::string& line : log.at(LogLevel::warning))
    if (line.find("has no expiry") != std::string::npos && line.find(probe.lease_name(first.key())) != std::string::npos)
      ++named;
  EXPECT_EQ(named, 1u) << log.all();
  // The broken leases are left for `clear --remote --stale`; a node never deletes a lease
  // that is not its own.
  auto left = server->command({"EXISTS", probe.lease_name(first.key()), probe.lease_name(second.key())});
  ASSERT_OK(left);
  EXPECT_EQ(left->integer, 2);
}

}  // namespace
}  // namespace jitcache::remote
