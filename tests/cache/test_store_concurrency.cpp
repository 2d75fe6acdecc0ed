// One produce per key across threads and processes, killed producers, and crashes at
// every step of publishing.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <iostream>
#include <latch>
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

constexpr int k_workers = 8;

class ConcurrencyTest : public StoreFixture {
 protected:
  // Starts the helper program; `keep_fd` stays open in the child, everything else of
  // ours is close-on-exec or irrelevant.
  static pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& stderr_path = {}) {
    std::vector<char*> argv;
    std::string program = JITCACHE_CACHE_HELPER;
    argv.push_back(program.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (!stderr_path.empty()) {
        const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (err >= 0) ::dup2(err, 2);
      }
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    return pid;
  }

  static int wait_status(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }

  std::uint64_t seed = jitcache::testing::test_seed("concurrency");
};

TEST_F(ConcurrencyTest, EightThreadsOneKeyOneProduce) {
  auto store = open_store();
  const Facts facts = sample_facts("threads");
  CountingProducer producer{make_bytes(100 * 1024, seed)};
  producer.delay = std::chrono::milliseconds(200);
  std::latch start(k_workers);
  std::vector<Result<Fetched>> results(k_workers, make_error(ErrorCode::internal, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < k_workers; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = store->get_or_create(facts.key(), facts, producer.producer());
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(producer.calls, 1);
  int produced = 0;
  for (const auto& r : results) {
    ASSERT_OK(r);
    EXPECT_EQ(*r->bytes, producer.bytes);
    EXPECT_EQ(BlobDigest::of(*r->bytes), BlobDigest::of(producer.bytes));
    produced += r->source == Source::produced;
  }
  EXPECT_EQ(produced, 1);
  const Counters c = store->session_counters();
  EXPECT_EQ(c.produces, 1u);
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.disk_hits, 0u);
  EXPECT_EQ(c.coalesced + c.memory_hits, static_cast<std::uint64_t>(k_workers - 1));
  EXPECT_EQ(c.produce_failures, 0u);
}

TEST_F(ConcurrencyTest, DifferentKeysProduceInParallel) {
  auto store = open_store();
  constexpr int k_keys = 4;
  // Every producer waits until all of them have started: serialized producers would
  // never all start, and the wait would time out.
  std::mutex mutex;
  std::condition_variable all_started;
  int started = 0;
  bool overlapped = true;
  std::vector<std::thread> threads;
  for (int i = 0; i < k_keys; ++i)
    threads.emplace_back([&, i] {
      const Facts facts = sample_facts("parallel" + std::to_string(i));
      auto result = store->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
        std::unique_lock lock(mutex);
        ++started;
        all_started.notify_all();
        if (!all_started.wait_for(lock, std::chrono::seconds(10), [&] { return started == k_keys; }))
          overlapped = false;
        return Produced{make_bytes(1000, seed + i), 1.0};
      });
      EXPECT_OK(result);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(overlapped) << "producers of different keys ran one after another";
  EXPECT_EQ(store->session_counters().produces, static_cast<std::uint64_t>(k_keys));
}

TEST_F(ConcurrencyTest, WaitersReceiveTheProducersError) {
  auto store = open_store();
  const Facts facts = sample_facts("failing");
  std::atomic<int> calls{0};
  std::latch start(k_workers);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < k_workers; ++i)
    threads.emplace_back([&] {
      start.arrive_and_wait();
      auto result = store->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
        ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return make_error(ErrorCode::compile, "nvrtc: error: identifier \"x\" is undefined");
      });
      if (!result && result.error().code == ErrorCode::compile) ++errors;
    });
  for (auto& t : threads) t.join();
  // Callers that arrived after the failure try again; those that waited share it.
  EXPECT_GE(calls, 1);
  EXPECT_LT(calls, k_workers);
  EXPECT_EQ(errors, k_workers);
  EXPECT_EQ(store->session_counters().produces, 0u);
}

