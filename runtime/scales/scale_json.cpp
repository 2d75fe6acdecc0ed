#include "runtime/scales/scale_json.hpp"

#include <cctype>
#include <charconv>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "support/text.hpp"

namespace jitcache::scales {
namespace {

using nlohmann::json;

// Builds the document through nlohmann's SAX interface so that duplicate keys and depth
// can be refused at the point they appear; returning false stops the parser at once.
class StrictDomBuilder final : public nlohmann::json_sax<json> {
 public:
  StrictDomBuilder(std::string_view text, std::size_t max_depth)
      : m_text(text), m_max_depth(max_depth) {}

  bool null() override { return place(json(nullptr)); }
  bool boolean(bool value) override { return place(json(value)); }
  bool number_integer(number_integer_t value) override { return place(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return place(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return place(json(value)); }
  bool string(string_t& value) override { return place(json(std::move(value))); }
  bool binary(binary_t&) override {
    // The JSON text format cannot produce binary values; reaching here is a parser bug.
    m_error = "unexpected binary value";
    return false;
  }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }

  bool key(string_t& name) override {
    Frame& frame = m_stack.back();
    if (!frame.keys.insert(name).second) {
      m_error = "duplicate key \"" + name + "\" in " +
                (frame.path.empty() ? std::string("the top-level object")
                                    : "object \"" + frame.path + "\"") +
                " (each key may appear once)";
      return false;
    }
    m_key = std::move(name);
    return true;
  }

  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    std::string what = error.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag: users need the position.
    if (const auto tag_end = what.find("] "); what.starts_with("[json.") && tag_end != std::string::npos)
      what.erase(0, tag_end + 2);
    m_error = "not valid JSON: " + what;
    // The lexer stops one character into a bad literal; look at what was written there.
    if (position >= 1 && position <= m_text.size()) {
      std::string word(m_text.substr(position - 1, 3));
      for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (word == "nan" || word == "inf")
        m_error += " (NaN and Infinity are not JSON numbers)";
    }
    return false;
  }

  json take_root() { return std::move(m_root); }
  const std::string& error() const { return m_error; }

 private:
  struct Frame {
    json* value;
    std::string path;
    std::set<std::string> keys;
  };

  std::string child_path() const {
    if (m_stack.empty()) return {};
    const Frame& parent = m_stack.back();
    if (parent.value->is_array())
      return parent.path + "[" + std::to_string(parent.value->size()) + "]";
    return parent.path.empty() ? m_key : parent.path + "." + m_key;
  }

  json* insert(json&& value) {
    if (m_stack.empty()) {
      m_root = std::move(value);
      return &m_root;
    }
    json& parent = *m_stack.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[m_key];
    slot = std::move(value);
    return &slot;
  }

  bool place(json&& value) {
    insert(std::move(value));
    return true;
  }

  bool open(json&& container) {
    if (m_stack.size() >= m_max_depth) {
      const std::string path = child_path();
      m_error = "nesting deeper than " + std::to_string(m_max_depth) + " levels" +
                (path.empty() ? std::string() : " at \"" + path + "\"");
      return false;
    }
    std::string path = child_path();
    json* value = insert(std::move(container));
    // Pointers into the tree stay valid: a parent never grows while a child is open.
    m_stack.push_back(Frame{value, std::move(path), {}});
    return true;
  }

  bool close() {
    m_stack.pop_back();
    return true;
  }

  std::string_view m_text;
  std::size_t m_max_depth;
  json m_root;
  std::vector<Frame> m_stack;
  std::string m_key;
  std::string m_error;
};

}  // namespace

Result<json> parse_json_strict(std::string_view text, const std::string& file,
                               std::size_t max_depth) {
  if (const auto bad = text::find_invalid_utf8(text)) {
    return make_error(ErrorCode::invalid_input,
                      file + ": not valid UTF-8 (first bad byte at offset " +
                          std::to_string(*bad) + ")");
  }
  StrictDomBuilder builder(text, max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    // sax_parse reports through parse_error; anything thrown besides is still bad input,
    // and must not escape as an exception.
    return make_error(ErrorCode::invalid_input, file + ": not valid JSON: " + e.what());
  }
  if (!ok) {
    const std::string why = builder.error().empty() ? "not valid JSON" : builder.error();
    return make_error(ErrorCode::invalid_input, file + ": " + why);
  }
  return builder.take_root();
}

std::string format_number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

}  // namespace jitcache::scales
