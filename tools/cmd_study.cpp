// `jitcache kv study`: the error table across layer magnitudes (synthetic post-RMSNorm
// latents, host executor numerics): identity, the calibrated per-layer scale and the
// per-token scale side by side, and the bytes per token each record format costs. The
// magnitudes are a default span, or each layer of a checkpoint (--checkpoint). For a
// format whose reader expands rows to FP8 (flashinfer-glm-416), the error that adds too.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "jitcache/scales.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/outer_scale_study.hpp"
#include "tools/cli.hpp"
#include "tools/format_options.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

struct StudyArgs {
  std::size_t tokens = 1024;
  std::uint64_t seed = 20261129;
  FormatArgs format;
  std::string checkpoint;  // empty: the default span of magnitudes
  bool json = false;

  // Neither --format nor --rope: b12x-368, the format written with all three modes.
  RecordFormat record_format() const {
    return format.format.empty() && format.rope.empty() ? study::StudyOptions{}.format
                                                        : format.record_format();
  }
};

std::string modes_of(const RecordFormatRow& row, const char* separator) {
  std::string modes;
  for (const LatentScaleRow& mode : k_latent_scales.rows)
    if (allows(row, mode.value)) modes += std::string(modes.empty() ? "" : separator) + mode.name;
  return modes;
}


nlohmann::json field(const std::optional<study::ModeResult>& result, double study::ModeResult::*member) {
  return result ? nlohmann::json((*result).*member) : nlohmann::json(nullptr);
}

// The deep layer's error every 'vs deep' column divides by: identity's where the format
// has it, else the first measured mode's.
study::StudyMode reference_mode(const study::LayerRow& deep) {
  for (study::StudyMode mode : study::k_study_modes)
    if (deep.result(mode)) return mode;
  return study::StudyMode::identity;
}

// A checkpoint's calibrated layers as magnitudes: each layer's recorded max_abs, else
// s_l * 2688 (the calibration's rule run backwards). A layer at the identity scale with no
// recorded magnitude (a draft layer) says nothing of its latent and is left out.
struct CheckpointLayers {
  std::vector<int> layers;
  std::vector<float> max_abs;
};

Result<CheckpointLayers> checkpoint_max_abs(const std::string& checkpoint) {
  ResolveOptions resolve;
  resolve.checkpoint_dir = checkpoint;
  const ResolvedScales resolved = JC_TRY(resolve_scales(resolve));
  CheckpointLayers out;
  for (const LayerScale& layer : resolved.layers) {
    if (!layer.max_abs && layer.mode == ScaleMode::identity) continue;
    out.layers.push_back(layer.layer);
    out.max_abs.push_back(layer.max_abs ? static_cast<float>(*layer.max_abs) : layer.scale * 2688.0f);
  }
  if (out.layers.empty())
    return make_error(ErrorCode::invalid_input,
                      "--checkpoint " + checkpoint + ": no layer has a calibrated scale to study");
  return out;
}

nlohmann::json optional_field(const std::optional<study::ModeResult>& result,
                              std::optional<double> study::ModeResult::*member) {
  return result && (*result).*member ? nlohmann::json(*((*result).*member)) : nlohmann::json(nullptr);
}

