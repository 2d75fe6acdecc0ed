#include "runtime/capi/schema_json.hpp"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace jitcache {
namespace {

// Parses `text`, or nullopt; `duplicate` names the first key given twice in one object
// ("facts.width" for a fact), which the parser alone would let the last one win.
std::optional<nlohmann::json> parse_unique_keys(const char* text, std::string& duplicate) {
  struct Object {
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Object> open;
  const auto watch = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second && duplicate.empty()) {
        for (std::size_t i = 0; i + 1 < open.size(); ++i) duplicate += open[i].last + ".";
        duplicate += key;
      }
      open.back().last = key;
    }
    return true;
  };
  auto json = nlohmann::json::parse(text, watch, false);
  if (json.is_discarded()) return std::nullopt;
  return json;
}

}  // namespace

Result<SpecSchema> read_schema(const char* self, const char* text) {
  const std::string what = std::string(self) + ": schema";
  std::string duplicate;
  const auto parsed = parse_unique_keys(text, duplicate);
  if (!parsed || !parsed->is_object()) return make_error(ErrorCode::invalid_argument, what + " is not a JSON object");
  if (!duplicate.empty())
    return make_error(ErrorCode::invalid_argument, what + ": key '" + duplicate + "' is given twice");
  const nlohmann::json& json = *parsed;
  for (const auto& [name, value] : json.items())
    if (name != "family" && name != "kind" && name != "facts")
      return make_error(ErrorCode::invalid_argument,
                        what + ": unknown field '" + name + "' (expected family, kind, facts)");
  SpecSchema schema;
  if (!json.contains("family") || !json["family"].is_string())
    return make_error(ErrorCode::invalid_argument, what + ": field 'family' is missing or not a string");
  schema.family = json["family"].get<std::string>();
  if (!json.contains("kind") || !json["kind"].is_string() || !parse_source_kind(json["kind"].get<std::string>()))
    return make_error(ErrorCode::invalid_argument, what + ": field 'kind' must be \"cuda\", \"nvvm\" or \"ptx\"");
  schema.kind = *parse_source_kind(json["kind"].get<std::string>());
  if (!json.contains("facts") || !json["facts"].is_object())
    return make_error(ErrorCode::invalid_argument, what + ": field 'facts' is missing or not an object");
  for (const auto& [name, values] : json["facts"].items()) {
    if (!values.is_array())
      return make_error(ErrorCode::invalid_argument,
                        what + ": field 'facts." + name + "' must be a list of allowed values ([] for any)");
    FactDomain domain;
    for (const auto& value : values) {
      if (!value.is_string())
        return make_error(ErrorCode::invalid_argument, what + ": field 'facts." + name + "' holds a non-string");
      domain.allowed.push_back(value.get<std::string>());
    }
    schema.facts.emplace(name, std::move(domain));
  }
  return schema;
}

}  // namespace jitcache
