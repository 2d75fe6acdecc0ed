// The C ABI (include/jitcache/jitcache.h) over the C++ runtime. Every entry point
// catches everything: a C caller cannot unwind a C++ exception.
#include "jitcache/jitcache.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/schema_json.hpp"
#include "runtime/compiled_kernel_json.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/binding_guard.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "runtime/scales/scale_resolver.hpp"

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

// A call on a handle that was closed, or whose close began while the call waited.
jitcache_status closed_handle(const char* function, const char* what) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + what + " closed");
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

// The fields through cache_max_bytes are ABI 1's first runtime options.
constexpr std::size_t k_runtime_options_v1_size =
    offsetof(jitcache_runtime_options, cache_max_bytes) + sizeof(std::uint64_t);
constexpr std::size_t k_prepare_options_v1_size =
    offsetof(jitcache_prepare_options, revision) + sizeof(const char*);
constexpr std::uint32_t k_max_jobs = 1024;
constexpr std::int32_t k_max_device_ordinal = 1023;
constexpr std::uint64_t k_min_cache_bytes = 16ull << 20;  // a few kernel bundles
constexpr std::uint64_t k_max_cache_bytes = 1ull << 50;   // 1 PiB

Result<jitcache_runtime_options> read_options(const char* self, const jitcache_runtime_options* given) {
  if (given == nullptr) {
    jitcache_runtime_options defaults;
    jitcache_runtime_options_init(&defaults);
    return defaults;
  }
  const std::string field = std::string(self) + ": options.";
  jitcache_runtime_options options = JC_TRY(read_input_struct(
      field, given, k_runtime_options_v1_size, &jitcache_runtime_options_init, "jitcache_runtime_options_init"));

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
  // Negative (the default) defers to the environment; NaN fails both comparisons.
  if (!(options.verify_spec < 0.0) && !(options.verify_spec >= 0.0 && options.verify_spec <= 1.0))
    return make_error(ErrorCode::invalid_argument,
                      field + "verify_spec is " + std::to_string(options.verify_spec) +
                          ", expected a fraction from 0 to 1, or negative for JITCACHE_VERIFY_SPEC");
  return options;
}

// The RoPE format a C caller named; nullopt for a value outside the enum.
std::optional<RopeFormat> read_rope(jitcache_rope rope) {
  switch (abi_enum_value(rope)) {
    case JITCACHE_ROPE_BF16: return RopeFormat::bf16;
    case JITCACHE_ROPE_FP8: return RopeFormat::fp8;
    default: return std::nullopt;
  }
}

jitcache_status unknown_rope(const char* self, jitcache_rope rope) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
              std::string(self) + ": no RoPE format " + std::to_string(abi_enum_value(rope)));
}

bool is_unset(const char* text) { return text == nullptr || *text == '\0'; }

jitcache_status prepare_model(const char* self, jitcache_runtime* runtime,
                              const jitcache_prepare_options& options, jitcache_model** out) {
  if (runtime == nullptr) return null_argument(self, "runtime");
  if (options.checkpoint == nullptr) return null_argument(self, "checkpoint");
  if (out == nullptr) return null_argument(self, "out");
  if (t_log_callback_depth > 0) return refused_in_log_callback(self);
  const std::optional<RopeFormat> rope = read_rope(options.rope);
  if (!rope) return unknown_rope(self, options.rope);
  ModelSpec spec;
  spec.checkpoint = options.checkpoint;
  spec.rope = *rope;
  if (options.target != nullptr) spec.target = options.target;
  if (options.scales_override != nullptr) spec.scales_override = std::filesystem::path(options.scales_override);
  if (!is_unset(options.revision)) spec.checkpoint_revision = std::string(options.revision);
  auto prepared = runtime->runtime->prepare(spec);
  if (!prepared) return fail(prepared.error());
  *out = new jitcache_model{std::move(*prepared)};
  return JITCACHE_OK;
}

