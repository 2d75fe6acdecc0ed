#include "runtime/compile/binding_guard.hpp"

#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {

Status check_binding(const LayerScale& layer, LatentPolicy policy, const KernelSpec& expected,
                     const FactMap& embedded) {
  const std::string layer_name = "layer " + std::to_string(layer.layer) + " (scale " +
                                 std::to_string(layer.scale) + ", " + to_string(layer.mode) + ")";
  // Read through the dimension tables: a missing fact or a value no table has is refused
  // by name, never taken for one of the known values.
  const auto built = KernelSpec::from_facts(embedded);
  if (!built)
    return make_error(ErrorCode::invalid_input, "refusing to bind a kernel to " + layer_name +
                                                    ": the artifact's " + built.error().message);
  const FactMap have = built->to_facts();
  const std::string latent(k_latent_scales.fact);
  // The field failure first, in its own words: a kernel built for the other scale mode.
  const std::string needed = to_string(latent_scale_for(layer, policy));
  if (have.at(latent) != needed)
    return make_error(ErrorCode::invalid_input,
                      "refusing to bind " + std::string(to_string(expected.kernel)) + " kernel to " +
                          layer_name + ": the artifact was built for " + latent + "=" + have.at(latent) +
                          ", the layer needs " + needed);
  for (const auto& [name, value] : expected.to_facts()) {
    if (name == latent) continue;
    const auto it = have.find(name);
    if (it == have.end() || it->second != value)
      return make_error(ErrorCode::invalid_input, "refusing to bind a kernel to " + layer_name + ": the artifact's " +
                                                      name + " is " + (it == have.end() ? "(absent)" : it->second) +
                                                      ", expected " + value);
  }
  return {};
}

}  // namespace jitcache
