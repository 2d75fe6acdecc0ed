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

}  // namespace jitcache::text
