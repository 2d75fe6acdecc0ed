// Which kernel variants a model's layers need, worked out once for everyone who asks: the
// runtime (what to fetch and bind), the audit (what to look up) and the benchmarks.
#pragma once

#include <cstddef>
#include <vector>

#include "jitcache/error.hpp"
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

// Where a model's layers get their latent-scale mode: each from its calibrated scale
// (identity for exactly 1.0, else dynamic), or every layer per-token (no outer scale is
// applied; each token's own is in its record).
enum class LatentPolicy { per_layer, per_token };

// The mode the policy gives a layer: the binding guard asks this too.
LatentScale latent_scale_for(const LayerScale& layer, LatentPolicy policy);

// The policy a format implies when the caller chose none: per-token for a format written
// only per-token (b12x-304), per-layer otherwise.
LatentPolicy default_policy(RecordFormat format);

// ErrorCode::invalid_argument when the format is not written in a mode the policy needs
// for these layers (per-token on b12x-432, a calibrated layer on b12x-304, ...).
Result<VariantPlan> plan_variants(const ResolvedScales& scales, RecordFormat format, const Target& target,
                                  LatentPolicy policy = LatentPolicy::per_layer);

}  // namespace jitcache