TEST_F(ConcurrencyTest, EightProcessesOneKeyOneProduce) {
  { ASSERT_TRUE(open_store()); }  // the root exists before the race, as after a first run
  int barrier[2];
  ASSERT_EQ(::pipe(barrier), 0);
  ::fcntl(barrier[1], F_SETFD, FD_CLOEXEC);  // only the read end reaches the helpers
  const auto produce_log = dir() / "produce.log";
  std::vector<pid_t> pids;
  for (int i = 0; i < k_workers; ++i)
    pids.push_back(spawn({"produce", root().string(), std::to_string(barrier[0]), produce_log.string(),
                          (dir() / ("out" + std::to_string(i))).string(), "processes", "300"}));
  ::close(barrier[0]);
  // Give every helper time to open its store, then release them all at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(barrier[1]);
  for (pid_t pid : pids) {
    const int status = wait_status(pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper failed, status " << status;
  }
  const std::string log = read_file(produce_log);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << "producer ran in: " << log;

  const std::string expected =
      BlobDigest::of(make_bytes(200 * 1024, std::hash<std::string>{}("processes"))).to_hex();
  int produced = 0;
  for (int i = 0; i < k_workers; ++i) {
    const std::string out = read_file(dir() / ("out" + std::to_string(i)));
    EXPECT_NE(out.find(expected), std::string::npos) << "helper " << i << ": " << out;
    produced += out.starts_with("produced ");
  }
  EXPECT_EQ(produced, 1);

  auto store = open_store();
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->entries, 1u);
  EXPECT_EQ(stats->totals.produces, 1u);
  EXPECT_EQ(stats->totals.misses, 1u);
  EXPECT_EQ(stats->totals.disk_hits, static_cast<std::uint64_t>(k_workers - 1));
  EXPECT_EQ(stats->totals.produce_failures, 0u);
  expect_verified_clean(*store);
}

// Issue 10, item 10: ranks of one engine cold-starting together on a new machine. Each
// round releases 16 processes at the same instant (all wait on one pipe that the parent
// then closes) onto a cache directory that does not exist yet.
TEST_F(ConcurrencyTest, SixteenProcessesOpenAFreshCacheTogether) {
  constexpr int k_openers = 16;
  constexpr int k_rounds = 50;
  const auto started = std::chrono::steady_clock::now();
  int failures = 0;
  std::string first_error;
  for (int round = 0; round < k_rounds; ++round) {
    const std::filesystem::path fresh = dir() / ("round" + std::to_string(round)) / "cache";
    int ready[2], barrier[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe(barrier), 0);
    ::fcntl(barrier[1], F_SETFD, FD_CLOEXEC);  // only the read ends reach the helpers
    ::fcntl(ready[1], F_SETFD, 0);
    std::vector<pid_t> pids;
    std::vector<std::filesystem::path> errs;
    for (int i = 0; i < k_openers; ++i) {
      errs.push_back(dir() / ("err" + std::to_string(round) + "." + std::to_string(i)));
      pids.push_back(spawn({"open", fresh.string(), std::to_string(ready[1]), std::to_string(barrier[0]),
                            "rank" + std::to_string(i)},
                           errs.back()));
    }
    ::close(ready[1]);
    ::close(barrier[0]);
    // Every helper is at the barrier before any is released.
    int arrived = 0;
    char byte;
    pollfd poll_ready{ready[0], POLLIN, 0};
    while (arrived<k_openers&& ::poll(&poll_ready, 1, 20'000)> 0 && ::read(ready[0], &byte, 1) == 1)
      ++arrived;
    ::close(ready[0]);
    ::close(barrier[1]);
    EXPECT_EQ(arrived, k_openers) << "round " << round << ": helpers did not reach the barrier";
    for (int i = 0; i < k_openers; ++i) {
      const int status = wait_status(pids[i]);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      ++failures;
      if (first_error.empty())
        first_error = "round " + std::to_string(round) + ", rank " + std::to_string(i) + ", status " +
                      std::to_string(status) + ": " + read_file(errs[i]);
    }
    std::error_code ec;
    std::filesystem::remove_all(fresh.parent_path(), ec);
  }
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "[timing] " << k_rounds << " rounds of " << k_openers << " simultaneous openers: " << seconds
            << " s\n";
  EXPECT_EQ(failures, 0) << "first: " << first_error;
}

TEST_F(ConcurrencyTest, KilledLockHolderDoesNotBlockOthers) {
  { ASSERT_TRUE(open_store()); }
  const auto ready = dir() / "ready";
  const pid_t holder = spawn({"hold", root().string(), ready.string(), "held"});
  for (int i = 0; i < 1000 && !std::filesystem::exists(ready); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the holder never started producing";
  ::kill(holder, SIGKILL);
  const int status = wait_status(holder);
  ASSERT_TRUE(WIFSIGNALED(status));

  StoreOptions options;
  options.lock_timeout = std::chrono::seconds(60);
  auto store = open_store(options);
  const Facts facts = sample_facts("held");
  CountingProducer producer{make_bytes(1000, seed)};
  LogCapture log;
  const auto begin = std::chrono::steady_clock::now();
  auto result = store->get_or_create(facts.key(), facts, producer.producer());
  const auto waited = std::chrono::steady_clock::now() - begin;
  ASSERT_OK(result);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the dead holder's lock was not released";
  EXPECT_EQ(log.count_containing("waited"), 0u) << log.all();
}

TEST_F(ConcurrencyTest, LockTimeoutProducesAnywayWithAWarning) {
  const Facts facts = sample_facts("slow");
  auto first = open_store();
  StoreOptions impatient;
  impatient.lock_timeout = std::chrono::milliseconds(200);
  auto second = open_store(impatient);
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  bool holding = false;
  std::thread slow([&] {
    auto result = first->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
      std::unique_lock lock(mutex);
      holding = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      return Produced{make_bytes(500, seed), 1.0};
    });
    EXPECT_OK(result);
  });
  {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return holding; });
  }
  LogCapture log;
  CountingProducer producer{make_bytes(500, seed)};
  auto result = second->get_or_create(facts.key(), facts, producer.producer());
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  slow.join();
  ASSERT_OK(result);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_EQ(producer.calls, 1);
  EXPECT_EQ(log.count_containing("producing it here too"), 1u) << log.all();
}

