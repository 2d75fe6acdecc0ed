#include "runtime/compiled_kernel_json.hpp"

namespace jitcache {

nlohmann::json to_json(const CompiledKernel& k) {
  return {{"family", k.family},
          {"kind", to_string(k.kind)},
          {"entry", k.entry},
          {"target", k.target},
          {"key", k.key},
          {"from_cache", k.from_cache},
          {"from_remote", k.from_remote},
          {"verified", k.verified},
          {"ms", k.ms},
          {"cubin_bytes", k.cubin.size()},
          {"resources",
           {{"registers", k.usage.registers},
            {"stack_frame_bytes", k.usage.stack_frame_bytes},
            {"spill_store_bytes", k.usage.spill_store_bytes},
            {"spill_load_bytes", k.usage.spill_load_bytes}}},
          {"log", k.log}};
}

nlohmann::json kernel_info_json(const KernelInfo& k) {
  return {{"kernel", to_string(k.kernel)},
          {"latent_scale", to_string(k.latent_scale)},
          {"format", to_string(k.format)},
          {"target", k.target},
          {"key", k.key},
          {"from_remote", k.from_remote},
          {"from_provider", k.from_provider},
          {"stored", k.stored},
          {"registers", k.registers},
          {"cubin_bytes", k.cubin_bytes}};
}

}  // namespace jitcache
