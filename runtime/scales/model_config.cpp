#include "runtime/scales/model_config.hpp"

#include <algorithm>
#include <cstdint>
#include <system_error>

#include "jitcache/scales.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"
#include "support/text.hpp"

namespace jitcache {
namespace {

using nlohmann::json;

// Bounds keep a hostile config from sizing allocations; real models are far below them.
constexpr std::int64_t k_max_hidden_layers = 100000;
constexpr std::int64_t k_max_draft_layers = 1024;
constexpr std::int64_t k_max_dimension = 1 << 20;

// How a field may be absent. A defaulted field changes the result when absent (no draft
// layers), so a null there is refused rather than read as the default; an informational
// field may be null, as Hugging Face writes unset optional attributes.
enum class Presence { required, defaulted, optional };

Result<std::optional<int>> int_field(const json& config, const std::string& file, const char* name,
                                     Presence presence, std::int64_t min, std::int64_t max) {
  const auto it = config.find(name);
  if (it == config.end() || (presence == Presence::optional && it->is_null())) {
    if (presence != Presence::required) return std::optional<int>();
    return make_error(ErrorCode::invalid_input,
                      file + ": field '" + name +
                          "': missing; jitcache needs num_hidden_layers and kv_lora_rank from "
                          "an MLA model's config.json");
  }
  const bool in_range =
      it->is_number_unsigned()
          ? it->get<std::uint64_t>() <= static_cast<std::uint64_t>(max) &&
                static_cast<std::int64_t>(it->get<std::uint64_t>()) >= min
          : it->is_number_integer() && it->get<std::int64_t>() >= min && it->get<std::int64_t>() <= max;
  if (!in_range) {
    return make_error(ErrorCode::invalid_input,
                      file + ": field '" + name + "': must be an integer in [" +
                          std::to_string(min) + ", " + std::to_string(max) + "], got " + it->dump());
  }
  return std::optional<int>(static_cast<int>(it->get<std::int64_t>()));
}

}  // namespace

Result<ModelConfig> parse_model_config(const json& config, const std::string& file) {
  if (!config.is_object()) {
    return make_error(ErrorCode::invalid_input,
                      file + ": expected a JSON object (a model config), got " +
                          std::string(config.type_name()));
  }
  ModelConfig model;
  model.num_hidden_layers =
      *JC_TRY(int_field(config, file, "num_hidden_layers", Presence::required, 1, k_max_hidden_layers));
  model.kv_lora_rank =
      *JC_TRY(int_field(config, file, "kv_lora_rank", Presence::required, 1, k_max_dimension));
  model.num_nextn_predict_layers =
      JC_TRY(int_field(config, file, "num_nextn_predict_layers", Presence::defaulted, 0, k_max_draft_layers))
          .value_or(0);
  model.qk_rope_head_dim =
      JC_TRY(int_field(config, file, "qk_rope_head_dim", Presence::optional, 1, k_max_dimension));
  model.qk_nope_head_dim =
      JC_TRY(int_field(config, file, "qk_nope_head_dim", Presence::optional, 0, k_max_dimension));
  model.v_head_dim = JC_TRY(int_field(config, file, "v_head_dim", Presence::optional, 1, k_max_dimension));
  model.num_attention_heads =
      JC_TRY(int_field(config, file, "num_attention_heads", Presence::optional, 1, k_max_dimension));
  model.index_topk = JC_TRY(int_field(config, file, "index_topk", Presence::optional, 1, 1 << 30));
  if (const auto it = config.find("model_type"); it != config.end() && it->is_string())
    model.model_type = it->get<std::string>();
  return model;
}

std::vector<KeyNearMiss> scales_key_near_misses(const json& config) {
  std::vector<KeyNearMiss> found;
  if (!config.is_object()) return found;
  const std::string expected = k_scales_config_field;
  const std::string wanted = text::ascii_lower(expected);
  // An edit distance is at least the difference of the lengths: most keys of a config.json
  // are far shorter than the field's name and cost no distance at all.
  constexpr std::size_t k_most_edits = 3;
  auto near = [&](const std::string& key) {
    const std::size_t longer = std::max(key.size(), wanted.size());
    const std::size_t shorter = std::min(key.size(), wanted.size());
    return longer - shorter <= k_most_edits && text::edit_distance(text::ascii_lower(key), wanted) <= k_most_edits;
  };
  for (const auto& [key, value] : config.items())
    if (key != expected && near(key)) found.push_back({key, expected});
  if (const auto q = config.find("quantization_config"); q != config.end() && q->is_object())
    for (const auto& [key, value] : q->items())
      if (near(key)) found.push_back({"quantization_config." + key, expected});
  return found;
}

Error empty_checkpoint_error() {
  return Error{ErrorCode::invalid_argument,
               "checkpoint directory: empty path; give the directory that holds config.json", {}};
}

Result<CheckpointConfig> read_checkpoint_config(const std::filesystem::path& checkpoint_dir) {
  if (checkpoint_dir.empty()) return std::unexpected(empty_checkpoint_error());
  std::error_code ec;
  if (!std::filesystem::is_directory(checkpoint_dir, ec)) {
    return make_error(ErrorCode::not_found, text::shown(checkpoint_dir) +
                                                ": checkpoint directory does not exist or is not a "
                                                "directory");
  }
  CheckpointConfig checkpoint;
  checkpoint.path = checkpoint_dir / "config.json";
  const std::string name = checkpoint.path.string();
  const std::string bytes =
      JC_TRY(read_regular_file(checkpoint.path, scales::k_max_config_file_bytes));
  checkpoint.sha256 = sha256_hex(bytes);
  json config = JC_TRY(scales::parse_json_strict(bytes, name));
  checkpoint.model = JC_TRY(parse_model_config(config, name));
  checkpoint.near_misses = scales_key_near_misses(config);
  if (const auto it = config.find(k_scales_config_field); it != config.end())
    checkpoint.scales_field = std::move(*it);
  return checkpoint;
}

}  // namespace jitcache
