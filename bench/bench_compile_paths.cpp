// The same small kernel (axpy) through the three compile paths of compile_source, for
// each product target: CUDA C++ -> NVRTC, NVVM IR -> libNVVM -> nvJitLink, PTX ->
// nvJitLink. Prints the median of N in-process compiles per cell, the first compile of
// each path, and the one-time load of libNVVM and nvJitLink (which this process has not
// loaded before: it is measured first). No GPU needed.
//
// Then the cost of tool isolation (runtime/compile/tool_worker.hpp): each path in this
// process (compile_source_in_process) against the same compile in the tool worker, both
// the first request (spawning a worker, which then loads its tools) and the steady state
// (a pooled worker: the message exchange only).
//
//   bench_compile_paths [--reps N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "runtime/compile/nvjitlink_library.hpp"
#include "runtime/compile/nvvm_library.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "runtime/compile/tool_worker.hpp"

namespace {

using namespace jitcache;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The kernels are the compile tests' golden files (tests/runtime/compile/golden), so the
// figures are for exactly what the tests check.
std::string golden(const char* name) { return bench::golden_kernel(JITCACHE_SOURCE_DIR, name); }

enum class Where { here, worker };

Result<SourceOutput> compile(SourceKind kind, const std::string& text, const std::string& target,
                             Where where = Where::here) {
  SourceInput in;
  in.kind = kind;
  in.text = text;
  in.entry = "axpy";
  in.target = target;
  return where == Where::here ? compile_source_in_process(in) : compile_source(in);
}

// Wall time of one compile_source call; exits on a failed compile (a figure of a failure
// would be meaningless).
double timed(SourceKind kind, const std::string& text, const std::string& target, Where where = Where::here) {
  const auto t = Clock::now();
  auto out = compile(kind, text, target, where);
  const double ms = ms_since(t);
  if (!out) {
    std::fprintf(stderr, "%s for %s failed: %s\n", to_string(kind), target.c_str(), out.error().to_string().c_str());
    std::exit(1);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_compile_paths [--reps N]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;

  // First: nothing has loaded them yet in this process.
  auto t = Clock::now();
  auto jl = nvjitlink_library();
  const double jl_load_ms = ms_since(t);
  t = Clock::now();
  auto nvvm = nvvm_library();
  const double nvvm_load_ms = ms_since(t);
  if (!jl || !nvvm) {
    std::fprintf(stderr, "%s\n", (!jl ? jl.error() : nvvm.error()).to_string().c_str());
    return 1;
  }
  std::printf("nvJitLink %s  %s\nlibNVVM   %s  %s\n", (*jl)->version().c_str(), (*jl)->library.file.c_str(),
              (*nvvm)->version().c_str(), (*nvvm)->library.file.c_str());
  std::printf("one-time load (first use in this process): nvJitLink %.1f ms, libNVVM %.1f ms\n\n", jl_load_ms,
              nvvm_load_ms);

  const std::vector<std::string> targets = {"sm_90", "sm_100a", "sm_120a"};
  const std::vector<SourceKind> kinds = {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx};
  std::vector<std::string> ptx;
  const std::string axpy_cu = golden("axpy.cu");
  const std::string axpy_ll = golden("axpy_nvvm.ll");
  for (const auto& target : targets) {
    auto out = compile(SourceKind::cuda, axpy_cu, target);
    if (!out) {
      std::fprintf(stderr, "%s\n", out.error().to_string().c_str());
      return 1;
    }
    ptx.push_back(out->ptx);
  }

  std::printf("compile_source, ms: median of %d in-process compiles (the first compile of each cell in brackets)\n\n",
              reps);
  std::printf("| path | %s | %s | %s |\n|---|---|---|---|\n", targets[0].c_str(), targets[1].c_str(),
              targets[2].c_str());
  const char* labels[] = {"CUDA C++ -> NVRTC -> cubin", "NVVM IR -> libNVVM -> PTX -> nvJitLink -> cubin",
                          "PTX -> nvJitLink -> cubin"};
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    std::printf("| %s |", labels[k]);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const std::string& text = kinds[k] == SourceKind::cuda   ? axpy_cu
                                : kinds[k] == SourceKind::nvvm ? axpy_ll
                                                               : ptx[i];
      const double first = timed(kinds[k], text, targets[i]);
      std::vector<double> samples;
      for (int r = 0; r < reps; ++r) samples.push_back(timed(kinds[k], text, targets[i]));
      std::printf(" %.1f (%.1f) |", jitcache::bench::median(samples), first);
    }
    std::printf("\n");
  }

  std::printf("\ntool isolation, ms, sm_90: in process | in the worker, steady (pooled worker) | in the worker, "
              "first request (spawn + tool load) | steady overhead\n\n");
  std::printf("| path | in process | worker, steady | worker, first | overhead |\n|---|---|---|---|---|\n");
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const std::string& text = kinds[k] == SourceKind::cuda ? axpy_cu : kinds[k] == SourceKind::nvvm ? axpy_ll : ptx[0];
    std::vector<double> here, worker, first;
    for (int r = 0; r < reps; ++r) {
      drop_idle_tool_workers();
      first.push_back(timed(kinds[k], text, targets[0], Where::worker));
    }
    timed(kinds[k], text, targets[0], Where::worker);
    for (int r = 0; r < reps; ++r) {
      here.push_back(timed(kinds[k], text, targets[0], Where::here));
      worker.push_back(timed(kinds[k], text, targets[0], Where::worker));
    }
    const double h = jitcache::bench::median(here), w = jitcache::bench::median(worker);
    std::printf("| %s | %.2f | %.2f | %.1f | %+.2f |\n", labels[k], h, w, jitcache::bench::median(first), w - h);
  }
  return 0;
}
