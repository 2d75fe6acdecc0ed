// The remote tier's settings, from the environment (support/env.cpp declares every
// variable) and the options of the same meaning (--remote, RuntimeOptions::remote).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"
#include "remote/remote_tier.hpp"

namespace jitcache::remote {

inline constexpr std::size_t k_min_fleet_key_bytes = 32;

// The fleet key from JITCACHE_REMOTE_KEY_FILE (>= 32 bytes, a private regular file of
// this user: support/secret_file.hpp); std::nullopt when the variable is unset.
Result<std::optional<std::string>> load_fleet_key();

// The options of the remote tier, when one is configured: `url` when given, else
// JITCACHE_REMOTE. std::nullopt when neither names one, or when no fleet key is configured
// (a node without a key does not use the remote: one warning per process). An error for
// a malformed URL, an unusable key or password file, or a bad timeout.
// `source` names where `url` came from in messages ("--remote", "RuntimeOptions::remote").
Result<std::optional<RemoteTierOptions>> remote_options(const std::optional<std::string>& url,
                                                        std::string_view source = "--remote");

// The same without the fleet key (fleet_key left empty) and without its warning: for
// `jitcache remote status`, which reaches the server and reports a missing key itself.
Result<std::optional<RemoteTierOptions>> remote_settings(const std::optional<std::string>& url,
                                                         std::string_view source = "--remote");

}  // namespace jitcache::remote
