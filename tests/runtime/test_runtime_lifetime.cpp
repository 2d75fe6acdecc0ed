// A runtime's life against other threads and other processes (include/jitcache/runtime.hpp,
// Runtime::close): closing while threads prepare lets each call finish or refuses it, never
// frees what a call uses; a child made by fork() while a thread compiles opens its own
// runtime and compiles (NVRTC's locks are never inherited held), and is refused the parent's.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "close_race.hpp"
#include "jitcache/runtime.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace std::chrono_literals;
using jitcache::testing::CallEnd;

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

bool says(const Error& error, const std::string& text) { return error.message.find(text) != std::string::npos; }

std::unique_ptr<Runtime> open_runtime(const std::filesystem::path& cache,
                                      std::function<void(const PrepareProgress&)> progress = {}) {
  RuntimeOptions options;
  options.cache_dir = cache;
  options.device = DeviceUse::none;
  options.cache_requirement = CacheRequirement::required;
  options.progress = std::move(progress);
  auto runtime = Runtime::open(options);
  return runtime ? std::move(*runtime) : nullptr;
}

ModelSpec glm5_mini() {
  ModelSpec spec;
  spec.checkpoint = k_checkpoint;
  spec.target = "sm_90";
  return spec;
}

// A CUDA kernel of its own per n: each is a cold compile, so NVRTC runs.
KernelRequest scaled(int n) {
  KernelRequest r;
  r.family = "lifetime";
  r.spec = {{"n", std::to_string(n)}};
  r.kind = SourceKind::cuda;
  r.text = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= " + std::to_string(n) + ".5f; }\n";
  r.entry = "k";
  r.target = "sm_90";
  return r;
}

const SpecSchema k_schema{"lifetime", SourceKind::cuda, {{"n", FactDomain{}}}};

class RuntimeLifetimeTest : public jitcache::testing::TempDirTest {};

TEST_F(RuntimeLifetimeTest, CloseWhileThreadsPrepareLetsEachCallFinishOrRefusesIt) {
  auto runtime = open_runtime(dir() / "cache");
  ASSERT_TRUE(runtime);
  auto first = runtime->prepare(glm5_mini());  // compiles; the threads below hit the cache
  ASSERT_TRUE(first) << first.error().to_string();

  const auto tally = jitcache::testing::race_close(
      4,
      [&](int) {
        auto model = runtime->prepare(glm5_mini());
        if (model) return CallEnd::answered;
        return model.error().code == ErrorCode::invalid_argument && says(model.error(), "runtime closed")
                   ? CallEnd::refused
                   : CallEnd::other;
      },
      [&] { ASSERT_TRUE(runtime->close()); });
  EXPECT_GT(tally.answered, 0);
  EXPECT_EQ(tally.refused, 4);  // every thread ended on the refusal
  EXPECT_EQ(tally.other, 0);
  // Closed: every call refused, closing again harmless, the models prepared before intact.
  EXPECT_TRUE(runtime->close());
  EXPECT_TRUE(says(runtime->prepare(glm5_mini()).error(), "runtime closed"));
  EXPECT_TRUE(says(runtime->declare_family(k_schema).error(), "runtime closed"));
  EXPECT_TRUE(says(runtime->compile(scaled(1)).error(), "runtime closed"));
  EXPECT_TRUE(says(runtime->lookup("lifetime", {{"n", "1"}}, "sm_90").error(), "runtime closed"));
  EXPECT_EQ(runtime->cache_dir(), dir() / "cache");
  EXPECT_EQ((*first)->layers().size(), 79u);
  EXPECT_EQ((*first)->target(), "sm_90");
}

TEST_F(RuntimeLifetimeTest, CloseFromInsideACallOnTheSameRuntimeIsRefusedNotADeadlock) {
  Runtime* self = nullptr;
  std::vector<Status> closes;
  auto runtime = open_runtime(dir() / "cache", [&](const PrepareProgress&) { closes.push_back(self->close()); });
  ASSERT_TRUE(runtime);
  self = runtime.get();
  const jitcache::testing::HangGuard guard(240);
  auto model = runtime->prepare(glm5_mini());
  ASSERT_TRUE(model) << model.error().to_string();
  ASSERT_FALSE(closes.empty());
  for (const Status& s : closes) {
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
    EXPECT_TRUE(says(s.error(), "from inside a call on this runtime")) << s.error().message;
  }
  EXPECT_TRUE(runtime->prepare(glm5_mini()));  // still open
}

// What a forked child does; its exit status says what failed (0: all went well).
int child_work(Runtime& parents, const std::filesystem::path& cache, int n) {
  auto refused = parents.compile(scaled(n));
  if (refused || refused.error().code != ErrorCode::invalid_argument || !says(refused.error(), "forked child"))
    return 10;
  if (!parents.close()) return 11;  // marks it closed, waits for no parent thread
  auto own = open_runtime(cache);
  if (!own) return 12;
  if (!own->declare_family(k_schema)) return 13;
  auto compiled = own->compile(scaled(n));
  if (!compiled) {
    std::fprintf(stderr, "child %d: %s\n", n, compiled.error().to_string().c_str());
    return 14;
  }
  if (compiled->from_cache || compiled->cubin.empty()) return 15;
  auto model = own->prepare(glm5_mini());
  if (!model) return 16;
  return own->close() ? 0 : 17;
}

TEST_F(RuntimeLifetimeTest, ForkedChildrenOfACompilingProcessOpenTheirOwnRuntimeAndCompile) {
  auto runtime = open_runtime(dir() / "cache");
  ASSERT_TRUE(runtime);
  ASSERT_TRUE(runtime->declare_family(k_schema));
  auto probe = runtime->compile(scaled(0));
  if (!probe && probe.error().code == ErrorCode::unavailable) GTEST_SKIP() << probe.error().to_string();
  ASSERT_TRUE(probe) << probe.error().to_string();
  ASSERT_TRUE(runtime->prepare(glm5_mini()));  // the children's prepare is a hit

  std::atomic<bool> stop{false};
  std::atomic<int> compiles{0};
  std::thread compiler([&] {
    for (int n = 1; !stop; ++n)
      if (runtime->compile(scaled(n))) ++compiles;
  });
  constexpr int k_children = 8;
  std::vector<pid_t> children;
  for (int i = 0; i < k_children; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15 + 7 * i));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(child_work(*runtime, dir() / "cache", 100000 + i));
    children.push_back(pid);
  }
  stop = true;
  compiler.join();
  EXPECT_GT(compiles.load(), 0);

  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (const pid_t pid : children) {
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "child " << pid << " hung";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status)) << "child " << pid << " ended by signal " << WTERMSIG(status);
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
    }
  }
}

}  // namespace
}  // namespace jitcache
