// The C ABI's shared internals (c_api_support.hpp), with the two entry points that are
// their other half: jitcache_last_error reads the message `fail` keeps, and
// jitcache_string_free frees what `hand_out` allocates.
#include "runtime/capi/c_api_support.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

namespace jitcache::capi {
namespace {

thread_local std::string t_last_error;

jitcache_status to_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return JITCACHE_ERROR_INVALID_ARGUMENT;
    case ErrorCode::invalid_input: return JITCACHE_ERROR_INVALID_INPUT;
    case ErrorCode::io: return JITCACHE_ERROR_IO;
    case ErrorCode::not_found: return JITCACHE_ERROR_NOT_FOUND;
    case ErrorCode::unsafe: return JITCACHE_ERROR_UNSAFE;
    case ErrorCode::compile: return JITCACHE_ERROR_COMPILE;
    case ErrorCode::database: return JITCACHE_ERROR_DATABASE;
    case ErrorCode::unavailable: return JITCACHE_ERROR_UNAVAILABLE;
    case ErrorCode::internal: return JITCACHE_ERROR_INTERNAL;
  }
  return JITCACHE_ERROR_INTERNAL;
}

}  // namespace

thread_local int t_log_callback_depth = 0;

jitcache_status fail(jitcache_status status, std::string message) noexcept {
  try {
    t_last_error = std::move(message);
  } catch (...) {
    // No memory for the message: keep the code, which says as much.
    t_last_error.clear();
  }
  return status;
}

jitcache_status fail(const Error& error) noexcept {
  try {
    return fail(to_status(error.code), error.to_string());
  } catch (...) {
    return fail(JITCACHE_ERROR_OUT_OF_MEMORY, {});
  }
}

jitcache_status null_argument(const char* function, const char* name) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + name + " is NULL");
}

jitcache_status closed_handle(const char* function, const char* what) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + what + " closed");
}

jitcache_status refused_in_log_callback(const char* function) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
              std::string(function) +
                  ": called from inside a jitcache log callback, which may run within a compile "
                  "that this call would wait for; call it after the callback returns");
}

std::optional<RecordFormat> read_rope(jitcache_rope rope) {
  switch (abi_enum_value(rope)) {
    case JITCACHE_ROPE_BF16: return RecordFormat::b12x_432;
    case JITCACHE_ROPE_FP8: return RecordFormat::b12x_368;
    default: return std::nullopt;
  }
}

jitcache_status unknown_rope(const char* self, jitcache_rope rope) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
              std::string(self) + ": no RoPE format " + std::to_string(abi_enum_value(rope)));
}

std::optional<RecordFormat> read_format(std::int32_t format) {
  switch (format) {
    case JITCACHE_FORMAT_B12X_432: return RecordFormat::b12x_432;
    case JITCACHE_FORMAT_B12X_368: return RecordFormat::b12x_368;
    case JITCACHE_FORMAT_B12X_304: return RecordFormat::b12x_304;
    case JITCACHE_FORMAT_FLASHMLA_352: return RecordFormat::flashmla_352;
    default: return std::nullopt;
  }
}

jitcache_status unknown_format(const char* self, const char* field, std::int32_t format) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
              std::string(self) + ": " + field + " is " + std::to_string(format) +
                  ", expected a jitcache_record_format: JITCACHE_FORMAT_B12X_432 (0), JITCACHE_FORMAT_B12X_368 "
                  "(1), JITCACHE_FORMAT_B12X_304 (2) or JITCACHE_FORMAT_FLASHMLA_352 (3)");
}

bool is_unset(const char* text) { return text == nullptr || *text == '\0'; }

jitcache_status hand_out(const nlohmann::json& document, char** out) {
  const std::string text = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return fail(JITCACHE_ERROR_OUT_OF_MEMORY, "out of memory for a JSON document");
  std::memcpy(copy, text.c_str(), text.size() + 1);
  *out = copy;
  return JITCACHE_OK;
}

}  // namespace jitcache::capi

using namespace jitcache::capi;

extern "C" {

const char* jitcache_last_error(void) { return t_last_error.c_str(); }

void jitcache_string_free(char* text) { std::free(text); }

}  // extern "C"
