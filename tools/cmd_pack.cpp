// `jitcache pack`: the variants a checkpoint needs on some targets as a cache wheel, a pip
// package that installs a cache provider (runtime/compile/cache_provider.hpp) and declares it
// in the entry-point group `jitcache.cache_providers`. The package tree is laid out here;
// the wheel itself (its RECORD, its zip) is made by the `wheel` package's `wheel pack`.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/files.hpp"
#include "cache/report.hpp"
#include "cache/size.hpp"
#include "remote/remote_config.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/scales/checkpoint_files.hpp"
#include "support/atomic_file.hpp"
#include "support/env.hpp"
#include "tools/checkpoint_plan.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/format_options.hpp"
#include "tools/subcommand.hpp"

extern char** environ;

namespace jitcache::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct PackArgs : CheckpointArgs {
  std::string out;
  std::string name;
  std::string version;
  std::string python;
  unsigned jobs = 0;
  bool json = false;
};

// Lowercase letters and digits, every other run of characters one '_': a Python package name
// and a normalized distribution name at once.
std::string slug(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

bool valid_package_name(std::string_view name) {
  if (name.empty() || !std::isalpha(static_cast<unsigned char>(name.front()))) return false;
  for (const char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return name.size() <= 100;
}

// A public version identifier of PEP 440's plain shape: N(.N)*, optionally followed by a
// pre-, post- or dev-release part (letters and digits, dots).
bool valid_version(std::string_view v) {
  if (v.empty() || v.size() > 64 || !std::isdigit(static_cast<unsigned char>(v.front()))) return false;
  for (const char c : v)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.')) return false;
  return v.back() != '.';
}

// The interpreter that runs `wheel pack`: --python, else the virtual environment's
// (VIRTUAL_ENV, which `python -m jitcache` sets), else python3 on PATH.
std::string python_for(const PackArgs& args) {
  if (!args.python.empty()) return args.python;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    const fs::path candidate = fs::path(venv) / "bin" / "python";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "python3";
}

// Runs `argv` (searched on PATH) with its stdout sent to this process's stderr, so that a
// --json document stays alone on stdout, or with both to /dev/null (`quiet`). Returns its
// exit status, or -1 when it could not be started (errno in `spawn_error`).
int run_program(const std::vector<std::string>& argv, int& spawn_error, bool quiet = false) {
  std::vector<char*> raw;
  for (const std::string& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  pid_t pid = 0;
  spawn_error = posix_spawnp(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Removes the staging directory whatever happens.
struct StagingDir {
  fs::path path;
  ~StagingDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

std::string python_string(std::string_view text) {
  // A Python string literal: the text is a name and targets made of [a-z0-9_.-] here, but
  // escape anyway.
  return nlohmann::json(std::string(text)).dump();
}

int run_pack(const PackArgs& args, const GlobalOptions& global) {
  const auto started = Clock::now();
  const RecordFormat format = args.format.record_format();
  auto planned = plan_checkpoint(args);
  if (!planned) return report_data(planned.error());

  const std::string model = checkpoint_name(args.checkpoint);
  std::string name = args.name;
  if (name.empty()) {
    name = "jitcache_cache_" + slug(model);
    if (format != RecordFormat::b12x_432) name += "_" + slug(to_string(format));
    for (const std::string& t : planned->targets) name += "_" + slug(std::string(t).erase(2, 1));  // sm_90 -> sm90
  }
  if (!valid_package_name(name))
    return report(Error{ErrorCode::invalid_argument,
                        "--name: \"" + name + "\" is not a package name (a lowercase letter, then lowercase "
                        "letters, digits and '_', at most 100)", {}},
                  k_exit_usage);
  const std::string version = args.version.empty() ? std::string(JITCACHE_VERSION_STRING) : args.version;
  if (!valid_version(version))
    return report(Error{ErrorCode::invalid_argument,
                        "--package-version: \"" + version + "\" is not a version (digits and dots, e.g. 1.2.0, optionally "
                        "followed by letters and digits, e.g. 1.2.0rc1)", {}},
                  k_exit_usage);

  const fs::path out_dir = args.out;
  const fs::path wheel_path = out_dir / (name + "-" + version + "-py3-none-any.whl");
  std::optional<fs::path> override_file;
  if (!args.scales.empty()) override_file = args.scales;
  const scales::CheckpointFiles files = scales::checkpoint_files(args.checkpoint, override_file, EnvOverride::read);
  std::vector<fs::path> inputs = files.inputs;
  for (auto& path : environment_inputs()) inputs.push_back(std::move(path));
  if (auto ok = check_output_target(wheel_path, inputs, files.pinned); !ok) return report_data(ok.error());

  // The wheel is made by the `wheel` package: check it is there before compiling anything.
  const std::string python = python_for(args);
  int spawn_error = 0;
  const int probe = run_program({python, "-m", "wheel", "version"}, spawn_error, /*quiet=*/true);
  if (probe != 0)
    return report(Error{ErrorCode::unavailable,
                        "pack makes the wheel with the `wheel` package, and " +
                            (probe < 0 ? python + " cannot be run (" + std::string(std::strerror(spawn_error)) + ")"
                                       : python + " cannot import it") +
                            ": install it (" + python + " -m pip install wheel) or name another interpreter with --python",
                        {}},
                  k_exit_usage);

  auto key = remote::load_fleet_key();
  if (!key) return report(key.error());

  auto opened = open_command_cache(global);
  if (!opened) return report(opened.error(), k_exit_usage);
  auto entries = gather_export_entries(*opened->kernels, *opened->compiler, planned->specs, args.jobs,
                                       gather_progress(args.json));
  if (!entries) return report(entries.error());

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return report(Error{ErrorCode::io, "creating " + out_dir.string() + ": " + ec.message(), {}});
  StagingDir stage;
  std::string templ = (out_dir / ".jitcache-pack-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr)
    return report(Error{ErrorCode::io, "creating a staging directory in " + out_dir.string() + ": " +
                                           std::strerror(errno), {}});
  stage.path = templ;

  ProviderInfo info;
  info.producer = std::string("jitcache ") + JITCACHE_VERSION_STRING;
  info.created = cache::format_time(cache::unix_now_ms(), cache::TimeFormat::iso);
  info.name = name;
  info.checkpoint = model;
  info.record_format = to_string(format);
  info.targets = planned->targets;
  const fs::path package = stage.path / name;
  if (auto written = write_provider(package / "provider", info, *entries, *key); !written)
    return report(written.error());

  std::string targets_text;
  for (const std::string& t : planned->targets) targets_text += (targets_text.empty() ? "" : ", ") + t;
  const std::string summary = "Prebuilt jitcache kernels for " + model + " (" + to_string(format) + ") on " +
                              targets_text;
  const std::string init =
      "\"\"\"" + summary + ", made by `jitcache pack` (" + info.producer + ").\n\n"
      "Installed, it is a cache provider: jitcache asks it after the local cache and verifies\n"
      "every kernel it reads from it. Nothing here is imported by a serving process but\n"
      "provider().\n\"\"\"\n\n"
      "from pathlib import Path\n\n"
      "NAME = " + python_string(name) + "\n"
      "CHECKPOINT = " + python_string(model) + "\n"
      "RECORD_FORMAT = " + python_string(to_string(format)) + "\n"
      "TARGETS = " + nlohmann::json(planned->targets).dump() + "\n\n\n"
      "def provider() -> dict:\n"
      "    \"\"\"The entry point of the group jitcache.cache_providers.\"\"\"\n"
      "    directory = Path(__file__).resolve().parent / \"provider\"\n"
      "    return {\"directory\": str(directory), \"manifest\": str(directory / \"manifest.json\")}\n";
  const fs::path dist_info = stage.path / (name + "-" + version + ".dist-info");
  fs::create_directories(dist_info, ec);
  if (ec) return report(Error{ErrorCode::io, "creating " + dist_info.string() + ": " + ec.message(), {}});
  const std::string metadata = "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version +
                               "\nSummary: " + summary + "\nRequires-Dist: jitcache\n";
  const std::string wheel = std::string("Wheel-Version: 1.0\nGenerator: jitcache pack ") + JITCACHE_VERSION_STRING +
                            "\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
  const std::string entry_points = "[jitcache.cache_providers]\n" + name + " = " + name + ":provider\n";
  for (const auto& [path, text] : {std::pair{package / "__init__.py", init}, std::pair{dist_info / "METADATA", metadata},
                                   std::pair{dist_info / "WHEEL", wheel},
                                   std::pair{dist_info / "entry_points.txt", entry_points}})
    if (auto ok = write_text_atomic(path, text); !ok) return report(ok.error());

  const int packed = run_program({python, "-m", "wheel", "pack", stage.path.string(), "-d", out_dir.string()},
                                 spawn_error);
  if (packed != 0)
    return report(Error{ErrorCode::io, python + " -m wheel pack failed (exit " + std::to_string(packed) +
                                           "); its output is above", {}});
  const auto wheel_size = fs::file_size(wheel_path, ec);
  if (ec)
    return report(Error{ErrorCode::internal, "wheel pack reported success but " + wheel_path.string() +
                                                 " is not there: " + ec.message(), {}});

  std::size_t compiled = 0;
  for (const ExportEntry& e : *entries) compiled += e.compiled_now ? 1 : 0;
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (args.json) {
    nlohmann::ordered_json variants = nlohmann::ordered_json::array();
    for (const ExportEntry& e : *entries)
      variants.push_back({{"label", e.label}, {"key", e.key.to_hex()}, {"size", e.bytes->size()},
                          {"compiled", e.compiled_now}});
    const nlohmann::ordered_json out = {{"wheel", wheel_path.string()},
                                        {"name", name},
                                        {"version", version},
                                        {"checkpoint", model},
                                        {"format", to_string(format)},
                                        {"targets", planned->targets},
                                        {"entries", entries->size()},
                                        {"compiled", compiled},
                                        {"cached", entries->size() - compiled},
                                        {"bytes", wheel_size},
                                        {"signed", key->has_value()},
                                        {"wall_ms", wall_ms},
                                        {"variants", variants}};
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("packed %zu variants of %s for %s (%s) into %s: %s, %s\n", entries->size(), model.c_str(),
              targets_text.c_str(), to_string(format), wheel_path.string().c_str(),
              cache::format_size(wheel_size).c_str(), *key ? "signed with the fleet key" : "unsigned");
  std::printf("compiled %zu, already cached %zu, wall time %.1f ms\n", compiled, entries->size() - compiled, wall_ms);
  std::printf("install it beside jitcache (pip install %s); `jitcache coverage` and Runtime.prepare() find it\n",
              wheel_path.string().c_str());
  return k_exit_ok;
}

void register_pack(CLI::App& root, Context& context) {
  auto [cmd, args] = add_subcommand(root, context, "pack",
                                    "Build a cache wheel: the variants a checkpoint needs, as a pip package", run_pack);
  add_checkpoint_options(cmd, args);
  cmd->add_option("--out", args.out, "Directory the wheel is written to (created when missing)")->required();
  cmd->add_option("--name", args.name,
                  "Package name (default: jitcache_cache_<checkpoint>[_<format>]_<targets>, e.g. "
                  "jitcache_cache_glm5_mini_sm90)");
  cmd->add_option("--package-version", args.version, "Package version (default: this jitcache's)");
  cmd->add_option("--python", args.python,
                  "Interpreter whose `wheel` package makes the wheel (default: $VIRTUAL_ENV's, else python3)");
  add_jobs_option(cmd, args.jobs);
  add_json_flag(cmd, args.json);
}

const Registrar k_registrar(26, register_pack);

}  // namespace
}  // namespace jitcache::cli
