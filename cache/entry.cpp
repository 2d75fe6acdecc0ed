#include "cache/entry.hpp"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace jitcache::cache {

bool compile_ms_in_range(double ms) { return std::isfinite(ms) && ms >= 0 && ms <= k_max_compile_ms; }

bool entry_size_in_range(std::uint64_t bytes) { return bytes <= k_max_entry_bytes; }

bool facts_json_in_rule(std::string_view text) {
  const auto facts = nlohmann::json::parse(text, nullptr, false);
  return !facts.is_discarded() && facts.is_object();
}

Status check_incoming_fields(const IncomingFields& fields) {
  auto broken = [](std::string_view field, const std::string& value, std::string_view rule) {
    return make_error(ErrorCode::invalid_input,
                      std::string(field) + ": " + value + " is not " + std::string(rule));
  };
  if (!entry_size_in_range(fields.size)) return broken("size", std::to_string(fields.size), k_entry_size_rule);
  if (!compile_ms_in_range(fields.compile_ms)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", fields.compile_ms);
    return broken("compile_ms", shown, k_compile_ms_rule);
  }
  if (!fields.facts_json.empty() && !facts_json_in_rule(fields.facts_json))
    return broken("facts", "the text given", k_facts_json_rule);
  return {};
}

Counters& Counters::operator+=(const Counters& other) {
#define JC_COUNTER_ADD(member, type, json, text_row, text_part, description) member += other.member;
  JC_CACHE_COUNTERS(JC_COUNTER_ADD)
#undef JC_COUNTER_ADD
  return *this;
}

double counter_value(const CounterField& field, const Counters& counters) {
  switch (field.kind) {
    case CounterKind::count: return static_cast<double>(counters.*field.count);
    case CounterKind::milliseconds: return counters.*field.milliseconds;
  }
  return 0;
}

}  // namespace jitcache::cache
