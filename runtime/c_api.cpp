// The C ABI (include/jitcache/jitcache.h) over the C++ runtime. Every entry point
// catches everything: a C caller cannot unwind a C++ exception.
#include "jitcache/jitcache.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "jitcache/runtime.hpp"

struct jitcache_runtime {
  std::unique_ptr<jitcache::Runtime> runtime;
  // Held here so the strings handed out stay valid for the runtime's life.
  jitcache::DeviceStatus device;
  std::string cache_dir;
  std::string cache_reason;
  jitcache_cache_mode cache_mode = JITCACHE_CACHE_READ_WRITE;
};

struct jitcache_model {
  std::shared_ptr<const jitcache::PreparedModel> model;
};

namespace jitcache {
namespace {

thread_local std::string t_last_error;

// Depth of log callbacks running on this thread. A callback runs inside whatever library
// call logged, possibly a compile worker inside the single-flight wait for its own key; a
// prepare or open from there could wait on itself for ever, so those calls are refused.
thread_local int t_log_callback_depth = 0;

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

jitcache_status null_argument(const char* function, const char* name) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + name + " is NULL");
}

jitcache_status refused_in_log_callback(const char* function) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
              std::string(function) +
                  ": called from inside a jitcache log callback, which may run within a compile "
                  "that this call would wait for; call it after the callback returns");
}

jitcache_scale_mode to_c(ScaleMode mode) {
  return mode == ScaleMode::identity ? JITCACHE_SCALE_IDENTITY : JITCACHE_SCALE_DYNAMIC;
}

jitcache_scale_source to_c(ScaleSource source) {
  switch (source) {
    case ScaleSource::explicit_override: return JITCACHE_SOURCE_OVERRIDE;
    case ScaleSource::checkpoint: return JITCACHE_SOURCE_CHECKPOINT;
    case ScaleSource::identity_default: return JITCACHE_SOURCE_IDENTITY_DEFAULT;
    case ScaleSource::draft_identity: return JITCACHE_SOURCE_DRAFT_IDENTITY;
  }
  return JITCACHE_SOURCE_IDENTITY_DEFAULT;
}

// The fields through cache_max_bytes are ABI 1's: a smaller struct_size means the caller
// never called jitcache_runtime_options_init. Fields added later are read when present.
constexpr std::size_t k_runtime_options_v1_size =
    offsetof(jitcache_runtime_options, cache_max_bytes) + sizeof(std::uint64_t);
// A struct from a newer header is larger, but never by this much: a bigger struct_size is
// garbage (an uninitialised struct), and its "tail" must not be read.
constexpr std::size_t k_runtime_options_max_size = 4096;
constexpr std::uint32_t k_max_jobs = 1024;
constexpr std::int32_t k_max_device_ordinal = 1023;
constexpr std::uint64_t k_min_cache_bytes = 16ull << 20;  // a few kernel bundles
constexpr std::uint64_t k_max_cache_bytes = 1ull << 50;   // 1 PiB

