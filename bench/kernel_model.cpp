#include "bench/kernel_model.hpp"

#include <algorithm>
#include <string>

#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "support/enum_names.hpp"

namespace jitcache::kernel_model {

std::optional<ArchLimits> arch_limits(std::string_view target) {
  // CUDA C++ Programming Guide, "Technical Specifications per Compute Capability":
  // 64K 32-bit registers per SM for all three, 32 resident CTAs per SM, 2048 resident
  // threads (64 warps) per SM on 9.0 and 10.x, 1536 (48 warps) on 12.x. Registers are
  // allocated per warp in units of 256.
  static constexpr ArchLimits k_hopper{"sm_90", 65536, 64, 32, 256, 255};
  static constexpr ArchLimits k_blackwell{"sm_100", 65536, 64, 32, 256, 255};
  static constexpr ArchLimits k_blackwell_consumer{"sm_120", 65536, 48, 32, 256, 255};
  // By the compute capability the target is compiled for (k_targets): every target of a
  // major version, generic, family- or arch-specific, has these limits; 11.0 (Thor) is not
  // modelled.
  const TargetRow* row = k_targets.find(target);
  if (row == nullptr) return std::nullopt;
  if (row->major == 9) return k_hopper;
  if (row->major == 10) return k_blackwell;
  if (row->major == 12) return k_blackwell_consumer;
  return std::nullopt;
}

const char* to_string(OccupancyLimit limit) { return enum_name(limit, {"registers", "warps", "CTAs"}); }

Occupancy occupancy(const ArchLimits& limits, int registers, int threads_per_cta) {
  Occupancy out;
  if (registers <= 0 || threads_per_cta <= 0 || registers > limits.max_registers_per_thread) return out;
  const int warps_per_cta = (threads_per_cta + 31) / 32;
  const int unit = limits.register_unit_per_warp;
  const int registers_per_warp = (registers * 32 + unit - 1) / unit * unit;
  const int by_registers = limits.registers_per_sm / registers_per_warp / warps_per_cta;
  const int by_warps = limits.max_warps_per_sm / warps_per_cta;
  const int by_ctas = limits.max_ctas_per_sm;
  out.ctas_per_sm = std::min({by_registers, by_warps, by_ctas});
  // The tightest limit; a tie goes to the hardware limits (warps, then CTAs), since more
  // registers would not lower the occupancy.
  out.limit = out.ctas_per_sm == by_warps  ? OccupancyLimit::warps
              : out.ctas_per_sm == by_ctas ? OccupancyLimit::ctas
                                           : OccupancyLimit::registers;
  out.warps_per_sm = out.ctas_per_sm * warps_per_cta;
  out.fraction = static_cast<double>(out.warps_per_sm) / limits.max_warps_per_sm;
  return out;
}

TokenBytes bytes_per_token(KernelKind kernel, RecordFormat rope) {
  const int record = record_bytes(rope);
  const int row_elems = gathered_row_elems(rope);
  constexpr int k_bf16 = 2;
  TokenBytes out;
  switch (kernel) {
    case KernelKind::writer:
      // kv_c row (512 bf16) + k_pe row (64 bf16) + its slot_mapping entry in; the whole
      // record out (latent, scales, padding and RoPE are all written).
      // (A format without RoPE reads no k_pe.)
      out.read = jc::k_latent_dim * k_bf16 + (row_elems - jc::k_latent_dim) * k_bf16 +
                 static_cast<int>(sizeof(jc::i64));
      out.written = record;
      break;
    case KernelKind::gather:
      // Its slot in, the record in, 576 (512 without RoPE) bf16 out. The gather does not read the record's
      // 16 (bf16 RoPE) or 12 (fp8 RoPE) padding bytes, but they lie between bytes it reads
      // and are narrower than a 32-byte DRAM sector, so every sector holding one is fetched
      // anyway: the DRAM traffic is the whole record.
      out.read = static_cast<int>(sizeof(jc::i32)) + record;
      out.written = row_elems * k_bf16;
      break;
  }
  return out;
}

std::span<const Device> devices() {
  // NVIDIA's published figures (datasheets and architecture papers; third-party
  // listings round B200 to 7.7 TB/s and 1.98 GHz, which moves no verdict here):
  // H200 SXM: 132 SMs (GH100 as in H100 SXM), 1.98 GHz boost, 4.8 TB/s HBM3e.
  // B200 (HGX): 148 SMs, 1.965 GHz boost, 8 TB/s HBM3e.
  static constexpr Device k_devices[] = {
      {"H200", "sm_90", 132, 4, 1.98e9, 4.8e12, "H200 SXM: 132 SMs, 1.98 GHz boost, 4.8 TB/s"},
      {"B200", "sm_100a", 148, 4, 1.965e9, 8.0e12, "B200: 148 SMs, 1.965 GHz boost, 8.0 TB/s"},
  };
  return k_devices;
}

Roofline roofline(const Device& device, int warp_instructions_per_token, int bytes_per_token) {
  Roofline out;
  if (warp_instructions_per_token <= 0 || bytes_per_token <= 0) return out;
  out.issue_tokens_per_s = device.sms * device.schedulers_per_sm * device.clock_hz /
                           static_cast<double>(warp_instructions_per_token);
  out.memory_tokens_per_s = device.dram_bytes_per_s / static_cast<double>(bytes_per_token);
  out.issue_bound = out.issue_tokens_per_s < out.memory_tokens_per_s;
  out.issue_over_memory = out.issue_tokens_per_s / out.memory_tokens_per_s;
  return out;
}

}  // namespace jitcache::kernel_model
