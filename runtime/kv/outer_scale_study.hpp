// The mechanism the product exists for, reproduced on synthetic data: post-RMSNorm
// latents whose magnitude spans layers from max_abs 0.02 (shallow) to 5.2 (deep),
// quantized with the identity scale and with the calibrated s_l = max_abs / 2688.
// Without a scale, the shallow layers' E4M3 block scales fall below 2^-6 into the
// subnormal range and the round-trip error grows; with it, every layer sees the deep
// layers' error.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"

namespace jitcache::study {

// The brief's span of layer magnitudes, shallow to deep.
std::span<const float> default_layer_max_abs();

// Synthetic post-RMSNorm latents, float32 [tokens, 512]: per-channel RMSNorm gains,
// Gaussian activations with rare outliers, each token RMS-normalized, then the layer
// scaled so that its max |x| is exactly `max_abs`. Deterministic in `seed`.
std::vector<float> synthetic_latents(std::size_t tokens, float max_abs, std::uint64_t seed);

struct LayerRow {
  float max_abs = 0.0f;
  float calibrated_scale = 0.0f;     // max_abs / 2688
  double identity_rel_rms = 0.0;     // relative RMS round-trip error, latent, scale 1
  double calibrated_rel_rms = 0.0;   // the same with the calibrated scale
  double identity_subnormal_blocks = 0.0;  // share of block scales below E4M3's 2^-6
  double calibrated_subnormal_blocks = 0.0;
};

struct StudyOptions {
  std::size_t tokens = 1024;
  std::uint64_t seed = 20261129;
  RecordFormat rope = RecordFormat::b12x_432;
};

// One row per layer magnitude, computed with the host executor (the GPU's numerics).
Result<std::vector<LayerRow>> run_outer_scale_study(std::span<const float> layer_max_abs,
                                                    const StudyOptions& options);

}  // namespace jitcache::study
