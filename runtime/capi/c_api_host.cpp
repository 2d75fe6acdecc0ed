// The C ABI's host kernels: jitcache_host_write/gather and their per-layer forms, which
// run the writer and gather kernels on the CPU (runtime/kv/host_executor.hpp), with the
// checks of their arguments; bf16 conversion and the record size.
#include "jitcache/jitcache.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "jitcache/runtime.hpp"
#include "runtime/capi/c_api_support.hpp"
#include "runtime/capi/handles.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/kv_tools.hpp"

namespace jitcache::capi {
namespace {

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
jitcache_status run_on_host(const char* self, LatentScale variant, RecordFormat rope, const Args& args,
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
  const std::optional<RecordFormat> format = read_rope(rope);
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
  return run_on_host(self, b->latent_scale, model->model->format(), *args, b->scale);
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

}  // extern "C"
