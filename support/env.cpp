#include "support/env.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <set>

#include "jitcache/log.hpp"
#include "support/enum_names.hpp"
#include "support/text.hpp"

extern char** environ;

namespace jitcache::env {

const EnvVar jitcache_dir{"JITCACHE_DIR", EnvType::path, "",
                          "Cache directory (after --cache-dir; before $XDG_CACHE_HOME/jitcache)."};
const EnvVar jitcache_log_level{"JITCACHE_LOG_LEVEL", EnvType::log_level, "info",
                                "Minimum level logged: debug, info, warning, error, off."};
const EnvVar jitcache_strict{"JITCACHE_STRICT", EnvType::boolean, "0",
                             "Strict mode: unknown JITCACHE_* variables, a bad JITCACHE_LOG_LEVEL, "
                             "near-miss scales keys in config.json and override revision "
                             "mismatches are errors, not warnings."};
const EnvVar vllm_nvfp4_mla_scales_file{
    "VLLM_NVFP4_MLA_SCALES_FILE", EnvType::path, "",
    "Explicit override of per-layer NVFP4 MLA outer scales (a v1 scales file); logged as an "
    "override."};
const EnvVar xdg_cache_home{"XDG_CACHE_HOME", EnvType::path, "",
                            "Base of the default cache directory ($XDG_CACHE_HOME/jitcache)."};
const EnvVar home{"HOME", EnvType::path, "", "Fallback base of the cache directory (~/.cache/jitcache)."};
const EnvVar jitcache_lineinfo{"JITCACHE_LINEINFO", EnvType::boolean, "0",
                               "Compile kernels with line information (-lineinfo) for profilers; "
                               "recorded in every kernel's cache key.",
                               true};
const EnvVar jitcache_require_cache{"JITCACHE_REQUIRE_CACHE", EnvType::boolean, "0",
                                    "Fail Runtime::open / jitcache_runtime_open when the local cache "
                                    "directory cannot be used, instead of running memory-only. It is "
                                    "about the directory only: a remote cache (JITCACHE_REMOTE) that "
                                    "cannot be used is never an error for an engine."};

const EnvVar jitcache_providers{
    "JITCACHE_PROVIDERS", EnvType::string, "",
    "Cache provider directories (prebuilt, verified kernel bundles: `jitcache pack`), separated by ':', "
    "asked after the local cache and before the remote. The Python package adds the cache wheels "
    "installed in its environment."};
const EnvVar jitcache_no_compile{"JITCACHE_NO_COMPILE", EnvType::boolean, "0",
                                 "Never compile: a kernel missing from every cache tier is an error "
                                 "naming the variant and the tiers it was looked up in (exit 2 for "
                                 "the CLI, UnavailableError in Python) instead of a compile. For "
                                 "nodes that must start from shipped kernels only; `jitcache "
                                 "coverage` says beforehand what is missing."};

const EnvVar jitcache_verify_spec{"JITCACHE_VERIFY_SPEC", EnvType::fraction, "0",
                                  "Shadow verification of spec-keyed lookups (Runtime::lookup): the "
                                  "fraction of hits turned into 'verify' (the library generates the "
                                  "source and compile() compares it with the entry's record): 0 never, "
                                  "1 every hit, or a sampled fraction such as 0.01. The runtime option "
                                  "verify_spec beats it."};

// Read by the Python package (python/jitcache), declared here so that the registry knows
// them: `jitcache env` lists them and strict mode does not refuse them.
const EnvVar jitcache_library{"JITCACHE_LIBRARY", EnvType::path, "",
                              "Python package: the libjitcache.so to load instead of the bundled one."};
const EnvVar jitcache_cli{"JITCACHE_CLI", EnvType::path, "",
                          "Python package: the jitcache CLI that `python -m jitcache` runs instead "
                          "of the bundled one."};
const EnvVar jitcache_sglang_format{"JITCACHE_SGLANG_FORMAT", EnvType::string, "b12x-432",
                                    "Python package, SGLang plugin: the record format of "
                                    "--kv-cache-dtype nvfp4_ds_mla (b12x-432, b12x-368 or "
                                    "flashmla-352; docs/sglang.md)."};

// The shared remote tier (remote/remote_tier.hpp, docs/remote.md).
const EnvVar jitcache_remote{.name = "JITCACHE_REMOTE",
                             .type = EnvType::string,
                             .default_value = "",
                             .doc = "Shared remote cache: redis://[user[:password]@]host[:port][/db]. Used only "
                                    "with a fleet key (JITCACHE_REMOTE_KEY_FILE). Never required: a remote that "
                                    "cannot be used is one warning and local-only operation. Shown with its "
                                    "password as ***.",
                             .url_with_password = true};
const EnvVar jitcache_remote_key_file{
    "JITCACHE_REMOTE_KEY_FILE", EnvType::path, "",
    "Fleet key (>= 32 bytes; a regular file owned by the user, mode 600) signing remote entries and "
    "export files with HMAC-SHA256."};
const EnvVar jitcache_remote_password_file{
    "JITCACHE_REMOTE_PASSWORD_FILE", EnvType::path, "",
    "Redis password, read from a private file instead of the URL."};
const EnvVar jitcache_remote_prefix{"JITCACHE_REMOTE_PREFIX", EnvType::string, "jitcache:",
                                    "Prefix of every Redis key jitcache writes (one namespace per fleet)."};
const EnvVar jitcache_remote_connect_timeout_ms{"JITCACHE_REMOTE_CONNECT_TIMEOUT_MS", EnvType::milliseconds,
                                                "200", "Connecting to the remote cache gives up after this."};
const EnvVar jitcache_remote_timeout_ms{"JITCACHE_REMOTE_TIMEOUT_MS", EnvType::milliseconds, "500",
                                        "One remote cache operation gives up after this."};
const EnvVar jitcache_remote_breaker_ms{
    "JITCACHE_REMOTE_BREAKER_MS", EnvType::milliseconds, "30000",
    "After a remote failure, the remote is left alone for this long (local tiers only)."};
const EnvVar jitcache_remote_lease_ms{
    "JITCACHE_REMOTE_LEASE_MS", EnvType::milliseconds, "10000",
    "Lifetime of a compile lease (renewed while its holder compiles; a dead holder's expires)."};
const EnvVar jitcache_remote_wait_ms{
    "JITCACHE_REMOTE_WAIT_MS", EnvType::milliseconds, "60000",
    "Longest wait for another node's compile of the same kernel before compiling here too."};
const EnvVar jitcache_remote_max_entry_bytes{"JITCACHE_REMOTE_MAX_ENTRY_BYTES", EnvType::bytes, "16777216",
                                             "Largest remote value read; a larger one is rejected unread."};

// Tool isolation (runtime/compile/tool_worker.hpp).
const EnvVar jitcache_tool_worker{"JITCACHE_TOOL_WORKER", EnvType::path, "",
                                  "The jitcache-tool-worker executable that compiles kernels from outside in "
                                  "a child process (default: beside the library or the program)."};
const EnvVar jitcache_tool_timeout_ms{"JITCACHE_TOOL_TIMEOUT_MS", EnvType::milliseconds, "300000",
                                      "Longest compile of a kernel from outside in the tool worker; a worker "
                                      "that takes longer is killed and the compile fails."};
const EnvVar jitcache_tool_workers{"JITCACHE_TOOL_WORKERS", EnvType::count, "",
                                   "Most tool workers alive at once (busy and idle); further compiles of "
                                   "kernels from outside wait for one (default: the CPUs this process may "
                                   "run on)."};

// The compiler libraries, opened at their first use (runtime/compile/toolkit_search.hpp
// gives the whole search). Set, the file named is the only candidate.
const EnvVar jitcache_nvrtc{"JITCACHE_NVRTC", EnvType::path, "",
                            "The libnvrtc.so file to compile with (default: the NVIDIA pip package of the "
                            "Python environment, an NVRTC already loaded, the CUDA toolkit, then the loader's "
                            "search)."};
const EnvVar jitcache_nvjitlink{"JITCACHE_NVJITLINK", EnvType::path, "",
                                "The libnvJitLink.so file for kernels from outside given as PTX or NVVM IR "
                                "(default: searched like NVRTC)."};
const EnvVar jitcache_nvvm{"JITCACHE_NVVM", EnvType::path, "",
                           "The libnvvm.so file for kernels from outside given as NVVM IR (default: searched "
                           "like NVRTC)."};
const EnvVar virtual_env{"VIRTUAL_ENV", EnvType::path, "",
                         "An activated Python virtual environment: its NVIDIA pip packages are searched for "
                         "NVRTC, nvJitLink and libNVVM."};
const EnvVar conda_prefix{"CONDA_PREFIX", EnvType::path, "",
                          "An activated conda environment: searched like VIRTUAL_ENV."};
const EnvVar pythonhome{"PYTHONHOME", EnvType::path, "",
                        "Python's prefix, when exported: searched like VIRTUAL_ENV."};
const EnvVar cuda_home{"CUDA_HOME", EnvType::path, "",
                       "A CUDA toolkit searched for NVRTC, nvJitLink and libNVVM before /usr/local/cuda."};
const EnvVar cuda_path{"CUDA_PATH", EnvType::path, "", "Searched like CUDA_HOME, after it."};
const EnvVar ld_library_path{"LD_LIBRARY_PATH", EnvType::string, "",
                             "The dynamic loader's directories: searched for the compilers after the toolkit, "
                             "before the loader's cache."};

namespace {
const EnvVar* const k_registry[] = {&jitcache_dir,      &jitcache_log_level,  &jitcache_strict,
                                    &vllm_nvfp4_mla_scales_file, &xdg_cache_home, &home,
                                    &jitcache_lineinfo, &jitcache_require_cache, &jitcache_no_compile, &jitcache_library,
                                    &jitcache_cli, &jitcache_sglang_format,
                                    &jitcache_remote, &jitcache_remote_key_file,
                                    &jitcache_remote_password_file, &jitcache_remote_prefix,
                                    &jitcache_remote_connect_timeout_ms, &jitcache_remote_timeout_ms,
                                    &jitcache_remote_breaker_ms, &jitcache_remote_lease_ms,
                                    &jitcache_remote_wait_ms, &jitcache_remote_max_entry_bytes,
                                    &jitcache_verify_spec, &jitcache_providers, &jitcache_tool_worker,
                                    &jitcache_tool_timeout_ms, &jitcache_tool_workers, &jitcache_nvrtc, &jitcache_nvjitlink,
                                    &jitcache_nvvm, &virtual_env, &conda_prefix, &pythonhome, &cuda_home,
                                    &cuda_path, &ld_library_path};

// VLLM_NVFP4_MLA_ is owned too: a misspelt VLLM_NVFP4_MLA_SCALES_FILE silently drops the
// override, the very mistake the registry exists to catch.
constexpr std::string_view k_owned_prefixes[] = {"JITCACHE_", "VLLM_NVFP4_MLA_"};

// Warn once per process and name: a serving engine resolves scales more than once.
bool first_warning(const std::string& key) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard lock(mutex);
  return warned.insert(key).second;
}

}  // namespace

