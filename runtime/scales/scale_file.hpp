// The scales file format `nvfp4_ds_mla_outer_scale_v1`, as a grammar:
//
//   object     := { "format": "nvfp4_ds_mla_outer_scale_v1",
//                   "num_layers": int > 0,            == model num_hidden_layers
//                   "latent_dim": int > 0,            == model kv_lora_rank
//                   "denominator": 2688 | 2688.0,     6 * 448, exactly
//                   "scales": [ number ] x num_layers, each finite, > 0, a positive float
//                   ["max_abs": [ number ] x num_layers,  each finite, >= 0, and
//                               |scales[i] - max_abs[i]/denominator| <= 1e-6 * max_abs[i]/denominator]
//                   ["model_revision": non-empty string]
//                   ["provenance": object] }
//   no other keys; no duplicate keys anywhere (see scale_json.hpp).
//
// In config.json, the field `nvfp4_ds_mla_outer_scales` holds either that object inline or
//   reference  := { "file": relative path inside the checkpoint, "sha256": 64 hex digits }
//
// A new format gets a new `format` string; unknown strings are refused with the list of
// supported ones, never guessed at.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"

namespace jitcache::scales {

inline constexpr double k_max_abs_tolerance = 1e-6;  // relative

// The rule for one latent scale, wherever a scale comes from (a scales file, `kv --scale`):
// finite, > 0, and a normal float32 once rounded to one. nullopt when it holds, else what
// is wrong ("must be > 0, got 0"), to follow the name of the field.
std::optional<std::string> latent_scale_problem(double value);

// What the model requires of a file; unset members are not checked.
struct Expectations {
  std::optional<int> num_layers;  // the model's num_hidden_layers
  std::optional<int> latent_dim;  // the model's kv_lora_rank
};

// Validates a parsed v1 object. Messages read "<file>: field '<field_prefix><field>[i]': ...".
// Every problem is collected: the error's message names the first, its detail lists all.
Result<ScaleFileContents> validate_scale_object(const nlohmann::json& object,
                                                const std::string& file,
                                                const std::string& field_prefix,
                                                const Expectations& expectations);

// Strict-parses and validates the text of a standalone v1 file.
Result<ScaleFileContents> parse_scale_file(std::string_view text, const std::string& file,
                                           const Expectations& expectations);

struct SidecarReference {
  std::string file;    // as written: relative to the checkpoint directory
  std::string sha256;  // lowercase hex
};
// The config.json field: the inline object (not yet validated) or a sidecar reference.
using CheckpointScales = std::variant<nlohmann::json, SidecarReference>;

Result<CheckpointScales> parse_checkpoint_field(const nlohmann::json& value,
                                                const std::string& config_file);

// Whether a recorded model_revision names the known checkpoint revision: equal, or one an
// abbreviation (at least 7 hex digits) of the other, case-insensitively.
bool revision_matches(std::string_view recorded, std::string_view known);

}  // namespace jitcache::scales
