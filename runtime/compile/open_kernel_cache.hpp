// One way to open the kernel cache, for the runtime, the CLI and the benchmarks alike: the
// store under the resolved cache directory (runtime/compile/cache_dir.hpp), the shared
// remote tier when one is configured (remote/remote_tier.hpp), the NVRTC compiler with its
// fingerprint memo in that directory, and the KernelCache joining them.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "remote/remote_tier.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {

// What open_kernel_cache does with a directory that cannot be resolved or opened.
//   fail         return the error (the CLI commands whose job is the cache)
//   memory_only  open a memory-only store and say why (the runtime: a cache is an
//                optimisation, never a reason for the engine not to start)
enum class UnusableCache { fail, memory_only };

// Whether the remote tier may be used: from_environment (remote_url, else JITCACHE_REMOTE,
// with a fleet key) or off (commands that must not touch a shared store). `unusable` is
// about the directory only: a remote configuration that cannot be used is always one
// warning and a kernel cache without the remote, never an error.
enum class RemoteUse { from_environment, off };

// Whether cache providers (installed, read-only directories of prebuilt kernels:
// runtime/compile/cache_provider.hpp) are asked: from_environment (JITCACHE_PROVIDERS, then
// KernelCacheOptions::providers) or off (commands that must see the local cache alone).
enum class ProviderUse { from_environment, off };

struct KernelCacheOptions {
  // An explicit directory (--cache-dir, the API's cache_dir); absent: the other rules of
  // resolve_cache_dir (JITCACHE_DIR, XDG_CACHE_HOME, HOME). Given empty: an error, also
  // with UnusableCache::memory_only (the caller's mistake, not an unusable directory).
  std::optional<std::filesystem::path> cache_dir;
  cache::StoreOptions store;
  UnusableCache unusable = UnusableCache::fail;
  RemoteUse remote = RemoteUse::from_environment;
  // An explicit remote (--remote, RuntimeOptions::remote); empty: JITCACHE_REMOTE.
  std::optional<std::string> remote_url;
  std::string remote_url_source = "--remote";  // where remote_url came from, for messages
  ProviderUse provider_use = ProviderUse::from_environment;
  // Provider directories besides JITCACHE_PROVIDERS (RuntimeOptions::providers).
  std::vector<std::filesystem::path> providers;
  // No-compile mode (kernel_cache.hpp, NoCompile); unset: JITCACHE_NO_COMPILE (a boolean;
  // a value that is not one is ErrorCode::invalid_input naming it).
  std::optional<bool> no_compile;
};

// The parts, owned together; `kernels` refers to `*store` and `*compiler`.
struct OpenedKernelCache {
  // The store's root; else the directory that was resolved but could not be used; else empty.
  std::filesystem::path dir;
  // Set when the store is memory-only because the directory could not be used: why.
  std::optional<Error> unusable;
  // The remote tier in the store, when one is configured and usable; shared with the store.
  std::shared_ptr<remote::RemoteTier> remote;
  // The provider tiers in the store, in lookup order (after the disk, before the remote).
  std::vector<std::shared_ptr<ProviderTier>> providers;
  std::unique_ptr<cache::Store> store;
  // Remembers its fingerprint in the cache directory, so a fresh process skips the
  // fingerprint compile; a memory-only store's refused directory is not read at all.
  std::unique_ptr<Compiler> compiler;
  std::unique_ptr<KernelCache> kernels;
  NoCompile no_compile = NoCompile::no;  // as resolved; the kernel cache's and the source cache's
};

Result<OpenedKernelCache> open_kernel_cache(const KernelCacheOptions& options);

}  // namespace jitcache