const char* to_string(EnvType type) {
  return enum_name(type, {"path", "string", "bool", "log level", "milliseconds", "bytes", "count",
                          "fraction"});
}

std::span<const EnvVar* const> registry() { return k_registry; }

std::optional<std::string> get(const EnvVar& var) {
  const char* value = std::getenv(std::string(var.name).c_str());
  if (value == nullptr) return std::nullopt;
  const std::string_view trimmed = text::trim(value);
  if (trimmed.empty()) return std::nullopt;
  return std::string(trimmed);
}

std::optional<std::string> shown_value(const EnvVar& var) {
  auto value = get(var);
  if (value && var.url_with_password) return text::redact_url_password(*value);
  return value;
}

Result<bool> get_bool(const EnvVar& var) {
  auto value = get(var);
  const std::string word = text::ascii_lower(value ? *value : std::string(var.default_value));
  if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
  if (word.empty() || word == "0" || word == "false" || word == "no" || word == "off") return false;
  return make_error(ErrorCode::invalid_input,
                    std::string(var.name) + "=" + text::escape_control(*value) +
                        ": expected a boolean: 1, true, yes, on or 0, false, no, off (any case)");
}

Result<std::uint64_t> get_uint(const EnvVar& var) {
  auto value = get(var);
  const std::string text = value ? *value : std::string(var.default_value);
  constexpr std::uint64_t k_max = std::uint64_t{1} << 53;
  std::uint64_t n = 0;
  bool ok = !text.empty() && text.size() <= 16;
  for (char c : text) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || n > k_max)
    return make_error(ErrorCode::invalid_input, std::string(var.name) + "=" + text::escape_control(text) +
                                                    ": expected a whole number" +
                                                    (var.type == EnvType::count ? std::string()
                                                                                : " of " + std::string(to_string(var.type))) +
                                                    " (decimal digits)");
  return n;
}

