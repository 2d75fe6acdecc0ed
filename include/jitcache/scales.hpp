// Per-layer NVFP4 MLA outer latent scales: where each layer's scale comes from, validated
// and with its provenance.
//
// The values belong to the checkpoint (config.json field `nvfp4_ds_mla_outer_scales`,
// inline or as a sidecar reference); jitcache only parses, validates and applies them.
// Precedence, highest first:
//   1. an explicit override file: the API argument, else VLLM_NVFP4_MLA_SCALES_FILE;
//   2. the checkpoint's metadata;
//   3. the identity default (every layer 1.0).
// Draft (MTP) layers, indexed after the main layers, are never calibrated and stay 1.0.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

inline constexpr const char* k_scales_format_v1 = "nvfp4_ds_mla_outer_scale_v1";
// 6 (largest E2M1 magnitude) x 448 (largest E4M3 magnitude): puts each layer's largest
// block scale at the top of the E4M3 range.
inline constexpr double k_scales_denominator = 2688.0;
inline constexpr const char* k_scales_config_field = "nvfp4_ds_mla_outer_scales";

enum class ScaleMode {
  identity,  // scale exactly 1.0 (or uncalibrated): kernels may fold the multiply away
  dynamic,   // any other scale: kernels must apply the restore multiply
};

enum class ScaleSource {
  explicit_override,  // an override file (API argument or VLLM_NVFP4_MLA_SCALES_FILE)
  checkpoint,         // the checkpoint's config.json metadata (inline or sidecar)
  identity_default,   // no metadata anywhere: 1.0
  draft_identity,     // a draft (MTP) layer: never calibrated, always 1.0
};

enum class OverrideOrigin { none, argument, environment };
enum class CheckpointForm { none, inline_object, sidecar };

// Whether resolve_scales consults VLLM_NVFP4_MLA_SCALES_FILE.
enum class EnvOverride { read, ignore };

const char* to_string(ScaleMode mode);          // "identity" | "dynamic"
const char* to_string(ScaleSource source);      // "override" | "checkpoint" | "identity-default" | "draft-identity"
const char* to_string(OverrideOrigin origin);   // "none" | "argument" | "environment"
const char* to_string(CheckpointForm form);     // "none" | "inline" | "sidecar"

struct LayerScale {
  int layer = 0;
  float scale = 1.0f;
  ScaleMode mode = ScaleMode::identity;
  ScaleSource source = ScaleSource::identity_default;
  std::optional<double> max_abs;  // the calibrated magnitude, when the file records it
};

// A validated v1 scales object, as read (doubles; LayerScale holds the float applied).
struct ScaleFileContents {
  std::string format;
  int num_layers = 0;
  int latent_dim = 0;
  double denominator = 0.0;
  std::vector<double> scales;
  std::optional<std::vector<double>> max_abs;
  std::optional<std::string> model_revision;
  std::string provenance_json;  // the `provenance` object as compact JSON; empty if absent
};

struct ScaleProvenance {
  ScaleSource source = ScaleSource::identity_default;
  OverrideOrigin override_origin = OverrideOrigin::none;
  CheckpointForm checkpoint_form = CheckpointForm::none;
  // Checkpoint: relative to the checkpoint ("config.json" when inline). Override: the path
  // as given. Identity default: empty.
  std::string file;
  std::string format;
  // SHA-256 (lowercase hex) of the bytes the values were parsed from: the sidecar, the
  // override file, or config.json for inline metadata. Empty for the identity default.
  std::string sha256;
  std::optional<std::string> model_revision;       // recorded in the file
  std::optional<std::string> checkpoint_revision;  // known: explicit, or snapshots/<rev>
  std::string provenance_json;                     // see ScaleFileContents
  // An override that shadows checkpoint metadata names it here ("config.json" or the
  // sidecar's relative path); empty otherwise.
  std::string shadowed_checkpoint_file;
  std::vector<std::string> warnings;  // also logged; e.g. an override's revision mismatch
};

struct ResolvedScales {
  std::filesystem::path checkpoint_dir;
  int num_hidden_layers = 0;
  int num_draft_layers = 0;
  int latent_dim = 0;  // the model's kv_lora_rank
  std::vector<LayerScale> layers;  // num_hidden_layers + num_draft_layers entries
  ScaleProvenance provenance;

  int count(ScaleMode mode) const;
};

struct ResolveOptions {
  std::filesystem::path checkpoint_dir;
  std::optional<std::filesystem::path> override_file;  // highest precedence
  // The checkpoint revision when the caller knows it; else taken from a Hugging Face
  // snapshot directory name (.../snapshots/<rev>), else unknown (no revision check).
  std::optional<std::string> checkpoint_revision;
  EnvOverride env = EnvOverride::read;
};

// Resolves every layer's scale, logs one INFO line saying which source won (and a WARNING
// when an override shadows checkpoint metadata). Every failure names file and field.
Result<ResolvedScales> resolve_scales(const ResolveOptions& options);

struct ValidateOptions {
  std::filesystem::path file;  // a v1 scales file
  // When given, the file must fit this checkpoint's model (num_layers, latent_dim) and, when
  // the checkpoint's revision is known, its model_revision must match it.
  std::optional<std::filesystem::path> checkpoint_dir;
  std::optional<std::string> checkpoint_revision;
};

struct ValidatedScaleFile {
  std::filesystem::path file;
  std::string sha256;
  ScaleFileContents contents;
  std::optional<std::string> checkpoint_revision;  // the revision it was checked against
};

// Validates one scales file. Problems come back as one Error: the message names the first
// (file, field, index), and `detail` lists every problem found when there is more than one.
Result<ValidatedScaleFile> validate_scales_file(const ValidateOptions& options);

}  // namespace jitcache
