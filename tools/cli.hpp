// Shared plumbing of the jitcache CLI: the global options every subcommand sees, the
// registration hook each cmd_*.cpp uses, and the exit codes, one table for every command
// (k_exit_code_table below, which `jitcache --help` prints; README.md, "Exit codes";
// tests/tools/test_cli_exit_codes.cpp holds each command to it).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache::cli {

constexpr int k_exit_ok = 0;
constexpr int k_exit_findings = 1;
constexpr int k_exit_usage = 2;

// The one text of the exit codes (the footer of `jitcache --help`).
inline constexpr const char* k_exit_code_table =
    "Exit codes:\n"
    "  0  success; audit, verify, env: nothing found; scales validate: valid; scales diff:\n"
    "     within the tolerance\n"
    "  1  refused or found: the command read what it was given and refuses it (invalid or\n"
    "     unsafe data in a file it was named or led to, a source that does not compile, an\n"
    "     output it may not replace: not a regular file, one of its inputs, a file a checkpoint\n"
    "     it reads pins by sha256), or it found problems (findings, a difference; coverage,\n"
    "     explain: a kernel in no cache tier)\n"
    "  2  usage or environment: options (unknown, missing, conflicting, a bad value), a\n"
    "     missing file, an I/O error, the cache directory, the remote, the fleet key, the\n"
    "     compilers and the tool worker and their settings (JITCACHE_TOOL_*), a miss in\n"
    "     no-compile mode (JITCACHE_NO_COMPILE, --no-compile); for audit and scales diff,\n"
    "     whose 1 means findings, anything that keeps them from running\n";

struct GlobalOptions {
  std::optional<std::string> cache_dir;  // --cache-dir; absent: resolved from the environment; never empty
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

// The options several commands take, each with its one help text.
inline CLI::Option* add_json_flag(CLI::App* command, bool& json) {
  return command->add_flag("--json", json, "One JSON document on stdout");
}
inline CLI::Option* add_jobs_option(CLI::App* command, unsigned& jobs) {
  return command->add_option("--jobs", jobs, "Parallel compiles (default: one per core)");
}

// Registers subcommands onto the root app. `order` keeps `--help` listing stable.
using Registration = void (*)(CLI::App& root, Context& context);
struct Registrar {
  Registrar(int order, Registration registration);
};

// Prints an error to stderr in the CLI's one format and returns the exit code it maps to:
// invalid input -> 1, everything else (usage, environment, I/O; an unsafe cache directory
// or fleet key file) -> 2.
int report(const Error& error);
// The same for an error about the data a command was given (a checkpoint and its scales,
// a scales or capture file, an output path): invalid input and unsafe data -> 1.
int report_data(const Error& error);
// Prints the error and returns `code`.
int report(const Error& error, int code);

// The files the environment makes a command read, which no output may replace: the fleet
// key file JITCACHE_REMOTE_KEY_FILE names, when it names one.
std::vector<std::filesystem::path> environment_inputs();

}  // namespace jitcache::cli
