#include "remote/remote_names.hpp"

#include <algorithm>

namespace jitcache::remote {
namespace {

constexpr std::string_view k_version = "v1";

bool all_of(std::string_view text, bool (*ok)(char)) { return std::all_of(text.begin(), text.end(), ok); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_lower_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

// The canonical (lowercase) spelling only: a signature covers the exact name.
std::optional<cache::CacheKey> canonical_key(std::string_view id) {
  if (id.size() != cache::k_hash_hex_chars || !all_of(id, is_lower_hex)) return std::nullopt;
  auto key = cache::CacheKey::from_hex(id);
  return key ? std::optional<cache::CacheKey>(*key) : std::nullopt;
}

}  // namespace

ParsedName parse_name(std::string_view prefix, std::string_view name) {
  ParsedName parsed;
  if (!name.starts_with(prefix)) return parsed;
  const std::string_view tail = name.substr(prefix.size());
  const std::size_t first = tail.find(':');
  if (first == std::string_view::npos) return parsed;
  const std::size_t second = tail.find(':', first + 1);
  if (second == std::string_view::npos || tail.find(':', second + 1) != std::string_view::npos) return parsed;
  const std::string_view version = tail.substr(0, first);
  const std::string_view kind = tail.substr(first + 1, second - first - 1);
  const std::string_view id = tail.substr(second + 1);
  if (version.size() < 2 || version[0] != 'v' || !all_of(version.substr(1), is_digit)) return parsed;
  if (kind.empty() || !all_of(kind, is_lower)) return parsed;
  if (version != k_version) {
    parsed.kind = NameKind::other_version;
    return parsed;
  }
  parsed.kind = NameKind::malformed;
  if (kind == "entry" || kind == "lease") {
    parsed.key = canonical_key(id);
    if (parsed.key) parsed.kind = kind == "entry" ? NameKind::entry : NameKind::lease;
  } else if (kind == "probe" && !id.empty() && all_of(id, is_lower_hex)) {
    parsed.kind = NameKind::probe;
  }
  return parsed;
}

std::string make_name(std::string_view prefix, std::string_view kind, std::string_view id) {
  std::string name(prefix);
  name.append(k_version).append(":").append(kind).append(":").append(id);
  return name;
}

}  // namespace jitcache::remote
