#include "runtime/runtime_stats.hpp"

#include <nlohmann/json.hpp>

#include "cache/metrics.hpp"
#include "cache/report.hpp"

namespace jitcache {

std::string runtime_stats_json(cache::Store& store, const CacheStatus& status) {
  const std::string dir = status.dir.string();
  // One snapshot, so that "session" and the metrics agree while other threads count.
  const cache::Counters session = store.session_counters();
  std::vector<cache::MetricFamily> families = cache::counter_metrics(session, cache::CounterScope::process, dir);
  nlohmann::ordered_json doc{{"cache_dir", dir},
                             {"mode", to_string(status.mode)},
                             {"session", cache::counters_json(session)},
                             {"cache", nullptr}};
  if (store.mode() != cache::StoreMode::memory_only) {
    auto stats = store.stats();
    if (stats) {
      doc["cache"] = {{"entries", stats->entries}, {"bytes", stats->bytes}, {"max_bytes", stats->max_bytes}};
      for (cache::MetricFamily& gauge : cache::size_metrics(*stats, dir)) families.push_back(std::move(gauge));
    } else {
      doc["cache_error"] = stats.error().to_string();
    }
  }
  doc["metrics"] = cache::metrics_json(families);
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace jitcache