class CrashTest : public ConcurrencyTest, public ::testing::WithParamInterface<PublishStep> {};

TEST_P(CrashTest, KilledWriterLeavesNoVisibleEntry) {
  const PublishStep step = GetParam();
  const pid_t pid = spawn({"crash", root().string(), to_string(step), "crash"});
  const int status = wait_status(pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  const Facts facts = sample_facts("crash");
  EXPECT_EQ(sql_query(root() / "index.db", "PRAGMA integrity_check"), std::vector<std::string>{"ok"});
  auto store = open_store();
  auto entries = store->list();
  ASSERT_OK(entries);
  EXPECT_TRUE(entries->empty()) << "a partial entry became visible";
  auto lookup = store->get(facts.key());
  ASSERT_OK(lookup);
  EXPECT_FALSE(*lookup);
  auto report = store->verify();
  ASSERT_OK(report);
  EXPECT_TRUE(report->clean());
  EXPECT_EQ(report->orphan_blobs, step == PublishStep::temp_written ? 0u : 1u);
  EXPECT_EQ(count_files(root() / "tmp"), step == PublishStep::temp_written ? 1u : 0u);

  GcOptions gc;
  gc.grace = std::chrono::milliseconds(-1000);
  auto cleaned = store->gc(gc);
  ASSERT_OK(cleaned);
  EXPECT_EQ(count_files(root() / "tmp"), 0u);
  EXPECT_EQ(count_files(root() / "blobs"), 0u);

  CountingProducer producer{make_bytes(64 * 1024, 7)};
  auto result = store->get_or_create(facts.key(), facts, producer.producer());
  ASSERT_OK(result);
  EXPECT_EQ(result->source, Source::produced);
  EXPECT_EQ(store->session_counters().produces, 1u);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, CrashTest,
                         ::testing::Values(PublishStep::temp_written, PublishStep::renamed,
                                           PublishStep::row_written),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace jitcache::cache
