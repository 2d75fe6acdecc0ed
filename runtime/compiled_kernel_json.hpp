// A kernel from outside as one JSON object: what `jitcache compile --source --json` prints
// and what jitcache_kernel_describe hands a C caller (its keys are listed in jitcache.h).
#pragma once

#include <nlohmann/json.hpp>

#include "jitcache/compile.hpp"

namespace jitcache {

nlohmann::json to_json(const CompiledKernel& kernel);

}  // namespace jitcache
