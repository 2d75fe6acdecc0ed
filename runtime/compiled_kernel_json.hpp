// Kernels as JSON objects. A kernel from outside: what `jitcache compile --source --json`
// prints and what jitcache_kernel_describe hands a C caller (its keys are listed in
// jitcache.h). A prepared model's variant: the keys that jitcache_model_describe and
// `jitcache warm --json` both print.
#pragma once

#include <nlohmann/json.hpp>

#include "jitcache/compile.hpp"
#include "jitcache/runtime.hpp"

namespace jitcache {

nlohmann::json to_json(const CompiledKernel& kernel);

// The variant, where it came from and what it is: kernel, latent_scale, format, target,
// key, from_remote, from_provider, stored, registers and cubin_bytes. Each caller adds its
// own keys.
nlohmann::json kernel_info_json(const KernelInfo& kernel);

}  // namespace jitcache
