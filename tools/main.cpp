#include <cstdio>
#include <exception>
#include <map>

#include "jitcache/log.hpp"
#include "support/env.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {
namespace {

std::multimap<int, Registration>& registrations() {
  static std::multimap<int, Registration> table;
  return table;
}

}  // namespace

Registrar::Registrar(int order, Registration registration) {
  registrations().emplace(order, registration);
}

void Context::bind(CLI::App* command, Action action) {
  command->callback([this, action = std::move(action)] { exit_code = action(); });
}

int report(const Error& error, int code) {
  std::fprintf(stderr, "jitcache: error: %s\n", error.to_string().c_str());
  return code;
}

int report(const Error& error) {
  return report(error, error.code == ErrorCode::invalid_input ? k_exit_findings : k_exit_usage);
}

int report_data(const Error& error) {
  const bool refused = error.code == ErrorCode::invalid_input || error.code == ErrorCode::unsafe;
  return report(error, refused ? k_exit_findings : k_exit_usage);
}

std::vector<std::filesystem::path> environment_inputs() {
  std::vector<std::filesystem::path> inputs;
  if (auto key_file = jitcache::env::get(jitcache::env::jitcache_remote_key_file)) inputs.emplace_back(*key_file);
  return inputs;
}

}  // namespace jitcache::cli

int main(int argc, char** argv) {
  using namespace jitcache::cli;
  CLI::App app{"jitcache: JIT compiler and persistent kernel cache for NVFP4 MLA KV-cache kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", JITCACHE_VERSION_STRING);
  app.footer(k_exit_code_table);
  // Option errors in the CLI's one format, like every other error.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("jitcache: error: ") + e.what() + "\nRun with --help for more information.\n";
  });
  Context context;
  app.add_option("--cache-dir", context.global.cache_dir,
                 "Cache directory (else JITCACHE_DIR, else $XDG_CACHE_HOME/jitcache, else "
                 "~/.cache/jitcache)");
  app.add_option("--remote", context.global.remote,
                 "Shared remote cache, redis://[user[:password]@]host[:port][/db] (else JITCACHE_REMOTE; "
                 "used with a fleet key, JITCACHE_REMOTE_KEY_FILE)");
  app.add_option("--log-level", context.global.log_level, "debug|info|warning|error|off")
      ->check(CLI::IsMember({"debug", "info", "warning", "error", "off"}, CLI::ignore_case));
  app.parse_complete_callback([&context] {
    // An empty --cache-dir is a script's unset variable, not a wish for the default cache:
    // `--cache-dir "" clear --all` must not empty JITCACHE_DIR's.
    if (context.global.cache_dir && context.global.cache_dir->empty()) {
      context.startup_error = jitcache::Error{jitcache::ErrorCode::invalid_argument,
                                              "--cache-dir is empty; leave the option out for the default cache "
                                              "directory (JITCACHE_DIR, $XDG_CACHE_HOME/jitcache, ~/.cache/jitcache)",
                                              ""};
      throw CLI::Success();
    }
    // --log-level beats JITCACHE_LOG_LEVEL, which beats the default (info).
    std::string level = context.global.log_level;
    if (level.empty()) level = jitcache::env::get(jitcache::env::jitcache_log_level).value_or("");
    if (auto parsed = jitcache::parse_log_level(level)) jitcache::set_log_level(*parsed);
    // JITCACHE_STRICT must parse; a bad JITCACHE_LOG_LEVEL (ignored, using info) and
    // misspelt JITCACHE_* variables are warnings, or in strict mode errors before any work.
    if (auto checked = jitcache::env::check_startup(); !checked) {
      context.startup_error = checked.error();
      throw CLI::Success();  // stop parsing; main reports the error
    }
  });
  for (auto& [order, registration] : registrations()) registration(app, context);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // Also --help and --version (CLI11 derives them from Success): print and exit 0.
    // The environment is wrong, whatever the command: a usage/environment error.
    if (context.startup_error) {
      report(*context.startup_error);
      return k_exit_usage;
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? k_exit_ok : k_exit_usage;
  } catch (const std::exception& e) {
    // Library code reports errors as values; this is the last line of defence.
    std::fprintf(stderr, "jitcache: internal error: %s\n", e.what());
    return k_exit_usage;
  }
  return context.exit_code;
}