// Hands a JSON document to a C caller: a malloc'd copy freed by jitcache_string_free.
jitcache_status hand_out(const nlohmann::json& document, char** out) {
  const std::string text = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return fail(JITCACHE_ERROR_OUT_OF_MEMORY, "out of memory for a JSON document");
  std::memcpy(copy, text.c_str(), text.size() + 1);
  *out = copy;
  return JITCACHE_OK;
}

nlohmann::json describe(const PreparedModel& model) {
  const PrepareStats& s = model.stats();
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelInfo& k : model.kernels())
    kernels.push_back({{"kernel", to_string(k.kernel)},
                       {"latent_scale", to_string(k.latent_scale)},
                       {"rope", to_string(k.rope)},
                       {"target", k.target},
                       {"key", k.key},
                       {"entry", k.entry},
                       {"registers", k.registers},
                       {"cubin_bytes", k.cubin_bytes},
                       {"compiled_now", k.compiled_now},
                       {"from_remote", k.from_remote},
                       {"stored", k.stored},
                       {"loaded", k.loaded},
                       {"ptx_fallback", k.ptx_fallback}});
  return {{"target", model.target()},
          {"rope", to_string(model.rope())},
          {"stats",
           {{"variants", s.variants},
            {"cached", s.cached},
            {"compiled", s.compiled},
            {"from_remote", s.remote},
            {"stored", s.stored},
            {"wall_ms", s.wall_ms}}},
          {"kernels", std::move(kernels)},
          {"scales", scales::to_json(model.scales())}};
}

template <class T>
T* host_pointer(std::uint64_t address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

// The launch structs as the host executor's parameters (host addresses; 0 strides are the
// dense defaults, as on the device).
jc::WriterParams host_params(const jitcache_writer_launch& a) {
  jc::WriterParams p{};
  p.kv_c = host_pointer<const jc::u16>(a.kv_c);
  p.kv_c_stride = a.kv_c_stride != 0 ? a.kv_c_stride : static_cast<std::int64_t>(kv::k_latent_dim);
  p.k_pe = host_pointer<const jc::u16>(a.k_pe);
  p.k_pe_stride = a.k_pe_stride != 0 ? a.k_pe_stride : static_cast<std::int64_t>(kv::k_rope_dim);
  p.slot_mapping = host_pointer<const jc::i64>(a.slot_mapping);
  p.num_tokens = a.num_tokens;
  p.cache = host_pointer<jc::u8>(a.cache);
  p.num_slots = a.num_slots;
  p.status = host_pointer<jc::u32>(a.status);
  return p;
}

jc::GatherParams host_params(const jitcache_gather_launch& a) {
  jc::GatherParams p{};
  p.cache = host_pointer<const jc::u8>(a.cache);
  p.num_slots = a.num_slots;
  p.slots = host_pointer<const jc::i32>(a.slots);
  p.num_rows = a.num_rows;
  p.out = host_pointer<jc::u16>(a.out);
  p.out_stride = a.out_stride != 0 ? a.out_stride : static_cast<std::int64_t>(kv::k_row_dim);
  p.status = host_pointer<jc::u32>(a.status);
  return p;
}

// Runs one host kernel; the status bits it reports are ORed into the caller's word, as
// the device kernel does.
template <class Args>
jitcache_status run_on_host(const char* self, LatentScale variant, RopeFormat rope, const Args& args,
                            float scale) {
  const auto params = host_params(args);
  Result<jc::u32> bits = [&] {
    if constexpr (std::is_same_v<Args, jitcache_writer_launch>)
      return host_run_writer(variant, rope, params, scale);
    else
      return host_run_gather(variant, rope, params, scale);
  }();
  if (!bits) {
    Error error = bits.error();
    error.message = std::string(self) + ": " + error.message;
    return fail(error);
  }
  return JITCACHE_OK;
}

template <class Args>
jitcache_status host_kernel(const char* self, float scale, jitcache_rope rope, const Args* args) {
  if (args == nullptr) return null_argument(self, "args");
  const std::optional<RopeFormat> format = read_rope(rope);
  if (!format) return unknown_rope(self, rope);
  const auto choice = kv::choose_latent_scale(static_cast<double>(scale), "scale");
  if (!choice) {
    Error error = choice.error();
    error.message = std::string(self) + ": " + error.message;
    return fail(error);
  }
  return run_on_host(self, choice->variant, *format, *args, choice->value);
}

template <class Args>
jitcache_status model_host_kernel(const char* self, const jitcache_model* model, int32_t layer,
                                  const Args* args) {
  if (model == nullptr) return null_argument(self, "model");
  const auto pass = model->gate.enter();
  if (!pass) return closed_handle(self, "model");
  if (args == nullptr) return null_argument(self, "args");
  const LayerBinding* b = model->model->layer(layer);
  if (b == nullptr)
    return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(self) + ": no layer " + std::to_string(layer) +
                                                     " (the model has " +
                                                     std::to_string(model->model->layers().size()) + ")");
  return run_on_host(self, latent_scale_for(b->mode), model->model->rope(), *args, b->scale);
}

