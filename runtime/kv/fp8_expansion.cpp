#include "runtime/kv/fp8_expansion.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernel_templates/nvfp4_mla_formats.cuh"

namespace jitcache::kv {
namespace {

constexpr std::size_t k_glm_bytes = 416;
constexpr int k_glm_scales = 256;

float e2m1_value(unsigned nibble) {
  static constexpr float k_magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = k_magnitude[nibble & 7u];
  return (nibble & 8u) != 0u ? -m : m;
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

Result<Fp8Row> expand_glm_row_to_fp8(std::span<const std::uint8_t> record, float kv_global_scale) {
  if (record.size() != k_glm_bytes)
    return make_error(ErrorCode::invalid_argument, "a flashinfer-glm-416 record is 416 bytes, got " +
                                                       std::to_string(record.size()));
  if (!(kv_global_scale > 0.0f) || !std::isfinite(kv_global_scale))
    return make_error(ErrorCode::invalid_argument,
                      "kv_global_scale: expected a positive finite fp32, got " + std::to_string(kv_global_scale));
  // The largest scale byte: non-negative E4M3 codes order as their values (the writer
  // stores no sign and no NaN code).
  std::uint8_t max_byte = 0;
  for (int b = 0; b < jc::k_num_blocks; ++b) max_byte = std::max(max_byte, record[k_glm_scales + b]);
  const float lower = jc::e4m3_to_float(max_byte) * (6.0f / 448.0f);
  std::uint32_t scale_bits = bits_of(lower);
  if ((scale_bits & 0x007fffffu) != 0u) scale_bits = (scale_bits + 0x00800000u) & 0x7f800000u;
  const float compute_scale = float_of(scale_bits);

  Fp8Row row;
  row.row_scale = compute_scale * kv_global_scale;
  for (int b = 0; b < jc::k_num_blocks; ++b) {
    const float multiplier = compute_scale > 0.0f ? jc::e4m3_to_float(record[k_glm_scales + b]) / compute_scale : 0.0f;
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * b + i;
      const unsigned byte = record[static_cast<std::size_t>(e / 2)];
      const float q = e2m1_value(e % 2 == 0 ? byte & 0xfu : byte >> 4);
      row.codes[static_cast<std::size_t>(e)] = jc::float_to_e4m3_satfinite(q * multiplier);
    }
  }
  return row;
}

std::array<float, 512> fp8_row_values(const Fp8Row& row) {
  std::array<float, 512> out{};
  for (std::size_t e = 0; e < out.size(); ++e) out[e] = jc::e4m3_to_float(row.codes[e]) * row.row_scale;
  return out;
}

}  // namespace jitcache::kv
