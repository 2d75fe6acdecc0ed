#include "runtime/kv/npy.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"

namespace jitcache::npy {
namespace {

// .npy data is little-endian and read by memcpy into host floats.
static_assert(std::endian::native == std::endian::little, "jitcache assumes a little-endian host");

constexpr std::uint8_t k_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t k_header_alignment = 64;
constexpr std::size_t k_excerpt_chars = 160;

// Where the bytes come from: a file is read piecewise (a multi-gigabyte dump is never
// held twice), memory is used by tests and fuzzing.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const = 0;
  virtual Status read(std::uint64_t offset, void* dst, std::size_t size) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const std::uint8_t> bytes) : m_bytes(bytes) {}
  std::uint64_t size() const override { return m_bytes.size(); }
  Status read(std::uint64_t offset, void* dst, std::size_t size) override {
    if (size > 0) std::memcpy(dst, m_bytes.data() + offset, size);
    return {};
  }

 private:
  std::span<const std::uint8_t> m_bytes;
};

class FileSource final : public Source {
 public:
  explicit FileSource(RegularFile file) : m_file(std::move(file)) {}
  std::uint64_t size() const override { return m_file.size(); }
  Status read(std::uint64_t offset, void* dst, std::size_t size) override {
    return m_file.read_at(offset, dst, size);
  }

 private:
  RegularFile m_file;
};

Result<std::unique_ptr<FileSource>> open_source(const std::filesystem::path& path) {
  RegularFile file = JC_TRY(RegularFile::open(path));
  return std::make_unique<FileSource>(std::move(file));
}

// Printable text of untrusted bytes: ASCII as is, everything else as \xNN.
std::string escape(std::string_view text, std::size_t limit = k_excerpt_chars) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += k_hex[c >> 4];
      out += k_hex[c & 0xf];
    }
  }
  return out;
}

std::unexpected<Error> invalid(std::string_view name, std::string what) {
  return make_error(ErrorCode::invalid_input, std::string(name) + ": " + std::move(what));
}

std::unexpected<Error> field_error(std::string_view name, std::string_view field,
                                   std::string what) {
  return invalid(name, "field '" + std::string(field) + "': " + std::move(what));
}

