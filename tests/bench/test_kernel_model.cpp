// The kernel report's model: occupancy from registers, bytes per token from the record
// layout, and the roofline arithmetic.
#include "bench/kernel_model.hpp"

#include <gtest/gtest.h>

namespace jitcache::kernel_model {
namespace {

TEST(KernelModel, ArchLimitsOfTheProductTargets) {
  // The family-specific targets (sm_100f, sm_120f) have their family's limits.
  const std::pair<const char*, int> warps_per_sm[] = {
      {"sm_90", 64}, {"sm_100a", 64}, {"sm_103a", 64}, {"sm_100f", 64},
      {"sm_120a", 48}, {"sm_121a", 48}, {"sm_120f", 48},
  };
  for (const auto& [target, warps] : warps_per_sm) {
    const auto limits = arch_limits(target);
    ASSERT_TRUE(limits) << target;
    EXPECT_EQ(limits->max_warps_per_sm, warps) << target;
  }
  EXPECT_EQ(arch_limits("sm_120a")->registers_per_sm, 65536);
  EXPECT_EQ(arch_limits("sm_120a")->max_ctas_per_sm, 32);
  for (const char* unknown : {"sm_110a", "sm_89", "sm_100x"}) EXPECT_FALSE(arch_limits(unknown)) << unknown;
}

TEST(KernelModel, OccupancyFromRegisters) {
  const ArchLimits hopper = *arch_limits("sm_90");
  // 46 registers: 1472 per warp, rounded to 1536; 42 warps fit, so 10 CTAs of 4 warps.
  Occupancy o = occupancy(hopper, 46, 128);
  EXPECT_EQ(o.ctas_per_sm, 10);
  EXPECT_EQ(o.warps_per_sm, 40);
  EXPECT_DOUBLE_EQ(o.fraction, 40.0 / 64.0);
  EXPECT_EQ(o.limit, OccupancyLimit::registers);
  // 56 registers: 1792 per warp, 36 warps, 9 CTAs.
  o = occupancy(hopper, 56, 128);
  EXPECT_EQ(o.ctas_per_sm, 9);
  EXPECT_EQ(o.warps_per_sm, 36);
  // 32 registers: the register file holds 64 warps, which is also the warp limit.
  o = occupancy(hopper, 32, 128);
  EXPECT_EQ(o.ctas_per_sm, 16);
  EXPECT_EQ(o.warps_per_sm, 64);
  EXPECT_EQ(o.limit, OccupancyLimit::warps);
  // 33 registers round up to 40 per thread (1280 per warp): 51 warps, 12 CTAs.
  o = occupancy(hopper, 33, 128);
  EXPECT_EQ(o.ctas_per_sm, 12);
  EXPECT_EQ(o.limit, OccupancyLimit::registers);
  // One-warp CTAs with few registers hit the CTA limit.
  o = occupancy(hopper, 16, 32);
  EXPECT_EQ(o.ctas_per_sm, 32);
  EXPECT_EQ(o.warps_per_sm, 32);
  EXPECT_EQ(o.limit, OccupancyLimit::ctas);

  const ArchLimits consumer = *arch_limits("sm_120a");
  o = occupancy(consumer, 32, 128);
  EXPECT_EQ(o.ctas_per_sm, 12);
  EXPECT_EQ(o.warps_per_sm, 48);
  EXPECT_DOUBLE_EQ(o.fraction, 1.0);
  o = occupancy(consumer, 46, 128);
  EXPECT_EQ(o.warps_per_sm, 40);
  EXPECT_NEAR(o.fraction, 40.0 / 48.0, 1e-12);

  // Nothing sensible to say about an unknown register count.
  EXPECT_EQ(occupancy(hopper, -1, 128).ctas_per_sm, 0);
  EXPECT_EQ(occupancy(hopper, 256, 128).ctas_per_sm, 0);
  EXPECT_EQ(occupancy(hopper, 32, 0).ctas_per_sm, 0);
}

TEST(KernelModel, BytesPerTokenFromTheRecordLayout) {
  // Writer: kv_c 1024 + k_pe 128 + slot 8 in; the record out.
  EXPECT_EQ(bytes_per_token(KernelKind::writer, RecordFormat::b12x_432).read, 1160);
  EXPECT_EQ(bytes_per_token(KernelKind::writer, RecordFormat::b12x_432).written, 432);
  EXPECT_EQ(bytes_per_token(KernelKind::writer, RecordFormat::b12x_368).total(), 1160 + 368);
  // Gather: slot 4 + the record in; 576 bf16 out.
  EXPECT_EQ(bytes_per_token(KernelKind::gather, RecordFormat::b12x_432).read, 436);
  EXPECT_EQ(bytes_per_token(KernelKind::gather, RecordFormat::b12x_432).written, 1152);
  EXPECT_EQ(bytes_per_token(KernelKind::gather, RecordFormat::b12x_368).total(), 4 + 368 + 1152);
}

TEST(KernelModel, RooflineArithmetic) {
  const Device& h200 = devices()[0];
  EXPECT_EQ(h200.name, "H200");
  EXPECT_EQ(h200.target, "sm_90");
  // 132 SMs x 4 x 1.98e9 = 1.04544e12 warp instructions per second.
  Roofline r = roofline(h200, 1000, 1600);
  EXPECT_NEAR(r.issue_tokens_per_s, 1.04544e9, 1.0);
  EXPECT_NEAR(r.memory_tokens_per_s, 3.0e9, 1.0);
  EXPECT_TRUE(r.issue_bound);
  EXPECT_NEAR(r.issue_over_memory, 1.04544 / 3.0, 1e-9);
  // Few instructions: DRAM is the limit.
  r = roofline(h200, 200, 1600);
  EXPECT_FALSE(r.issue_bound);
  EXPECT_GT(r.issue_over_memory, 1.0);

  const Device& b200 = devices()[1];
  EXPECT_EQ(b200.target, "sm_100a");
  r = roofline(b200, 1000, 1600);
  EXPECT_NEAR(r.issue_tokens_per_s, 148 * 4 * 1.965e9 / 1000, 1.0);
  EXPECT_NEAR(r.memory_tokens_per_s, 8.0e12 / 1600, 1.0);

  EXPECT_EQ(roofline(h200, 0, 1600).issue_tokens_per_s, 0.0);
}

}  // namespace
}  // namespace jitcache::kernel_model
