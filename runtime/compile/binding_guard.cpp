#include "runtime/compile/binding_guard.hpp"

namespace jitcache {

LatentScale latent_scale_for(ScaleMode mode) {
  return mode == ScaleMode::identity ? LatentScale::identity : LatentScale::dynamic;
}

Status check_binding(const LayerScale& layer, const KernelSpec& expected, const FactMap& embedded) {
  auto fact = [&](const char* name) {
    auto it = embedded.find(name);
    return it == embedded.end() ? std::string("(absent)") : it->second;
  };
  const std::string layer_name = "layer " + std::to_string(layer.layer) + " (scale " +
                                 std::to_string(layer.scale) + ", " + to_string(layer.mode) + ")";
  const std::string needed = to_string(latent_scale_for(layer.mode));
  if (fact("latent_scale") != needed)
    return make_error(ErrorCode::invalid_input,
                      "refusing to bind " + std::string(to_string(expected.kernel)) + " kernel to " + layer_name +
                          ": the artifact was built for latent_scale=" + fact("latent_scale") + ", the layer needs " +
                          needed);
  const std::pair<const char*, std::string> rest[] = {{"kernel", to_string(expected.kernel)},
                                                      {"rope", to_string(expected.rope)},
                                                      {"target", expected.target.name}};
  for (const auto& [name, value] : rest)
    if (fact(name) != value)
      return make_error(ErrorCode::invalid_input, "refusing to bind a kernel to " + layer_name + ": the artifact's " +
                                                      name + " is " + fact(name) + ", expected " + value);
  return {};
}

}  // namespace jitcache
