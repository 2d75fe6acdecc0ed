// What the main() of a bench program that runs the jitcache CLI on the bundled checkpoint
// shares with the others: where it starts from (itself, the checkpoint, the CLI and a
// scratch directory, with the options that name the first two, --checkpoint=DIR and
// --jitcache-cli=PATH, and their defaults), and the run of its Google benchmarks.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_support.hpp"
#include "jitcache/log.hpp"

namespace jitcache::bench {

struct CliBenchPaths {
  std::filesystem::path self;
  std::filesystem::path checkpoint;
  std::filesystem::path cli;  // the jitcache CLI
  std::filesystem::path scratch;
};

// Takes `arg` when it is --checkpoint=DIR or --jitcache-cli=PATH; false: it is neither.
inline bool take_path_option(const std::string& arg, CliBenchPaths& paths) {
  for (auto [option, path] : {std::pair{std::string_view("--checkpoint="), &paths.checkpoint},
                              std::pair{std::string_view("--jitcache-cli="), &paths.cli}}) {
    if (arg.starts_with(option)) {
      *path = std::filesystem::absolute(arg.substr(option.size()));
      return true;
    }
  }
  return false;
}

// Completes `paths` for the bench program `program`: itself, the checkpoint when no option
// named one (examples/glm5-mini, find_example_checkpoint), the CLI built next to it
// (build/bench/.. -> build/tools/jitcache), and a new scratch directory below /tmp. False
// (after saying why, for the checkpoint) when one of them cannot be had.
inline bool complete_paths(CliBenchPaths& paths, const std::string& program) {
  paths.self = std::filesystem::read_symlink("/proc/self/exe");
  if (paths.checkpoint.empty()) paths.checkpoint = find_example_checkpoint(paths.self);
  if (paths.checkpoint.empty()) {
    std::fprintf(stderr, "%s: cannot find examples/glm5-mini; pass --checkpoint=DIR\n", program.c_str());
    return false;
  }
  if (paths.cli.empty()) paths.cli = paths.self.parent_path().parent_path() / "tools" / "jitcache";
  std::string scratch = "/tmp/jitcache-" + program + "-XXXXXX";  // bench_runtime: jitcache-bench-runtime-...
  std::replace(scratch.begin(), scratch.end(), '_', '-');
  if (::mkdtemp(scratch.data()) == nullptr) return false;
  paths.scratch = scratch;
  return true;
}

// Runs the benchmarks `args` select (argv[0] and the options the program did not take
// itself), with the library's log at `level`, then prints `summary`. False (Google
// Benchmark has said why) when `args` holds an option it does not know either.
inline bool run_benchmarks(std::vector<char*>& args, LogLevel level, void (*summary)()) {
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(argc, args.data())) return false;
  set_log_level(level);
  benchmark::RunSpecifiedBenchmarks();
  summary();
  benchmark::Shutdown();
  return true;
}

}  // namespace jitcache::bench
