// Structural checks on generated PTX: does an entry do arithmetic with its latent-scale
// parameter? The identity variant must not (it only compares it, for the guard); the
// dynamic variant must. Used by tests and by the cache audit as evidence that a
// kernel was (or was not) built with the restore multiply.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

struct PtxParamUse {
  std::string param;                         // e.g. "jc_nvfp4_mla_writer_param_1"
  std::vector<std::string> registers;        // the register it is loaded into, and copies
  std::vector<std::string> arithmetic;       // instructions that compute with it
  std::vector<std::string> comparisons;      // setp instructions that only test it
};

// Follows the f32 parameter `param_index` of `entry` through loads and register copies.
// Errors when the entry or the parameter load is not found.
Result<PtxParamUse> analyze_param_use(std::string_view ptx, std::string_view entry, int param_index);

}  // namespace jitcache
