// The kernel that measures rcp.approx.ftz.f32 (bench/rcp_table_kernel.hpp) compiles through
// the library's NVRTC back end for every default target, and the instruction reaches the
// PTX as written. No GPU needed; the GPU runs it in scripts/gpu_check.sh.
#include <gtest/gtest.h>

#include "bench/rcp_table_kernel.hpp"

namespace jitcache {
namespace {

TEST(RcpTableKernel, CompilesForEveryDefaultTargetWithTheInstructionInItsPtx) {
  for (std::string_view target : default_targets()) {
    SCOPED_TRACE(std::string(target));
    auto artifact = compile_rcp_kernel(std::string(target));
    ASSERT_TRUE(artifact) << artifact.error().to_string();
    EXPECT_FALSE(artifact->cubin.empty());
    EXPECT_NE(artifact->ptx.find("rcp.approx.ftz.f32"), std::string::npos);
    EXPECT_NE(artifact->ptx.find(".entry jc_rcp_approx_ftz"), std::string::npos);
    EXPECT_EQ(artifact->entry, k_rcp_kernel_entry);
  }
}

}  // namespace
}  // namespace jitcache