// The header dictionary parser (grammar in npy.hpp).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : m_text(text), m_name(name) {}

  Status parse(Header& header) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_ws();
    if (!eat('{')) return fail("expected '{' at the start of the dictionary");
    skip_ws();
    while (!eat('}')) {
      const std::size_t key_pos = m_pos;
      const std::string key = JC_TRY(parse_string("a key string or '}'"));
      skip_ws();
      if (!eat(':')) return fail("expected ':' after key '" + escape(key) + "'");
      skip_ws();
      bool* seen = nullptr;
      if (key == "descr") {
        seen = &seen_descr;
        JC_TRY(parse_descr(header.descr));
      } else if (key == "fortran_order") {
        seen = &seen_order;
        JC_TRY(parse_bool(header.fortran_order));
      } else if (key == "shape") {
        seen = &seen_shape;
        JC_TRY(parse_shape(header.shape));
      } else {
        m_pos = key_pos;
        return fail("unexpected key '" + escape(key) +
                    "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (*seen) {
        m_pos = key_pos;
        return fail("duplicate key '" + key + "'");
      }
      *seen = true;
      skip_ws();
      if (eat(',')) {
        skip_ws();
      } else if (peek() != '}') {
        return fail("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    skip_ws();
    if (m_pos != m_text.size()) return fail("unexpected text after the closing '}'");
    if (!seen_descr) return missing("descr");
    if (!seen_order) return missing("fortran_order");
    if (!seen_shape) return missing("shape");
    return {};
  }

 private:
  char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
  bool at_end() const { return m_pos >= m_text.size(); }
  bool eat(char c) {
    if (at_end() || m_text[m_pos] != c) return false;
    ++m_pos;
    return true;
  }
  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n'))
      ++m_pos;
  }

  std::string found() const {
    if (at_end()) return "the end of the header";
    return "'" + escape(m_text.substr(m_pos, 12), 24) + "'";
  }

  std::unexpected<Error> fail(const std::string& what) const {
    return invalid(m_name, "malformed header at byte " + std::to_string(m_pos) + ": " + what +
                               ", found " + found() + " (header: " + escape(m_text) + ")");
  }
  std::unexpected<Error> fail_field(std::string_view field, const std::string& what) const {
    return invalid(m_name, "malformed header: field '" + std::string(field) + "' at byte " +
                               std::to_string(m_pos) + ": " + what + ", found " + found() +
                               " (header: " + escape(m_text) + ")");
  }
  std::unexpected<Error> missing(std::string_view key) const {
    return invalid(m_name, "malformed header: missing key '" + std::string(key) +
                               "' (header: " + escape(m_text) + ")");
  }

  Result<std::string> parse_string(std::string_view expected) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') return fail("expected " + std::string(expected));
    const std::size_t start = ++m_pos;
    while (!at_end() && peek() != quote) {
      // Nothing in a valid header needs an escape; refusing them keeps the grammar tiny.
      if (peek() == '\\') return fail("escape sequences in strings are not supported");
      if (peek() == '\n') return fail("unterminated string");
      ++m_pos;
    }
    if (at_end()) return fail("unterminated string");
    std::string value(m_text.substr(start, m_pos - start));
    ++m_pos;
    return value;
  }

  std::string_view identifier() {
    const std::size_t start = m_pos;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_'))
      ++m_pos;
    return m_text.substr(start, m_pos - start);
  }

  Status parse_descr(std::string& out) {
    if (peek() == '[')
      return fail_field("descr",
                        "structured dtypes (a list of fields) are not supported; expected a "
                        "dtype string such as '<f4'");
    if (peek() != '\'' && peek() != '"')
      return fail_field("descr", "expected a dtype string such as '<f4'");
    out = JC_TRY(parse_string("a dtype string"));
    return {};
  }

  Status parse_bool(bool& out) {
    const std::size_t start = m_pos;
    const std::string_view word = identifier();
    if (word == "True") {
      out = true;
    } else if (word == "False") {
      out = false;
    } else {
      m_pos = start;
      return fail_field("fortran_order", "expected True or False");
    }
    return {};
  }

  Status parse_shape(std::vector<std::uint64_t>& out) {
    out.clear();
    if (!eat('(')) return fail_field("shape", "expected a tuple such as (3, 576)");
    skip_ws();
    bool trailing_comma = false;
    while (!eat(')')) {
      if (peek() == '-') return fail_field("shape", "dimensions must be non-negative");
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return fail_field("shape", "expected a non-negative integer or ')'");
      const std::size_t start = m_pos;
      std::uint64_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const std::uint64_t digit = static_cast<std::uint64_t>(peek() - '0');
        if (value > (std::uint64_t{std::numeric_limits<std::int64_t>::max()} - digit) / 10) {
          m_pos = start;
          return fail_field("shape", "dimension is absurdly large (more than 2^63 - 1)");
        }
        value = value * 10 + digit;
        ++m_pos;
      }
      if (m_text[start] == '0' && m_pos - start > 1) {
        m_pos = start;
        return fail_field("shape", "integers with leading zeros are not valid Python");
      }
      eat('L');
      out.push_back(value);
      skip_ws();
      trailing_comma = eat(',');
      skip_ws();
      if (!trailing_comma && peek() != ')') return fail_field("shape", "expected ',' or ')'");
    }
    // Python reads "(3)" as the integer 3, not a tuple: numpy refuses it as a shape.
    if (out.size() == 1 && !trailing_comma)
      return fail_field("shape", "a one-dimensional shape needs a trailing comma, as in (3,)");
    return {};
  }

  std::string_view m_text;
  std::string_view m_name;
  std::size_t m_pos = 0;
};

Result<Header> read_header(Source& source, std::string_view name) {
  const std::uint64_t size = source.size();
  std::uint8_t pre[12] = {};
  const std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(size, sizeof pre));
  JC_TRY(source.read(0, pre, have));
  const std::size_t magic_have = std::min<std::size_t>(have, sizeof k_magic);
  if (size == 0) return invalid(name, "empty file: not a NumPy .npy file");
  if (std::memcmp(pre, k_magic, magic_have) != 0) {
    return invalid(
        name, "not a NumPy .npy file: bad magic: expected '\\x93NUMPY', found '" +
                  escape(std::string_view(reinterpret_cast<const char*>(pre), magic_have)) + "'");
  }
  if (have < 8)
    return invalid(name, "truncated: " + std::to_string(size) +
                             " bytes, shorter than the 10-byte .npy preamble");
  Header header;
  header.major_version = pre[6];
  header.minor_version = pre[7];
  if (header.major_version < 1 || header.major_version > 3 || header.minor_version != 0)
    return invalid(name, "unsupported .npy format version " + std::to_string(header.major_version) +
                             "." + std::to_string(header.minor_version) +
                             " (supported: 1.0, 2.0, 3.0)");
  const std::size_t len_bytes = header.major_version == 1 ? 2 : 4;
  if (have < 8 + len_bytes)
    return invalid(name, "truncated: " + std::to_string(size) + " bytes, shorter than the " +
                             std::to_string(8 + len_bytes) + "-byte preamble of format version " +
                             std::to_string(header.major_version) + ".0");
  std::uint64_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) header_len |= std::uint64_t{pre[8 + i]} << (8 * i);
  if (header_len > k_max_header_bytes)
    return field_error(name, "header_len",
                       std::to_string(header_len) + " bytes is absurd (the limit is " +
                           std::to_string(k_max_header_bytes) + ")");
  header.data_offset = 8 + len_bytes + header_len;
  if (header.data_offset > size)
    return invalid(name, "header is truncated: header_len declares " + std::to_string(header_len) +
                             " bytes, only " + std::to_string(size - 8 - len_bytes) +
                             " follow the preamble");
  std::string text(static_cast<std::size_t>(header_len), '\0');
  JC_TRY(source.read(8 + len_bytes, text.data(), text.size()));
  JC_TRY(HeaderParser(text, name).parse(header));
  return header;
}

