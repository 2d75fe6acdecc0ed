// Spec-keyed hits against source-keyed hits, through the linked runtime (Runtime::lookup
// and Runtime::compile), for a kernel from outside already in the cache:
//
//   fresh process  each rep runs this program again (fork + exec) on the same cache: it
//                  opens a runtime, declares the family and asks once. Printed: the
//                  child's own time from before Runtime::open to the answer, split into
//                  open and the call, and the parent's wall time of the whole process.
//   same process   many calls on one runtime (the memory tier answers), in microseconds.
//
// A lookup by spec reads the spec record and the entry it names; a compile of the same
// source also digests the source and compares it with the record (shadow verification)
// before the same reads. Neither counts the library's own source generation, which a
// spec-keyed hit skips entirely (see the Python benchmark for a DSL's).
//
//   bench_spec_lookup [--reps N] [--calls N]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "jitcache/runtime.hpp"

namespace {

using namespace jitcache;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::string golden(const char* name) { return bench::golden_kernel(JITCACHE_SOURCE_DIR, name); }

const std::map<std::string, std::string> k_spec{{"dtype", "f32"}, {"block", "256"}};

SpecSchema schema(SourceKind kind) {
  return SpecSchema{std::string("axpy_") + to_string(kind), kind, {{"dtype", {{"f32"}}}, {"block", {}}}};
}

KernelRequest request(SourceKind kind) {
  KernelRequest r;
  r.family = schema(kind).family;
  r.spec = k_spec;
  r.kind = kind;
  r.text = golden(kind == SourceKind::cuda ? "axpy.cu" : "axpy_nvvm.ll");
  r.entry = "axpy";
  r.target = "sm_100a";
  return r;
}

std::unique_ptr<Runtime> open_runtime(const std::string& dir, double verify = 0.0) {
  RuntimeOptions options;
  options.cache_dir = dir;
  options.device = DeviceUse::none;
  options.cache_requirement = CacheRequirement::required;
  options.verify_spec = verify;
  auto runtime = Runtime::open(options);
  if (!runtime) {
    std::fprintf(stderr, "bench_spec_lookup: %s\n", runtime.error().to_string().c_str());
    std::exit(1);
  }
  return std::move(*runtime);
}

void must(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_spec_lookup: %s\n", what);
    std::exit(1);
  }
}

// The child: one question on a fresh runtime; prints "open_ms call_ms".
int child(const std::string& dir, const std::string& mode, SourceKind kind) {
  const KernelRequest r = request(kind);  // read before the clock: not the cache's cost
  const auto t0 = Clock::now();
  auto runtime = open_runtime(dir);
  must(bool(runtime->declare_family(schema(kind))), "declare");
  const double open_ms = ms_since(t0);
  const auto t1 = Clock::now();
  if (mode == "spec") {
    auto found = runtime->lookup(r.family, r.spec, r.target);
    must(found && found->outcome == LookupOutcome::hit, "the spec lookup was not a hit");
  } else {
    auto got = runtime->compile(r);
    must(got && got->from_cache && got->verified, "the source compile was not a verified hit");
  }
  std::printf("%.3f %.3f\n", open_ms, ms_since(t1));
  return 0;
}

struct Sample {
  double open_ms, call_ms, process_ms;
};

Sample run_child(const char* self, const std::string& dir, const char* mode, SourceKind kind) {
  int pipe_fd[2];
  must(::pipe(pipe_fd) == 0, "pipe");
  const auto t = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fd[1], STDOUT_FILENO);
    ::close(pipe_fd[0]);
    ::execl(self, self, "--child", mode, "--cache", dir.c_str(), "--kind", to_string(kind), nullptr);
    std::_Exit(127);
  }
  ::close(pipe_fd[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double process_ms = ms_since(t);
  must(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a child failed");
  Sample s{0, 0, process_ms};
  must(std::sscanf(out.c_str(), "%lf %lf", &s.open_ms, &s.call_ms) == 2, "a child printed no figures");
  return s;
}


}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  int calls = 2000;
  std::string child_mode, child_cache, child_kind;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--reps") reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--calls") calls = std::max(1, std::atoi(next().c_str()));
    else if (a == "--child") child_mode = next();
    else if (a == "--cache") child_cache = next();
    else if (a == "--kind") child_kind = next();
    else {
      std::fprintf(stderr, "usage: bench_spec_lookup [--reps N] [--calls N]\n");
      return 2;
    }
  }
  if (!child_mode.empty()) return child(child_cache, child_mode, *parse_source_kind(child_kind));

  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  must(n > 0, "readlink /proc/self/exe");
  self[n] = '\0';
  char pattern[] = "/tmp/jc_bench_spec_XXXXXX";
  must(::mkdtemp(pattern) != nullptr, "mkdtemp");
  const std::string dir = std::string(pattern) + "/cache";

  std::printf("%-6s %-13s %10s %10s %12s\n", "kind", "hit by", "open ms", "call ms", "process ms");
  for (SourceKind kind : {SourceKind::nvvm, SourceKind::cuda}) {
    {
      auto runtime = open_runtime(dir);
      must(bool(runtime->declare_family(schema(kind))), "declare");
      must(bool(runtime->compile(request(kind))), "the first compile failed");
    }
    for (const char* mode : {"spec", "source"}) {
      std::vector<double> open, call, process;
      run_child(self, dir, mode, kind);  // page cache and fingerprint memo warm
      for (int i = 0; i < reps; ++i) {
        const Sample s = run_child(self, dir, mode, kind);
        open.push_back(s.open_ms);
        call.push_back(s.call_ms);
        process.push_back(s.process_ms);
      }
      std::printf("%-6s %-13s %10.2f %10.3f %12.1f\n", to_string(kind),
                  std::string(mode) == "spec" ? "spec (lookup)" : "source", bench::median(open), bench::median(call),
                  bench::median(process));
    }
  }

  // The same process: one runtime, many calls (the memory tier answers both).
  std::printf("\nsame process, %d calls each (median of 5 batches), microseconds per call:\n", calls);
  auto runtime = open_runtime(dir);
  for (SourceKind kind : {SourceKind::nvvm, SourceKind::cuda}) {
    must(bool(runtime->declare_family(schema(kind))), "declare");
    const KernelRequest r = request(kind);
    std::vector<double> spec_us, source_us;
    for (int batch = 0; batch < 5; ++batch) {
      auto t = Clock::now();
      for (int i = 0; i < calls; ++i) must(runtime->lookup(r.family, r.spec, r.target)->outcome == LookupOutcome::hit,
                                           "lookup");
      spec_us.push_back(ms_since(t) * 1000.0 / calls);
      t = Clock::now();
      for (int i = 0; i < calls; ++i) must(runtime->compile(r)->verified, "compile");
      source_us.push_back(ms_since(t) * 1000.0 / calls);
    }
    std::printf("  %-5s lookup by spec %8.1f us   compile with source (verified) %8.1f us   source %zu bytes\n",
                to_string(kind), bench::median(spec_us), bench::median(source_us), r.text.size());
  }
  std::error_code ec;
  std::filesystem::remove_all(pattern, ec);
  return 0;
}
