// Issue 24, item 3: two different sources compiled for one spec at the same moment on a
// cold cache. Exactly one wins the spec (its record is written create-only, in the disk
// index and with SET NX in Redis), and the other request reports the incomplete spec at
// once, in every round: threads of one process, processes sharing a cache directory, and
// processes on two cache directories ("nodes") sharing one redis-server. One source raced
// against itself is served to both. The compile step is a fake that takes 30 ms, so that
// both racers reach the record together.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <latch>
#include <thread>

#include "cache/store.hpp"
#include "redis_server.hpp"
#include "remote/redis_url.hpp"
#include "remote/remote_tier.hpp"
#include "source_race_helper.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::race_failed;
using testing::race_incomplete;
using testing::race_served;
using testing::RaceOutcome;
using testing::racing_request;

constexpr int k_rounds = 12;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
const std::array<std::string, 2> k_scales = {"1.0", "0.5"};

// What the rounds of a race gave.
struct Tally {
  int one_winner = 0;   // one served, the other told the spec is incomplete
  int both_served = 0;  // the bug: two sources for one spec, both served
  int other = 0;        // anything else (an error, a wrong cubin)
  std::string first_other;

  void add(int round, RaceOutcome a, RaceOutcome b, const std::string& detail) {
    if ((a == race_served && b == race_incomplete) || (a == race_incomplete && b == race_served)) ++one_winner;
    else if (a == race_served && b == race_served) ++both_served;
    else {
      ++other;
      if (first_other.empty())
        first_other = "round " + std::to_string(round) + ": " + std::to_string(a) + "/" + std::to_string(b) + " " +
                      detail;
    }
  }
  void print(const std::string& what) const {
    std::cout << "[race] " << what << ": " << k_rounds << " rounds: one winner " << one_winner << ", both served "
              << both_served << ", other " << other << "\n";
  }
};

class SourceCacheRaceTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(registry.add(testing::racing_schema()));
  }

  std::unique_ptr<cache::Store> open_store(const std::filesystem::path& root) {
    auto store = cache::Store::open(root);
    EXPECT_TRUE(store) << store.error().to_string();
    return store ? std::move(*store) : nullptr;
  }

  // The cubin the spec of `round` names now, in the cache at `root` (a fresh view: no
  // memory tier) with the remote tier on `redis_url` if given, or "" when none.
  std::string recorded_cubin(const std::filesystem::path& root, const std::string& round,
                             const std::string& redis_url = "") {
    cache::StoreOptions options;
    if (!redis_url.empty()) {
      remote::RemoteTierOptions remote_options;
      remote_options.redis.url = *remote::parse_redis_url(redis_url, "test");
      remote_options.fleet_key = testing::k_race_fleet_key;
      remote_options.check_content = check_stored_content;
      options.extra_tiers.push_back(std::make_shared<remote::RemoteTier>(remote_options));
    }
    auto store = cache::Store::open(root, options);
    EXPECT_TRUE(store) << store.error().to_string();
    if (!store) return "";
    SourceCache cache(**store, testing::racing_options(registry, {}));
    auto found = cache.lookup("racing", {{"round", round}}, "sm_90");
    if (!found || !*found) return "";
    return std::string((*found)->cubin.begin(), (*found)->cubin.end());
  }

  static std::string cubin_of(const std::string& round, const std::string& scale) {
    const auto out = testing::fake_output(source_input(racing_request(round, scale)));
    return std::string(out.cubin.begin(), out.cubin.end());
  }

  // Runs the helper program for one racer; stderr goes to `err`.
  static pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& err) {
    std::string program = JITCACHE_SOURCE_RACE_HELPER;
    std::vector<std::string> copy = args;
    std::vector<char*> argv{program.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) ::dup2(fd, 2);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    return pid;
  }

  static RaceOutcome wait_outcome(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? static_cast<RaceOutcome>(WEXITSTATUS(status)) : race_failed;
  }

  // One round of two helper processes, racer i compiling `scales[i]` into `roots[i]`,
  // released together once both have opened their stores.
  std::array<RaceOutcome, 2> race_processes(const std::string& round, const std::array<std::string, 2>& scales,
                                            const std::array<std::filesystem::path, 2>& roots,
                                            const std::string& redis_url, std::string& detail) {
    int ready[2], barrier[2];
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe(barrier), 0);
    ::fcntl(barrier[1], F_SETFD, FD_CLOEXEC);  // only the read end reaches the helpers
    ::fcntl(ready[1], F_SETFD, 0);
    std::array<pid_t, 2> pids{};
    std::array<std::filesystem::path, 2> errs;
    for (int i = 0; i < 2; ++i) {
      errs[i] = dir() / ("err." + round + "." + std::to_string(i));
      std::vector<std::string> args{roots[i].string(), round, scales[i], std::to_string(ready[1]),
                                    std::to_string(barrier[0])};
      if (!redis_url.empty()) args.push_back(redis_url);
      pids[i] = spawn(args, errs[i]);
    }
    ::close(ready[1]);
    ::close(barrier[0]);
    int arrived = 0;
    char byte;
    pollfd poll_ready{ready[0], POLLIN, 0};
    while (arrived < 2 && ::poll(&poll_ready, 1, 20'000) > 0 && ::read(ready[0], &byte, 1) == 1) ++arrived;
    ::close(ready[0]);
    ::close(barrier[1]);  // releases both
    EXPECT_EQ(arrived, 2) << "round " << round << ": the helpers did not reach the barrier";
    std::array<RaceOutcome, 2> outcomes{wait_outcome(pids[0]), wait_outcome(pids[1])};
    detail = read_text(errs[0]) + " | " + read_text(errs[1]);
    return outcomes;
  }

  // Whichever racer was served, the spec now names its cubin in every cache listed.
  void expect_spec_names_winner(const std::string& round, const std::array<RaceOutcome, 2>& outcomes,
                                const std::vector<std::filesystem::path>& roots, const std::string& redis_url = "") {
    for (int i = 0; i < 2; ++i) {
      if (outcomes[i] != race_served || outcomes[1 - i] != race_incomplete) continue;
      for (const auto& root : roots)
        EXPECT_EQ(recorded_cubin(root, round, redis_url), cubin_of(round, k_scales[i]))
            << "round " << round << ": the spec does not name the winner's kernel in " << root;
    }
  }

  SpecRegistry registry;
};

