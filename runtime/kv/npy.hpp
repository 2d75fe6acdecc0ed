// NumPy .npy files, read strictly and written atomically: the exchange format of the
// `kv` tools (real KV data dumped from a serving engine with numpy.save).
//
// Accepted layout (numpy.lib.format, format versions 1.0, 2.0 and 3.0):
//
//   file       := magic major minor header_len header data
//   magic      := "\x93NUMPY"
//   major      := 1 | 2 | 3            minor := 0
//   header_len := u16 little-endian (1.0) | u32 little-endian (2.0, 3.0)
//   header     := header_len bytes: ws dict ws     (3.0 allows UTF-8 inside strings)
//   dict       := "{" ws [ item ( ws "," ws item )* [ ws "," ] ] ws "}"
//   item       := string ws ":" ws value
//   value      := string | "True" | "False" | tuple
//   tuple      := "(" ws ")" | "(" ws int ws "," ws ")"
//               | "(" ws int ( ws "," ws int )+ [ ws "," ] ws ")"
//   int        := digit+ [ "L" ]           (the "L" of headers written by Python 2)
//   string     := "'" chars "'" | '"' chars '"'
//   ws         := ( " " | "\t" | "\r" | "\n" )*
//   keys       := exactly 'descr', 'fortran_order' and 'shape', each once
//   data       := product(shape) * itemsize bytes in C order, and nothing after them
//
// `(3)` is not a tuple in Python, so it is rejected as a shape, as numpy does. Every
// error names the file and the field, says what was found and what is expected. Sizes
// come from the header, so nothing is allocated before the file is known to hold them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache::npy {

enum class DType { float32, uint8 };

// The header's 'descr' for a dtype: "<f4", "|u1".
const char* descr(DType dtype);
std::size_t item_size(DType dtype);

// Headers longer than this are refused before anything is read: numpy itself writes
// less than 100 bytes for a plain array, and refuses 10000 by default.
constexpr std::uint64_t k_max_header_bytes = 1 << 20;

struct Header {
  int major_version = 1;
  int minor_version = 0;
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
  std::uint64_t data_offset = 0;  // bytes before the data: preamble + header
};

// Parses the preamble and the header dictionary of a file whose first bytes are `bytes`
// (they must include the whole header). `name` is the file name used in errors. Checks
// only the grammar; dtype, order and shape are checked by the readers.
Result<Header> parse_header(std::span<const std::uint8_t> bytes, std::string_view name);

template <class T>
struct Array {
  std::vector<std::uint64_t> shape;
  std::vector<T> values;  // C order
};

// Reads a whole .npy file of the given element type. `rank`, when set, is the number of
// dimensions the caller requires.
Result<Array<float>> read_float32(const std::filesystem::path& path,
                                  std::optional<std::size_t> rank = std::nullopt);
Result<Array<std::uint8_t>> read_uint8(const std::filesystem::path& path,
                                       std::optional<std::size_t> rank = std::nullopt);

// The same from bytes already in memory; `name` stands for the file in errors.
Result<Array<float>> parse_float32(std::span<const std::uint8_t> bytes, std::string_view name,
                                   std::optional<std::size_t> rank = std::nullopt);
Result<Array<std::uint8_t>> parse_uint8(std::span<const std::uint8_t> bytes, std::string_view name,
                                        std::optional<std::size_t> rank = std::nullopt);

// A version 1.0 preamble + header, padded so that the data starts 64-byte aligned.
// Fails only if the shape's element count overflows.
Result<std::vector<std::uint8_t>> encode_header(DType dtype, std::span<const std::uint64_t> shape);

// Writes a version 1.0 file atomically (write_file_atomic, support/atomic_file.hpp): a
// non-regular file at `path` is refused. `values` must hold exactly product(shape) elements.
Status write_float32(const std::filesystem::path& path, std::span<const std::uint64_t> shape,
                     std::span<const float> values);
Status write_uint8(const std::filesystem::path& path, std::span<const std::uint64_t> shape,
                   std::span<const std::uint8_t> values);

// Python's spelling of a shape tuple: "()", "(3,)", "(3, 576)".
std::string format_shape(std::span<const std::uint64_t> shape);

}  // namespace jitcache::npy
