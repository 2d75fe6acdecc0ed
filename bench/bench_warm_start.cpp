// A warm start against the process floor, as the ratio of two medians taken in one run.
//
// The floor is a bare `jitcache --version`: the same binary, its loader work and its
// command-line set-up, nothing else. The warm start is `jitcache warm` of the bundled
// checkpoint (examples/glm5-mini, 79 layers, 4 variants) with every variant already in
// the cache: what an engine's process pays before it serves, plus writing the session's
// uses. The two are interleaved (version, warm, version, warm, ...) so that whatever else
// the machine does weighs on both alike; each sample is the wall time from posix_spawn to
// waitpid. Further binaries (--also PATH, e.g. an older build) are timed in the same
// rounds against the same cache, each with its own ratio to the floor of the first.
//
//   bench_warm_start [--rounds N] [--arch sm_90] [--also PATH]... [--json]
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Runs `args` with stdout and stderr on /dev/null; the wall time in ms, or a negative
// value when it did not exit 0.
double timed_run(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const auto start = Clock::now();
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ms : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Series {
  std::string label;
  std::vector<std::string> args;
  std::vector<double> ms;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "bench_warm_start: " << why
            << "\nusage: bench_warm_start [--rounds N] [--arch T] [--also PATH]... [--json]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 40;
  std::string arch = "sm_90";
  std::vector<std::string> also;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--rounds") {
      rounds = std::atoi(value().c_str());
      if (rounds < 3) usage("--rounds must be at least 3");
    } else if (a == "--arch") {
      arch = value();
    } else if (a == "--also") {
      also.push_back(value());
    } else if (a == "--json") {
      json_out = true;
    } else {
      usage("unknown argument " + a);
    }
  }
  const std::string cli = JITCACHE_CLI_PATH;
  const std::string checkpoint = std::string(JITCACHE_SOURCE_DIR) + "/examples/glm5-mini";
  char pattern[] = "/tmp/jitcache-bench-warm-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) usage("cannot make a temporary directory");
  const fs::path dir = pattern;
  const std::string cache = (dir / "cache").string();
  auto warm_args = [&](const std::string& binary) {
    return std::vector<std::string>{binary, "--cache-dir", cache, "warm", "--checkpoint", checkpoint, "--arch", arch};
  };
  // Fill the cache (and the fingerprint memo) once, then one untimed warm start per binary.
  if (timed_run(warm_args(cli)) < 0) usage("the first `jitcache warm` failed (is NVRTC available?)");
  std::vector<Series> series{{"version", {cli, "--version"}, {}}, {"warm", warm_args(cli), {}}};
  for (const std::string& other : also) series.push_back({"warm " + other, warm_args(other), {}});
  for (Series& s : series)
    if (timed_run(s.args) < 0) usage("`" + s.args[0] + "` failed on a warm cache");
  for (int r = 0; r < rounds; ++r)
    for (Series& s : series) {
      const double ms = timed_run(s.args);
      if (ms < 0) usage("`" + s.args[0] + "` failed in round " + std::to_string(r));
      s.ms.push_back(ms);
    }
  fs::remove_all(dir);

  const double floor = median(series[0].ms);
  nlohmann::json report = {{"rounds", rounds}, {"arch", arch}, {"series", nlohmann::json::array()}};
  for (const Series& s : series) {
    const double m = median(s.ms);
    report["series"].push_back({{"label", s.label},
                                {"median_ms", m},
                                {"min_ms", *std::min_element(s.ms.begin(), s.ms.end())},
                                {"ratio_to_version", m / floor}});
  }
  if (json_out) {
    std::cout << report.dump(2) << "\n";
    return 0;
  }
  std::printf("%d rounds, interleaved; wall time from spawn to exit\n", rounds);
  for (const auto& row : report["series"])
    std::printf("  %-40s median %7.2f ms  min %6.2f ms  ratio %.2f\n", row["label"].get<std::string>().c_str(),
                row["median_ms"].get<double>(), row["min_ms"].get<double>(), row["ratio_to_version"].get<double>());
  return 0;
}
