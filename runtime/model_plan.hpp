// What prepare() works out before it fetches any kernel, and the questions asked of the
// cache with it alone: which tier holds each variant a model needs (Runtime::coverage,
// `jitcache coverage`) and why one layer's kernels hit or miss (`jitcache explain`).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "jitcache/runtime.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/explain.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {

struct PlannedModel {
  ResolvedScales scales;
  LatentPolicy policy = LatentPolicy::per_layer;
  Target target;
  VariantPlan plan;
};

// Picks the device's target when the model names none, given its scales and policy
// (runtime/device_target.hpp: the most specific one the cache holds or can compile).
using TargetChooser = std::function<Result<Target>(const ResolvedScales&, LatentPolicy)>;

// The model's latent policy, target (model.target, else `choose`'s for the device, else the
// device's own: unavailable without a device), resolved scales and variant plan; the errors
// are prepare()'s, the caller's mistakes first.
Result<PlannedModel> plan_model(const ModelSpec& model, const DeviceStatus& device, const TargetChooser& choose = {});

// The tier holding each of the plan's variants (Store::locate: nothing counted or filled).
Result<std::vector<VariantCoverage>> model_coverage(const KernelCache& kernels, const PlannedModel& planned);

// Why layer `layer` (the layer number of the scales, as LayerBinding::layer) finds its
// writer's and its gather's kernels or not. invalid_argument for a layer the model does
// not have, naming the range.
Result<std::vector<KeyExplanation>> explain_layer(const KernelCache& kernels, const PlannedModel& planned, int layer,
                                                  std::size_t nearest = 3);

// The coverage as one JSON object (jitcache_runtime_coverage, `jitcache coverage --json`):
// "target", "format", "covered", "missing", "variants": [{"label", "kernel",
// "latent_scale", "format", "target", "key", "tier" (null: none), "tier_name", "layers"}].
nlohmann::json coverage_json(const std::vector<VariantCoverage>& variants);

}  // namespace jitcache
