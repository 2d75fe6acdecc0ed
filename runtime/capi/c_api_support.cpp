// The C ABI's shared internals (c_api_support.hpp), with the two entry points that are
// their other half: jitcache_last_error reads the message `fail` keeps, and
// jitcache_string_free frees what `hand_out` allocates.
#include "runtime/capi/c_api_support.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "kernel_templates/variant_dimensions.hpp"

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

// jitcache_record_format's values are the rows of k_record_formats, in order.
static_assert(JITCACHE_FORMAT_B12X_432 == static_cast<int>(RecordFormat::b12x_432) &&
              JITCACHE_FORMAT_B12X_368 == static_cast<int>(RecordFormat::b12x_368) &&
              JITCACHE_FORMAT_B12X_304 == static_cast<int>(RecordFormat::b12x_304) &&
              JITCACHE_FORMAT_FLASHMLA_352 == static_cast<int>(RecordFormat::flashmla_352) &&
              JITCACHE_FORMAT_FLASHINFER_GLM_416 == static_cast<int>(RecordFormat::flashinfer_glm_416) &&
              JITCACHE_FORMAT_FLASHINFER_DSV4_384 == static_cast<int>(RecordFormat::flashinfer_dsv4_384) &&
              JITCACHE_FORMAT_FLASHMLA_V41_288 == static_cast<int>(RecordFormat::flashmla_v41_288) &&
              JITCACHE_FORMAT_FLASHMLA_V41_288 + 1 == static_cast<int>(k_record_formats.size()),
              "a record format needs its jitcache_record_format value in jitcache.h");

std::optional<RecordFormat> read_format(std::int32_t format) {
  if (format < 0 || format >= static_cast<std::int32_t>(k_record_formats.size())) return std::nullopt;
  return k_record_formats.rows[static_cast<std::size_t>(format)].value;
}

jitcache_status unknown_format(const char* self, const char* field, std::int32_t format) {
  std::string expected;
  for (std::size_t i = 0; i < k_record_formats.size(); ++i)
    expected += std::string(i == 0 ? "" : i + 1 == k_record_formats.size() ? " or " : ", ") + std::to_string(i) +
                " (" + k_record_formats.rows[i].name + ")";
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(self) + ": " + field + " is " + std::to_string(format) +
                                                   ", expected a jitcache_record_format: " + expected);
}

bool is_unset(const char* text) { return text == nullptr || *text == '\0'; }

jitcache_status hand_out(const nlohmann::json& document, char** out) {
  return hand_out_text(document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), out);
}

jitcache_status hand_out_text(const std::string& text, char** out) {
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
