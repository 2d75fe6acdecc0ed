// The kernel that measures rcp.approx.ftz.f32: out[i] = rcp.approx.ftz.f32 of the fp32 whose
// bits are first + i, for i < count. The rcp table program (bench/rcp_table.cpp) runs it on
// the 2^23 significands of [1, 2); the GPU test of the table (tests/runtime/test_gpu.cpp)
// runs it on all 2^32 inputs. Compiled by the library's NVRTC back end, with the product
// kernels' options; the instruction is inline PTX, so no compiler option can replace it.
#pragma once

#include <string>

#include "kernel_templates/generator.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/compiler.hpp"

namespace jitcache {

inline constexpr const char* k_rcp_kernel_entry = "jc_rcp_approx_ftz";

inline constexpr const char* k_rcp_kernel_source = R"(
extern "C" __global__ void jc_rcp_approx_ftz(unsigned first, unsigned long long count, unsigned* out) {
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(first + static_cast<unsigned>(i));
    float r;
    asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    out[i] = __float_as_uint(r);
  }
}
)";

// The kernel compiled for `target` ("sm_90a", ...).
inline Result<CompiledArtifact> compile_rcp_kernel(const std::string& target) {
  GeneratedSource source;
  source.spec = KernelSpec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{target}};
  source.program_name = "jc_rcp_approx_ftz.cu";
  source.entry = k_rcp_kernel_entry;
  source.source = k_rcp_kernel_source;
  return make_nvrtc_compiler()->compile(source);
}

}  // namespace jitcache
