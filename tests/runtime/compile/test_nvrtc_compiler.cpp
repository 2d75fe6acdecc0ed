// Every variant compiles with NVRTC for every target of the table (the family-specific
// sm_100f and sm_120f included), into a cubin of the target's SM, without spills or local
// memory; the PTX shows the latent scale used exactly where it must be; a compile error
// comes back as a value with the options and the full log.
#include <algorithm>
#include <future>
#include <map>
#include <string>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/ptx_analysis.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

class AllVariants : public ::testing::Test {
 protected:
  // Compiled once for the whole suite: every variant for every target, one target's
  // variants at a time (about 0.1 s each).
  static void SetUpTestSuite() {
    const auto compiler = make_nvrtc_compiler();
    for (auto t : supported_targets()) {
      std::vector<std::future<Result<CompiledArtifact>>> jobs;
      for (const KernelSpec& spec : all_variants(Target{std::string(t)}))
        jobs.push_back(std::async(std::launch::async, [&compiler, spec] {
          return compiler->compile(generate(spec));
        }));
      for (auto& j : jobs) s_results->push_back(j.get());
    }
  }
  static void TearDownTestSuite() { s_results->clear(); }
  static inline std::vector<Result<CompiledArtifact>>* s_results =
      new std::vector<Result<CompiledArtifact>>();
};

TEST_F(AllVariants, CompileToCubinForEveryTarget) {
  ASSERT_EQ(s_results->size(), supported_targets().size() * all_variants(Target{"sm_90"}).size());
  std::map<std::string, int> per_target;
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    const CompiledArtifact& a = *r;
    ++per_target[a.spec.target.name];
    ASSERT_GE(a.cubin.size(), 4u);
    EXPECT_TRUE(a.cubin[0] == 0x7f && a.cubin[1] == 'E' && a.cubin[2] == 'L' && a.cubin[3] == 'F')
        << a.spec.label() << ": cubin is not an ELF image";
    EXPECT_NE(a.ptx.find(".target " + a.spec.target.name), std::string::npos) << a.spec.label();
    // The ELF header names the SM of the target's compute capability (an "f" or "a"
    // cubin's the same as the generic one's: the suffix is in the key, not the header).
    const auto elf = read_cubin_info(a.cubin);
    ASSERT_OK(elf);
    const TargetRow* row = k_targets.find(a.spec.target.name);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(elf->sm, row->major * 10 + row->minor) << a.spec.label();
    EXPECT_NE(a.ptx.find(".entry " + a.entry), std::string::npos) << a.spec.label();
    EXPECT_GT(a.compile_ms, 0.0);
  }
  const int per = static_cast<int>(all_variants(Target{"sm_90"}).size());
  for (auto t : supported_targets()) EXPECT_EQ(per_target[std::string(t)], per) << t;
  EXPECT_EQ(per_target["sm_100f"], per);
  EXPECT_EQ(per_target["sm_120f"], per);
}

TEST_F(AllVariants, NoSpillsNoLocalMemory) {
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    const CompiledArtifact& a = *r;
    ASSERT_GT(a.usage.registers, 0) << a.spec.label() << ": ptxas report missing:\n" << a.log;
    EXPECT_EQ(a.usage.spill_store_bytes, 0) << a.spec.label();
    EXPECT_EQ(a.usage.spill_load_bytes, 0) << a.spec.label();
    EXPECT_EQ(a.usage.stack_frame_bytes, 0) << a.spec.label();
    EXPECT_EQ(a.ptx.find(".local"), std::string::npos) << a.spec.label() << " uses local memory";
    // The launch bounds (128 threads) leave room for full occupancy; stay well inside.
    EXPECT_LE(a.usage.registers, 64) << a.spec.label();
  }
}

// A lane moves its two latent chunks as vectors: the writer reads each chunk's 16 bytes of
// bf16 with one load (read-only path) and stores its 4 bytes of E2M1 at once; the gather
// does the reverse.
TEST_F(AllVariants, VectorizedLatentAccesses) {
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    const bool writer = r->spec.kernel == KernelKind::writer;
    const char* load = writer ? "ld.global.nc.v4.u32" : "ld.global.nc.u32";
    const char* store = writer ? "st.global.u32" : "st.global.v4.u32";
    EXPECT_NE(r->ptx.find(load), std::string::npos) << r->spec.label() << ": no " << load;
    EXPECT_NE(r->ptx.find(store), std::string::npos) << r->spec.label() << ": no " << store;
  }
}

TEST_F(AllVariants, NoApproximateArithmetic) {
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    for (const char* approx : {".approx", "rcp.", "fma.rn", "ex2.", "lg2."})
      EXPECT_EQ(r->ptx.find(approx), std::string::npos) << r->spec.label() << " contains " << approx;
  }
}

