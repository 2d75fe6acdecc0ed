// The configured remote tier for the CLI's remote commands (remote status / push,
// audit --remote, clear --remote): from --remote, else JITCACHE_REMOTE, with the fleet
// key. Every way it can be missing or unusable is an environment error (exit 2).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "remote/remote_tier.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {

// Where the remote's URL comes from: "--remote", "JITCACHE_REMOTE", or empty for none.
std::string remote_source(const GlobalOptions& global);

// The tier, with no content check of its own (the commands check values themselves). On
// failure prints "jitcache: error: <command>: ..." and returns nullptr; the exit code is
// k_exit_usage.
std::unique_ptr<remote::RemoteTier> open_remote_tier(const GlobalOptions& global, std::string_view command);

}  // namespace jitcache::cli