TEST_F(SourceCacheRaceTest, TwoThreadsTwoSourcesOneSpecHaveOneWinnerEveryRound) {
  auto store = open_store(dir() / "cache");
  ASSERT_TRUE(store);
  SourceCache cache(*store, testing::racing_options(registry, std::chrono::milliseconds(30)));
  Tally tally;
  for (int round = 0; round < k_rounds; ++round) {
    const std::string name = "t" + std::to_string(round);
    std::latch start(2);
    std::array<RaceOutcome, 2> outcomes{};
    std::array<std::string, 2> messages;
    std::vector<std::thread> racers;
    for (int i = 0; i < 2; ++i)
      racers.emplace_back([&, i] {
        start.arrive_and_wait();
        outcomes[i] = testing::race_compile(cache, racing_request(name, k_scales[i]), &messages[i]);
      });
    for (auto& t : racers) t.join();
    tally.add(round, outcomes[0], outcomes[1], messages[0] + " | " + messages[1]);
    expect_spec_names_winner(name, outcomes, {dir() / "cache"});
  }
  tally.print("two threads, one store");
  EXPECT_EQ(tally.one_winner, k_rounds) << "both served: " << tally.both_served << "; " << tally.first_other;
}

TEST_F(SourceCacheRaceTest, TwoProcessesTwoSourcesOneSpecHaveOneWinnerEveryRound) {
  const auto root = dir() / "shared";
  Tally tally;
  for (int round = 0; round < k_rounds; ++round) {
    const std::string name = "p" + std::to_string(round);
    std::string detail;
    const auto outcomes = race_processes(name, k_scales, {root, root}, "", detail);
    tally.add(round, outcomes[0], outcomes[1], detail);
    expect_spec_names_winner(name, outcomes, {root});
  }
  tally.print("two processes, one cache directory");
  EXPECT_EQ(tally.one_winner, k_rounds) << "both served: " << tally.both_served << "; " << tally.first_other;
}

