// `jitcache remote status | push`: the shared remote tier (remote/remote_tier.hpp) as an
// operator sees it: is it there, is this node able to use it, and filling it from a cache
// warmed before the fleet had one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/remote_config.hpp"
#include "runtime/audit/remote_audit.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/compile/source_cache.hpp"
#include "support/env.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/entry_filter.hpp"
#include "tools/remote_cli.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {

std::string remote_source(const GlobalOptions& global) {
  if (!global.remote.empty()) return "--remote";
  const auto url = env::get(env::jitcache_remote);
  return url && !url->empty() ? std::string(env::jitcache_remote.name) : std::string();
}

namespace {

std::optional<std::string> explicit_url(const GlobalOptions& global) {
  return global.remote.empty() ? std::nullopt : std::optional<std::string>(global.remote);
}

std::string no_remote_message() {
  return "no remote cache configured (--remote URL or " + std::string(env::jitcache_remote.name) + ")";
}

std::string no_key_message() {
  return "no fleet key (" + std::string(env::jitcache_remote_key_file.name) +
         " is not set): remote entries are signed, and a node without the key can neither check nor sign them";
}

void print_error(std::string_view command, const std::string& message) {
  std::fprintf(stderr, "jitcache: error: %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               message.c_str());
}

// The value a setting's lookup found, or null after printing why there is none: the
// lookup's error, else `absent` (the setting is not configured).
template <typename T>
T* found_or_print(Result<std::optional<T>>& found, std::string_view command, const std::string& absent) {
  if (!found) {
    print_error(command, found.error().to_string());
    return nullptr;
  }
  if (!*found) {
    print_error(command, absent);
    return nullptr;
  }
  return &**found;
}

}  // namespace

std::unique_ptr<remote::RemoteTier> open_remote_tier(const GlobalOptions& global, std::string_view command) {
  auto settings = remote::remote_settings(explicit_url(global));
  remote::RemoteTierOptions* options = found_or_print(settings, command, no_remote_message());
  if (options == nullptr) return nullptr;
  auto key = remote::load_fleet_key();
  std::string* fleet_key = found_or_print(key, command, no_key_message());
  if (fleet_key == nullptr) return nullptr;
  options->fleet_key = std::move(*fleet_key);
  return std::make_unique<remote::RemoteTier>(std::move(*options));
}

namespace {

// ---- remote status ------------------------------------------------------------------------

constexpr int k_pings = 5;

struct StatusArgs {
  bool json = false;
};

struct RemoteStatus {
  std::optional<std::string> remote;  // display form; unset: none configured
  std::string source;
  std::string prefix;
  bool key_configured = false;
  std::optional<std::string> key_problem;
  bool reachable = false;
  std::optional<double> latency_ms;
  std::optional<std::string> server_version;
  std::optional<std::size_t> entries;
  std::optional<std::size_t> leases;
  // What this node may do under the prefix; unset: not probed. Each refusal is in `error`.
  std::optional<bool> can_read, can_write, can_delete;
  std::optional<std::string> error;  // what stops this node from using the remote
};

std::optional<std::string> info_field(const std::string& info, std::string_view field) {
  const std::string head = std::string(field) + ":";
  std::size_t at = 0;
  while (at < info.size()) {
    std::size_t end = info.find('\n', at);
    if (end == std::string::npos) end = info.size();
    std::string_view line(info.data() + at, end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.starts_with(head)) return std::string(line.substr(head.size()));
    at = end + 1;
  }
  return std::nullopt;
}

// Whether this node may read, write and delete under the prefix: a server that answers
// PING may still refuse them (an ACL user without the read commands, a read-only replica).
void probe_access(remote::RemoteTier& tier, RemoteStatus& status) {
  const remote::RemoteTier::Access access = tier.probe_access();
  std::vector<std::string> refused;
  auto note = [&](std::optional<bool>& allowed, const Status& result, const char* what) {
    allowed = result.has_value();
    if (!result) refused.push_back(std::string("cannot ") + what + " under " + status.prefix + " (" +
                                   result.error().to_string() + ")");
  };
  note(status.can_read, access.read, "read");
  note(status.can_write, access.write, "write");
  if (access.remove) note(status.can_delete, *access.remove, "delete");
  for (const std::string& line : refused) status.error = status.error ? *status.error + "; " + line : line;
}

// Asks the server; fills reachable, latency, version, access and counts, or error.
void probe(remote::RemoteTier& tier, RemoteStatus& status) {
  using clock = std::chrono::steady_clock;
  std::vector<double> round_trips;
  for (int i = 0; i < k_pings; ++i) {
    const auto start = clock::now();
    auto pong = tier.client().command({"PING"});
    if (!pong) {
      status.error = "unreachable: " + pong.error().to_string();
      return;
    }
    round_trips.push_back(std::chrono::duration<double, std::milli>(clock::now() - start).count());
  }
  status.reachable = true;
  std::sort(round_trips.begin(), round_trips.end());
  status.latency_ms = round_trips[round_trips.size() / 2];
  // INFO is one of the commands a locked-down server may rename or refuse: then no version.
  if (auto info = tier.client().command({"INFO", "server"}); info && info->type == remote::Reply::Type::string)
    status.server_version = info_field(info->str, "redis_version");
  probe_access(tier, status);
  auto names = tier.list_all_names();
  if (!names) {
    if (!status.error) status.error = "listing " + status.prefix + "*: " + names.error().to_string();
    return;
  }
  auto count = [&](remote::NameKind kind) {
    return static_cast<std::size_t>(std::count_if(names->begin(), names->end(),
                                                  [&](const std::string& n) { return tier.parse(n).kind == kind; }));
  };
  status.entries = count(remote::NameKind::entry);
  status.leases = count(remote::NameKind::lease);
}

template <typename T>
nlohmann::ordered_json or_null(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

int run_status(const Context& context, const StatusArgs& args) {
  RemoteStatus status;
  status.source = remote_source(context.global);
  auto settings = remote::remote_settings(explicit_url(context.global));
  std::unique_ptr<remote::RemoteTier> tier;
  if (!settings) {
    status.error = settings.error().to_string();
  } else if (!*settings) {
    status.error = no_remote_message();
  } else {
    status.remote = (*settings)->redis.url.display();
    status.prefix = (*settings)->prefix;
    auto key = remote::load_fleet_key();
    if (!key) status.key_problem = key.error().to_string();
    else if (!*key) status.key_problem = no_key_message();
    else {
      status.key_configured = true;
      (*settings)->fleet_key = std::move(**key);
    }
    // Reachability is worth knowing even without a key: listing and PING need none.
    tier = std::make_unique<remote::RemoteTier>(std::move(**settings));
    probe(*tier, status);
    if (!status.error && status.key_problem) status.error = *status.key_problem;
  }
  const int code = status.error ? k_exit_usage : k_exit_ok;
  if (args.json) {
    nlohmann::ordered_json doc{{"configured", status.remote.has_value()},
                               {"remote", or_null(status.remote)},
                               {"source", status.source.empty() ? nlohmann::ordered_json(nullptr)
                                                                : nlohmann::ordered_json(status.source)},
                               {"prefix", status.remote ? nlohmann::ordered_json(status.prefix) : nlohmann::ordered_json(nullptr)},
                               {"key_configured", status.key_configured},
                               {"key_problem", or_null(status.key_problem)},
                               {"reachable", status.reachable},
                               {"latency_ms", or_null(status.latency_ms)},
                               {"server_version", or_null(status.server_version)},
                               {"entries", or_null(status.entries)},
                               {"leases", or_null(status.leases)},
                               {"can_read", or_null(status.can_read)},
                               {"can_write", or_null(status.can_write)},
                               {"can_delete", or_null(status.can_delete)},
                               {"usable", code == k_exit_ok},
                               {"error", or_null(status.error)}};
    std::cout << doc.dump(2) << "\n";
  } else if (status.remote) {
    auto row = [](const char* name, const std::string& value) { std::printf("%-10s %s\n", name, value.c_str()); };
    row("remote", *status.remote + " (" + status.source + ")");
    row("prefix", status.prefix);
    row("fleet key", status.key_configured ? "configured (" + std::string(env::jitcache_remote_key_file.name) + ")"
                                           : "NONE: " + *status.key_problem);
    if (status.reachable) {
      char latency[64];
      std::snprintf(latency, sizeof latency, "yes, %.3f ms round trip (median of %d PINGs)", *status.latency_ms,
                    k_pings);
      row("reachable", latency);
      row("server", "redis " + status.server_version.value_or("(version not reported)"));
      auto yes_no = [](const std::optional<bool>& v) { return v ? (*v ? "yes" : "NO") : "not tried"; };
      if (status.can_read)
        row("access", std::string("read ") + yes_no(status.can_read) + ", write " + yes_no(status.can_write) +
                          ", delete " + yes_no(status.can_delete));
      if (status.entries)
        row("entries", std::to_string(*status.entries) + " (compile leases held now: " +
                           std::to_string(*status.leases) + ")");
    } else {
      row("reachable", "no");
    }
  }
  if (status.error) print_error("remote status", *status.error);
  return code;
}

// ---- remote push --------------------------------------------------------------------------

struct PushArgs {
  FilterArgs filter;
  bool json = false;
};

struct Skipped {
  std::string key;
  std::string kernel;
  std::string target;
  std::string why;
};

// Why an entry cannot be pushed to its name, which holds a value already (SET NX said
// so): nothing when it is a value every node would load; else the value's problem (not a
// string, garbage, another fleet's key...), which no push may overwrite.
Result<std::optional<std::string>> blocked_by(remote::RemoteTier& tier, const cache::CacheKey& key) {
  const std::string name = tier.entry_name(key);
  const auto there = JC_TRY(tier.read(name));
  std::string why;
  if (!there) why = "it was removed while pushing; push again";
  else if (there->rejected) why = there->rejected->to_string();
  else if (auto usable = check_stored_content(there->entry->facts, there->entry->bytes); !usable)
    why = std::string(remote::to_string(remote::Rejection::bad_content)) + ": " + usable.error().message;
  if (why.empty()) return std::optional<std::string>();
  return std::optional<std::string>("the remote holds a bad value at " + name + " (" + why +
                                    "); `jitcache audit --remote` and `clear --remote --stale` deal with it");
}

int run_push(const Context& context, const PushArgs& args) {
  // The store is read; the tier below is written.
  auto opened = open_command_cache(context.global, RemoteUse::off);
  if (!opened) {
    print_error("remote push", opened.error().to_string());
    return k_exit_usage;
  }
  auto tier = open_remote_tier(context.global, "remote push");
  if (!tier) return k_exit_usage;
  cache::Store& store = *opened->store;
  auto entries = store.list(args.filter.filter());
  if (!entries) return report(entries.error());

  std::size_t uploaded = 0, present = 0;
  std::vector<Skipped> skipped, blocked;
  for (const cache::EntryInfo& e : *entries) {
    auto fact = [&](std::string_view name) {
      const auto v = e.facts.get(name);
      return v ? std::string(*v) : std::string("?");
    };
    const auto bytes = fleet_ready_bytes(store, e);
    if (!bytes) {
      skipped.push_back({e.key.to_hex(), fact(k_kernel_kinds.fact), fact(k_targets.fact), bytes.error()});
      continue;
    }
    auto stored = tier->upload(e.key, e.facts, **bytes, e.compile_ms);
    if (!stored) {
      // Too large for the fleet's bound: this entry only. Anything else (down, refused,
      // read-only) stops the push: the next entry would fail the same way.
      if (stored.error().code == ErrorCode::invalid_argument) {
        skipped.push_back({e.key.to_hex(), fact(k_kernel_kinds.fact), fact(k_targets.fact), stored.error().message});
        continue;
      }
      print_error("remote push", stored.error().to_string() + " (after " + std::to_string(uploaded) +
                                     " uploaded, " + std::to_string(present) + " already present)");
      return k_exit_usage;
    }
    if (*stored) {
      ++uploaded;
      continue;
    }
    auto bad = blocked_by(*tier, e.key);
    if (!bad) {
      print_error("remote push", bad.error().to_string());
      return k_exit_usage;
    }
    if (*bad) blocked.push_back({e.key.to_hex(), fact(k_kernel_kinds.fact), fact(k_targets.fact), **bad});
    else ++present;
  }

  if (args.json) {
    auto list = [](const std::vector<Skipped>& items) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Skipped& s : items)
        out.push_back({{"key", s.key}, {"kernel", s.kernel}, {"target", s.target}, {"why", s.why}});
      return out;
    };
    std::cout << nlohmann::ordered_json{{"cache_dir", store.root().string()},
                                        {"remote", tier->client().display()},
                                        {"entries", entries->size()},
                                        {"uploaded", uploaded},
                                        {"already_present", present},
                                        {"skipped", list(skipped)},
                                        {"blocked", list(blocked)}}
                     .dump(2)
              << "\n";
  } else {
    for (const Skipped& s : skipped)
      std::printf("skipped %s (%s, %s): %s\n", s.key.c_str(), s.kernel.c_str(), s.target.c_str(), s.why.c_str());
    for (const Skipped& s : blocked)
      std::printf("blocked %s (%s, %s): %s\n", s.key.c_str(), s.kernel.c_str(), s.target.c_str(), s.why.c_str());
    std::printf("pushed %zu local entries to %s: %zu uploaded, %zu already present, %zu skipped, %zu blocked\n",
                entries->size(), tier->client().display().c_str(), uploaded, present, skipped.size(), blocked.size());
  }
  // Skipped entries are findings, as in `jitcache audit`: the local cache holds bad ones;
  // blocked entries too: the remote holds bad values where they belong.
  return skipped.empty() && blocked.empty() ? k_exit_ok : k_exit_findings;
}

void register_remote(CLI::App& root, Context& context) {
  CLI::App* remote =
      add_command_group(root, "remote", "The shared remote tier (Redis): status, and pushing local entries to it");

  auto [status, status_args] = add_subcommand(
      *remote, context, "status",
      "The configured remote (--remote or JITCACHE_REMOTE): reachable, latency, entries under jitcache's prefix, "
      "server version, whether a fleet key is configured (exit 2 when it cannot be used)",
      run_status);
  add_json_flag(status, status_args.json);

  auto [push, push_args] = add_subcommand(
      *remote, context, "push",
      "Upload every verified local entry the remote does not have (first writer wins); bad local entries are "
      "skipped and named (exit 1)",
      run_push);
  add_filter_options(push, push_args.filter);
  add_json_flag(push, push_args.json);
}

const Registrar k_registrar(47, register_remote);

}  // namespace
}  // namespace jitcache::cli
