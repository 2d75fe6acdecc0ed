// The bind-time guard: before a kernel is bound to a layer, the facts embedded in the
// artifact itself (not the cache index) must say it was built for the layer's latent-
// scale mode, kernel, RoPE layout and target. A mismatch is a hard error naming the
// layer; it never becomes a launch. This is the second, independent defence against the
// field failure (an identity kernel replayed for a calibrated layer).
#pragma once

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/artifact_facts.hpp"

namespace jitcache {

// `embedded`: facts read from the artifact (facts_from_cubin). `expected`: the variant
// the runtime chose for the layer.
Status check_binding(const LayerScale& layer, const KernelSpec& expected, const FactMap& embedded);

}  // namespace jitcache
