#include "support/env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>

#include "jitcache/log.hpp"

extern char** environ;

namespace jitcache::env {

const EnvVar jitcache_dir{"JITCACHE_DIR", EnvType::path, "",
                          "Cache directory (after --cache-dir; before $XDG_CACHE_HOME/jitcache)."};
const EnvVar jitcache_log_level{"JITCACHE_LOG_LEVEL", EnvType::log_level, "info",
                                "Minimum level logged: debug, info, warning, error, off."};
const EnvVar jitcache_strict{"JITCACHE_STRICT", EnvType::boolean, "0",
                             "Strict mode: unknown JITCACHE_* variables and override revision "
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
                                    "Fail Runtime::open / jitcache_runtime_open when the cache "
                                    "directory cannot be used, instead of running memory-only."};

namespace {
const EnvVar* const k_registry[] = {&jitcache_dir, &jitcache_log_level, &jitcache_strict,
                                    &vllm_nvfp4_mla_scales_file, &xdg_cache_home, &home,
                                    &jitcache_lineinfo, &jitcache_require_cache};

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

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace

const char* to_string(EnvType type) {
  switch (type) {
    case EnvType::path: return "path";
    case EnvType::string: return "string";
    case EnvType::boolean: return "bool";
    case EnvType::log_level: return "log level";
  }
  return "?";
}

std::span<const EnvVar* const> registry() { return k_registry; }

std::optional<std::string> get(const EnvVar& var) {
  const char* value = std::getenv(std::string(var.name).c_str());
  if (value == nullptr) return std::nullopt;
  std::string_view text(value);
  const auto first = text.find_first_not_of(" \t\r\n\v\f");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = text.find_last_not_of(" \t\r\n\v\f");
  return std::string(text.substr(first, last - first + 1));
}

Result<bool> get_bool(const EnvVar& var) {
  auto value = get(var);
  const std::string text = lower(value ? *value : std::string(var.default_value));
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text.empty() || text == "0" || text == "false" || text == "no" || text == "off") return false;
  return make_error(ErrorCode::invalid_input,
                    std::string(var.name) + "=" + *value + ": expected a boolean (1/0, true/false)");
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
                          std::string(var.name) + "=" + *value +
                              ": expected a log level (debug, info, warning, error, off)");
      return {};
    case EnvType::path:
    case EnvType::string:
      return {};
  }
  return {};
}

bool strict_mode() {
  auto value = get_bool(jitcache_strict);
  if (!value) {
    if (first_warning("invalid:" + std::string(jitcache_strict.name)))
      log_warning(value.error().message + "; strict mode stays off");
    return false;
  }
  return *value;
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
      const std::size_t d = edit_distance(lower(name), lower(v->name));
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
  const bool strict = strict_mode();
  std::string errors;
  for (const UnknownVar& u : unknown_prefixed_vars()) {
    std::string line = "environment variable " + u.name + " is not a declared jitcache variable";
    if (!u.suggestion.empty()) line += " (did you mean " + u.suggestion + "?)";
    if (strict) {
      errors += (errors.empty() ? "" : "; ") + line;
    } else if (first_warning("unknown:" + u.name)) {
      log_warning(line + "; it is ignored");
    }
  }
  if (!errors.empty())
    return make_error(ErrorCode::invalid_argument, errors + " [strict mode, JITCACHE_STRICT]");
  return {};
}

}  // namespace jitcache::env