Result<jitcache_runtime_options> read_options(const char* self, const jitcache_runtime_options* given) {
  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  if (given == nullptr) return options;
  const std::string field = std::string(self) + ": options.";
  const std::size_t size = given->struct_size;
  if (size < k_runtime_options_v1_size || size > k_runtime_options_max_size)
    return make_error(ErrorCode::invalid_argument,
                      field + "struct_size is " + std::to_string(size) + ", expected " +
                          std::to_string(sizeof options) + " (at least " +
                          std::to_string(k_runtime_options_v1_size) +
                          "); fill the options with jitcache_runtime_options_init first");
  // Fields this library does not know must be zero: their defaults. A set one asks for
  // something this library cannot do.
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (std::size_t i = sizeof options; i < size; ++i)
    if (bytes[i] != 0)
      return make_error(ErrorCode::invalid_argument,
                        field + "struct_size is " + std::to_string(size) + " and byte " + std::to_string(i) +
                            " beyond the " + std::to_string(sizeof options) +
                            " bytes this library knows is not zero: the caller's header is newer "
                            "than this library (ABI " +
                            std::to_string(JITCACHE_ABI_VERSION) + ") and sets an option it does not have");
  std::memcpy(&options, given, std::min(size, sizeof options));
  options.struct_size = sizeof options;

  if (options.jobs > k_max_jobs)
    return make_error(ErrorCode::invalid_argument, field + "jobs is " + std::to_string(options.jobs) +
                                                       ", expected 0 (one per core) to " +
                                                       std::to_string(k_max_jobs));
  const int device = abi_enum_value(options.device);
  if (device != JITCACHE_DEVICE_AUTO && device != JITCACHE_DEVICE_NONE)
    return make_error(ErrorCode::invalid_argument,
                      field + "device is " + std::to_string(device) +
                          ", expected JITCACHE_DEVICE_AUTO (0) or JITCACHE_DEVICE_NONE (1)");
  if (options.device_ordinal < 0 || options.device_ordinal > k_max_device_ordinal)
    return make_error(ErrorCode::invalid_argument,
                      field + "device_ordinal is " + std::to_string(options.device_ordinal) +
                          ", expected 0 to " + std::to_string(k_max_device_ordinal));
  if (options.cache_max_bytes != 0 &&
      (options.cache_max_bytes < k_min_cache_bytes || options.cache_max_bytes > k_max_cache_bytes))
    return make_error(ErrorCode::invalid_argument,
                      field + "cache_max_bytes is " + std::to_string(options.cache_max_bytes) +
                          ", expected 0 (the default cap) or " + std::to_string(k_min_cache_bytes) + " to " +
                          std::to_string(k_max_cache_bytes));
  const int requirement = abi_enum_value(options.cache_requirement);
  if (requirement < JITCACHE_CACHE_FROM_ENVIRONMENT || requirement > JITCACHE_CACHE_REQUIRED)
    return make_error(ErrorCode::invalid_argument,
                      field + "cache_requirement is " + std::to_string(requirement) +
                          ", expected JITCACHE_CACHE_FROM_ENVIRONMENT (0), JITCACHE_CACHE_OPTIONAL (1) or "
                          "JITCACHE_CACHE_REQUIRED (2)");
  return options;
}

}  // namespace
}  // namespace jitcache

using namespace jitcache;

