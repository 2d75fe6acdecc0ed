#include "runtime/compile/open_kernel_cache.hpp"

#include "jitcache/log.hpp"
#include "remote/remote_config.hpp"
#include "runtime/compile/cache_dir.hpp"
#include "runtime/compile/source_cache.hpp"
#include "support/env.hpp"

namespace jitcache {

namespace {

// The remote tier the options ask for, or none. The remote is never required: a
// configuration that cannot be used (a malformed URL, an unusable key or password file, a
// bad timeout) is one warning and local-only operation, whatever the local cache's policy
// (`unusable`, JITCACHE_REQUIRE_CACHE) says. The commands whose job is the remote open it
// themselves and fail instead (tools/remote_cli.hpp).
std::shared_ptr<remote::RemoteTier> open_remote(const KernelCacheOptions& options) {
  if (options.remote == RemoteUse::off) return nullptr;
  auto settings = remote::remote_options(options.remote_url, options.remote_url_source);
  if (!settings) {
    log_warning("remote cache not used: " + settings.error().to_string() +
                "; running with the local cache only (the remote is never required)");
    return nullptr;
  }
  if (!*settings) return nullptr;
  (*settings)->check_content = check_stored_content;  // own kernels and source cache entries
  return std::make_shared<remote::RemoteTier>(std::move(**settings));
}

}  // namespace

Result<OpenedKernelCache> open_kernel_cache(const KernelCacheOptions& options) {
  OpenedKernelCache opened;
  const bool no_compile = options.no_compile ? *options.no_compile : JC_TRY(env::get_bool(env::jitcache_no_compile));
  opened.no_compile = no_compile ? NoCompile::yes : NoCompile::no;
  opened.remote = open_remote(options);
  cache::StoreOptions store_options = options.store;
  if (opened.remote) store_options.extra_tiers.push_back(opened.remote);
  auto dir = runtime::resolve_cache_dir(options.cache_dir);
  // An empty path given (or JITCACHE_DIR="") is a mistake to fix, never a memory-only start.
  if (!dir && dir.error().code == ErrorCode::invalid_argument) return std::unexpected(dir.error());
  Result<std::unique_ptr<cache::Store>> store =
      dir ? cache::Store::open(dir->path, store_options)
          : Result<std::unique_ptr<cache::Store>>(std::unexpected(dir.error()));
  if (store) {
    opened.store = std::move(*store);
    opened.dir = opened.store->root();
  } else if (options.unusable == UnusableCache::fail) {
    return std::unexpected(std::move(store.error()));
  } else {
    if (dir) opened.dir = dir->path;
    opened.unusable = std::move(store.error());
    opened.store = cache::Store::open_memory_only(store_options);
  }
  NvrtcOptions nvrtc;
  if (!opened.unusable) nvrtc.fingerprint_memo = opened.dir / k_fingerprint_memo_name;
  opened.compiler = make_nvrtc_compiler(std::move(nvrtc));
  opened.kernels = std::make_unique<KernelCache>(*opened.store, *opened.compiler, opened.no_compile);
  return opened;
}

}  // namespace jitcache
