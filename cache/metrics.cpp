#include "cache/metrics.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "support/enum_names.hpp"

namespace jitcache::cache {
namespace {

constexpr std::string_view k_prefix = "jitcache_";
constexpr std::string_view k_hits = "hits";
constexpr std::string_view k_ms_suffix = "_ms";

std::vector<std::string_view> path_parts(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::size_t slash; (slash = path.find('/')) != std::string_view::npos; path.remove_prefix(slash + 1))
    parts.push_back(path.substr(0, slash));
  parts.push_back(path);
  return parts;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// The shortest text that reads back as the same double ("3", "0.25", "1e+15").
std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

std::string escaped(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

MetricFamily& family_named(std::vector<MetricFamily>& families, const std::string& name, MetricType type) {
  for (MetricFamily& family : families)
    if (family.name == name) return family;
  families.push_back(MetricFamily{name, type, "", {}});
  return families.back();
}

}  // namespace

const char* to_string(MetricType type) { return enum_name(type, {"counter", "gauge"}); }

const char* to_string(CounterScope scope) { return enum_name(scope, {"cache", "process"}); }

CounterMetric counter_metric(const CounterField& field) {
  std::vector<std::string_view> parts = path_parts(field.json);
  CounterMetric metric;
  if (parts.size() == 2 && (parts[0] == k_hits || parts[1] == k_hits)) {
    metric.tier = std::string(parts[0] == k_hits ? parts[1] : parts[0]);
    parts = {k_hits};
  }
  std::string name(k_prefix);
  bool seconds = false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) name += '_';
    std::string_view part = parts[i];
    if (field.kind == CounterKind::milliseconds && !seconds && ends_with(part, k_ms_suffix)) {
      part.remove_suffix(k_ms_suffix.size());
      name.append(part).append("_seconds");
      seconds = true;
      continue;
    }
    name.append(part);
  }
  if (field.kind == CounterKind::milliseconds) {
    if (!seconds) name += "_seconds";
    metric.factor = 0.001;
  }
  metric.family = name + "_total";
  return metric;
}

std::vector<MetricFamily> counter_metrics(const Counters& counters, CounterScope scope, std::string_view cache_dir) {
  std::vector<MetricFamily> families;
  for (const CounterField& field : k_counter_fields) {
    const CounterMetric metric = counter_metric(field);
    MetricFamily& family = family_named(families, metric.family, MetricType::counter);
    MetricSample sample;
    sample.labels = {{"cache_dir", std::string(cache_dir)}, {"scope", to_string(scope)}};
    if (!metric.tier.empty()) sample.labels.push_back({"tier", metric.tier});
    sample.value = counter_value(field, counters) * metric.factor;
    family.samples.push_back(std::move(sample));
    // One counter: its own description. Several (the tiers of hits): each one's, by tier.
    const std::string unit = field.kind == CounterKind::milliseconds ? " (seconds)" : "";
    if (metric.tier.empty()) {
      family.help = std::string(field.description) + unit;
    } else {
      family.help += family.help.empty() ? "lookups served by each tier (label tier): " : "; ";
      family.help.append(metric.tier).append(": ").append(field.description).append(unit);
    }
  }
  return families;
}

std::vector<MetricFamily> size_metrics(const Stats& stats, std::string_view cache_dir) {
  const std::vector<MetricLabel> labels = {{"cache_dir", std::string(cache_dir)}};
  auto gauge = [&](const char* name, const char* help, std::uint64_t value) {
    return MetricFamily{name, MetricType::gauge, help, {MetricSample{labels, static_cast<double>(value)}}};
  };
  return {gauge("jitcache_cache_entries", "entries in the cache directory's index", stats.entries),
          gauge("jitcache_cache_bytes", "bytes of the entries in the cache directory", stats.bytes),
          gauge("jitcache_cache_max_bytes", "the cache directory's size cap in bytes", stats.max_bytes)};
}

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string prometheus_text(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& family : families) {
    out.append("# HELP ").append(family.name).append(" ").append(escaped(family.help, false)).append("\n");
    out.append("# TYPE ").append(family.name).append(" ").append(to_string(family.type)).append("\n");
    for (const MetricSample& sample : family.samples) {
      out.append(family.name);
      if (!sample.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < sample.labels.size(); ++i) {
          if (i > 0) out += ',';
          out.append(sample.labels[i].name).append("=\"").append(escaped(sample.labels[i].value, true)).append("\"");
        }
        out += '}';
      }
      out.append(" ").append(number(sample.value)).append("\n");
    }
  }
  return out;
}

nlohmann::ordered_json metrics_json(const std::vector<MetricFamily>& families) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const MetricFamily& family : families) {
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    for (const MetricSample& sample : family.samples) {
      nlohmann::ordered_json labels = nlohmann::ordered_json::object();
      for (const MetricLabel& label : sample.labels) labels[label.name] = label.value;
      samples.push_back({{"labels", labels}, {"value", sample.value}});
    }
    list.push_back({{"name", family.name}, {"type", to_string(family.type)}, {"help", family.help}, {"samples", samples}});
  }
  return list;
}

}  // namespace jitcache::cache
