// Fixed-width integers and doubles in little-endian byte order, for the binary formats
// jitcache writes to be read elsewhere (remote values, export files). jitcache runs on
// little-endian hosts only, so these are plain copies; the assertion keeps it honest.
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace jitcache {

static_assert(std::endian::native == std::endian::little, "jitcache assumes a little-endian host");

// Appends `value`'s bytes to `out`.
template <class T>
  requires std::is_arithmetic_v<T>
void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// The value stored at `offset`; the caller has checked that sizeof(T) bytes are there.
template <class T>
  requires std::is_arithmetic_v<T>
T read_le(std::string_view data, std::size_t offset) {
  T value;
  std::memcpy(&value, data.data() + offset, sizeof(T));
  return value;
}

}  // namespace jitcache
