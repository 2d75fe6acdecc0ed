// The store's figures as Prometheus metrics (cache/metrics.hpp). The rules are checked for
// every row of k_counter_fields, so a counter added there is covered here without a line
// added by hand; the golden names pin today's public ones.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "cache/metrics.hpp"

namespace jitcache::cache {
namespace {

// A different value per counter; milliseconds with a fraction.
Counters distinct_counters() {
  Counters counters;
  std::uint64_t n = 0;
  for (const CounterField& field : k_counter_fields) {
    ++n;
    switch (field.kind) {
      case CounterKind::count: counters.*field.count = 1000 * n + 7; break;
      case CounterKind::milliseconds: counters.*field.milliseconds = 250.0 * static_cast<double>(n) + 0.5; break;
    }
  }
  return counters;
}

const MetricLabel* label(const MetricSample& sample, std::string_view name) {
  for (const MetricLabel& l : sample.labels)
    if (l.name == name) return &l;
  return nullptr;
}

TEST(MetricsTest, EveryCounterHasAValidUniqueCounterName) {
  std::set<std::pair<std::string, std::string>> seen;  // (family, tier)
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    const CounterMetric metric = counter_metric(field);
    EXPECT_TRUE(valid_metric_name(metric.family)) << metric.family;
    EXPECT_TRUE(metric.family.starts_with("jitcache_")) << metric.family;
    EXPECT_TRUE(metric.family.ends_with("_total")) << metric.family;
    EXPECT_EQ(metric.family.find("_ms"), std::string::npos) << "Prometheus counts time in seconds";
    EXPECT_EQ(metric.factor, field.kind == CounterKind::milliseconds ? 0.001 : 1.0);
    if (field.kind == CounterKind::milliseconds) {
      EXPECT_NE(metric.family.find("_seconds"), std::string::npos);
    }
    EXPECT_TRUE(seen.insert({metric.family, metric.tier}).second) << "two counters in one series";
  }
}

// Today's names: what dashboards and alerts are written against (docs/metrics.md).
TEST(MetricsTest, TodaysCountersHaveTheDocumentedNames) {
  std::map<std::string, std::string> names;
  for (const CounterField& field : k_counter_fields) {
    const CounterMetric metric = counter_metric(field);
    names[std::string(field.name)] = metric.family + (metric.tier.empty() ? "" : "{tier=" + metric.tier + "}");
  }
  const std::map<std::string, std::string> expected = {
      {"memory_hits", "jitcache_hits_total{tier=memory}"},
      {"disk_hits", "jitcache_hits_total{tier=disk}"},
      {"remote_hits", "jitcache_hits_total{tier=remote}"},
      {"coalesced", "jitcache_coalesced_total"},
      {"misses", "jitcache_misses_total"},
      {"produces", "jitcache_compiles_total"},
      {"produce_failures", "jitcache_compile_failures_total"},
      {"compile_ms_spent", "jitcache_compile_seconds_spent_total"},
      {"compile_ms_saved", "jitcache_compile_seconds_saved_total"},
      {"quarantined", "jitcache_quarantined_total"},
      {"evicted", "jitcache_evicted_total"},
      {"remote_misses", "jitcache_remote_misses_total"},
      {"remote_rejects", "jitcache_remote_rejected_total"},
      {"remote_uploads", "jitcache_remote_uploads_total"},
      {"remote_lease_waits", "jitcache_remote_lease_waits_total"},
      {"remote_errors", "jitcache_remote_errors_total"},
  };
  for (const auto& [member, name] : expected) {
    ASSERT_TRUE(names.contains(member)) << member;
    EXPECT_EQ(names[member], name) << member;
  }
}

// A counter added later under "hits/<tier>" or "<tier>/hits" is one more tier of the hits
// family; one under any other path is a family of its own.
TEST(MetricsTest, TheNamingRuleCoversCountersNotYetInTheTable) {
  auto field = [](std::string_view json, CounterKind kind) {
    return CounterField{"x", kind, nullptr, nullptr, json, "row", "{}", "what it counts"};
  };
  EXPECT_EQ(counter_metric(field("hits/provider", CounterKind::count)).family, "jitcache_hits_total");
  EXPECT_EQ(counter_metric(field("hits/provider", CounterKind::count)).tier, "provider");
  EXPECT_EQ(counter_metric(field("provider/hits", CounterKind::count)).tier, "provider");
  EXPECT_EQ(counter_metric(field("provider_hits", CounterKind::count)).family, "jitcache_provider_hits_total");
  EXPECT_EQ(counter_metric(field("verify/failures", CounterKind::count)).family, "jitcache_verify_failures_total");
  EXPECT_EQ(counter_metric(field("lock_wait_ms", CounterKind::milliseconds)).family,
            "jitcache_lock_wait_seconds_total");
  EXPECT_EQ(counter_metric(field("waited", CounterKind::milliseconds)).family, "jitcache_waited_seconds_total");
}

TEST(MetricsTest, CounterFamiliesHoldEveryCounterInSecondsWithScopeAndDirectory) {
  const Counters counters = distinct_counters();
  const auto families = counter_metrics(counters, CounterScope::process, "/var/cache/jc");
  std::size_t samples = 0;
  for (const MetricFamily& family : families) {
    EXPECT_EQ(family.type, MetricType::counter);
    EXPECT_FALSE(family.help.empty()) << family.name;
    samples += family.samples.size();
  }
  EXPECT_EQ(samples, k_counter_fields.size());
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    const CounterMetric metric = counter_metric(field);
    const MetricSample* found = nullptr;
    for (const MetricFamily& family : families)
      if (family.name == metric.family)
        for (const MetricSample& sample : family.samples) {
          const MetricLabel* tier = label(sample, "tier");
          if ((tier ? tier->value : "") == metric.tier) found = &sample;
        }
    ASSERT_NE(found, nullptr);
    EXPECT_DOUBLE_EQ(found->value, counter_value(field, counters) * metric.factor);
    ASSERT_NE(label(*found, "scope"), nullptr);
    EXPECT_EQ(label(*found, "scope")->value, "process");
    ASSERT_NE(label(*found, "cache_dir"), nullptr);
    EXPECT_EQ(label(*found, "cache_dir")->value, "/var/cache/jc");
    for (const MetricLabel& l : found->labels) EXPECT_TRUE(valid_label_name(l.name)) << l.name;
  }
}

