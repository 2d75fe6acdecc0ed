#include "kernel_templates/variant_plan.hpp"

#include <array>

#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {

VariantPlan plan_variants(const ResolvedScales& scales, RopeFormat rope, const Target& target) {
  std::array<bool, k_latent_scales.size()> needed{};
  for (const LayerScale& layer : scales.layers)
    needed[std::to_underlying(latent_scale_for(layer.mode))] = true;

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
    const auto mode = std::to_underlying(latent_scale_for(layer.mode));
    plan.layers.push_back({index[std::to_underlying(KernelKind::writer)][mode],
                           index[std::to_underlying(KernelKind::gather)][mode]});
  }
  return plan;
}

}  // namespace jitcache
