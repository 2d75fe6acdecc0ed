#include "runtime/compile/open_kernel_cache.hpp"

#include <algorithm>
#include <map>

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

// The provider tiers the options ask for. A provider is never required either: a fleet key
// file that cannot be read means no signature could be checked, so no provider is used
// (one warning); a provider that is missing or refused is its own warning, at first use.
std::vector<std::shared_ptr<ProviderTier>> open_providers(const KernelCacheOptions& options) {
  std::vector<std::shared_ptr<ProviderTier>> tiers;
  if (options.provider_use == ProviderUse::off) return tiers;
  const std::vector<std::filesystem::path> dirs = provider_dirs(options.providers);
  if (dirs.empty()) return tiers;
  auto key = remote::load_fleet_key();
  if (!key) {
    log_warning("cache providers not used: " + key.error().to_string() +
                " (a provider's signature cannot be checked without the fleet key)");
    return tiers;
  }
  for (const auto& dir : dirs) tiers.push_back(std::make_shared<ProviderTier>(dir, *key, check_stored_content));
  return tiers;
}

// The NVRTC builds the providers' kernels were compiled with, the one most of them name first.
std::vector<NvrtcOptions::StandIn> nvrtc_builds_of(const std::vector<std::shared_ptr<ProviderTier>>& providers) {
  struct Count {
    std::size_t entries = 0;
    std::string origin;
  };
  std::map<std::pair<std::string, std::string>, Count> counts;
  for (const auto& provider : providers) {
    const ProviderManifest* manifest = provider->manifest();
    if (manifest == nullptr) continue;
    for (const ProviderItem& item : manifest->items) {
      const auto compiler = item.facts.get("compiler");
      const auto version = item.facts.get("compiler_version");
      const auto fingerprint = item.facts.get("compiler_fingerprint");
      if (!compiler || *compiler != "nvrtc" || !version || !fingerprint) continue;
      Count& count = counts[{std::string(*version), std::string(*fingerprint)}];
      if (count.entries++ == 0) count.origin = "cache provider " + provider->dir().string();
    }
  }
  std::vector<std::pair<std::size_t, NvrtcOptions::StandIn>> ranked;
  for (const auto& [build, count] : counts)
    ranked.push_back({count.entries, NvrtcOptions::StandIn{build.first, build.second, count.origin}});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<NvrtcOptions::StandIn> builds;
  for (auto& [entries, build] : ranked) builds.push_back(std::move(build));
  return builds;
}

}  // namespace

Result<OpenedKernelCache> open_kernel_cache(const KernelCacheOptions& options) {
  OpenedKernelCache opened;
  const bool no_compile = options.no_compile ? *options.no_compile : JC_TRY(env::get_bool(env::jitcache_no_compile));
  opened.no_compile = no_compile ? NoCompile::yes : NoCompile::no;
  opened.remote = open_remote(options);
  opened.providers = open_providers(options);
  cache::StoreOptions store_options = options.store;
  for (const auto& provider : opened.providers) store_options.extra_tiers.push_back(provider);
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
  if (!opened.providers.empty()) nvrtc.provider_builds = [providers = opened.providers] {
    return nvrtc_builds_of(providers);
  };
  opened.compiler = make_nvrtc_compiler(std::move(nvrtc));
  opened.kernels = std::make_unique<KernelCache>(*opened.store, *opened.compiler, opened.no_compile);
  return opened;
}

}  // namespace jitcache
