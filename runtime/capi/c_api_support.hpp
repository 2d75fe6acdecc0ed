// Internals shared by the C ABI's source files (c_api_*.cpp): the last-error plumbing,
// the guard every entry point runs in, the checks of arguments and input structs, and
// the copy-out of JSON documents. Not installed; include/jitcache/jitcache.h is the ABI.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json_fwd.hpp>

#include "jitcache/error.hpp"
#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"

namespace jitcache::capi {

// Depth of log callbacks running on this thread. A callback runs inside whatever library
// call logged, possibly a compile worker inside the single-flight wait for its own key; a
// prepare or open from there could wait on itself for ever, so those calls are refused.
extern thread_local int t_log_callback_depth;

class InLogCallback {
 public:
  InLogCallback() { ++t_log_callback_depth; }
  ~InLogCallback() { --t_log_callback_depth; }
  InLogCallback(const InLogCallback&) = delete;
  InLogCallback& operator=(const InLogCallback&) = delete;
};

// A C caller may pass any int where the header names an enum, and reading a value outside
// a C++ enum's range through the enum type is undefined. Every enum that crosses the ABI is
// therefore read as its bytes into the underlying integer first, then checked.
template <class Enum>
int abi_enum_value(const Enum& value) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &value, sizeof raw);
  return static_cast<int>(raw);
}

// Keeps `message` as this thread's last error (jitcache_last_error) and returns `status`.
jitcache_status fail(jitcache_status status, std::string message) noexcept;
jitcache_status fail(const Error& error) noexcept;

// Runs `body` (returning jitcache_status) with every exception turned into a status.
template <class Body>
jitcache_status guarded(const char* function, Body&& body) noexcept {
  try {
    return body(function);
  } catch (const std::bad_alloc&) {
    return fail(JITCACHE_ERROR_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(JITCACHE_ERROR_INTERNAL, std::string(function) + ": unexpected exception: " + e.what());
  } catch (...) {
    return fail(JITCACHE_ERROR_INTERNAL, std::string(function) + ": unexpected exception");
  }
}

jitcache_status null_argument(const char* function, const char* name);

// A call on a handle that was closed, or whose close began while the call waited.
jitcache_status closed_handle(const char* function, const char* what);

jitcache_status refused_in_log_callback(const char* function);

// An input struct as the caller filled it: `v1_size` bytes (the fields of the first header
// that had the struct) through 4096 (a newer header's larger struct), every byte beyond
// what this library knows zero. Fields this library knows but the caller's struct lacks
// keep `init`'s defaults.
constexpr std::size_t k_input_struct_max_size = 4096;

template <class Struct>
Result<Struct> read_input_struct(const std::string& field, const Struct* given, std::size_t v1_size,
                                 void (*init)(Struct*), const char* init_name) {
  Struct value;
  init(&value);
  const std::size_t size = given->struct_size;
  // A smaller struct_size means the caller never called the _init function; a bigger one
  // than any header will have is garbage (an uninitialised struct), whose "tail" must not
  // be read.
  if (size < v1_size || size > k_input_struct_max_size)
    return make_error(ErrorCode::invalid_argument,
                      field + "struct_size is " + std::to_string(size) + ", expected " +
                          std::to_string(sizeof value) + " (at least " + std::to_string(v1_size) +
                          "); fill the struct with " + init_name + " first");
  // Fields this library does not know must be zero: their defaults. A set one asks for
  // something this library cannot do.
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (std::size_t i = sizeof value; i < size; ++i)
    if (bytes[i] != 0)
      return make_error(ErrorCode::invalid_argument,
                        field + "struct_size is " + std::to_string(size) + " and byte " + std::to_string(i) +
                            " beyond the " + std::to_string(sizeof value) +
                            " bytes this library knows is not zero: the caller's header is newer "
                            "than this library (ABI " +
                            std::to_string(JITCACHE_ABI_VERSION) + ") and sets an option it does not have");
  std::memcpy(&value, given, std::min(size, sizeof value));
  value.struct_size = sizeof value;
  return value;
}

// The RoPE format a C caller named; nullopt for a value outside the enum.
std::optional<RecordFormat> read_rope(jitcache_rope rope);

jitcache_status unknown_rope(const char* self, jitcache_rope rope);

// The record format a C caller named (a jitcache_record_format); nullopt outside the enum.
std::optional<RecordFormat> read_format(std::int32_t format);

// `field` is not a jitcache_record_format: the message lists the values.
jitcache_status unknown_format(const char* self, const char* field, std::int32_t format);

bool is_unset(const char* text);

// Hands a JSON document to a C caller: a malloc'd copy freed by jitcache_string_free.
jitcache_status hand_out(const nlohmann::json& document, char** out);
// The same for a document already written out.
jitcache_status hand_out_text(const std::string& text, char** out);

}  // namespace jitcache::capi
