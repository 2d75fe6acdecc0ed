#include "cache/report.hpp"

#include <cstdio>
#include <ctime>
#include <string_view>

namespace jitcache::cache {

std::string format_time(std::int64_t unix_ms, TimeFormat format) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  if (::gmtime_r(&seconds, &utc) == nullptr) return "?";
  char buffer[40];
  if (format == TimeFormat::human) {
    std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &utc);
    return buffer;
  }
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &utc);
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return std::string(buffer) + millis;
}

nlohmann::ordered_json to_json(const EntryInfo& entry) {
  nlohmann::ordered_json facts = nlohmann::ordered_json::object();
  for (const auto& [name, value] : entry.facts.fields()) facts[name] = value;
  return {{"key", entry.key.to_hex()},
          {"digest", entry.digest.to_hex()},
          {"size", entry.size},
          {"key_schema", entry.key_schema},
          {"created", format_time(entry.created_ms, TimeFormat::iso)},
          {"last_used", format_time(entry.last_used_ms, TimeFormat::iso)},
          {"hits", entry.hits},
          {"compile_ms", entry.compile_ms},
          {"facts", facts}};
}

nlohmann::ordered_json to_json(const Stats& stats) {
  nlohmann::ordered_json doc{
      {"entries", stats.entries}, {"bytes", stats.bytes}, {"max_bytes", stats.max_bytes}};
  doc.update(counters_json(stats.totals));
  return doc;
}

nlohmann::ordered_json counters_json(const Counters& counters) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const CounterField& field : k_counter_fields) {
    // "hits/memory": the object "hits", made where the first of its counters comes.
    nlohmann::ordered_json* parent = &doc;
    std::string_view path = field.json;
    for (std::size_t slash; (slash = path.find('/')) != std::string_view::npos; path.remove_prefix(slash + 1))
      parent = &(*parent)[std::string(path.substr(0, slash))];
    nlohmann::ordered_json& value = (*parent)[std::string(path)];
    switch (field.kind) {
      case CounterKind::count: value = counters.*field.count; break;
      case CounterKind::milliseconds: value = counters.*field.milliseconds; break;
    }
  }
  return doc;
}

std::vector<std::pair<std::string, std::string>> counter_text_rows(const Counters& counters) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const CounterField& field : k_counter_fields) {
    std::string value;
    switch (field.kind) {
      case CounterKind::count: value = std::to_string(counters.*field.count); break;
      case CounterKind::milliseconds: {
        char seconds[64];
        std::snprintf(seconds, sizeof seconds, "%.1f", counters.*field.milliseconds / 1000);
        value = seconds;
        break;
      }
    }
    if (rows.empty() || rows.back().first != field.text_row) rows.emplace_back(field.text_row, "");
    const std::size_t slot = field.text_part.find("{}");
    rows.back()
        .second.append(field.text_part.substr(0, slot))
        .append(value)
        .append(field.text_part.substr(slot + 2));
  }
  return rows;
}

nlohmann::ordered_json to_json(const VerifyReport& report) {
  nlohmann::ordered_json bad = nlohmann::ordered_json::array();
  for (const VerifyFinding& f : report.bad)
    bad.push_back({{"key", f.key.to_hex()}, {"digest", f.digest.to_hex()}, {"problem", f.problem}});
  nlohmann::ordered_json quarantined = nlohmann::ordered_json::array();
  for (const IndexRecovery& q : report.index_quarantined)
    quarantined.push_back(
        {{"moved_to", q.moved_to.string()},
         {"entries", q.entries ? nlohmann::ordered_json(*q.entries) : nlohmann::ordered_json()},
         {"problem", q.problem},
         {"next", k_after_index_quarantine}});
  return {{"clean", report.clean()},
          {"checked", report.checked},
          {"bad", bad},
          {"integrity", report.integrity_problems},
          {"index_quarantined", quarantined},
          {"orphan_blobs", report.orphan_blobs}};
}

nlohmann::ordered_json to_json(const GcReport& report) {
  return {{"evicted_entries", report.evicted_entries}, {"evicted_bytes", report.evicted_bytes},
          {"orphan_blobs", report.orphan_blobs},       {"temp_files", report.temp_files},
          {"lock_files", report.lock_files},           {"quarantine_files", report.quarantine_files},
          {"bytes_after", report.bytes_after},         {"max_bytes", report.max_bytes}};
}

}  // namespace jitcache::cache
