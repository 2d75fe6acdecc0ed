// The store's figures as Prometheus metric families, and their text exposition format
// (version 0.0.4). Derived from k_counter_fields (cache/entry.hpp): a counter added to
// JC_CACHE_COUNTERS becomes a metric without a line here. docs/metrics.md lists the names.
//
// Naming, from a counter's JSON path (its `json` column):
//   - a path of two parts one of which is "hits" ("hits/disk", "remote/hits"): the family
//     jitcache_hits_total, the other part as the label `tier`;
//   - any other path: jitcache_<parts joined by '_'>_total ("remote/errors":
//     jitcache_remote_errors_total);
//   - a counter in milliseconds is exposed in seconds: its part "<x>_ms" becomes
//     "<x>_seconds" ("compile_ms/spent": jitcache_compile_seconds_spent_total), or
//     "_seconds" is appended when no part ends in "_ms".
// Every counter sample carries `cache_dir` and `scope` (CounterScope); the size gauges
// carry `cache_dir` only: the cache's size is the same whoever reads it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/disk_tier.hpp"
#include "cache/entry.hpp"

namespace jitcache::cache {

enum class MetricType { counter, gauge };
const char* to_string(MetricType type);

struct MetricLabel {
  std::string name;
  std::string value;
  friend bool operator==(const MetricLabel&, const MetricLabel&) = default;
};

struct MetricSample {
  std::vector<MetricLabel> labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;  // as exposed; a counter's ends in "_total"
  MetricType type = MetricType::counter;
  std::string help;
  std::vector<MetricSample> samples;
};

// Whose figures a counter sample holds, its `scope` label: the cache's (the index's
// cumulative counters, every process that used the directory: `jitcache stats`), or one
// process's (what its runtimes' stores did since they opened: the Python collector).
enum class CounterScope { cache, process };
const char* to_string(CounterScope scope);

// Where one counter goes.
struct CounterMetric {
  std::string family;  // e.g. "jitcache_hits_total"
  std::string tier;    // the `tier` label; empty: none
  double factor = 1;   // the exposed value is the counter's times this (ms to s: 0.001)
};
CounterMetric counter_metric(const CounterField& field);

// One family per metric name, in k_counter_fields' order; the hits of every tier are the
// samples of one family.
std::vector<MetricFamily> counter_metrics(const Counters& counters, CounterScope scope, std::string_view cache_dir);
// jitcache_cache_entries, jitcache_cache_bytes, jitcache_cache_max_bytes (gauges).
std::vector<MetricFamily> size_metrics(const Stats& stats, std::string_view cache_dir);

// Prometheus' rules: a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*, a label name
// [a-zA-Z_][a-zA-Z0-9_]* and does not begin with "__" (reserved).
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

// The text exposition format: per family "# HELP", "# TYPE" and one line per sample; help
// and label values escaped (backslash, newline, and in label values the double quote).
std::string prometheus_text(const std::vector<MetricFamily>& families);
// [{"name", "type" ("counter" | "gauge"), "help", "samples": [{"labels": {name: value}, "value"}]}]
nlohmann::ordered_json metrics_json(const std::vector<MetricFamily>& families);

}  // namespace jitcache::cache
