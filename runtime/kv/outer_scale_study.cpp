#include "runtime/kv/outer_scale_study.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernel_templates/nvfp4_mla_formats.cuh"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/fp8_expansion.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "support/enum_names.hpp"

namespace jitcache::study {
namespace {

constexpr float k_layer_max_abs[] = {0.02f, 0.05f, 0.1f, 0.2f, 0.5f, 1.0f, 2.0f, 5.2f};

// Share of block-scale bytes below E4M3's smallest normal (code 0x08) in a record set,
// wherever the format keeps them.
double subnormal_block_share(std::span<const std::uint8_t> records, RecordFormat format) {
  const jc::fmt::Layout layout = jc::fmt::layout(k_record_formats[format].device);
  const auto rb = static_cast<std::size_t>(layout.record_bytes);
  std::size_t blocks = 0, subnormal = 0;
  // A page-major record's scales lie in its page's footer; only the quantized blocks have one.
  const int scaled_blocks = layout.quant_dim / jc::k_block_elems;
  for (std::size_t slot = 0; (slot + 1) * rb <= records.size(); ++slot) {
    for (int b = 0; b < scaled_blocks; ++b) {
      const auto at = jc::fmt::record_byte(layout, static_cast<jc::i64>(slot), jc::fmt::scale_position(layout, b));
      const std::uint8_t sf = records[static_cast<std::size_t>(at)] & 0x7f;
      ++blocks;
      if (sf < 0x08) ++subnormal;
    }
  }
  return blocks == 0 ? 0.0 : static_cast<double>(subnormal) / static_cast<double>(blocks);
}

// The error of one mode and the share of subnormal block scales its records hold.
Result<ModeResult> measure(std::span<const float> x, RecordFormat format, kv::ScaleSource source,
                           kv::LatentScaleChoice scale) {
  kv::ErrorOptions error;
  error.source = source;
  error.scale = scale;
  error.format = format;
  const kv::ErrorReport report = JC_TRY(kv::measure_error(x, jc::k_latent_dim, error));
  kv::RecordOptions records_options;
  records_options.scale = report.scale;
  records_options.format = format;
  const auto records = JC_TRY(kv::quantize(x, jc::k_latent_dim, records_options));
  ModeResult result{report.latent.rel_rms, subnormal_block_share(records, format), std::nullopt, std::nullopt};
  if (reader_expands_to_fp8(format)) {
    const auto gathered = JC_TRY(kv::dequantize(records, records_options));
    const std::size_t width = kv::output_columns(format);
    const std::size_t rb = static_cast<std::size_t>(record_bytes(format));
    // The reader's global scale is the one the records were written with: s_l, 1.0 for identity.
    const float global = report.scale.variant == LatentScale::identity ? 1.0f : report.scale.value;
    double added = 0.0, total = 0.0, reference = 0.0;
    const std::size_t tokens = x.size() / jc::k_latent_dim;
    for (std::size_t t = 0; t < tokens; ++t) {
      const kv::Fp8Row row =
          JC_TRY(kv::expand_glm_row_to_fp8(std::span(records).subspan(t * rb, rb), global));
      const std::array<float, 512> expanded = kv::fp8_row_values(row);
      for (std::size_t c = 0; c < jc::k_latent_dim; ++c) {
        const double in = jc::bf16_to_float(jc::float_to_bf16(x[t * jc::k_latent_dim + c]));
        const double bf16_out = gathered[t * width + c];
        added += (expanded[c] - bf16_out) * (expanded[c] - bf16_out);
        total += (expanded[c] - in) * (expanded[c] - in);
        reference += in * in;
      }
    }
    result.fp8_added_rel_rms = reference > 0.0 ? std::sqrt(added / reference) : 0.0;
    result.fp8_rel_rms = reference > 0.0 ? std::sqrt(total / reference) : 0.0;
  }
  return result;
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

const char* to_string(StudyMode mode) { return enum_name(mode, {"identity", "calibrated", "per-token"}); }

const std::optional<ModeResult>& LayerRow::result(StudyMode mode) const {
  switch (mode) {
    case StudyMode::identity: return identity;
    case StudyMode::calibrated: return calibrated;
    case StudyMode::per_token: return per_token;
  }
  return identity;
}

bool reader_expands_to_fp8(RecordFormat format) { return format == RecordFormat::flashinfer_glm_416; }

bool study_measures(RecordFormat format, StudyMode mode) {
  switch (mode) {
    case StudyMode::identity: return format_allows(format, LatentScale::identity);
    case StudyMode::calibrated: return format_allows(format, LatentScale::dynamic);
    case StudyMode::per_token: return format_allows(format, LatentScale::per_token);
  }
  return false;
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
    // s_l from the bf16-rounded latent, as kv::measure_error calibrates it.
    float max_abs = 0.0f;
    for (float v : x) max_abs = std::max(max_abs, std::fabs(jc::bf16_to_float(jc::float_to_bf16(v))));
    row.calibrated_scale = kv::calibrated_latent_scale(max_abs).value;

    if (study_measures(options.format, StudyMode::identity))
      row.identity = JC_TRY(measure(x, options.format, kv::ScaleSource::given, {}));
    if (study_measures(options.format, StudyMode::calibrated))
      row.calibrated = JC_TRY(measure(x, options.format, kv::ScaleSource::calibrated, {}));
    if (study_measures(options.format, StudyMode::per_token))
      row.per_token = JC_TRY(
          measure(x, options.format, kv::ScaleSource::given, kv::per_token_latent_scale()));
    // The first of equal errors wins, in column order.
    bool found = false;
    for (StudyMode mode : k_study_modes) {
      const auto& result = row.result(mode);
      if (result && (!found || result->rel_rms < row.result(row.lowest)->rel_rms)) {
        row.lowest = mode;
        found = true;
      }
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace jitcache::study
