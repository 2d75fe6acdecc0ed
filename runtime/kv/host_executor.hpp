// The host executor: runs the kernels' own lane bodies (kernel_templates/nvfp4_mla.cuh
// and nvfp4_mla_formats.cuh, whichever the generator builds the variant from) on the CPU, token by token and lane by lane, so that the GPU's numerics are testable
// and usable (the `kv` tools) without a GPU. Results are bit-identical to the device.
#pragma once

#include <cstdint>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/nvfp4_mla_formats.cuh"

namespace jitcache {

// The most rows (tokens) one launch takes: the grid's x dimension (2^31 - 1 blocks of
// jc::k_tokens_per_cta rows). The host executor keeps the same bound.
inline constexpr std::int64_t k_max_launch_rows = std::int64_t{0x7fffffff} * jc::k_tokens_per_cta;

// Checks the launch preconditions the GPU kernels rely on, so that a launch that passes
// cannot address memory outside the buffers it names:
//   - counts are >= 0 and at most k_max_launch_rows rows (num_tokens, num_rows);
//   - every buffer read or written is non-null and aligned for its type: kv_c, k_pe,
//     cache and out 16 bytes (vector loads), slot_mapping 8 (int64), slots 4 (int32), a
//     non-null status 4 (uint32);
//   - strides are >= the row width and multiples of 8 elements (rows stay 16-byte
//     aligned);
//   - for every buffer, base + its extent (last row's offset + row bytes) fits in 64
//     bits, and the extent fits in int64 (the kernels index with int64, e.g. slot *
//     record_bytes and token * stride);
//   - no buffer the kernel writes (the writer's cache and status, the gather's out and
//     status) shares a byte with any other buffer of the launch, each taken from its base
//     to the end of its last row (runtime/kv/launch_contract.hpp); buffers that are only
//     read may overlap.
// A count of 0 is valid with any pointers: nothing is read or written. The device launch
// wrappers use the same checks. Errors are ErrorCode::invalid_argument naming the field.
// A format without RoPE (b12x-304) reads no k_pe (it may be null), and its gathered rows
// hold gathered_row_elems(format) = 512 values.
Status validate(const jc::WriterParams& params, RecordFormat format);
Status validate(const jc::GatherParams& params, RecordFormat format);

// Which bodies run: the ones the generator builds the variant's GPU kernel from (always,
// outside tests), or nvfp4_mla_formats.cuh's for every variant, so that tests can hold its
// bodies to nvfp4_mla.cuh's on the variants both can build.
enum class HostBodies { as_generated, formats };

// Runs the writer / gather exactly as the GPU would, including the latent-scale guard.
// Returns the status bits the kernel reports (jc::k_status_*; 0 = clean), or an error
// when the parameters violate the preconditions. The writer also refuses, before writing
// anything, a slot_mapping that maps two tokens to one slot in [0, num_slots)
// (check_distinct_slots): what the device leaves undefined is an error here. A page-major
// format's writer (flashinfer-dsv4-384, flashmla-v41-288) defines it instead, as its
// engine's writer does: the lowest row of a slot writes it. Its cache is whole pages
// (num_slots a multiple of the page size) and its writer reads no k_pe (the RoPE, if any,
// is in kv_c's row of 512). A mode the format is not written with (check_format_mode) is
// ErrorCode::invalid_argument.
Result<jc::u32> host_run_writer(LatentScale latent_scale, RecordFormat format,
                                const jc::WriterParams& params, float scale,
                                HostBodies bodies = HostBodies::as_generated);
Result<jc::u32> host_run_gather(LatentScale latent_scale, RecordFormat format,
                                const jc::GatherParams& params, float scale,
                                HostBodies bodies = HostBodies::as_generated);

}  // namespace jitcache