TEST_F(AllVariants, IdentityNeverComputesWithTheScaleDynamicDoes) {
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    const CompiledArtifact& a = *r;
    auto use = analyze_param_use(a.ptx, a.entry, 1);
    ASSERT_OK(use);
    // A per-token kernel takes no outer scale either: it only checks that it was given 1.0
    // (its scale is each token's own, computed or read from the record).
    if (a.spec.latent_scale == LatentScale::identity || a.spec.latent_scale == LatentScale::per_token) {
      EXPECT_TRUE(use->arithmetic.empty())
          << a.spec.label() << " computes with the latent scale: " << use->arithmetic.front();
      EXPECT_FALSE(use->comparisons.empty()) << a.spec.label() << ": the scale guard is missing";
    } else {
      ASSERT_FALSE(use->arithmetic.empty()) << a.spec.label() << " never applies the latent scale";
      auto count = [&](const char* op) {
        return std::count_if(use->arithmetic.begin(), use->arithmetic.end(),
                             [&](const std::string& l) { return l.rfind(op, 0) == 0; });
      };
      if (a.spec.kernel == KernelKind::writer) {
        // The writer divides one block amax by it (a lane computes one block's scale: no
        // division per element), and builds that block's thresholds from it with half-ulp
        // products and directed-rounding FMAs, the scale prescaled by 2^100 when tiny
        // (selp picks the prescaled copy; how much of that the compiler shows on the
        // parameter's own register varies by target). All correctly or directedly
        // rounded, nothing else.
        EXPECT_EQ(count("div.rn.f32"), 1) << a.spec.label();
        EXPECT_EQ(count("div.rn.f32") + count("mul.rn.f32") + count("fma.rm.f32") + count("fma.rp.f32") +
                      count("selp.f32"),
                  static_cast<long>(use->arithmetic.size()))
            << a.spec.label();
      } else {
        // The gather multiplies by it once per latent element a lane handles (two chunks of
        // 8), correctly rounded.
        EXPECT_EQ(count("mul.rn.f32"), 16) << a.spec.label();
        EXPECT_EQ(count("mul.rn.f32"), static_cast<long>(use->arithmetic.size())) << a.spec.label();
      }
    }
  }
}

TEST_F(AllVariants, ArtifactsCarryTheirFacts) {
  for (const auto& r : *s_results) {
    ASSERT_OK(r);
    const std::string expected = std::string("latent_scale=") + to_string(r->spec.latent_scale) + ";";
    const std::string cubin(r->cubin.begin(), r->cubin.end());
    EXPECT_NE(cubin.find(expected), std::string::npos) << r->spec.label();
    EXPECT_NE(cubin.find("target=" + r->spec.target.name + ";"), std::string::npos);
    EXPECT_NE(r->ptx.find("jc_artifact_facts"), std::string::npos);
  }
}

TEST(NvrtcCompiler, CompileErrorReturnsOptionsAndFullLog) {
  const auto compiler = make_nvrtc_compiler();
  GeneratedSource broken = generate({KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_90"}});
  broken.source += "\nextern \"C\" __global__ void oops() { this_is_not_declared = 1; }\n";
  auto r = compiler->compile(broken);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::compile);
  EXPECT_NE(r.error().message.find(broken.program_name), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().detail.find("--gpu-architecture=sm_90"), std::string::npos) << r.error().detail;
  EXPECT_NE(r.error().detail.find("this_is_not_declared"), std::string::npos) << r.error().detail;
  EXPECT_NE(r.error().detail.find("error"), std::string::npos);
}

TEST(NvrtcCompiler, MissingHeaderIsACompileError) {
  const auto compiler = make_nvrtc_compiler();
  GeneratedSource broken = generate({KernelKind::gather, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_100a"}});
  broken.headers.clear();
  auto r = compiler->compile(broken);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().detail.find("nvfp4_mla.cuh"), std::string::npos) << r.error().detail;
}

TEST(NvrtcCompiler, ReportsVersionAndNormalizedOptions) {
  const auto compiler = make_nvrtc_compiler();
  EXPECT_EQ(compiler->name(), "nvrtc");
  EXPECT_NE(compiler->version(), "unknown");
  const auto opts = compiler->options({KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_120a"}});
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--gpu-architecture=sm_120a"), opts.end());
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--fmad=false"), opts.end());
}

TEST(Targets, ExactNamesOnly) {
  EXPECT_OK(parse_target("sm_120a"));
  EXPECT_OK(parse_target("sm_90"));
  auto bad = parse_target("sm_12");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("supported"), std::string::npos);
  EXPECT_FALSE(parse_target("SM_90"));
  EXPECT_NE(*parse_target("sm_120a"), *parse_target("sm_120"));
}

TEST(PtxAnalysis, FollowsCopiesAndReportsMissingEntries) {
  const std::string ptx = R"(
.visible .entry k(
	.param .f32 k_param_1
)
{
	ld.param.f32 	%f1, [k_param_1];
	mov.f32 	%f9, %f1;
	setp.neu.f32 	%p1, %f1, 0f3F800000;
	mul.rn.f32 	%f3, %f2, %f9;
	add.f32 	%f11, %f10, %f19;
}
)";
  auto use = analyze_param_use(ptx, "k", 1);
  ASSERT_OK(use);
  EXPECT_EQ(use->comparisons.size(), 1u);
  ASSERT_EQ(use->arithmetic.size(), 1u);  // %f19 is not %f1
  EXPECT_EQ(use->arithmetic[0].rfind("mul.rn.f32", 0), 0u);
  EXPECT_FALSE(analyze_param_use(ptx, "other", 1));
  EXPECT_FALSE(analyze_param_use(ptx, "k", 2));
}

}  // namespace
}  // namespace jitcache
