// What the C ABI tests share: a runtime's options as most of them open one.
#pragma once

#include "jitcache/jitcache.h"

namespace jitcache::testing {

// Initialised options for a runtime on `cache_dir` (which must outlive the open) without a
// device (JITCACHE_DEVICE_NONE); a test sets what else it needs before jitcache_runtime_open.
inline jitcache_runtime_options deviceless_runtime_options(const char* cache_dir) {
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  options.cache_dir = cache_dir;
  options.device = JITCACHE_DEVICE_NONE;
  return options;
}

}  // namespace jitcache::testing
