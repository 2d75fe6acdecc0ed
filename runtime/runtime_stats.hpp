// The figures of a runtime's cache as one JSON document (Runtime::stats_json,
// jitcache_runtime_stats): the store's session counters (this process), the cache
// directory's size (every process) and both as Prometheus metric families.
#pragma once

#include <string>

#include "cache/store.hpp"
#include "jitcache/runtime.hpp"

namespace jitcache {

// {"cache_dir", "mode", "session": {counters as `jitcache stats --json` names them},
//  "cache": {"entries", "bytes", "max_bytes"} | null, ["cache_error": why null],
//  "metrics": cache::metrics_json of the session's counters (scope "process") and, when
//             "cache" is not null, the size gauges}
// The index is read for the size; a failure to read it is no failure of this call: "cache"
// is null and "cache_error" says why. Memory-only: "cache" is null, no "cache_error".
std::string runtime_stats_json(cache::Store& store, const CacheStatus& status);

}  // namespace jitcache
