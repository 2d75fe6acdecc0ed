// Which kernel variants a model's layers need, worked out once for everyone who asks: the
// runtime (what to fetch and bind), the audit (what to look up) and the benchmarks.
#pragma once

#include <cstddef>
#include <vector>

#include "jitcache/scales.hpp"
#include "kernel_templates/kernel_spec.hpp"

namespace jitcache {

struct VariantPlan {
  // The distinct variants, kernel kind first, then latent-scale mode, each in table order
  // (writer/identity, writer/dynamic, gather/identity, gather/dynamic when all are needed):
  // not one per layer.
  std::vector<KernelSpec> variants;
  // Per layer of the scales, in their order: the variants (indices into `variants`) it is
  // bound to.
  struct Layer {
    std::size_t writer = 0;
    std::size_t gather = 0;
  };
  std::vector<Layer> layers;
};

VariantPlan plan_variants(const ResolvedScales& scales, RopeFormat rope, const Target& target);

}  // namespace jitcache
