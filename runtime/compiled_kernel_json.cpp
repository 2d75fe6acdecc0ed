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

}  // namespace jitcache
