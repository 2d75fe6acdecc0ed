// The gather the host executor's tests compare whole caches with: every slot, in order.
#pragma once

#include <cstdint>

#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache::testing {

// Launch parameters that gather all `num_slots` records of `cache` into rows of `out_stride`
// elements, row r from slot r (`slots` holds 0 .. num_slots - 1); no status word.
inline jc::GatherParams every_slot_gather(const std::uint8_t* cache, std::int64_t num_slots,
                                          const std::int32_t* slots, std::uint16_t* out, std::int64_t out_stride) {
  jc::GatherParams p{};
  p.cache = cache;
  p.num_slots = num_slots;
  p.slots = slots;
  p.num_rows = num_slots;
  p.out = out;
  p.out_stride = out_stride;
  return p;
}

}  // namespace jitcache::testing