int run_study(const StudyArgs& args) {
  study::StudyOptions options;
  options.tokens = args.tokens;
  options.seed = args.seed;
  options.format = args.record_format();
  const RecordFormatRow& format = k_record_formats[options.format];
  std::vector<float> magnitudes(study::default_layer_max_abs().begin(), study::default_layer_max_abs().end());
  std::vector<int> layer_index;  // with --checkpoint: each row's layer
  if (!args.checkpoint.empty()) {
    auto from_checkpoint = checkpoint_max_abs(args.checkpoint);
    if (!from_checkpoint) return report_data(from_checkpoint.error());
    magnitudes = std::move(from_checkpoint->max_abs);
    layer_index = std::move(from_checkpoint->layers);
  }
  const bool fp8 = study::reader_expands_to_fp8(options.format);
  auto rows = study::run_outer_scale_study(magnitudes, options);
  if (!rows) return report(rows.error());
  const study::StudyMode reference = reference_mode(rows->back());
  const double deep = rows->back().result(reference)->rel_rms;
  if (args.json) {
    nlohmann::json formats = nlohmann::json::array();
    for (const RecordFormatRow& row : k_record_formats.rows) {
      nlohmann::json modes = nlohmann::json::array();
      for (const LatentScaleRow& mode : k_latent_scales.rows)
        if (allows(row, mode.value)) modes.push_back(mode.name);
      formats.push_back({{"name", row.name}, {"bytes_per_token", row.record_bytes}, {"modes", modes}});
    }
    nlohmann::json out = {{"tokens", args.tokens},
                          {"seed", args.seed},
                          {"format", format.name},
                          {"rope", format.rope_alias != nullptr ? nlohmann::json(format.rope_alias) : nullptr},
                          {"bytes_per_token", format.record_bytes},
                          {"checkpoint", args.checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(args.checkpoint)},
                          {"reader_expands_to_fp8", fp8},
                          {"formats", formats},
                          {"layers", nlohmann::json::array()}};
    using study::ModeResult;
    for (std::size_t i = 0; i < rows->size(); ++i) {
      const study::LayerRow& r = (*rows)[i];
      out["layers"].push_back({{"layer", layer_index.empty() ? nlohmann::json(nullptr) : nlohmann::json(layer_index[i])},
                               {"max_abs", r.max_abs},
                               {"calibrated_scale", r.calibrated_scale},
                               {"identity_rel_rms", field(r.identity, &ModeResult::rel_rms)},
                               {"calibrated_rel_rms", field(r.calibrated, &ModeResult::rel_rms)},
                               {"per_token_rel_rms", field(r.per_token, &ModeResult::rel_rms)},
                               {"identity_subnormal_blocks", field(r.identity, &ModeResult::subnormal_blocks)},
                               {"calibrated_subnormal_blocks", field(r.calibrated, &ModeResult::subnormal_blocks)},
                               {"per_token_subnormal_blocks", field(r.per_token, &ModeResult::subnormal_blocks)},
                               {"identity_fp8_added_rel_rms", optional_field(r.identity, &ModeResult::fp8_added_rel_rms)},
                               {"calibrated_fp8_added_rel_rms", optional_field(r.calibrated, &ModeResult::fp8_added_rel_rms)},
                               {"identity_fp8_rel_rms", optional_field(r.identity, &ModeResult::fp8_rel_rms)},
                               {"calibrated_fp8_rel_rms", optional_field(r.calibrated, &ModeResult::fp8_rel_rms)},
                               {"lowest", to_string(r.lowest)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("Relative RMS round-trip error of the latent (NVFP4, %s, %d bytes per token; %zu synthetic "
              "post-RMSNorm tokens per layer, seed %llu%s%s)\n\n",
              format.name, format.record_bytes, args.tokens, static_cast<unsigned long long>(args.seed),
              args.checkpoint.empty() ? "" : "; the layers of ", args.checkpoint.c_str());
  if (!args.checkpoint.empty()) std::printf("%5s ", "layer");
  std::printf("%8s %11s", "max_abs", "s_l");
  for (study::StudyMode mode : study::k_study_modes) {
    std::printf(" | %10s %7s %7s", to_string(mode), "vs deep", "subnorm");
    if (fp8 && study::study_measures(options.format, mode)) std::printf(" %8s %8s", "fp8 add", "fp8");
  }
  std::printf(" | %s\n", "lowest");
  for (std::size_t i = 0; i < rows->size(); ++i) {
    const study::LayerRow& r = (*rows)[i];
    if (!layer_index.empty()) std::printf("%5d ", layer_index[i]);
    std::printf("%8g %11.4e", r.max_abs, r.calibrated_scale);
    for (study::StudyMode mode : study::k_study_modes) {
      if (const auto& m = r.result(mode)) {
        std::printf(" | %10.5f %6.3fx %6.1f%%", m->rel_rms, m->rel_rms / deep, 100.0 * m->subnormal_blocks);
        if (fp8) std::printf(" %8.5f %8.5f", m->fp8_added_rel_rms.value_or(0.0), m->fp8_rel_rms.value_or(0.0));
      } else {
        std::printf(" | %10s %7s %7s", "-", "-", "-");
      }
    }
    std::printf(" | %s\n", to_string(r.lowest));
  }
  if (fp8)
    std::printf("\n%s's reader expands each row to E4M3 on one power-of-two scale before its MMAs: 'fp8 add' is "
                "the error that adds to the bf16 gather (which reads what b12x-432's does), 'fp8' the "
                "expanded row's own error, both relative to the latent's RMS; kv_global_scale is s_l.\n",
                format.name);
  std::printf("\n'vs deep' divides by the %s error at max_abs %g; 'subnorm' is the share of "
              "E4M3 block scales below 2^-6",
              to_string(reference), rows->back().max_abs);
  std::string missing;
  for (study::StudyMode mode : study::k_study_modes)
    if (!study::study_measures(options.format, mode))
      missing += std::string(missing.empty() ? "" : " or ") + to_string(mode);
  if (!missing.empty()) std::printf("; '-': %s is not written with %s", format.name, missing.c_str());
  std::printf(".\n\nBytes per token of each record format (--format) and the modes it is written with:\n");
  for (const RecordFormatRow& row : k_record_formats.rows)
    std::printf("  %-18s %4d  %s\n", row.name, row.record_bytes, modes_of(row, ", ").c_str());
  return k_exit_ok;
}

void register_study(CLI::App& root, Context& context) {
  CLI::App* kv = nullptr;
  try {
    kv = root.get_subcommand("kv");
  } catch (const CLI::OptionNotFound&) {
    kv = root.add_subcommand("kv", "CPU KV tools (the kernels' numerics, run on the host)");
  }
  auto [cmd, args] = add_subcommand(
      *kv, context, "study", "Identity vs calibrated vs per-token scale: round-trip error across layer magnitudes",
      run_study);
  cmd->add_option("--tokens", args.tokens, "Synthetic tokens per layer")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", args.seed, "Seed of the synthetic data");
  add_format_options(cmd, args.format, /*latent=*/false);
  cmd->add_option("--checkpoint", args.checkpoint,
                  "A checkpoint directory: one row per layer, at the magnitude its scales record");
  add_json_flag(cmd, args.json);
}

// After cmd_kv.cpp's registration, which creates the `kv` command.
const Registrar k_registrar(200, register_study);

}  // namespace
}  // namespace jitcache::cli
