// The model facts jitcache needs from a checkpoint's config.json (Hugging Face layout).
// GLM-5.x: 78 layers + 1 draft (MTP) layer, kv_lora_rank 512, qk_rope_head_dim 64.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"

namespace jitcache {

struct ModelConfig {
  int num_hidden_layers = 0;         // required
  int num_nextn_predict_layers = 0;  // draft (MTP) layers; absent means none, null is refused
  int kv_lora_rank = 0;              // required: the latent width (MLA)
  std::optional<int> qk_rope_head_dim;
  std::optional<int> qk_nope_head_dim;
  std::optional<int> v_head_dim;
  std::optional<int> num_attention_heads;
  std::optional<int> index_topk;
  std::string model_type;  // empty when absent

  int total_layers() const { return num_hidden_layers + num_nextn_predict_layers; }
};

// `file` names config.json in error messages.
Result<ModelConfig> parse_model_config(const nlohmann::json& config, const std::string& file);

// A config.json key that looks like a misspelling of the scales key (or the right key
// in the wrong place): without a warning the checkpoint silently resolves to identity.
struct KeyNearMiss {
  std::string found;     // as written, with its object: "quantization_config.nvfp4_..."
  std::string expected;  // the key jitcache reads: k_scales_config_field at the top level
};

// Keys of `config` near k_scales_config_field: at the top level any other key equal
// ignoring case or within edit distance 3 (ignoring case; a transposition counts 1, so
// singular/plural and swapped letters are caught); inside `quantization_config` such a
// key and the exact key too, since jitcache reads the scales from the top level only.
std::vector<KeyNearMiss> scales_key_near_misses(const nlohmann::json& config);

struct CheckpointConfig {
  std::filesystem::path path;  // <checkpoint>/config.json
  std::string sha256;          // of config.json's bytes
  ModelConfig model;
  std::optional<nlohmann::json> scales_field;  // nvfp4_ds_mla_outer_scales, unvalidated
  std::vector<KeyNearMiss> near_misses;        // see scales_key_near_misses
};

// Reads and strictly parses <checkpoint_dir>/config.json.
// The error for an empty checkpoint path (invalid_argument), checked by prepare before
// anything else and by read_checkpoint_config.
Error empty_checkpoint_error();

Result<CheckpointConfig> read_checkpoint_config(const std::filesystem::path& checkpoint_dir);

}  // namespace jitcache
