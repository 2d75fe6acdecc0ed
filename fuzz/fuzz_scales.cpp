// libFuzzer target for everything that reads untrusted scale metadata: the strict JSON
// reader, the v1 validator, the config.json model fields, the sidecar reference, capture
// files (calibration) and the config.json editor of `scales install`.
// Beyond "no crash, no sanitizer report", it checks the invariants callers rely on: an
// accepted file has exactly num_layers finite, positive, float-representable scales; a
// rejected one has a non-empty message naming the file; an accepted capture calibrates
// into a valid v1 file or a named error; and setting the scales member of a config.json
// changes that member only.
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/scales/calibration.hpp"
#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_install.hpp"
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

// As a capture file: an accepted one, taken as a one-rank run, calibrates into a file that
// parses as v1 with max_abs / 2688 as its scales, or fails with invalid_input (a layer
// never observed, a scale below float32's normal range).
void check_capture(std::string_view text) {
  auto capture = scales::parse_capture(text, "capture.json");
  require_named_error(capture, "capture.json");
  if (!capture) return;
  require(capture->max_abs.size() == static_cast<std::size_t>(capture->num_layers));
  require(capture->rank >= 0 && capture->rank < capture->tp && capture->tokens > 0);
  for (double m : capture->max_abs) require(std::isfinite(m) && m >= 0);
  if (capture->tp != 1) return;
  const std::vector<double> max_abs = capture->max_abs;
  const auto calibrated = scales::calibrate({std::move(*capture)}, {}, {});
  if (!calibrated) {
    require(calibrated.error().code == ErrorCode::invalid_input);
    return;
  }
  require(calibrated->max_abs == max_abs);
  const auto reread = scales::parse_scale_file(scales::render_scale_file(calibrated->object),
                                               "calibrated.json", {});
  require(reread.has_value());
  check_accepted(*reread);
  for (std::size_t i = 0; i < max_abs.size(); ++i)
    require(reread->scales[i] == max_abs[i] / k_scales_denominator);
}

// As a config.json that `scales install` edits: the result reads back as the same
// document with only the scales member set, and the bytes before the edited member stay.
void check_splice(std::string_view text, const nlohmann::json& document) {
  const nlohmann::ordered_json value = {{"file", "s.json"}, {"sha256", std::string(64, 'a')}};
  const auto spliced = scales::splice_top_level_member(text, "config.json",
                                                       k_scales_config_field, value);
  require(spliced.has_value());
  const auto reread = scales::parse_json_strict(*spliced, "config.json");
  require(reread.has_value());
  nlohmann::json expected = document;
  expected[k_scales_config_field] = nlohmann::json::parse(value.dump());
  require(*reread == expected);
  const auto before = scales::scan_top_level_object(text, "config.json");
  require(before.has_value());
  for (const scales::TopLevelMember& member : before->members) {
    if (member.key == k_scales_config_field) {
      require(spliced->compare(0, member.value_begin, text.substr(0, member.value_begin)) == 0);
      return;
    }
  }
  // Added after the last member: everything up to its value's end is unchanged.
  const std::size_t kept = before->members.empty() ? before->open + 1
                                                   : before->members.back().value_end;
  require(spliced->compare(0, kept, text.substr(0, kept)) == 0);
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

  check_capture(text);

  // As a config.json: model fields, then the scales field in either form.
  const auto config = scales::parse_json_strict(text, "config.json");
  require_named_error(config, "config.json");
  if (!config) return 0;
  if (config->is_object()) check_splice(text, *config);
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
