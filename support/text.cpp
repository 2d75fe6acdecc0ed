#include "support/text.hpp"

#include <algorithm>
#include <vector>

namespace jitcache::text {
namespace {
constexpr std::string_view k_whitespace = " \t\r\n\v\f";
}  // namespace

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows: a transposition looks two rows back.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(k_whitespace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(k_whitespace);
  return s.substr(first, last - first + 1);
}

bool is_blank(std::string_view s) { return trim(s).empty(); }

std::string escape_control(std::string_view s) {
  const bool clean = std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (clean) return std::string(s);
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 16);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += k_hex[u >> 4];
      out += k_hex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string shown(const std::filesystem::path& path) {
  if (path.empty()) return "(empty path)";
  return escape_control(path.native());
}

std::optional<std::size_t> find_invalid_utf8(std::string_view s) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The length from the lead byte, and the range its second byte must fall in: the
    // narrowed ranges after E0, ED, F0 and F4 are what exclude overlong forms, surrogates
    // and code points above U+10FFFF (RFC 3629, section 4).
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return i;  // a continuation byte, C0/C1 (always overlong) or F5..FF
    }
    if (s.size() - i < length) return i;
    if (bytes[i + 1] < low || bytes[i + 1] > high) return i;
    for (std::size_t k = 2; k < length; ++k)
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
    i += length;
  }
  return std::nullopt;
}

std::string redact_url_password(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::size_t colon = url.find(':', start);
  if (colon == std::string_view::npos || colon > at) return std::string(url);  // a user name only
  return std::string(url.substr(0, colon + 1)) + "***" + std::string(url.substr(at));
}

}  // namespace jitcache::text
