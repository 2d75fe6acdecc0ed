#include "remote/redis_url.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include "support/text.hpp"

namespace jitcache::remote {
namespace {

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = text::hex_digit_value(text[i + 1]), lo = text::hex_digit_value(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

bool parse_int(std::string_view text, int low, int high, int& out) {
  if (text.empty() || text.size() > 6) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= low && out <= high;
}

}  // namespace

std::string RedisUrl::display() const {
  std::string text = "redis://";
  if (!user.empty() || !password.empty()) {
    text += user;
    if (!password.empty()) text += ":***";
    text += "@";
  }
  text += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  text += ":" + std::to_string(port);
  if (db != 0) text += "/" + std::to_string(db);
  return text;
}

Result<RedisUrl> parse_redis_url(std::string_view text, std::string_view source) {
  const std::string where = std::string(source) + ": ";
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_input,
                      where + why + " (expected redis://[user[:password]@]host[:port][/db])");
  };
  constexpr std::string_view scheme = "redis://";
  if (!text.starts_with(scheme)) {
    // The scheme is quoted only when it looks like one: a URL missing its "redis://" may
    // begin with its user info, password and all.
    const auto colon = text.find("://");
    const std::string_view name = colon == std::string_view::npos ? std::string_view() : text.substr(0, colon);
    const bool plain = !name.empty() && name.size() <= 16 && std::all_of(name.begin(), name.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' ||
             c == '.';
    });
    return bad(colon == std::string_view::npos ? "not a redis:// URL"
               : plain                         ? "unsupported scheme '" + std::string(name) + "'"
                                               : "unsupported scheme");
  }
  std::string_view rest = text.substr(scheme.size());
  RedisUrl url;
  // The user info ends at the last '@' (no host, port or database holds one), so a password
  // may hold '@', ':' and '/' unencoded; nothing of it is ever quoted in an error, and
  // every part that is comes after it (text::redact_url_password hides the same part).
  std::string_view userinfo;
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  const std::size_t slash = rest.find('/');
  const std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  const std::string_view hostport = rest.substr(0, slash);
  if (!userinfo.empty()) {
    const auto colon = userinfo.find(':');
    auto user = percent_decode(userinfo.substr(0, colon));
    if (!user) return bad("the user name has a malformed %-escape");
    url.user = std::move(*user);
    if (colon != std::string_view::npos) {
      auto password = percent_decode(userinfo.substr(colon + 1));
      if (!password) return bad("the password has a malformed %-escape");
      url.password = std::move(*password);
    }
  }
  std::string_view port_text;
  if (hostport.starts_with('[')) {
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address lacks its closing ']'");
    url.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) return bad("unexpected text after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("an empty port");
    }
  } else {
    const auto colon = hostport.find(':');
    url.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      if (port_text.empty()) return bad("an empty port");
    }
  }
  if (url.host.empty()) return bad("no host");
  for (char c : url.host)
    if (static_cast<unsigned char>(c) <= ' ' || c == '/' || c == '@' || c == '?' || c == '#')
      return bad("the host has a character that no host name has");
  // A URL with user info is quoted not even after it: when its real host part is missing,
  // the end of the password is what the parser took for the host, port and database.
  auto quoted = [&](std::string_view part) {
    return userinfo.empty() ? " '" + std::string(part) + "'" : std::string();
  };
  if (!port_text.empty() && !parse_int(port_text, 1, 65535, url.port))
    return bad("port" + quoted(port_text) + " is not a number from 1 to 65535");
  if (!path.empty() && !parse_int(path, 0, 1 << 20, url.db))
    return bad("database" + quoted(path) + " is not a non-negative number");
  return url;
}

}  // namespace jitcache::remote
