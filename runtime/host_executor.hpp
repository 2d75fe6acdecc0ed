// The host executor: runs the kernels' own lane bodies (kernel_templates/nvfp4_mla.cuh)
// on the CPU, token by token and lane by lane, so that the GPU's numerics are testable
// and usable (the `kv` tools) without a GPU. Results are bit-identical to the device.
#pragma once

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache {

// Checks the launch preconditions the GPU kernels rely on (16-byte aligned bases, row
// strides that keep rows 16-byte aligned, non-null buffers). The device launch
// wrappers use the same checks.
Status validate(const jc::WriterParams& params, RopeFormat rope);
Status validate(const jc::GatherParams& params);

// Runs the writer / gather exactly as the GPU would, including the latent-scale guard.
// Returns the status bits the kernel reports (jc::k_status_*; 0 = clean), or an error
// when the parameters violate the preconditions.
Result<jc::u32> host_run_writer(LatentScale latent_scale, RopeFormat rope,
                                const jc::WriterParams& params, float scale);
Result<jc::u32> host_run_gather(LatentScale latent_scale, RopeFormat rope,
                                const jc::GatherParams& params, float scale);

}  // namespace jitcache
