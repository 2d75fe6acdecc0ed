// The kernel cache as the CLI's commands open it (the runtime's one factory,
// runtime/compile/open_kernel_cache.hpp): the --cache-dir directory, and the remote tier
// from --remote, else JITCACHE_REMOTE, unless the command works on this machine's cache only.
#pragma once

#include <utility>

#include "runtime/compile/open_kernel_cache.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {

inline Result<OpenedKernelCache> open_command_cache(const GlobalOptions& global,
                                                    RemoteUse remote = RemoteUse::from_environment,
                                                    cache::StoreOptions store = {}) {
  KernelCacheOptions options;
  options.cache_dir = global.cache_dir;
  options.store = std::move(store);
  options.remote = remote;
  if (remote != RemoteUse::off && !global.remote.empty()) options.remote_url = global.remote;
  return open_kernel_cache(options);
}

}  // namespace jitcache::cli