TEST(MetricsTest, SizeGaugesCarryTheDirectoryOnly) {
  Stats stats;
  stats.entries = 12;
  stats.bytes = 3456789;
  stats.max_bytes = 2ull << 30;
  const auto gauges = size_metrics(stats, "/c");
  ASSERT_EQ(gauges.size(), 3u);
  std::map<std::string, double> values;
  for (const MetricFamily& g : gauges) {
    EXPECT_EQ(g.type, MetricType::gauge);
    EXPECT_TRUE(valid_metric_name(g.name));
    ASSERT_EQ(g.samples.size(), 1u);
    EXPECT_EQ(g.samples[0].labels, (std::vector<MetricLabel>{{"cache_dir", "/c"}}));
    values[g.name] = g.samples[0].value;
  }
  EXPECT_EQ(values["jitcache_cache_entries"], 12);
  EXPECT_EQ(values["jitcache_cache_bytes"], 3456789);
  EXPECT_EQ(values["jitcache_cache_max_bytes"], static_cast<double>(2ull << 30));
}

TEST(MetricsTest, NameRulesArePrometheus) {
  for (const char* good : {"jitcache_hits_total", "a", "_x", "ns:sub_total", "A9"})
    EXPECT_TRUE(valid_metric_name(good)) << good;
  for (const char* bad : {"", "9a", "jitcache-hits", "hits total", "h\xc3\xa9"}) EXPECT_FALSE(valid_metric_name(bad)) << bad;
  for (const char* good : {"tier", "cache_dir", "_x", "a9"}) EXPECT_TRUE(valid_label_name(good)) << good;
  for (const char* bad : {"", "__name__", "9a", "ns:tier", "a-b"}) EXPECT_FALSE(valid_label_name(bad)) << bad;
}

TEST(MetricsTest, TextFormatEscapesHelpAndLabelValues) {
  const std::vector<MetricFamily> families = {
      {"jitcache_x_total", MetricType::counter, "a \\ and\na line", {{{{"cache_dir", "/a\"b\\c\nd"}}, 3}}},
      {"jitcache_y", MetricType::gauge, "g", {{{}, 0.25}, {{{"tier", "disk"}}, 1e15}}},
  };
  EXPECT_EQ(prometheus_text(families),
            "# HELP jitcache_x_total a \\\\ and\\na line\n"
            "# TYPE jitcache_x_total counter\n"
            "jitcache_x_total{cache_dir=\"/a\\\"b\\\\c\\nd\"} 3\n"
            "# HELP jitcache_y g\n"
            "# TYPE jitcache_y gauge\n"
            "jitcache_y 0.25\n"
            "jitcache_y{tier=\"disk\"} 1e+15\n");
}

TEST(MetricsTest, JsonFormHoldsTheSameFamilies) {
  const auto families = counter_metrics(distinct_counters(), CounterScope::cache, "/c");
  const auto doc = metrics_json(families);
  ASSERT_EQ(doc.size(), families.size());
  for (std::size_t i = 0; i < families.size(); ++i) {
    EXPECT_EQ(doc[i]["name"], families[i].name);
    EXPECT_EQ(doc[i]["type"], "counter");
    EXPECT_EQ(doc[i]["help"], families[i].help);
    ASSERT_EQ(doc[i]["samples"].size(), families[i].samples.size());
    for (std::size_t j = 0; j < families[i].samples.size(); ++j) {
      EXPECT_EQ(doc[i]["samples"][j]["value"].get<double>(), families[i].samples[j].value);
      EXPECT_EQ(doc[i]["samples"][j]["labels"]["scope"], "cache");
    }
  }
}

}  // namespace
}  // namespace jitcache::cache
