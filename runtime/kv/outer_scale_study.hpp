// The mechanism the product exists for, reproduced on synthetic data: post-RMSNorm
// latents whose magnitude spans layers from max_abs 0.02 (shallow) to 5.2 (deep),
// quantized with the identity scale, with the calibrated per-layer s_l = max_abs / 2688,
// and with a per-token s_t stored in each record. Without a scale, the shallow layers'
// E4M3 block scales fall below 2^-6 into the subnormal range and the round-trip error
// grows; with either scale, every layer sees the deep layers' error.
#pragma once

#include <cstdint>
#include <optional>
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

// The three ways the study scales a layer's latent, in the order of its columns.
enum class StudyMode { identity, calibrated, per_token };
inline constexpr StudyMode k_study_modes[] = {StudyMode::identity, StudyMode::calibrated,
                                              StudyMode::per_token};
const char* to_string(StudyMode mode);  // "identity", "calibrated", "per-token"

struct ModeResult {
  double rel_rms = 0.0;           // relative RMS round-trip error of the latent
  double subnormal_blocks = 0.0;  // share of block scales below E4M3's 2^-6
  // A format whose reader expands each row to E4M3 before its MMAs (flashinfer-glm-416,
  // runtime/kv/fp8_expansion.hpp): the error that expansion adds to the gathered bf16
  // row, and the expanded row's own round-trip error, both relative RMS against the
  // latent as rel_rms is. None for the other formats.
  std::optional<double> fp8_added_rel_rms;
  std::optional<double> fp8_rel_rms;
};

// Whether the engine that reads `format` expands its rows to FP8 (the study then measures
// the expansion too).
bool reader_expands_to_fp8(RecordFormat format);

struct LayerRow {
  float max_abs = 0.0f;
  float calibrated_scale = 0.0f;  // max_abs / 2688
  // One result per mode; none where the study's format is not written with that mode
  // (b12x-304 takes per-token only; b12x-432, flashmla-352 and flashinfer-glm-416 take no
  // per-token).
  std::optional<ModeResult> identity;
  std::optional<ModeResult> calibrated;
  std::optional<ModeResult> per_token;
  StudyMode lowest = StudyMode::identity;  // the measured mode with the lowest error

  const std::optional<ModeResult>& result(StudyMode mode) const;
};

struct StudyOptions {
  std::size_t tokens = 1024;
  std::uint64_t seed = 20261129;
  // b12x-368: the one format written with all three modes. The latent of b12x-432,
  // b12x-368 and b12x-304 is the same bytes, so their errors are the same; flashmla-352
  // floors its block scales at 2^-9, which changes the smallest layers' identity error.
  RecordFormat format = RecordFormat::b12x_368;
};

// Whether the study can measure `mode` in `format` (the calibrated mode is a dynamic
// kernel, even when a layer's calibrated scale happens to be 1.0).
bool study_measures(RecordFormat format, StudyMode mode);

// One row per layer magnitude, computed with the host executor (the GPU's numerics). The
// magnitudes are the study's default span, or a checkpoint's layers (the CLI's
// --checkpoint: each layer's recorded max_abs, else s_l * 2688).
Result<std::vector<LayerRow>> run_outer_scale_study(std::span<const float> layer_max_abs,
                                                    const StudyOptions& options);

}  // namespace jitcache::study
