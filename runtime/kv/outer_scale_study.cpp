#include "runtime/kv/outer_scale_study.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernel_templates/nvfp4_mla.cuh"
#include "runtime/kv/kv_tools.hpp"

namespace jitcache::study {
namespace {

constexpr float k_layer_max_abs[] = {0.02f, 0.05f, 0.1f, 0.2f, 0.5f, 1.0f, 2.0f, 5.2f};

// Share of block-scale bytes below E4M3's smallest normal (code 0x08) in a record set.
double subnormal_block_share(std::span<const std::uint8_t> records, RecordFormat rope) {
  const std::size_t rb = static_cast<std::size_t>(record_bytes(rope));
  std::size_t blocks = 0, subnormal = 0;
  for (std::size_t off = 0; off + rb <= records.size(); off += rb) {
    for (int b = 0; b < jc::k_num_blocks; ++b) {
      const std::uint8_t sf = records[off + jc::k_scales_offset + b] & 0x7f;
      ++blocks;
      if (sf < 0x08) ++subnormal;
    }
  }
  return blocks == 0 ? 0.0 : static_cast<double>(subnormal) / static_cast<double>(blocks);
}

}  // namespace

std::span<const float> default_layer_max_abs() { return k_layer_max_abs; }

std::vector<float> synthetic_latents(std::size_t tokens, float max_abs, std::uint64_t seed) {
  constexpr std::size_t dim = jc::k_latent_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform;
  // RMSNorm's learned gains differ per channel; a log-normal spread of about 1.4x.
  std::vector<float> gain(dim);
  for (float& g : gain) g = std::exp(0.35f * normal(rng));
  std::vector<float> x(tokens * dim);
  float layer_max = 0.0f;
  for (std::size_t t = 0; t < tokens; ++t) {
    float* row = x.data() + t * dim;
    double sum_sq = 0.0;
    for (std::size_t c = 0; c < dim; ++c) {
      float z = normal(rng);
      if (uniform(rng) < 0.002f) z *= 6.0f;  // rare outlier activations
      row[c] = z;
      sum_sq += static_cast<double>(z) * z;
    }
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + 1e-6));
    for (std::size_t c = 0; c < dim; ++c) {
      row[c] = row[c] * inv_rms * gain[c];
      layer_max = std::max(layer_max, std::fabs(row[c]));
    }
  }
  const float to_layer = max_abs / layer_max;
  for (float& v : x) v *= to_layer;
  return x;
}

Result<std::vector<LayerRow>> run_outer_scale_study(std::span<const float> layer_max_abs,
                                                    const StudyOptions& options) {
  std::vector<LayerRow> rows;
  for (std::size_t i = 0; i < layer_max_abs.size(); ++i) {
    LayerRow row;
    row.max_abs = layer_max_abs[i];
    // The same activation pattern in every layer, only the magnitude differs, so the
    // rows isolate the effect of magnitude.
    const auto x = synthetic_latents(options.tokens, row.max_abs, options.seed);

    kv::ErrorOptions identity;
    identity.rope = options.rope;
    const auto id = JC_TRY(kv::measure_error(x, jc::k_latent_dim, identity));
    kv::ErrorOptions calibrated = identity;
    calibrated.source = kv::ScaleSource::calibrated;
    const auto cal = JC_TRY(kv::measure_error(x, jc::k_latent_dim, calibrated));
    row.calibrated_scale = cal.scale.value;
    row.identity_rel_rms = id.latent.rel_rms;
    row.calibrated_rel_rms = cal.latent.rel_rms;

    kv::RecordOptions records_identity;
    records_identity.rope = options.rope;
    const auto rec_id = JC_TRY(kv::quantize(x, jc::k_latent_dim, records_identity));
    kv::RecordOptions records_calibrated = records_identity;
    records_calibrated.scale = cal.scale;
    const auto rec_cal = JC_TRY(kv::quantize(x, jc::k_latent_dim, records_calibrated));
    row.identity_subnormal_blocks = subnormal_block_share(rec_id, options.rope);
    row.calibrated_subnormal_blocks = subnormal_block_share(rec_cal, options.rope);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace jitcache::study