// ---- kernels from outside ----------------------------------------------------------------

// The fields through num_options are ABI 1's first compile request.
constexpr std::size_t k_compile_request_v1_size =
    offsetof(jitcache_compile_request, num_options) + sizeof(std::size_t);
// Bounds on what a C caller hands in, so that a garbage count is an error, not a crash
// deep in a copy.
constexpr std::size_t k_max_spec_facts = 256;
constexpr std::size_t k_max_headers = 4096;
constexpr std::size_t k_max_options = 4096;
constexpr std::size_t k_max_source_bytes = std::size_t{1} << 30;  // 1 GiB

std::optional<SourceKind> read_kind(jitcache_source_kind kind) {
  switch (abi_enum_value(kind)) {
    case JITCACHE_KIND_CUDA: return SourceKind::cuda;
    case JITCACHE_KIND_NVVM: return SourceKind::nvvm;
    case JITCACHE_KIND_PTX: return SourceKind::ptx;
    default: return std::nullopt;
  }
}

Result<std::map<std::string, std::string>> read_spec(const std::string& field, const jitcache_fact* spec,
                                                     std::size_t count) {
  if (count > k_max_spec_facts)
    return make_error(ErrorCode::invalid_argument, field + "num_spec is " + std::to_string(count) +
                                                       ", expected at most " + std::to_string(k_max_spec_facts));
  if (count > 0 && spec == nullptr)
    return make_error(ErrorCode::invalid_argument, field + "spec is NULL with num_spec " + std::to_string(count));
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string at = field + "spec[" + std::to_string(i) + "]";
    if (spec[i].name == nullptr || spec[i].value == nullptr)
      return make_error(ErrorCode::invalid_argument, at + ": name or value is NULL");
    if (!out.emplace(spec[i].name, spec[i].value).second)
      return make_error(ErrorCode::invalid_argument, at + ": fact " + std::string(spec[i].name) + " is given twice");
  }
  return out;
}

