#include "runtime/compile/source_rules.hpp"

#include <cctype>
#include <set>
#include <string_view>

namespace jitcache {
namespace {

// Options taking a file or directory, or writing one. Short ones that glue their value on
// (-Idir) are matched as prefixes; the rest as the option alone or with "=value".
constexpr std::string_view k_glued_options[] = {"-I", "-isystem"};
constexpr std::string_view k_file_options[] = {
    "--include-path",  "-include",          "--pre-include",  "--preinclude", "-isystem",
    "--pch",           "-pch",              "--create-pch",   "-create-pch",  "--use-pch",
    "-use-pch",        "--pch-dir",         "-pch-dir",       "--pch-messages", "--pch-verbose",
    "--instantiate-templates-in-pch", "--time", "-time",      "--fdevice-time-trace",
    "-fdevice-time-trace", "--device-time-trace", "--jobserver", "-jobserver", "--config",
    "-dump-perf-metrics-file", "--dump-perf-metrics-file"};

// The text with every line continuation (backslash, newline) removed, and for each of its
// characters the line it came from.
struct Joined {
  std::string text;
  std::vector<int> line;
};

Joined join_lines(const std::string& text) {
  Joined out;
  int line = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      const std::size_t next = i + (text[i + 1] == '\r' && i + 2 < text.size() && text[i + 2] == '\n' ? 3 : 2);
      ++line;
      i = next - 1;
      continue;
    }
    out.text.push_back(text[i]);
    out.line.push_back(line);
    if (text[i] == '\n') ++line;
  }
  return out;
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// The text with comments replaced by a space and the contents of string and character
// literals blanked (their quotes kept), so a directive is found only where it is one.
std::string code_only(const std::string& text) {
  std::string out = text;
  std::size_t i = 0;
  auto blank = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to && k < out.size(); ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      const std::size_t end = text.find('\n', i);
      blank(i, end == std::string::npos ? text.size() : end);
      i = end == std::string::npos ? text.size() : end;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      const std::size_t stop = end == std::string::npos ? text.size() : end + 2;
      blank(i, stop);
      out[i] = ' ';
      i = stop;
    } else if (c == 'R' && i + 1 < text.size() && text[i + 1] == '"' && (i == 0 || !is_ident(text[i - 1]) ||
                                                                         text[i - 1] == 'u' || text[i - 1] == 'U' ||
                                                                         text[i - 1] == 'L' || text[i - 1] == '8')) {
      // A raw string: R"delim( ... )delim".
      const std::size_t open = text.find('(', i + 2);
      if (open == std::string::npos) break;
      const std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
      const std::size_t end = text.find(close, open);
      const std::size_t stop = end == std::string::npos ? text.size() : end + close.size();
      blank(i + 2, stop - 1);
      i = stop;
    } else if (c == '"' || c == '\'') {
      std::size_t k = i + 1;
      while (k < text.size() && text[k] != c && text[k] != '\n') k += text[k] == '\\' ? 2 : 1;
      blank(i + 1, k);
      i = k + 1;
    } else {
      ++i;
    }
  }
  return out;
}

std::size_t skip_space(const std::string& s, std::size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\v' || s[i] == '\f' || s[i] == '\r')) ++i;
  return i;
}