// A readable name for a dtype string, for "found X, expected Y" messages.
std::string describe_descr(std::string_view descr) {
  std::string_view rest = descr;
  std::string order;
  if (!rest.empty() && std::string_view("<>|=").find(rest[0]) != std::string_view::npos) {
    order = rest[0] == '<' ? "little-endian " : rest[0] == '>' ? "big-endian " : "";
    rest.remove_prefix(1);
  }
  if (rest.empty()) return "unknown dtype";
  const std::string_view digits = rest.substr(1);
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      digits.size() > 4)
    return "unknown dtype";
  const std::string bits =
      digits.empty() ? "" : std::to_string(std::atoi(std::string(digits).c_str()) * 8);
  switch (rest[0]) {
    case 'f':
      return order + "float" + bits;
    case 'i':
      return order + "int" + bits;
    case 'u':
      return order + "uint" + bits;
    case 'c':
      return order + "complex" + bits;
    case 'b':
    case '?':
      return "bool";
    case 'U':
      return "unicode string";
    case 'S':
    case 'a':
      return "byte string";
    case 'O':
      return "Python object";
    case 'V':
      return "raw bytes";
    case 'M':
      return order + "datetime64";
    case 'm':
      return order + "timedelta64";
    default:
      return "unknown dtype";
  }
}

bool descr_matches(std::string_view found, DType dtype) {
  if (dtype == DType::float32) return found == "<f4";
  // Byte order means nothing for one-byte items; numpy writes '|u1' but accepts all.
  return found == "|u1" || found == "<u1" || found == ">u1" || found == "=u1" || found == "u1";
}

const char* dtype_label(DType dtype) {
  return dtype == DType::float32 ? "little-endian float32" : "uint8";
}

template <class T>
Result<Array<T>> read_array(Source& source, std::string_view name, DType dtype,
                            std::optional<std::size_t> rank) {
  const Header header = JC_TRY(read_header(source, name));
  if (!descr_matches(header.descr, dtype))
    return field_error(name, "descr",
                       "dtype '" + escape(header.descr) + "' (" + describe_descr(header.descr) +
                           ") is not supported; expected '" + descr(dtype) + "' (" +
                           dtype_label(dtype) + ")");
  if (header.fortran_order)
    return field_error(name, "fortran_order",
                       "True (column-major) is not supported; expected False (C order); "
                       "save with numpy.ascontiguousarray first");
  if (rank && header.shape.size() != *rank)
    return field_error(
        name, "shape",
        "expected " + std::to_string(*rank) + " dimensions, found " + format_shape(header.shape));
  std::uint64_t count = 1;
  for (const std::uint64_t dim : header.shape) {
    if (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / dim)
      return field_error(
          name, "shape",
          format_shape(header.shape) + " holds more elements than 2^64: absurd size");
    count *= dim;
  }
  const std::uint64_t item = item_size(dtype);
  if (count > std::numeric_limits<std::uint64_t>::max() / item ||
      count * item > static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()))
    return field_error(
        name, "shape",
        format_shape(header.shape) + " needs more bytes than memory can address: absurd size");
  const std::uint64_t need = count * item;
  const std::uint64_t have = source.size() - header.data_offset;
  if (have < need)
    return invalid(name, "data is truncated: shape " + format_shape(header.shape) + " of '" +
                             header.descr + "' needs " + std::to_string(need) +
                             " bytes after the " + std::to_string(header.data_offset) +
                             "-byte header, the file has " + std::to_string(have));
  if (have > need)
    return invalid(name, "trailing garbage: " + std::to_string(have - need) +
                             " bytes after the data (shape " + format_shape(header.shape) +
                             " of '" + header.descr + "' ends at byte " +
                             std::to_string(header.data_offset + need) + ")");
  Array<T> array;
  array.shape = header.shape;
  array.values.resize(static_cast<std::size_t>(count));
  JC_TRY(source.read(header.data_offset, array.values.data(), static_cast<std::size_t>(need)));
  return array;
}

