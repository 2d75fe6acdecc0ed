#include "runtime/compile/open_kernel_cache.hpp"

#include "runtime/compile/cache_dir.hpp"

namespace jitcache {

Result<OpenedKernelCache> open_kernel_cache(const KernelCacheOptions& options) {
  OpenedKernelCache opened;
  std::optional<std::filesystem::path> explicit_dir;
  if (!options.cache_dir.empty()) explicit_dir = options.cache_dir;
  auto dir = runtime::resolve_cache_dir(explicit_dir);
  Result<std::unique_ptr<cache::Store>> store =
      dir ? cache::Store::open(dir->path, options.store)
          : Result<std::unique_ptr<cache::Store>>(std::unexpected(dir.error()));
  if (store) {
    opened.store = std::move(*store);
    opened.dir = opened.store->root();
  } else if (options.unusable == UnusableCache::fail) {
    return std::unexpected(std::move(store.error()));
  } else {
    if (dir) opened.dir = dir->path;
    opened.unusable = std::move(store.error());
    opened.store = cache::Store::open_memory_only(options.store);
  }
  NvrtcOptions nvrtc;
  if (!opened.unusable) nvrtc.fingerprint_memo = opened.dir / k_fingerprint_memo_name;
  opened.compiler = make_nvrtc_compiler(std::move(nvrtc));
  opened.kernels = std::make_unique<KernelCache>(*opened.store, *opened.compiler);
  return opened;
}

}  // namespace jitcache
