// The C ABI (include/jitcache/jitcache.h) over the C++ runtime: the library's version,
// status names and logging, runtimes and their cache, models prepared from a checkpoint,
// their queries and device launches, and scale resolution. The host kernels are in
// c_api_host.cpp, the compile API in c_api_compile.cpp. Every entry point catches
// everything: a C caller cannot unwind a C++ exception.
#include "jitcache/jitcache.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "runtime/capi/c_api_support.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/model_call.hpp"
#include "runtime/compiled_kernel_json.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/scales/scale_resolver.hpp"

namespace jitcache::capi {
namespace {

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

// The fields through cache_max_bytes are ABI 1's first runtime options.
constexpr std::size_t k_runtime_options_v1_size =
    offsetof(jitcache_runtime_options, cache_max_bytes) + sizeof(std::uint64_t);
constexpr std::size_t k_prepare_options_v1_size =
    offsetof(jitcache_prepare_options, revision) + sizeof(const char*);
// jitcache_prepare_options.format's default: the record of `rope`.
constexpr std::int32_t k_format_from_rope = -1;
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
  if (options.no_compile > 1)
    return make_error(ErrorCode::invalid_argument,
                      field + "no_compile is " + std::to_string(options.no_compile) +
                          ", expected 1 (on), 0 (off) or negative for JITCACHE_NO_COMPILE");
  return options;
}

// The model the options name; a status other than JITCACHE_OK is the options' error.
jitcache_status read_model(const char* self, const jitcache_prepare_options& options, ModelSpec& spec) {
  if (options.checkpoint == nullptr) return null_argument(self, "checkpoint");
  spec.checkpoint = options.checkpoint;
  if (options.format == k_format_from_rope) {
    const std::optional<RecordFormat> rope = read_rope(options.rope);
    if (!rope) return unknown_rope(self, options.rope);
    spec.format = *rope;
  } else {
    const std::optional<RecordFormat> format = read_format(options.format);
    if (!format) return unknown_format(self, "options.format", options.format);
    spec.format = *format;
  }
  switch (options.latent_scale) {
    case JITCACHE_LATENT_PER_LAYER: break;  // each layer's scale decides (the format's default)
    case JITCACHE_LATENT_PER_TOKEN:
      if (!format_allows(spec.format, LatentScale::per_token))
        return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                    std::string(self) + ": options.latent_scale is JITCACHE_LATENT_PER_TOKEN, but format " +
                        to_string(spec.format) + " has no per-token records (b12x-368 and b12x-304 have)");
      spec.latent_scale = LatentScale::per_token;
      break;
    default:
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                  std::string(self) + ": options.latent_scale is " + std::to_string(options.latent_scale) +
                      ", expected JITCACHE_LATENT_PER_LAYER (0) or JITCACHE_LATENT_PER_TOKEN (1)");
  }
  if (options.target != nullptr) spec.target = options.target;
  if (options.scales_override != nullptr) spec.scales_override = std::filesystem::path(options.scales_override);
  if (!is_unset(options.revision)) spec.checkpoint_revision = std::string(options.revision);
  return JITCACHE_OK;
}

jitcache_status prepare_model(const char* self, jitcache_runtime* runtime,
                              const jitcache_prepare_options& options, jitcache_model** out) {
  if (runtime == nullptr) return null_argument(self, "runtime");
  if (options.checkpoint == nullptr) return null_argument(self, "checkpoint");
  if (out == nullptr) return null_argument(self, "out");
  if (t_log_callback_depth > 0) return refused_in_log_callback(self);
  ModelSpec spec;
  if (const jitcache_status read = read_model(self, options, spec); read != JITCACHE_OK) return read;
  auto prepared = runtime->runtime->prepare(spec);
  if (!prepared) return fail(prepared.error());
  *out = new jitcache_model{std::move(*prepared), {}};
  return JITCACHE_OK;
}

// The RoPE name of the formats that have one ("bf16", "fp8"), else null: the "rope" key
// the description had before formats existed.
nlohmann::json rope_alias_or_null(RecordFormat format) {
  const char* alias = k_record_formats[format].rope_alias;
  return alias != nullptr ? nlohmann::json(alias) : nlohmann::json(nullptr);
}

nlohmann::json describe(const PreparedModel& model) {
  const PrepareStats& s = model.stats();
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelInfo& k : model.kernels()) {
    nlohmann::json kernel = kernel_info_json(k);
    kernel["rope"] = rope_alias_or_null(k.format);
    kernel["entry"] = k.entry;
    kernel["compiled_now"] = k.compiled_now;
    kernel["loaded"] = k.loaded;
    kernel["ptx_fallback"] = k.ptx_fallback;
    kernels.push_back(std::move(kernel));
  }
  return {{"target", model.target()},
          {"format", to_string(model.format())},
          {"rope", rope_alias_or_null(model.format())},
          {"stats",
           {{"variants", s.variants},
            {"cached", s.cached},
            {"compiled", s.compiled},
            {"from_remote", s.remote},
            {"from_provider", s.provider},
            {"stored", s.stored},
            {"wall_ms", s.wall_ms}}},
          {"kernels", std::move(kernels)},
          {"scales", scales::to_json(model.scales())}};
}

}  // namespace
}  // namespace jitcache::capi

