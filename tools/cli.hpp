// Shared plumbing of the jitcache CLI: the global options every subcommand sees, the
// registration hook each cmd_*.cpp uses, and the exit-code convention of the brief:
// 0 success, 1 findings or invalid input, 2 usage or environment error.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>

#include "jitcache/error.hpp"

namespace jitcache::cli {

constexpr int k_exit_ok = 0;
constexpr int k_exit_findings = 1;
constexpr int k_exit_usage = 2;

struct GlobalOptions {
  std::string cache_dir;  // --cache-dir; empty: resolved from the environment
  std::string log_level;  // --log-level; empty: environment or default
  std::string remote;     // --remote; empty: JITCACHE_REMOTE
};

// A subcommand's action: returns the process exit code.
using Action = std::function<int()>;

struct Context {
  GlobalOptions global;
  int exit_code = k_exit_ok;
  std::optional<Error> startup_error;  // set before any subcommand runs (strict mode)
  // Binds an action to a subcommand so that its return value becomes the exit code.
  void bind(CLI::App* command, Action action);
};

// Registers subcommands onto the root app. `order` keeps `--help` listing stable.
using Registration = void (*)(CLI::App& root, Context& context);
struct Registrar {
  Registrar(int order, Registration registration);
};

// Prints an error to stderr in the CLI's one format and returns the exit code it maps to:
// invalid input -> 1, everything else (usage, environment, I/O) -> 2.
int report(const Error& error);

}  // namespace jitcache::cli
