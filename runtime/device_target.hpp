// Which target prepare() gives a device when the caller names none: the most specific
// cubin the cache holds or can compile. kernel_spec.hpp holds NVIDIA's rule of which
// targets run where (targets_for_device); this asks the cache which of them it already
// holds for every variant a checkpoint needs. It takes the device's compute capability as
// numbers, so that it is tested without a device.
#pragma once

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/compiler.hpp"

namespace jitcache {

// The first target of targets_for_device(major, minor) under which a tier of the store
// (Store::locate: memory, disk, a provider, the remote; nothing counted) holds every variant
// of the plan for `scales`, `format` and `policy` (keyed with `compiler`, as the kernel
// cache keys them); else the one prepare() then compiles (choose_device_target). A tier
// that cannot be asked counts as holding nothing. unavailable when
// no target runs on the device.
Result<Target> target_for_device(cache::Store& store, const Compiler& compiler, const ResolvedScales& scales,
                                 RecordFormat format, LatentPolicy policy, int major, int minor);

}  // namespace jitcache
