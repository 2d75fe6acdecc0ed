// The tool workers' memory under concurrent compiles of kernels from outside: THREADS
// threads (default 12) each compile a small CUDA kernel ROUNDS times (default 3) through
// compile_source, which runs NVRTC in the pooled jitcache-tool-worker processes. A sampler
// reads /proc for this process's workers every 5 ms. Prints the pool's cap
// (JITCACHE_TOOL_WORKERS, default the CPUs), the peak of live workers, each worker's
// VmHWM and last VmRSS, and the largest sum of VmRSS seen at one sample.
//
//   bench_tool_workers [THREADS [ROUNDS]]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/compile/source_compiler.hpp"
#include "runtime/compile/tool_worker.hpp"

namespace {

using namespace jitcache;

struct Memory {
  long hwm_kib = 0, rss_kib = 0;
};

// This process's live children and their memory, from /proc/<pid>/status.
std::map<pid_t, Memory> workers() {
  std::map<pid_t, Memory> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    pid_t ppid = -1;
    Memory m;
    bool zombie = false;
    while (std::getline(status, line)) {
      if (line.starts_with("PPid:")) ppid = std::atoi(line.c_str() + 5);
      if (line.starts_with("State:")) zombie = line.find('Z') != std::string::npos;
      if (line.starts_with("VmHWM:")) m.hwm_kib = std::atol(line.c_str() + 6);
      if (line.starts_with("VmRSS:")) m.rss_kib = std::atol(line.c_str() + 6);
    }
    if (ppid == ::getpid() && !zombie && m.rss_kib > 0) found[std::stoi(name)] = m;
  }
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 12;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const auto cap = tool_worker_cap();
  if (!cap) {
    std::fprintf(stderr, "bench_tool_workers: %s\n", cap.error().to_string().c_str());
    return 2;
  }
  std::atomic<bool> done{false};
  std::mutex mutex;
  std::map<pid_t, Memory> seen;
  std::size_t peak_live = 0;
  long peak_total_rss = 0;
  std::thread sampler([&] {
    while (!done) {
      const auto now = workers();
      long total = 0;
      std::lock_guard lock(mutex);
      for (const auto& [pid, m] : now) {
        Memory& s = seen[pid];
        s.hwm_kib = std::max(s.hwm_kib, m.hwm_kib);
        s.rss_kib = m.rss_kib;
        total += m.rss_kib;
      }
      peak_live = std::max(peak_live, now.size());
      peak_total_rss = std::max(peak_total_rss, total);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::atomic<int> failures{0};
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        SourceInput in;
        in.kind = SourceKind::cuda;
        in.entry = "k" + std::to_string(t) + "_" + std::to_string(r);
        in.text = "extern \"C\" __global__ void " + in.entry +
                  "(float* x, const float* y, float a, int n) {\n"
                  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                  "  if (i < n) x[i] = a * x[i] + y[i];\n}\n";
        in.target = "sm_90";
        in.name = in.entry + ".cu";
        auto out = compile_source(in);
        if (!out) {
          ++failures;
          std::fprintf(stderr, "%s\n", out.error().to_string().c_str());
        }
      }
    });
  for (auto& c : callers) c.join();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  done = true;
  sampler.join();
  std::printf("%d threads x %d compiles, pool cap %zu, wall %.0f ms, %d failed\n", threads, rounds, *cap, wall_ms,
              failures.load());
  std::printf("peak live workers %zu, workers spawned %zu\n", peak_live, seen.size());
  long hwm_sum = 0, hwm_max = 0;
  for (const auto& [pid, m] : seen) {
    std::printf("  worker %d: VmHWM %.1f MiB, VmRSS %.1f MiB (last seen)\n", pid, m.hwm_kib / 1024.0,
                m.rss_kib / 1024.0);
    hwm_sum += m.hwm_kib;
    hwm_max = std::max(hwm_max, m.hwm_kib);
  }
  if (!seen.empty())
    std::printf("VmHWM per worker: mean %.1f MiB, max %.1f MiB; largest VmRSS sum at one sample %.1f MiB\n",
                hwm_sum / 1024.0 / seen.size(), hwm_max / 1024.0, peak_total_rss / 1024.0);
  drop_idle_tool_workers();
  return failures == 0 ? 0 : 1;
}
