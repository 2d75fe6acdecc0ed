#include "cache/facts.hpp"

#include <nlohmann/json.hpp>

namespace jitcache::cache {
namespace {

constexpr std::string_view k_magic = "jitcache.facts";

void append_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void append_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

bool is_valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t extra;
    std::uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t k_min[] = {0, 0x80, 0x800, 0x10000};
    if (code < k_min[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
      return false;
    i += extra + 1;
  }
  return true;
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
    if (!is_valid_utf8(value))
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