Result<KernelRequest> read_request(const char* self, const jitcache_compile_request* given) {
  const std::string field = std::string(self) + ": request.";
  const jitcache_compile_request r = JC_TRY(read_input_struct(
      field, given, k_compile_request_v1_size, &jitcache_compile_request_init, "jitcache_compile_request_init"));
  KernelRequest request;
  if (is_unset(r.family)) return make_error(ErrorCode::invalid_argument, field + "family is NULL or empty");
  request.family = r.family;
  request.spec = JC_TRY(read_spec(field, r.spec, r.num_spec));
  const auto kind = read_kind(r.kind);
  if (!kind)
    return make_error(ErrorCode::invalid_argument,
                      field + "kind is " + std::to_string(abi_enum_value(r.kind)) +
                          ", expected JITCACHE_KIND_CUDA (0), JITCACHE_KIND_NVVM (1) or JITCACHE_KIND_PTX (2)");
  request.kind = *kind;
  if (r.text == nullptr || r.text_size == 0)
    return make_error(ErrorCode::invalid_argument, field + "text is NULL or text_size is 0");
  if (r.text_size > k_max_source_bytes)
    return make_error(ErrorCode::invalid_argument, field + "text_size is " + std::to_string(r.text_size) +
                                                       ", expected at most " + std::to_string(k_max_source_bytes));
  request.text.assign(r.text, r.text_size);
  if (r.num_headers > k_max_headers || (r.num_headers > 0 && r.headers == nullptr))
    return make_error(ErrorCode::invalid_argument, field + "headers is NULL or num_headers (" +
                                                       std::to_string(r.num_headers) + ") is over " +
                                                       std::to_string(k_max_headers));
  for (std::size_t i = 0; i < r.num_headers; ++i) {
    const jitcache_header& h = r.headers[i];
    const std::string at = field + "headers[" + std::to_string(i) + "]";
    if (is_unset(h.name) || (h.text == nullptr && h.size != 0) || h.size > k_max_source_bytes)
      return make_error(ErrorCode::invalid_argument, at + ": name is NULL or empty, or text and size disagree");
    request.headers.emplace_back(h.name, std::string(h.text == nullptr ? "" : h.text, h.size));
  }
  if (is_unset(r.entry)) return make_error(ErrorCode::invalid_argument, field + "entry is NULL or empty");
  request.entry = r.entry;
  if (is_unset(r.target)) return make_error(ErrorCode::invalid_argument, field + "target is NULL or empty");
  request.target = r.target;
  if (r.num_options > k_max_options || (r.num_options > 0 && r.options == nullptr))
    return make_error(ErrorCode::invalid_argument, field + "options is NULL or num_options (" +
                                                       std::to_string(r.num_options) + ") is over " +
                                                       std::to_string(k_max_options));
  for (std::size_t i = 0; i < r.num_options; ++i) {
    if (r.options[i] == nullptr)
      return make_error(ErrorCode::invalid_argument, field + "options[" + std::to_string(i) + "] is NULL");
    request.options.emplace_back(r.options[i]);
  }
  return request;
}

jitcache_status hand_out_kernel(CompiledKernel&& kernel, jitcache_kernel** out) {
  auto handle = std::make_unique<jitcache_kernel>();
  handle->kernel = std::move(kernel);
  *out = handle.release();
  return JITCACHE_OK;
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
  options->verify_spec = -1.0;
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
    // A field after ABI 1's first options: a caller with an older header has struct_size
    // short of it, and read_options left it at its default (NULL: JITCACHE_REMOTE).
    if (!is_unset(options.remote)) cxx.remote = options.remote;
    if (options.verify_spec >= 0.0) cxx.verify_spec = options.verify_spec;
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
  // Waits for the calls in flight; closing does not throw (a C caller could not handle it).
  capi::close_runtime(runtime);
}

jitcache_status jitcache_runtime_device(const jitcache_runtime* runtime, jitcache_device_status* out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (out == nullptr) return null_argument(self, "out");
    if (runtime->closed) return closed_handle(self, "runtime");
    out->available = runtime->device.available ? 1 : 0;
    out->reason = runtime->device.reason.c_str();
    out->name = runtime->device.name.c_str();
    out->target = runtime->device.target.c_str();
    return JITCACHE_OK;
  });
}

const char* jitcache_runtime_cache_dir(const jitcache_runtime* runtime) {
  return runtime == nullptr || runtime->closed ? "" : runtime->cache_dir.c_str();
}