Result<double> get_fraction(const EnvVar& var) {
  auto value = get(var);
  const std::string text = text::ascii_lower(value ? *value : std::string(var.default_value));
  if (text == "true" || text == "yes" || text == "on") return 1.0;
  if (text == "false" || text == "no" || text == "off") return 0.0;
  double parsed = -1.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  // from_chars reads "nan" and "inf" too; the range check refuses them.
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(parsed >= 0.0 && parsed <= 1.0))
    return make_error(ErrorCode::invalid_input,
                      std::string(var.name) + "=" + text::escape_control(value ? *value : text) +
                          ": expected a fraction from 0 to 1 (0 never, 1 always, 0.05 one in twenty), or a "
                          "boolean (1, true, yes, on, 0, false, no, off)");
  return parsed;
}

Status check_value(const EnvVar& var) {
  const auto value = get(var);
  if (!value) return {};
  switch (var.type) {
    case EnvType::boolean:
      if (auto parsed = get_bool(var); !parsed) return std::unexpected(parsed.error());
      return {};
    case EnvType::log_level:
      if (!parse_log_level(*value))
        return make_error(ErrorCode::invalid_input,
                          std::string(var.name) + "=" + text::escape_control(*value) +
                              ": expected a log level (debug, info, warning, error, off)");
      return {};
    case EnvType::milliseconds:
    case EnvType::bytes:
    case EnvType::count:
      if (auto parsed = get_uint(var); !parsed) return std::unexpected(parsed.error());
      return {};
    case EnvType::fraction:
      if (auto parsed = get_fraction(var); !parsed) return std::unexpected(parsed.error());
      return {};
    case EnvType::path:
    case EnvType::string:
      return {};
  }
  return {};
}