bool has_dotdot(std::string_view name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find_first_of("/\\", start), name.size());
    if (name.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

// Checks the name operand at `at` of the original text (`raw`, where the name's characters
// are; `code` has them blanked) of an include-like construct.
Status check_operand(const std::string& raw, const std::string& code, std::size_t at, const std::string& what,
                     const std::string& where) {
  at = skip_space(code, at);
  char close = 0;
  if (at < code.size() && code[at] == '"') close = '"';
  if (at < code.size() && code[at] == '<') close = '>';
  if (close == 0)
    return make_error(ErrorCode::invalid_argument,
                      where + ": " + what + " with a name computed by a macro is refused: NVRTC would resolve it " +
                          "where the cache key cannot see it; write the name in quotes or angle brackets");
  const std::size_t end = raw.find_first_of(std::string(1, close) + "\n", at + 1);
  const std::string name = raw.substr(at + 1, (end == std::string::npos ? raw.size() : end) - at - 1);
  if (!name.empty() && (name[0] == '/' || name[0] == '\\'))
    return make_error(ErrorCode::invalid_argument,
                      where + ": " + what + " \"" + name + "\" is an absolute path; NVRTC reads no file from disk " +
                          "(its bytes would not be in the cache key): pass it as a named header (--include-header)");
  if (has_dotdot(name))
    return make_error(ErrorCode::invalid_argument,
                      where + ": " + what + " \"" + name + "\" has a '..' component; NVRTC reads no file from disk " +
                          "(its bytes would not be in the cache key): pass it as a named header (--include-header)");
  return {};
}

Status scan_includes(const std::string& original, const std::string& file) {
  const Joined joined = join_lines(original);
  const std::string code = code_only(joined.text);
  const std::string& raw = joined.text;
  auto where = [&](std::size_t at) { return file + ":" + std::to_string(joined.line.empty() ? 1 : joined.line[std::min(at, joined.line.size() - 1)]); };
  bool line_start = true;
  for (std::size_t i = 0; i < code.size(); ++i) {
    const char c = code[i];
    if (c == '\n') {
      line_start = true;
      continue;
    }
    if (line_start && c == '#') {
      line_start = false;
      std::size_t k = skip_space(code, i + 1);
      std::size_t word_end = k;
      while (word_end < code.size() && is_ident(code[word_end])) ++word_end;
      const std::string directive = code.substr(k, word_end - k);
      if (directive == "include" || directive == "include_next" || directive == "embed" || directive == "import")
        JC_TRY(check_operand(raw, code, word_end, "#" + directive, where(i)));
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\r') line_start = false;
    // __has_include("x") / __has_include_next(<x>), anywhere (an #if, a macro body).
    if (c == '_' && code.compare(i, 13, "__has_include") == 0 && (i == 0 || !is_ident(code[i - 1]))) {
      std::size_t k = i + 13;
      if (code.compare(k, 5, "_next") == 0) k += 5;
      if (k < code.size() && is_ident(code[k])) continue;
      const std::string what = code.substr(i, k - i);
      k = skip_space(code, k);
      if (k < code.size() && code[k] == '(') JC_TRY(check_operand(raw, code, k + 1, what, where(i)));
      i = k;
    }
  }
  return {};
}

Status check_no_nul(const std::string& text, const std::string& file) {
  if (const auto at = text.find('\0'); at != std::string::npos)
    return make_error(ErrorCode::invalid_argument,
                      file + ": a NUL byte at offset " + std::to_string(at) +
                          "; NVRTC would ignore the text after it, which the cache key still holds");
  return {};
}

}  // namespace

std::string file_option_of(const std::string& option) {
  for (std::string_view o : k_glued_options)
    if (option.starts_with(o) && (option.size() == o.size() || o.size() == 2)) return std::string(o);
  for (std::string_view o : k_file_options)
    if (option == o || (option.starts_with(o) && option.size() > o.size() && option[o.size()] == '='))
      return std::string(o);
  return {};
}

Status check_cuda_input(const std::string& text, const std::vector<std::pair<std::string, std::string>>& headers,
                        const std::vector<std::string>& options, const std::string& name) {
  for (const std::string& o : options)
    if (const std::string file_option = file_option_of(o); !file_option.empty())
      return make_error(ErrorCode::invalid_argument,
                        name + ": option '" + o + "' (" + file_option +
                            ") makes NVRTC read or write files outside the cache key; it is refused. Pass the "
                            "headers the source includes as named headers (--include-header NAME=FILE, "
                            "KernelRequest::headers)");
  JC_TRY(check_no_nul(text, name));
  std::set<std::string> seen;
  for (const auto& [header, body] : headers) {
    if (!seen.insert(header).second)
      return make_error(ErrorCode::invalid_argument, name + ": the header name '" + header + "' is given twice");
    if (header.find('\0') != std::string::npos)
      return make_error(ErrorCode::invalid_argument, name + ": a header name holds a NUL byte");
    JC_TRY(check_no_nul(body, "header " + header));
  }
  JC_TRY(scan_includes(text, name));
  for (const auto& [header, body] : headers) JC_TRY(scan_includes(body, "header " + header));
  return {};
}

}  // namespace jitcache
