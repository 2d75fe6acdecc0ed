// The environment registry: every environment variable jitcache reads is declared here
// once, with its type, default and one line of documentation. Values are read only
// through get(const EnvVar&), so reading an undeclared variable cannot be written.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache::env {

enum class EnvType { path, string, boolean, log_level, milliseconds, bytes, count, fraction };

struct EnvVar {
  std::string_view name;
  EnvType type;
  std::string_view default_value;  // "" = no default
  std::string_view doc;
  // The variable changes what a compile produces, so its effective value is a fact of
  // every kernel's cache key (runtime/compile/kernel_cache.cpp).
  bool affects_compilation = false;
  // The value is a URL that may carry a password (redis://user:password@host): it is
  // shown only through shown_value(), with the password replaced by ***.
  bool url_with_password = false;
};

const char* to_string(EnvType type);

// The declared variables.
extern const EnvVar jitcache_dir;
extern const EnvVar jitcache_log_level;
extern const EnvVar jitcache_strict;
extern const EnvVar vllm_nvfp4_mla_scales_file;
extern const EnvVar xdg_cache_home;
extern const EnvVar home;
extern const EnvVar jitcache_lineinfo;
extern const EnvVar jitcache_tool_worker;
extern const EnvVar jitcache_providers;
extern const EnvVar jitcache_tool_timeout_ms;
extern const EnvVar jitcache_tool_workers;
extern const EnvVar jitcache_nvrtc;
extern const EnvVar jitcache_nvjitlink;
extern const EnvVar jitcache_nvvm;
extern const EnvVar virtual_env;
extern const EnvVar conda_prefix;
extern const EnvVar pythonhome;
extern const EnvVar cuda_home;
extern const EnvVar cuda_path;
extern const EnvVar ld_library_path;
extern const EnvVar jitcache_require_cache;
extern const EnvVar jitcache_no_compile;
extern const EnvVar jitcache_library;
extern const EnvVar jitcache_cli;
extern const EnvVar jitcache_sglang_format;
extern const EnvVar jitcache_remote;
extern const EnvVar jitcache_remote_key_file;
extern const EnvVar jitcache_remote_password_file;
extern const EnvVar jitcache_remote_prefix;
extern const EnvVar jitcache_remote_connect_timeout_ms;
extern const EnvVar jitcache_remote_timeout_ms;
extern const EnvVar jitcache_remote_breaker_ms;
extern const EnvVar jitcache_remote_lease_ms;
extern const EnvVar jitcache_remote_wait_ms;
extern const EnvVar jitcache_remote_max_entry_bytes;
extern const EnvVar jitcache_verify_spec;

std::span<const EnvVar* const> registry();

// The variable's value; unset, empty or whitespace-only reads as absent.
std::optional<std::string> get(const EnvVar& var);
// The value as it may be printed or logged: get(), with the password of a
// url_with_password variable replaced by *** (text::redact_url_password).
std::optional<std::string> shown_value(const EnvVar& var);
// A boolean variable: 1/true/yes/on and 0/false/no/off (any case); absent -> default.
Result<bool> get_bool(const EnvVar& var);

// A milliseconds or bytes variable: a decimal integer in [0, 2^53]; absent -> default.
// Anything else is ErrorCode::invalid_input naming the variable and the value.
Result<std::uint64_t> get_uint(const EnvVar& var);

// A fraction variable: a number in [0, 1] (decimal, e.g. 0.05), or a boolean word for 0
// or 1; absent -> default. Anything else (NaN, 2, -0.1, "half") is ErrorCode::invalid_input
// naming the variable and the value.
Result<double> get_fraction(const EnvVar& var);

// Whether the variable's current value is acceptable for its type (an unset variable is).
Status check_value(const EnvVar& var);

// Strict mode (JITCACHE_STRICT): warnings that matter become errors. A value that is not
// a boolean is an error (ErrorCode::invalid_input listing the accepted values), never a
// silent "off": a deployment that asked for strictness must not run without it.
Result<bool> strict_mode();

// The checks every entry point runs once at startup, before any work (the CLI after
// parsing its arguments, Runtime::open, resolve_scales): JITCACHE_STRICT must parse;
// JITCACHE_LOG_LEVEL must be a log level (else a warning, once per process, or an error in
// strict mode); set JITCACHE_* / VLLM_NVFP4_MLA_* variables that are not declared (see
// check_unknown_vars). Errors are ErrorCode::invalid_input.
Status check_startup();

// Prefixes owned by jitcache: a set variable under one of them that is not declared is
// almost certainly a typo of one that is.
std::span<const std::string_view> owned_prefixes();

// Set variables under an owned prefix that are not declared, each with a did-you-mean
// suggestion. `environ_entries` ("NAME=value") defaults to the process environment.
struct UnknownVar {
  std::string name;
  std::string suggestion;  // closest declared name, or empty
};
std::vector<UnknownVar> unknown_prefixed_vars();
std::vector<UnknownVar> unknown_prefixed_vars(std::span<const std::string> environ_entries);

// Logs a warning per unknown variable (each name once per process); in strict mode returns
// an error (ErrorCode::invalid_input) naming all of them instead.
Status check_unknown_vars();

}  // namespace jitcache::env
