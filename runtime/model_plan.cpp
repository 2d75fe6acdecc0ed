#include "runtime/model_plan.hpp"

#include <nlohmann/json.hpp>

#include "runtime/scales/model_config.hpp"
#include "support/enum_names.hpp"

namespace jitcache {

const char* to_string(CoverageTier tier) {
  return enum_name(tier, {"memory", "local", "provider", "remote"});
}

namespace {

CoverageTier coverage_tier(cache::Tier tier) {
  switch (tier) {
    case cache::Tier::memory: return CoverageTier::memory;
    case cache::Tier::disk: return CoverageTier::local;
    case cache::Tier::provider: return CoverageTier::provider;
    case cache::Tier::remote: return CoverageTier::remote;
  }
  return CoverageTier::remote;
}

}  // namespace

Result<PlannedModel> plan_model(const ModelSpec& model, const DeviceStatus& device, const TargetChooser& choose) {
  if (model.checkpoint.empty()) return std::unexpected(empty_checkpoint_error());
  PlannedModel planned;
  if (model.latent_scale && *model.latent_scale != LatentScale::per_token)
    return make_error(ErrorCode::invalid_argument,
                      std::string("latent_scale: only per-token can be chosen (got ") + to_string(*model.latent_scale) +
                          "); identity and dynamic follow each layer's scale");
  planned.policy = model.latent_scale ? LatentPolicy::per_token : default_policy(model.format);
  // A target named is checked before anything is read.
  if (!model.target.empty()) planned.target = JC_TRY(parse_target(model.target));
  else if (!device.available)
    return make_error(ErrorCode::unavailable, "no target given and no device to detect one from: " + device.reason);
  ResolveOptions resolve;
  resolve.checkpoint_dir = model.checkpoint;
  resolve.override_file = model.scales_override;
  resolve.checkpoint_revision = model.checkpoint_revision;
  planned.scales = JC_TRY(resolve_scales(resolve));
  if (model.target.empty())
    planned.target = choose ? JC_TRY(choose(planned.scales, planned.policy)) : JC_TRY(parse_target(device.target));
  planned.plan = JC_TRY(plan_variants(planned.scales, model.format, planned.target, planned.policy));
  return planned;
}

Result<std::vector<VariantCoverage>> model_coverage(const KernelCache& kernels, const PlannedModel& planned) {
  std::vector<VariantCoverage> out;
  for (const KernelSpec& spec : planned.plan.variants) {
    const cache::Facts facts = JC_TRY(kernels.facts_of(spec));
    VariantCoverage v;
    v.label = spec.label();
    v.kernel = spec.kernel;
    v.latent_scale = spec.latent_scale;
    v.format = spec.format;
    v.target = spec.target.name;
    v.key = facts.key().to_hex();
    if (auto located = JC_TRY(kernels.store().locate(facts.key()))) {
      v.tier = coverage_tier(located->kind);
      v.tier_name = located->name;
    }
    out.push_back(std::move(v));
  }
  for (std::size_t i = 0; i < planned.plan.layers.size(); ++i) {
    const int layer = planned.scales.layers[i].layer;
    const VariantPlan::Layer& uses = planned.plan.layers[i];
    out[uses.writer].layers.push_back(layer);
    if (uses.gather != uses.writer) out[uses.gather].layers.push_back(layer);
  }
  return out;
}

Result<std::vector<KeyExplanation>> explain_layer(const KernelCache& kernels, const PlannedModel& planned, int layer,
                                                  std::size_t nearest) {
  const auto& layers = planned.scales.layers;
  std::size_t index = layers.size();
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].layer == layer) index = i;
  if (index == layers.size())
    return make_error(ErrorCode::invalid_argument,
                      "layer " + std::to_string(layer) + ": the model has layers " +
                          (layers.empty() ? std::string("none")
                                          : std::to_string(layers.front().layer) + " to " +
                                                std::to_string(layers.back().layer)));
  ExplainOptions options;
  options.subject = "layer " + std::to_string(layer) + " needs";
  options.nearest = nearest;
  std::vector<KeyExplanation> out;
  const VariantPlan::Layer& uses = planned.plan.layers[index];
  for (std::size_t variant : {uses.writer, uses.gather}) {
    const KernelSpec& spec = planned.plan.variants[variant];
    const cache::Facts facts = JC_TRY(kernels.facts_of(spec));
    out.push_back(JC_TRY(explain_key(kernels.store(), facts, spec.label(), options)));
  }
  return out;
}

nlohmann::json coverage_json(const std::vector<VariantCoverage>& variants) {
  nlohmann::json rows = nlohmann::json::array();
  std::size_t missing = 0;
  for (const VariantCoverage& v : variants) {
    if (!v.tier) ++missing;
    rows.push_back({{"label", v.label},
                    {"kernel", to_string(v.kernel)},
                    {"latent_scale", to_string(v.latent_scale)},
                    {"format", to_string(v.format)},
                    {"target", v.target},
                    {"key", v.key},
                    {"tier", v.tier ? nlohmann::json(to_string(*v.tier)) : nlohmann::json(nullptr)},
                    {"tier_name", v.tier ? nlohmann::json(v.tier_name) : nlohmann::json(nullptr)},
                    {"layers", v.layers}});
  }
  nlohmann::json out = {{"covered", missing == 0}, {"missing", missing}, {"variants", rows}};
  out["target"] = variants.empty() ? nlohmann::json(nullptr) : nlohmann::json(variants.front().target);
  out["format"] = variants.empty() ? nlohmann::json(nullptr) : nlohmann::json(to_string(variants.front().format));
  return out;
}

}  // namespace jitcache
