#include "cache/facts.hpp"

#include <nlohmann/json.hpp>

#include "support/text.hpp"

namespace jitcache::cache {
namespace {

constexpr std::string_view k_magic = "jitcache.facts";

void append_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void append_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

bool is_valid_fact_name(std::string_view name) {
  if (name.empty() || name.size() > k_max_fact_name_chars) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Facts::Facts(std::initializer_list<Map::value_type> fields) {
  for (const auto& [name, value] : fields) m_fields.insert_or_assign(name, value);
}

Facts& Facts::set(std::string name, std::string value) {
  m_fields.insert_or_assign(std::move(name), std::move(value));
  return *this;
}

std::optional<std::string_view> Facts::get(std::string_view name) const {
  const auto it = m_fields.find(name);
  if (it == m_fields.end()) return std::nullopt;
  return std::string_view(it->second);
}

Status Facts::validate() const {
  for (const auto& [name, value] : m_fields) {
    if (!is_valid_fact_name(name))
      return make_error(ErrorCode::invalid_argument,
                        "fact name '" + name + "': expected 1 to " +
                            std::to_string(k_max_fact_name_chars) +
                            " characters from [A-Za-z0-9_.-]");
    if (value.size() > k_max_fact_value_bytes)
      return make_error(ErrorCode::invalid_argument,
                        "fact '" + name + "': value of " + std::to_string(value.size()) +
                            " bytes exceeds " + std::to_string(k_max_fact_value_bytes));
    if (text::find_invalid_utf8(value))
      return make_error(ErrorCode::invalid_argument, "fact '" + name + "': value is not valid UTF-8");
  }
  return {};
}

std::string Facts::canonical() const {
  std::size_t size = k_magic.size() + 4 + 8;
  for (const auto& [name, value] : m_fields) size += 1 + 8 + name.size() + 8 + value.size();
  std::string out;
  out.reserve(size);
  out.append(k_magic);
  append_u32(out, k_key_schema_version);
  append_u64(out, m_fields.size());
  // std::map<std::string> orders by char_traits<char>::compare, which compares as
  // unsigned char: the bytewise order the grammar promises.
  for (const auto& [name, value] : m_fields) {
    out.push_back('F');
    append_u64(out, name.size());
    out.append(name);
    append_u64(out, value.size());
    out.append(value);
  }
  return out;
}

CacheKey Facts::key() const { return CacheKey::of(canonical()); }

std::string Facts::to_json() const {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [name, value] : m_fields) object[name] = value;
  // Replacement keeps a bad value from throwing; validate() rejects such facts anyway.
  return object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<Facts> Facts::from_json(std::string_view text) {
  nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded())
    return make_error(ErrorCode::invalid_input, "facts: not valid JSON");
  if (!object.is_object())
    return make_error(ErrorCode::invalid_input,
                      std::string("facts: expected a JSON object, got ") + object.type_name());
  Facts facts;
  for (const auto& [name, value] : object.items()) {
    if (!value.is_string())
      return make_error(ErrorCode::invalid_input, "facts field '" + name +
                                                      "': expected a string, got " +
                                                      value.type_name());
    facts.set(name, value.get<std::string>());
  }
  if (auto valid = facts.validate(); !valid)
    return make_error(ErrorCode::invalid_input, valid.error().message);
  return facts;
}

}  // namespace jitcache::cache
