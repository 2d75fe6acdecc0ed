#include "runtime/compile/manifest_fields.hpp"

#include "support/sha256.hpp"

namespace jitcache {

nlohmann::ordered_json manifest_entry_json(const ExportEntry& e, WithSha256 sha256) {
  nlohmann::ordered_json entry = {{"key", e.key.to_hex()},
                                  {"label", e.label},
                                  {"facts", nlohmann::ordered_json::parse(e.facts.to_json())},
                                  {"digest", cache::BlobDigest::of(*e.bytes).to_hex()}};
  if (sha256 == WithSha256::yes)
    entry["sha256"] = sha256_hex(std::string_view(reinterpret_cast<const char*>(e.bytes->data()), e.bytes->size()));
  entry["size"] = e.bytes->size();
  entry["compile_ms"] = e.compile_ms;
  return entry;
}

Result<std::string> ManifestFields::string(const char* name) const {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return refuse(where + name + ": missing or not a string");
  return it->get<std::string>();
}

Result<std::vector<std::string>> ManifestFields::strings(const char* name) const {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_array()) return refuse(where + name + ": missing or not an array");
  std::vector<std::string> values;
  for (const auto& value : *it) {
    if (!value.is_string()) return refuse(where + name + ": not all strings");
    values.push_back(value.get<std::string>());
  }
  return values;
}

Result<const nlohmann::json*> ManifestFields::array(const char* name, std::size_t limit) const {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_array()) return refuse(where + name + ": missing or not an array");
  if (it->size() > limit)
    return refuse(where + name + ": " + std::to_string(it->size()) + " entries exceed the limit of " +
                  std::to_string(limit));
  return &*it;
}

}  // namespace jitcache
