// What the two manifests of verified entries, an export file's (cache_archive.hpp) and a
// provider's manifest.json (cache_provider.hpp), write and read alike: an entry's object,
// and the fields, each checked by type. A wrong field is refused through the reader's
// `refuse`, which names the file its own way, with `where`, the field's name and what is
// wrong ("manifest: targets: missing or not an array").
#pragma once

#include <cstddef>
#include <expected>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"
#include "runtime/compile/export_entry.hpp"

namespace jitcache {

enum class WithSha256 { no, yes };

// An entry as both manifests list it: key, label, facts, digest, the bundle's SHA-256 where
// `sha256` says (a provider's manifest has it), size, compile_ms; in that order.
nlohmann::ordered_json manifest_entry_json(const ExportEntry& entry, WithSha256 sha256);

struct ManifestFields {
  using Refuse = std::function<std::unexpected<Error>(const std::string& why)>;

  const nlohmann::json& object;
  std::string where;  // "manifest: ", "entry 3: ", "" (the message starts with the field)
  Refuse refuse;

  Result<std::string> string(const char* name) const;
  // An array of strings.
  Result<std::vector<std::string>> strings(const char* name) const;
  // An array of at most `limit` elements.
  Result<const nlohmann::json*> array(const char* name, std::size_t limit) const;
};

}  // namespace jitcache