Result<bool> strict_mode() { return get_bool(jitcache_strict); }

Status check_startup() {
  const bool strict = JC_TRY(strict_mode());
  if (auto level = check_value(jitcache_log_level); !level) {
    if (strict)
      return make_error(ErrorCode::invalid_input, level.error().message + " [strict mode, JITCACHE_STRICT]");
    if (first_warning("invalid:" + std::string(jitcache_log_level.name)))
      log_warning(level.error().message + "; it is ignored");
  }
  return check_unknown_vars();
}

std::span<const std::string_view> owned_prefixes() { return k_owned_prefixes; }

std::vector<UnknownVar> unknown_prefixed_vars(std::span<const std::string> environ_entries) {
  std::vector<UnknownVar> unknown;
  for (const std::string& entry : environ_entries) {
    const std::string name = entry.substr(0, entry.find('='));
    const bool owned = std::any_of(std::begin(k_owned_prefixes), std::end(k_owned_prefixes),
                                   [&](std::string_view prefix) { return name.starts_with(prefix); });
    if (!owned) continue;
    const bool declared = std::any_of(std::begin(k_registry), std::end(k_registry),
                                      [&](const EnvVar* v) { return v->name == name; });
    if (declared) continue;
    UnknownVar u{name, {}};
    std::size_t best = 4;  // suggest only near misses
    for (const EnvVar* v : k_registry) {
      const std::size_t d = text::edit_distance(text::ascii_lower(name), text::ascii_lower(v->name));
      if (d < best) {
        best = d;
        u.suggestion = std::string(v->name);
      }
    }
    unknown.push_back(std::move(u));
  }
  return unknown;
}

std::vector<UnknownVar> unknown_prefixed_vars() {
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) entries.emplace_back(*e);
  return unknown_prefixed_vars(entries);
}

Status check_unknown_vars() {
  const bool strict = JC_TRY(strict_mode());
  std::string errors;
  for (const UnknownVar& u : unknown_prefixed_vars()) {
    std::string line =
        "environment variable " + text::escape_control(u.name) + " is not a declared jitcache variable";
    if (!u.suggestion.empty()) line += " (did you mean " + u.suggestion + "?)";
    if (strict) {
      errors += (errors.empty() ? "" : "; ") + line;
    } else if (first_warning("unknown:" + u.name)) {
      log_warning(line + "; it is ignored");
    }
  }
  if (!errors.empty())
    return make_error(ErrorCode::invalid_input, errors + " [strict mode, JITCACHE_STRICT]");
  return {};
}

}  // namespace jitcache::env