template <class T>
Result<Array<T>> read_path(const std::filesystem::path& path, DType dtype,
                           std::optional<std::size_t> rank) {
  auto source = JC_TRY(open_source(path));
  return read_array<T>(*source, path.string(), dtype, rank);
}

template <class T>
Status write_array(const std::filesystem::path& path, DType dtype,
                   std::span<const std::uint64_t> shape, std::span<const T> values) {
  const std::vector<std::uint8_t> header = JC_TRY(encode_header(dtype, shape));
  std::uint64_t count = 1;
  for (const std::uint64_t dim : shape) count *= dim;  // encode_header checked overflow
  if (count != values.size())
    return make_error(ErrorCode::invalid_argument, path.string() + ": shape " +
                                                       format_shape(shape) + " needs " +
                                                       std::to_string(count) + " values, given " +
                                                       std::to_string(values.size()));
  const std::span<const std::uint8_t> parts[] = {
      header, {reinterpret_cast<const std::uint8_t*>(values.data()), values.size_bytes()}};
  return write_file_atomic(path, parts);
}

}  // namespace

const char* descr(DType dtype) { return dtype == DType::float32 ? "<f4" : "|u1"; }

std::size_t item_size(DType dtype) { return dtype == DType::float32 ? 4 : 1; }

std::string format_shape(std::span<const std::uint64_t> shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

Result<Header> parse_header(std::span<const std::uint8_t> bytes, std::string_view name) {
  MemorySource source(bytes);
  return read_header(source, name);
}

Result<Array<float>> read_float32(const std::filesystem::path& path,
                                  std::optional<std::size_t> rank) {
  return read_path<float>(path, DType::float32, rank);
}

Result<Array<std::uint8_t>> read_uint8(const std::filesystem::path& path,
                                       std::optional<std::size_t> rank) {
  return read_path<std::uint8_t>(path, DType::uint8, rank);
}

Result<Array<float>> parse_float32(std::span<const std::uint8_t> bytes, std::string_view name,
                                   std::optional<std::size_t> rank) {
  MemorySource source(bytes);
  return read_array<float>(source, name, DType::float32, rank);
}

Result<Array<std::uint8_t>> parse_uint8(std::span<const std::uint8_t> bytes, std::string_view name,
                                        std::optional<std::size_t> rank) {
  MemorySource source(bytes);
  return read_array<std::uint8_t>(source, name, DType::uint8, rank);
}

Result<std::vector<std::uint8_t>> encode_header(DType dtype, std::span<const std::uint64_t> shape) {
  std::uint64_t count = 1;
  for (const std::uint64_t dim : shape) {
    if (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / item_size(dtype) / dim)
      return make_error(ErrorCode::invalid_argument,
                        "npy: shape " + format_shape(shape) + " holds more bytes than 2^64");
    count *= dim;
  }
  // numpy's own spelling, trailing ", }" included, so files diff cleanly against numpy.save.
  std::string dict = std::string("{'descr': '") + descr(dtype) +
                     "', 'fortran_order': False, 'shape': " + format_shape(shape) + ", }";
  const std::size_t unpadded = 10 + dict.size() + 1;  // preamble + dict + '\n'
  const std::size_t padded =
      (unpadded + k_header_alignment - 1) / k_header_alignment * k_header_alignment;
  dict.append(padded - unpadded, ' ');
  dict += '\n';
  if (dict.size() > 0xffff)
    return make_error(ErrorCode::invalid_argument, "npy: header for shape " + format_shape(shape) +
                                                       " does not fit format version 1.0");
  std::vector<std::uint8_t> out(std::begin(k_magic), std::end(k_magic));
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<std::uint8_t>(dict.size() & 0xff));
  out.push_back(static_cast<std::uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  return out;
}

Status write_float32(const std::filesystem::path& path, std::span<const std::uint64_t> shape,
                     std::span<const float> values) {
  return write_array<float>(path, DType::float32, shape, values);
}

Status write_uint8(const std::filesystem::path& path, std::span<const std::uint64_t> shape,
                   std::span<const std::uint8_t> values) {
  return write_array<std::uint8_t>(path, DType::uint8, shape, values);
}

}  // namespace jitcache::npy