using namespace jitcache;
using namespace jitcache::capi;

extern "C" {

const char* jitcache_version(void) { return JITCACHE_VERSION; }

uint32_t jitcache_abi_version(void) { return JITCACHE_ABI_VERSION; }

const char* jitcache_status_name(jitcache_status status) {
  switch (jitcache::capi::abi_enum_value(status)) {
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
  options->no_compile = -1;
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
    if (!is_unset(options.providers)) cxx.providers = split_provider_list(options.providers);
    // Zero from a caller whose struct_size ends before it reads as "the environment" too:
    // read_input_struct fills what the caller's struct lacks from _init.
    if (options.no_compile >= 0) cxx.no_compile = options.no_compile == 1;
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

jitcache_status jitcache_runtime_stats(jitcache_runtime* runtime, char** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (out == nullptr) return null_argument(self, "out");
    if (runtime->closed) return closed_handle(self, "runtime");
    auto document = runtime->runtime->stats_json();
    if (!document) return fail(document.error());
    return hand_out_text(*document, out);
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
  options->format = k_format_from_rope;
  options->latent_scale = JITCACHE_LATENT_PER_LAYER;
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
    return on_model(self, model, out, "out", [&](const PreparedModel& m) {
      *out = static_cast<int32_t>(m.layers().size());
      return JITCACHE_OK;
    });
  });
}

jitcache_status jitcache_model_layer(const jitcache_model* model, int32_t layer, jitcache_layer_info* out) {
  return guarded(__func__, [&](const char* self) {
    return on_model(self, model, out, "out", [&](const PreparedModel& m) {
      const LayerBinding* b = m.layer(layer);
      if (b == nullptr) return no_layer(self, m, layer);
      out->layer = b->layer;
      out->scale = b->scale;
      out->mode = to_c(b->mode);
      out->source = to_c(b->source);
      return JITCACHE_OK;
    });
  });
}

jitcache_status jitcache_model_stats(const jitcache_model* model, jitcache_prepare_stats* out) {
  return guarded(__func__, [&](const char* self) {
    return on_model(self, model, out, "out", [&](const PreparedModel& m) {
      const PrepareStats& s = m.stats();
      out->variants = s.variants;
      out->cached = s.cached;
      out->compiled = s.compiled;
      out->wall_ms = s.wall_ms;
      return JITCACHE_OK;
    });
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
    return on_model(self, model, args, "args", [&](const PreparedModel& m) {
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
      const Status launched = m.launch_writer(layer, a, stream);
      return launched ? JITCACHE_OK : fail(launched.error());
    });
  });
}

jitcache_status jitcache_launch_gather(const jitcache_model* model, int32_t layer,
                                       const jitcache_gather_launch* args, void* stream) {
  return guarded(__func__, [&](const char* self) {
    return on_model(self, model, args, "args", [&](const PreparedModel& m) {
      GatherLaunch a;
      a.cache = args->cache;
      a.num_slots = args->num_slots;
      a.slots = args->slots;
      a.num_rows = args->num_rows;
      a.out = args->out;
      // The dense default is the format's row: 576, or 512 without RoPE (b12x-304).
      a.out_stride = args->out_stride != 0 ? args->out_stride
                                           : static_cast<std::int64_t>(gathered_row_elems(m.format()));
      a.status = args->status;
      const Status launched = m.launch_gather(layer, a, stream);
      return launched ? JITCACHE_OK : fail(launched.error());
    });
  });
}

jitcache_status jitcache_model_describe(const jitcache_model* model, char** out) {
  return guarded(__func__, [&](const char* self) {
    return on_model(self, model, out, "out", [&](const PreparedModel& m) { return hand_out(describe(m), out); });
  });
}

jitcache_status jitcache_runtime_coverage(jitcache_runtime* runtime, const jitcache_prepare_options* given,
                                         char** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (given == nullptr) return null_argument(self, "options");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto options =
        read_input_struct(std::string(self) + ": options.", given, k_prepare_options_v1_size,
                          &jitcache_prepare_options_init, "jitcache_prepare_options_init");
    if (!options) return fail(options.error());
    ModelSpec spec;
    if (const jitcache_status read = read_model(self, *options, spec); read != JITCACHE_OK) return read;
    auto covered = runtime->runtime->coverage(spec);
    if (!covered) return fail(covered.error());
    return hand_out(coverage_json(*covered), out);
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

}  // extern "C"
