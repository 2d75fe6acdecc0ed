// The C ABI's host kernels: jitcache_host_write/gather, their forms for any record format
// and their per-layer forms, which run the writer and gather kernels on the CPU
// (runtime/kv/host_executor.hpp), with the checks of their arguments; bf16 conversion and
// the record sizes.
#include "jitcache/jitcache.h"

#include <cstddef>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "jitcache/runtime.hpp"
#include "runtime/capi/c_api_support.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/model_call.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/kv_tools.hpp"

namespace jitcache::capi {
namespace {

// A float as the shortest text that reads back as it ("0.5", "7.440476e-06").
std::string shortest(float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
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
// the device kernel does. A per-token kernel given an outer scale refuses to run (status
// bit jc::fmt::k_status_per_token_scale_given): that is the caller's error, not a bit to
// find later.
template <class Args>
jitcache_status run_on_host(const char* self, LatentScale variant, RecordFormat format, const Args& args,
                            float scale) {
  auto params = host_params(args);
  if constexpr (std::is_same_v<Args, jitcache_gather_launch>) {
    // The dense default is the format's row width (512 for b12x-304, which has no RoPE).
    if (args.out_stride == 0) params.out_stride = static_cast<std::int64_t>(gathered_row_elems(format));
  }
  Result<jc::u32> bits = [&] {
    if constexpr (std::is_same_v<Args, jitcache_writer_launch>)
      return host_run_writer(variant, format, params, scale);
    else
      return host_run_gather(variant, format, params, scale);
  }();
  if (!bits) {
    Error error = bits.error();
    error.message = std::string(self) + ": " + error.message;
    return fail(error);
  }
  if ((*bits & jc::fmt::k_status_per_token_scale_given) != 0)
    return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                std::string(self) + ": scale is " + shortest(scale) + ", but " + to_string(format) +
                    " per-token records carry each token's own scale: the launch scale must be exactly 1.0 "
                    "(the kernel refused, status bit " +
                    std::to_string(jc::fmt::k_status_per_token_scale_given) + ")");
  return JITCACHE_OK;
}

// The variant a per-layer scale needs (identity exactly at 1.0), the scale checked as a
// scales file's value.
Result<kv::LatentScaleChoice> per_layer_choice(const char* self, float scale) {
  auto choice = kv::choose_latent_scale(static_cast<double>(scale), "scale");
  if (!choice) {
    Error error = choice.error();
    error.message = std::string(self) + ": " + error.message;
    return std::unexpected(error);
  }
  return choice;
}

template <class Args>
jitcache_status host_kernel(const char* self, float scale, jitcache_rope rope, const Args* args) {
  if (args == nullptr) return null_argument(self, "args");
  const std::optional<RecordFormat> format = read_rope(rope);
  if (!format) return unknown_rope(self, rope);
  const auto choice = per_layer_choice(self, scale);
  if (!choice) return fail(choice.error());
  return run_on_host(self, choice->variant, *format, *args, choice->value);
}

template <class Args>
jitcache_status host_kernel_format(const char* self, float scale, std::int32_t format_value,
                                   std::int32_t latent, const Args* args) {
  if (args == nullptr) return null_argument(self, "args");
  const std::optional<RecordFormat> format = read_format(format_value);
  if (!format) return unknown_format(self, "format", format_value);
  switch (latent) {
    case JITCACHE_LATENT_PER_LAYER: {
      const auto choice = per_layer_choice(self, scale);
      if (!choice) return fail(choice.error());
      return run_on_host(self, choice->variant, *format, *args, choice->value);
    }
    case JITCACHE_LATENT_PER_TOKEN:
      return run_on_host(self, LatentScale::per_token, *format, *args, scale);
    default:
      return fail(JITCACHE_ERROR_INVALID_ARGUMENT,
                  std::string(self) + ": latent is " + std::to_string(latent) +
                      ", expected JITCACHE_LATENT_PER_LAYER (0) or JITCACHE_LATENT_PER_TOKEN (1)");
  }
}

template <class Args>
jitcache_status model_host_kernel(const char* self, const jitcache_model* model, int32_t layer,
                                  const Args* args) {
  return on_model(self, model, args, "args", [&](const PreparedModel& m) {
    const LayerBinding* b = m.layer(layer);
    if (b == nullptr) return no_layer(self, m, layer);
    return run_on_host(self, b->latent_scale, m.format(), *args, b->scale);
  });
}

}  // namespace
}  // namespace jitcache::capi

using namespace jitcache;
using namespace jitcache::capi;

extern "C" {

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
  const std::optional<RecordFormat> format = read_rope(rope);
  return format ? static_cast<uint32_t>(record_bytes(*format)) : 0;
}

jitcache_status jitcache_host_write_format(float scale, int32_t format, int32_t latent,
                                           const jitcache_writer_launch* args) {
  return guarded(__func__,
                 [&](const char* self) { return host_kernel_format(self, scale, format, latent, args); });
}

jitcache_status jitcache_host_gather_format(float scale, int32_t format, int32_t latent,
                                            const jitcache_gather_launch* args) {
  return guarded(__func__,
                 [&](const char* self) { return host_kernel_format(self, scale, format, latent, args); });
}

uint32_t jitcache_format_record_bytes(int32_t format) {
  const std::optional<RecordFormat> known = read_format(format);
  return known ? static_cast<uint32_t>(record_bytes(*known)) : 0;
}

}  // extern "C"
