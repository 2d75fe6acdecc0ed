// What FlashInfer's GLM NVFP4 reader does to a flashinfer-glm-416 record before its FP8
// MMAs: each gathered row is expanded in shared memory to 512 E4M3 values on one
// power-of-two grid per row, so every latent value is rounded once more. The host twin of
// that step, for measuring the error it adds (`jitcache kv study --format
// flashinfer-glm-416`, docs/record-formats.md).
//
// The reader (flashinfer-ai/flashinfer be75a2b19137e93b29618c5c03a36ef2f30e712c,
// include/flashinfer/attention/sparse_mla_sm120/common/nvfp4_to_fp8.cuh,
// expand_nvfp4_kv_tile), per row:
//   max_scale     = the largest of the 32 E4M3 block scales
//   compute_scale = fp32(max_scale * fp32(6 / 448)) raised to a power of two (0 for 0)
//   code          = E4M3 (nearest even, satfinite) of f16(E2M1) * f16(block / compute_scale)
//   row scale     = fp32(compute_scale * kv_global_scale)
// and the MMA sees code * row scale. The f16 steps are exact here: block / compute_scale
// has at most four significant bits and lies in [2^-12, 448 / 6], and its product with an
// E2M1 value at most five bits in [2^-13, 448], all normal f16 values; so this twin
// computes them in fp32.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "jitcache/error.hpp"

namespace jitcache::kv {

struct Fp8Row {
  std::array<std::uint8_t, 512> codes{};  // E4M3
  float row_scale = 0.0f;                 // compute_scale * kv_global_scale
};

// One 416-byte record. invalid_argument for a record of another size or a global scale
// that is not positive and finite.
Result<Fp8Row> expand_glm_row_to_fp8(std::span<const std::uint8_t> record, float kv_global_scale);

// The 512 values the reader's MMA multiplies: code * row scale, each an fp32 product.
std::array<float, 512> fp8_row_values(const Fp8Row& row);

}  // namespace jitcache::kv
