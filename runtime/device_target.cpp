#include "runtime/device_target.hpp"

#include "kernel_templates/generator.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {

Result<Target> target_for_device(cache::Store& store, const Compiler& compiler, const ResolvedScales& scales,
                                 RecordFormat format, LatentPolicy policy, int major, int minor) {
  return choose_device_target(major, minor, [&](const Target& target) -> Result<bool> {
    const VariantPlan plan = JC_TRY(plan_variants(scales, format, target, policy));
    for (const KernelSpec& spec : plan.variants) {
      const cache::Facts facts = JC_TRY(kernel_facts(generate(spec), compiler));
      // Any tier: a provider (a cache wheel) or the remote serves a fresh node as well.
      const auto located = store.locate(facts.key());
      if (!located || !*located) return false;
    }
    return true;
  });
}

}  // namespace jitcache