jitcache_status jitcache_runtime_cache_status(const jitcache_runtime* runtime, jitcache_cache_status* out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (out == nullptr) return null_argument(self, "out");
    if (runtime->closed) return closed_handle(self, "runtime");
    out->mode = runtime->cache_mode;
    out->dir = runtime->cache_dir.c_str();
    out->reason = runtime->cache_reason.c_str();
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_prepare(jitcache_runtime* runtime, const char* checkpoint, jitcache_rope rope,
                                 const char* target, const char* scales_override, jitcache_model** out) {
  return guarded(__func__, [&](const char* self) {
    jitcache_prepare_options options;
    jitcache_prepare_options_init(&options);
    options.checkpoint = checkpoint;
    options.rope = rope;
    options.target = target;
    options.scales_override = scales_override;
    return prepare_model(self, runtime, options, out);
  });
}

void jitcache_prepare_options_init(jitcache_prepare_options* options) {
  if (options == nullptr) return;
  *options = jitcache_prepare_options{};
  options->struct_size = sizeof *options;
  options->rope = JITCACHE_ROPE_BF16;
}

jitcache_status jitcache_prepare_with(jitcache_runtime* runtime, const jitcache_prepare_options* given,
                                      jitcache_model** out) {
  return guarded(__func__, [&](const char* self) {
    if (given == nullptr) return null_argument(self, "options");
    const auto options =
        read_input_struct(std::string(self) + ": options.", given, k_prepare_options_v1_size,
                          &jitcache_prepare_options_init, "jitcache_prepare_options_init");
    if (!options) return fail(options.error());
    return prepare_model(self, runtime, *options, out);
  });
}

void jitcache_model_release(jitcache_model* model) {
  if (model != nullptr) capi::release_model(model);
}

jitcache_status jitcache_model_num_layers(const jitcache_model* model, int32_t* out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
    if (out == nullptr) return null_argument(self, "out");
    *out = static_cast<int32_t>(model->model->layers().size());
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_model_layer(const jitcache_model* model, int32_t layer, jitcache_layer_info* out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
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
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
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
  if (model == nullptr) return "";
  const auto pass = model->gate.enter();
  return pass ? model->model->target().c_str() : "";
}

jitcache_status jitcache_launch_writer(const jitcache_model* model, int32_t layer,
                                       const jitcache_writer_launch* args, void* stream) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
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
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
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

void jitcache_string_free(char* text) { std::free(text); }

jitcache_status jitcache_model_describe(const jitcache_model* model, char** out) {
  return guarded(__func__, [&](const char* self) {
    if (model == nullptr) return null_argument(self, "model");
    const auto pass = model->gate.enter();
    if (!pass) return closed_handle(self, "model");
    if (out == nullptr) return null_argument(self, "out");
    return hand_out(describe(*model->model), out);
  });
}

jitcache_status jitcache_resolve_scales(const char* checkpoint, const char* scales_override,
                                        const char* revision, char** out) {
  return guarded(__func__, [&](const char* self) {
    if (checkpoint == nullptr) return null_argument(self, "checkpoint");
    if (out == nullptr) return null_argument(self, "out");
    if (*checkpoint == '\0')
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(self) + ": checkpoint is empty");
    ResolveOptions options;
    options.checkpoint_dir = checkpoint;
    if (scales_override != nullptr) options.override_file = std::filesystem::path(scales_override);
    if (!is_unset(revision)) options.checkpoint_revision = std::string(revision);
    const auto resolved = resolve_scales(options);
    if (!resolved) return fail(resolved.error());
    return hand_out(scales::to_json(*resolved), out);
  });
}

jitcache_status jitcache_host_bf16_from_float(const float* in, uint16_t* out, size_t count) {
  return guarded(__func__, [&](const char* self) {
    if (count == 0) return JITCACHE_OK;
    if (in == nullptr) return null_argument(self, "in");
    if (out == nullptr) return null_argument(self, "out");
    for (std::size_t i = 0; i < count; ++i) out[i] = jc::float_to_bf16(in[i]);
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_host_write(float scale, jitcache_rope rope, const jitcache_writer_launch* args) {
  return guarded(__func__, [&](const char* self) { return host_kernel(self, scale, rope, args); });
}

jitcache_status jitcache_host_gather(float scale, jitcache_rope rope, const jitcache_gather_launch* args) {
  return guarded(__func__, [&](const char* self) { return host_kernel(self, scale, rope, args); });
}

jitcache_status jitcache_model_host_write(const jitcache_model* model, int32_t layer,
                                          const jitcache_writer_launch* args) {
  return guarded(__func__, [&](const char* self) { return model_host_kernel(self, model, layer, args); });
}

jitcache_status jitcache_model_host_gather(const jitcache_model* model, int32_t layer,
                                           const jitcache_gather_launch* args) {
  return guarded(__func__, [&](const char* self) { return model_host_kernel(self, model, layer, args); });
}

uint32_t jitcache_record_bytes(jitcache_rope rope) {
  const std::optional<RopeFormat> format = read_rope(rope);
  return format ? static_cast<uint32_t>(record_bytes(*format)) : 0;
}

void jitcache_compile_request_init(jitcache_compile_request* request) {
  if (request == nullptr) return;
  *request = jitcache_compile_request{};
  request->struct_size = sizeof *request;
  request->kind = JITCACHE_KIND_CUDA;
}

jitcache_status jitcache_declare_family(jitcache_runtime* runtime, const char* schema_json) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (schema_json == nullptr) return null_argument(self, "schema_json");
    const auto schema = read_schema(self, schema_json);
    if (!schema) return fail(schema.error());
    if (auto declared = runtime->runtime->declare_family(*schema); !declared) return fail(declared.error());
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_compile(jitcache_runtime* runtime, const jitcache_compile_request* request,
                                 jitcache_kernel** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (request == nullptr) return null_argument(self, "request");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto read = read_request(self, request);
    if (!read) return fail(read.error());
    auto compiled = runtime->runtime->compile(*read);
    if (!compiled) return fail(compiled.error());
    return hand_out_kernel(std::move(*compiled), out);
  });
}

jitcache_status jitcache_lookup(jitcache_runtime* runtime, const char* family, const jitcache_fact* spec,
                                size_t num_spec, const char* target, jitcache_lookup_outcome* outcome,
                                jitcache_kernel** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (family == nullptr) return null_argument(self, "family");
    if (target == nullptr) return null_argument(self, "target");
    if (outcome == nullptr) return null_argument(self, "outcome");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto facts = read_spec(std::string(self) + ": ", spec, num_spec);
    if (!facts) return fail(facts.error());
    auto found = runtime->runtime->lookup(family, *facts, target);
    if (!found) return fail(found.error());
    *out = nullptr;
    switch (found->outcome) {
      case LookupOutcome::hit: *outcome = JITCACHE_LOOKUP_HIT; return hand_out_kernel(std::move(*found->kernel), out);
      case LookupOutcome::miss: *outcome = JITCACHE_LOOKUP_MISS; break;
      case LookupOutcome::verify: *outcome = JITCACHE_LOOKUP_VERIFY; break;
    }
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_kernel_cubin(const jitcache_kernel* kernel, const uint8_t** data, size_t* size) {
  return guarded(__func__, [&](const char* self) {
    if (kernel == nullptr) return null_argument(self, "kernel");
    if (data == nullptr) return null_argument(self, "data");
    if (size == nullptr) return null_argument(self, "size");
    *data = kernel->kernel.cubin.data();
    *size = kernel->kernel.cubin.size();
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_kernel_describe(const jitcache_kernel* kernel, char** out) {
  return guarded(__func__, [&](const char* self) {
    if (kernel == nullptr) return null_argument(self, "kernel");
    if (out == nullptr) return null_argument(self, "out");
    return hand_out(to_json(kernel->kernel), out);
  });
}

void jitcache_kernel_release(jitcache_kernel* kernel) { delete kernel; }

}  // extern "C"
