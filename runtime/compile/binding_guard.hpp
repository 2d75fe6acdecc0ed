// The bind-time guard: before a kernel is bound to a layer, the facts embedded in the
// artifact itself (not the cache index) must say it was built for the layer's latent-
// scale mode, kernel, RoPE layout and target. A mismatch is a hard error naming the
// layer; it never becomes a launch. This is the second, independent defence against the
// field failure (an identity kernel replayed for a calibrated layer).
#pragma once

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/artifact_facts.hpp"

namespace jitcache {

// `embedded`: facts read from the artifact (facts_from_cubin). `expected`: the variant
// the runtime chose for the layer. The mode the layer needs comes from the layer and the
// model's policy (latent_scale_for), not from `expected`: a per-token kernel for a layer
// bound per layer, or the reverse, is refused.
Status check_binding(const LayerScale& layer, LatentPolicy policy, const KernelSpec& expected,
                     const FactMap& embedded);

}  // namespace jitcache