extern "C" {

const char* jitcache_version(void) { return JITCACHE_VERSION; }

uint32_t jitcache_abi_version(void) { return JITCACHE_ABI_VERSION; }

const char* jitcache_status_name(jitcache_status status) {
  switch (jitcache::abi_enum_value(status)) {
    case JITCACHE_OK: return "JITCACHE_OK";
    case JITCACHE_ERROR_INVALID_ARGUMENT: return "JITCACHE_ERROR_INVALID_ARGUMENT";
    case JITCACHE_ERROR_INVALID_INPUT: return "JITCACHE_ERROR_INVALID_INPUT";
    case JITCACHE_ERROR_IO: return "JITCACHE_ERROR_IO";
    case JITCACHE_ERROR_NOT_FOUND: return "JITCACHE_ERROR_NOT_FOUND";
    case JITCACHE_ERROR_UNSAFE: return "JITCACHE_ERROR_UNSAFE";
    case JITCACHE_ERROR_COMPILE: return "JITCACHE_ERROR_COMPILE";
    case JITCACHE_ERROR_DATABASE: return "JITCACHE_ERROR_DATABASE";
    case JITCACHE_ERROR_UNAVAILABLE: return "JITCACHE_ERROR_UNAVAILABLE";
    case JITCACHE_ERROR_INTERNAL: return "JITCACHE_ERROR_INTERNAL";
    case JITCACHE_ERROR_OUT_OF_MEMORY: return "JITCACHE_ERROR_OUT_OF_MEMORY";
  }
  return "JITCACHE_ERROR_UNKNOWN";
}

const char* jitcache_last_error(void) { return t_last_error.c_str(); }

jitcache_status jitcache_set_log_callback(jitcache_log_fn fn, void* user_data) {
  return guarded(__func__, [&](const char*) {
    if (fn == nullptr) {
      set_log_sink(nullptr);
      return JITCACHE_OK;
    }
    set_log_sink([fn, user_data](LogLevel level, std::string_view message) {
      // The sink's view need not be NUL-terminated; C wants a string.
      const std::string text(message);
      const InLogCallback inside;
      fn(user_data, static_cast<jitcache_log_level>(level), text.c_str(), text.size());
    });
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_set_log_level(jitcache_log_level level) {
  return guarded(__func__, [&](const char* self) {
    const int value = abi_enum_value(level);
    if (value < JITCACHE_LOG_DEBUG || value > JITCACHE_LOG_OFF)
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                  std::string(self) + ": no log level " + std::to_string(value));
    set_log_level(static_cast<LogLevel>(value));
    return JITCACHE_OK;
  });
}

void jitcache_runtime_options_init(jitcache_runtime_options* options) {
  if (options == nullptr) return;
  *options = jitcache_runtime_options{};
  options->struct_size = sizeof *options;
  options->device = JITCACHE_DEVICE_AUTO;
}

jitcache_status jitcache_runtime_open(const jitcache_runtime_options* given, jitcache_runtime** out) {
  return guarded(__func__, [&](const char* self) {
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto read = read_options(self, given);
    if (!read) return fail(read.error());
    const jitcache_runtime_options& options = *read;
    const int device = abi_enum_value(options.device);
    RuntimeOptions cxx;
    if (options.cache_dir != nullptr) cxx.cache_dir = options.cache_dir;
    cxx.jobs = options.jobs;
    cxx.device = device == JITCACHE_DEVICE_NONE ? DeviceUse::none : DeviceUse::automatic;
    cxx.device_ordinal = options.device_ordinal;
    cxx.cache_max_bytes = options.cache_max_bytes;
    switch (abi_enum_value(options.cache_requirement)) {
      case JITCACHE_CACHE_OPTIONAL: cxx.cache_requirement = CacheRequirement::optional; break;
      case JITCACHE_CACHE_REQUIRED: cxx.cache_requirement = CacheRequirement::required; break;
      default: cxx.cache_requirement = CacheRequirement::from_environment; break;
    }
    auto opened = Runtime::open(std::move(cxx));
    if (!opened) return fail(opened.error());
    auto handle = std::make_unique<jitcache_runtime>();
    handle->device = (*opened)->device();
    const CacheStatus& cache = (*opened)->cache_status();
    handle->cache_dir = cache.dir.string();
    handle->cache_reason = cache.reason;
    handle->cache_mode = cache.mode == CacheMode::read_write  ? JITCACHE_CACHE_READ_WRITE
                         : cache.mode == CacheMode::read_only ? JITCACHE_CACHE_READ_ONLY
                                                              : JITCACHE_CACHE_MEMORY_ONLY;
    handle->runtime = std::move(*opened);
    *out = handle.release();
    return JITCACHE_OK;
  });
}

void jitcache_runtime_close(jitcache_runtime* runtime) {
  if (runtime == nullptr) return;
  // The runtime may be the one logging (a prepare in progress): closing it under its own
  // feet would free what that call is using. Refused; nothing is logged, since logging
  // would call the callback again.
  if (t_log_callback_depth > 0) {
    fail(JITCACHE_ERROR_INVALID_ARGUMENT,
         "jitcache_runtime_close: called from inside a jitcache log callback; the runtime stays open");
    return;
  }
  // Destructors of the runtime do not throw; a C caller could not handle it if they did.
  delete runtime;
}

jitcache_status jitcache_runtime_device(const jitcache_runtime* runtime, jitcache_device_status* out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (out == nullptr) return null_argument(self, "out");
    out->available = runtime->device.available ? 1 : 0;
    out->reason = runtime->device.reason.c_str();
    out->name = runtime->device.name.c_str();
    out->target = runtime->device.target.c_str();
    return JITCACHE_OK;
  });
}

const char* jitcache_runtime_cache_dir(const jitcache_runtime* runtime) {
  return runtime == nullptr ? "" : runtime->cache_dir.c_str();
}

jitcache_status jitcache_runtime_cache_status(const jitcache_runtime* runtime, jitcache_cache_status* out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (out == nullptr) return null_argument(self, "out");
    out->mode = runtime->cache_mode;
    out->dir = runtime->cache_dir.c_str();
    out->reason = runtime->cache_reason.c_str();
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_prepare(jitcache_runtime* runtime, const char* checkpoint, jitcache_rope rope,
                                 const char* target, const char* scales_override, jitcache_model** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (checkpoint == nullptr) return null_argument(self, "checkpoint");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const int rope_value = abi_enum_value(rope);
    if (rope_value != JITCACHE_ROPE_BF16 && rope_value != JITCACHE_ROPE_FP8)
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                  std::string(self) + ": no RoPE format " + std::to_string(rope_value));
    ModelSpec spec;
    spec.checkpoint = checkpoint;
    spec.rope = rope_value == JITCACHE_ROPE_FP8 ? RopeFormat::fp8 : RopeFormat::bf16;
    if (target != nullptr) spec.target = target;
    if (scales_override != nullptr) spec.scales_override = std::filesystem::path(scales_override);
    auto prepared = runtime->runtime->prepare(spec);
    if (!prepared) return fail(prepared.error());
    *out = new jitcache_model{std::move(*prepared)};
    return JITCACHE_OK;
  });
}