TEST_F(SourceCacheRaceTest, TwoNodesSharingRedisHaveOneWinnerEveryRound) {
  auto server = jitcache::testing::RedisServer::start();
  ASSERT_TRUE(server) << server.error().to_string();
  const std::array<std::filesystem::path, 2> roots = {dir() / "node-a", dir() / "node-b"};
  Tally tally;
  for (int round = 0; round < k_rounds; ++round) {
    const std::string name = "r" + std::to_string(round);
    std::string detail;
    const auto outcomes = race_processes(name, k_scales, roots, (*server)->url(), detail);
    tally.add(round, outcomes[0], outcomes[1], detail);
    // The loser's node names the winner's kernel too: its disk took the fleet's record,
    // and the bundle it names comes from Redis.
    expect_spec_names_winner(name, outcomes, {roots[0], roots[1]}, (*server)->url());
  }
  tally.print("two nodes, one redis-server");
  EXPECT_EQ(tally.one_winner, k_rounds) << "both served: " << tally.both_served << "; " << tally.first_other;
}

// A record stored first that is no record (a foreign or buggy writer, between this
// request's check and its write) vouches for nothing: it is replaced, as an unusable record
// found by a read is, and the request is served; one of another source is the winner's.
TEST_F(SourceCacheRaceTest, AnUnusableFirstRecordIsReplacedAndAnotherSourcesIsReported) {
  const auto root = dir() / "cache";
  auto store = open_store(root);
  auto other = open_store(root);  // another process's view
  ASSERT_TRUE(store && other);
  SourceCache theirs(*other, testing::racing_options(registry, {}));
  for (const bool junk : {true, false}) {
    const std::string round = junk ? "junk" : "other-source";
    const KernelRequest mine = racing_request(round, "1.0");
    SourceCacheOptions options = testing::racing_options(registry, {});
    options.compile = [&](const SourceInput& input) -> Result<SourceOutput> {
      // While this request compiles, the other writer records the spec first.
      if (junk) {
        const auto spec = spec_facts(mine, testing::fake_tools(SourceKind::cuda));
        const std::string text = "{\"format\": 2}";
        EXPECT_TRUE(other->put(spec->key(), *spec, std::as_bytes(std::span(text.data(), text.size())), 0));
      } else {
        EXPECT_EQ(testing::race_compile(theirs, racing_request(round, "0.5")), race_served);
      }
      return testing::fake_output(input);
    };
    SourceCache cache(*store, options);
    std::string message;
    const RaceOutcome outcome = testing::race_compile(cache, mine, &message);
    EXPECT_EQ(outcome, junk ? race_served : race_incomplete) << round << ": " << message;
    EXPECT_EQ(recorded_cubin(root, round), cubin_of(round, junk ? "1.0" : "0.5")) << round;
    // The loser's bundle is kept under its own key: a valid entry of its source.
    if (!junk) {
      auto facts = request_facts(mine, testing::fake_tools(SourceKind::cuda));
      auto kept = store->contains(facts->key());
      ASSERT_TRUE(kept);
      EXPECT_TRUE(*kept);
    }
  }
}

// The control: one source raced against itself is no incomplete spec, for either racer.
TEST_F(SourceCacheRaceTest, OneSourceRacedAgainstItselfIsServedToBoth) {
  auto server = jitcache::testing::RedisServer::start();
  ASSERT_TRUE(server) << server.error().to_string();
  const std::array<std::filesystem::path, 2> nodes = {dir() / "node-a", dir() / "node-b"};
  const auto shared = dir() / "shared";
  for (int round = 0; round < 4; ++round) {
    for (const bool remote : {false, true}) {
      const std::string name = (remote ? "sr" : "sp") + std::to_string(round);
      std::string detail;
      const auto outcomes = race_processes(name, {"1.0", "1.0"}, remote ? nodes : std::array{shared, shared},
                                           remote ? (*server)->url() : "", detail);
      EXPECT_EQ(outcomes[0], race_served) << name << ": " << detail;
      EXPECT_EQ(outcomes[1], race_served) << name << ": " << detail;
    }
  }
}

}  // namespace
}  // namespace jitcache
