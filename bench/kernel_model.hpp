// The first-order performance model of the kernel report (bench/kernel_report.cpp):
// occupancy from the register count, the bytes one token moves, and a roofline that
// compares how fast the SMs can issue a token's instructions with how fast DRAM can move
// its bytes. Published figures, stated here once; nothing is measured.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "jitcache/kernel_types.hpp"

namespace jitcache::kernel_model {

// What limits the number of resident warps on one SM of an architecture.
struct ArchLimits {
  std::string_view family;  // "sm_90", for reports
  int registers_per_sm = 65536;
  int max_warps_per_sm = 64;
  int max_ctas_per_sm = 32;
  int register_unit_per_warp = 256;  // a warp's registers are allocated in units of this many
  int max_registers_per_thread = 255;
};

// The limits of a compilation target (sm_90, sm_100a, sm_120a and their siblings);
// nothing for a target this table does not know.
std::optional<ArchLimits> arch_limits(std::string_view target);

enum class OccupancyLimit { registers, warps, ctas };
const char* to_string(OccupancyLimit limit);

struct Occupancy {
  int ctas_per_sm = 0;
  int warps_per_sm = 0;
  double fraction = 0.0;  // warps_per_sm / max_warps_per_sm
  OccupancyLimit limit = OccupancyLimit::warps;
};

// Resident CTAs and warps per SM for a kernel using `registers` per thread and
// `threads_per_cta` threads (no shared memory: the kernels use none). Registers are
// rounded up per warp to the allocation unit; CTAs are whole.
Occupancy occupancy(const ArchLimits& limits, int registers, int threads_per_cta);

// Bytes one token (writer) or output row (gather) moves between the SMs and DRAM,
// from the record layout of kernel_templates/nvfp4_mla.cuh.
struct TokenBytes {
  int read = 0;
  int written = 0;
  int total() const { return read + written; }
};
TokenBytes bytes_per_token(KernelKind kernel, RecordFormat rope);

struct Device {
  std::string_view name;    // "H200"
  std::string_view target;  // the product target whose SASS it runs: "sm_90"
  int sms = 0;
  int schedulers_per_sm = 4;  // warp schedulers, each issuing at most one warp instruction per clock
  double clock_hz = 0.0;      // boost clock
  double dram_bytes_per_s = 0.0;
  std::string_view source;  // where the figures come from
};
std::span<const Device> devices();

struct Roofline {
  double issue_tokens_per_s = 0.0;   // sms * schedulers * clock / warp instructions per token
  double memory_tokens_per_s = 0.0;  // DRAM bandwidth / bytes per token
  bool issue_bound = false;          // the issue rate is the lower of the two
  // issue / memory: below 1 the kernel cannot reach the memory roofline even with perfect
  // latency hiding; the attainable fraction of it is min(1, this).
  double issue_over_memory = 0.0;
};
Roofline roofline(const Device& device, int warp_instructions_per_token, int bytes_per_token);

}  // namespace jitcache::kernel_model