void jitcache_model_release(jitcache_model* model) { delete model; }

jitcache_status jitcache_model_num_layers(const jitcache_model* model, int32_t* out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    if (out == nullptr) return null_argument(self, "out");
    *out = static_cast<int32_t>(model->model->layers().size());
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_model_layer(const jitcache_model* model, int32_t layer, jitcache_layer_info* out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    if (out == nullptr) return null_argument(self, "out");
    const LayerBinding* b = model->model->layer(layer);
    if (b == nullptr)
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                  std::string(self) + ": no layer " + std::to_string(layer) + " (the model has " +
                      std::to_string(model->model->layers().size()) + ")");
    out->layer = b->layer;
    out->scale = b->scale;
    out->mode = to_c(b->mode);
    out->source = to_c(b->source);
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_model_stats(const jitcache_model* model, jitcache_prepare_stats* out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    if (out == nullptr) return null_argument(self, "out");
    const PrepareStats& s = model->model->stats();
    out->variants = s.variants;
    out->cached = s.cached;
    out->compiled = s.compiled;
    out->wall_ms = s.wall_ms;
    return JITCACHE_OK;
  });
}

const char* jitcache_model_target(const jitcache_model* model) {
  return model == nullptr ? "" : model->model->target().c_str();
}

jitcache_status jitcache_launch_writer(const jitcache_model* model, int32_t layer,
                                       const jitcache_writer_launch* args, void* stream) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    if (args == nullptr) return null_argument(self, "args");
    WriterLaunch a;
    a.kv_c = args->kv_c;
    a.kv_c_stride = args->kv_c_stride != 0 ? args->kv_c_stride : a.kv_c_stride;
    a.k_pe = args->k_pe;
    a.k_pe_stride = args->k_pe_stride != 0 ? args->k_pe_stride : a.k_pe_stride;
    a.slot_mapping = args->slot_mapping;
    a.num_tokens = args->num_tokens;
    a.cache = args->cache;
    a.num_slots = args->num_slots;
    a.status = args->status;
    const Status launched = model->model->launch_writer(layer, a, stream);
    return launched ? JITCACHE_OK : fail(launched.error());
  });
}

jitcache_status jitcache_launch_gather(const jitcache_model* model, int32_t layer,
                                       const jitcache_gather_launch* args, void* stream) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    if (args == nullptr) return null_argument(self, "args");
    GatherLaunch a;
    a.cache = args->cache;
    a.num_slots = args->num_slots;
    a.slots = args->slots;
    a.num_rows = args->num_rows;
    a.out = args->out;
    a.out_stride = args->out_stride != 0 ? args->out_stride : a.out_stride;
    a.status = args->status;
    const Status launched = model->model->launch_gather(layer, a, stream);
    return launched ? JITCACHE_OK : fail(launched.error());
  });
}

}  // extern "C"
