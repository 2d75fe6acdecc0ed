// Small text helpers shared by the environment registry, the log layer and the messages
// that quote user input (paths, keys).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace jitcache::text {

std::string ascii_lower(std::string_view s);

// Optimal string alignment distance (Levenshtein plus adjacent transpositions): the
// did-you-mean measure for misspelt names. Case-sensitive; lower both sides to ignore case.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The value of one hexadecimal digit (0-9, a-f, A-F), or -1 for any other character: the
// one reader of hex digits (cache keys, percent-encoded URLs).
int hex_digit_value(char c);

// The whitespace rule for values that may be "unset": spaces, tabs, CR, LF, VT, FF.
std::string_view trim(std::string_view s);
// Empty or whitespace only: reads as unset, for environment variables and the matching
// API arguments alike (the scales override).
bool is_blank(std::string_view s);

// `s` with every control character (C0 and DEL) written as \xNN, so a message quoting user
// input stays one line and cannot forge a second log line.
std::string escape_control(std::string_view s);
// A path as quoted in messages: its text with control characters escaped; "" is shown as
// "(empty path)".
std::string shown(const std::filesystem::path& path);

// A URL as it may be shown: the password of its user info (between the first ':' after
// the scheme's "//" and the last '@') replaced by "***", whatever else the text holds; a
// text without user info comes back as it is. It reads the user info as the remote URL's
// parser does (remote/redis_url.hpp: the last '@' ends it, so a password may hold '/', '@'
// and ':' unencoded), so the part it hides is exactly the part sent as the password.
std::string redact_url_password(std::string_view url);

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629:
// overlong forms, UTF-16 surrogates, code points above U+10FFFF and sequences cut short
// are ill-formed), or nullopt when all of `s` is UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view s);

}  // namespace jitcache::text
