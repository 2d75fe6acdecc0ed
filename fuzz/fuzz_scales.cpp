// libFuzzer target for everything that reads untrusted scale metadata: the strict JSON
// reader, the v1 validator, the config.json model fields and the sidecar reference.
// Beyond "no crash, no sanitizer report", it checks the invariants callers rely on: an
// accepted file has exactly num_layers finite, positive, float-representable scales, and
// a rejected one has a non-empty message naming the file.
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"

namespace {

using namespace jitcache;

void require(bool condition) {
  if (!condition) std::abort();
}

template <class T>
void require_named_error(const Result<T>& result, std::string_view file) {
  if (!result) require(result.error().message.starts_with(file));
}

void check_accepted(const ScaleFileContents& c) {
  require(c.format == k_scales_format_v1);
  require(c.num_layers > 0 && c.latent_dim > 0 && c.denominator == k_scales_denominator);
  require(c.scales.size() == static_cast<std::size_t>(c.num_layers));
  for (double s : c.scales) {
    const float f = static_cast<float>(s);
    require(std::isfinite(s) && s > 0 && f >= FLT_MIN && std::isfinite(f));
  }
  if (c.max_abs) {
    require(c.max_abs->size() == c.scales.size());
    for (std::size_t i = 0; i < c.scales.size(); ++i) {
      const double expected = (*c.max_abs)[i] / c.denominator;
      require(std::fabs(c.scales[i] - expected) <= 1e-6 * std::fabs(expected));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // As a standalone scales file, unconstrained and for a GLM-5.x-shaped model.
  const auto any_model = scales::parse_scale_file(text, "fuzz.json", {});
  require_named_error(any_model, "fuzz.json");
  if (any_model) check_accepted(*any_model);
  const auto glm = scales::parse_scale_file(text, "fuzz.json", {78, 512});
  require_named_error(glm, "fuzz.json");
  if (glm) {
    check_accepted(*glm);
    require(glm->num_layers == 78 && glm->latent_dim == 512);
    require(any_model.has_value());  // fitting a model is stricter, never looser
  }

  // As a config.json: model fields, then the scales field in either form.
  const auto config = scales::parse_json_strict(text, "config.json");
  require_named_error(config, "config.json");
  if (!config) return 0;
  const auto model = parse_model_config(*config, "config.json");
  require_named_error(model, "config.json");
  if (model) require(model->num_hidden_layers > 0 && model->kv_lora_rank > 0 &&
                     model->num_nextn_predict_layers >= 0);
  if (!config->is_object()) return 0;
  const auto field = config->find(k_scales_config_field);
  if (field == config->end()) return 0;
  const auto parsed = scales::parse_checkpoint_field(*field, "config.json");
  require_named_error(parsed, "config.json");
  if (!parsed) return 0;
  if (const auto* reference = std::get_if<scales::SidecarReference>(&*parsed)) {
    require(!reference->file.empty() && reference->sha256.size() == 64);
    return 0;
  }
  scales::Expectations expected;
  if (model) expected = {model->num_hidden_layers, model->kv_lora_rank};
  const auto inline_scales = scales::validate_scale_object(
      std::get<nlohmann::json>(*parsed), "config.json", "nvfp4_ds_mla_outer_scales.", expected);
  require_named_error(inline_scales, "config.json");
  if (inline_scales) check_accepted(*inline_scales);
  return 0;
}
