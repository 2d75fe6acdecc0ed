#include "kernel_templates/variant_plan.hpp"

#include <array>
#include <string>

#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {

LatentScale latent_scale_for(const LayerScale& layer, LatentPolicy policy) {
  switch (policy) {
    case LatentPolicy::per_layer: return latent_scale_for(layer.mode);
    case LatentPolicy::per_token: return LatentScale::per_token;
  }
  return latent_scale_for(layer.mode);
}

LatentPolicy default_policy(RecordFormat format) {
  return format_allows(format, LatentScale::identity) || format_allows(format, LatentScale::dynamic)
             ? LatentPolicy::per_layer
             : LatentPolicy::per_token;
}

Result<VariantPlan> plan_variants(const ResolvedScales& scales, RecordFormat rope, const Target& target,
                                  LatentPolicy policy) {
  std::array<bool, k_latent_scales.size()> needed{};
  for (const LayerScale& layer : scales.layers) {
    const LatentScale mode = latent_scale_for(layer, policy);
    if (!format_allows(rope, mode)) {
      const Status refused = check_format_mode(rope, mode);
      return make_error(ErrorCode::invalid_argument,
                        "layer " + std::to_string(layer.layer) + " (scale " + std::to_string(layer.scale) + "): " +
                            refused.error().message);
    }
    needed[std::to_underlying(mode)] = true;
  }

  VariantPlan plan;
  // index[kind][mode]: where that variant is in plan.variants.
  std::array<std::array<std::size_t, k_latent_scales.size()>, k_kernel_kinds.size()> index{};
  for (const KernelKindRow& kind : k_kernel_kinds.rows)
    for (const LatentScaleRow& mode : k_latent_scales.rows) {
      if (!needed[std::to_underlying(mode.value)]) continue;
      index[std::to_underlying(kind.value)][std::to_underlying(mode.value)] = plan.variants.size();
      plan.variants.push_back(KernelSpec{kind.value, mode.value, rope, target});
    }
  plan.layers.reserve(scales.layers.size());
  for (const LayerScale& layer : scales.layers) {
    const auto mode = std::to_underlying(latent_scale_for(layer, policy));
    plan.layers.push_back({index[std::to_underlying(KernelKind::writer)][mode],
                           index[std::to_underlying(KernelKind::gather)][mode]});
  }
  return plan;
}

}  // namespace jitcache
