// The source cache with the real tools (runtime/compile/source_cache.hpp): CUDA C++
// through NVRTC and PTX through nvJitLink, cached across stores, cubins checked for the
// entry. Skipped where a tool is missing. Named to sort after test_source_compiler.cpp,
// whose first test needs a process in which nothing has loaded nvJitLink yet.
#include <atomic>
#include <filesystem>

#include "cache/store.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

KernelRequest sample_request() {
  KernelRequest r;
  r.family = "scaler";
  r.spec = {{"dtype", "f32"}, {"block", "128"}};
  r.kind = SourceKind::cuda;
  r.text = "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= 1.0f; }\n";
  r.entry = "scale";
  r.target = "sm_90";
  return r;
}

SpecSchema sample_schema() {
  return SpecSchema{"scaler", SourceKind::cuda, {{"dtype", FactDomain{{"f32", "bf16"}}}, {"block", FactDomain{}}}};
}

// Compiles `r` of a family of `registry` in two rounds, each through a store opened afresh on
// `root` as another process would: the first compiles, the second is served from the
// cache and found by its spec; each cubin holds `r.entry`.
void expect_compiled_once_then_cached(const std::filesystem::path& root, const SpecRegistry& registry,
                                      const KernelRequest& r) {
  std::atomic<int> compiles{0};
  SourceCacheOptions options;
  options.registry = &registry;
  options.compile = [&](const SourceInput& input) {
    ++compiles;  // counted: the second store must not compile
    return compile_source(input);
  };
  for (int round = 0; round < 2; ++round) {
    auto store = cache::Store::open(root);
    ASSERT_TRUE(store);
    SourceCache cache(**store, options);
    auto got = cache.compile(r);
    ASSERT_TRUE(got) << got.error().to_string();
    EXPECT_EQ(got->from_cache, round == 1);
    auto info = read_cubin_info(got->cubin);
    ASSERT_TRUE(info);
    EXPECT_TRUE(check_entry(*info, r.entry, "test"));
    if (round == 1) {
      auto found = cache.lookup(r.family, r.spec, r.target);
      ASSERT_TRUE(found && *found);
    }
  }
  EXPECT_EQ(compiles.load(), 1);
}

class SourceCacheNvrtc : public jitcache::testing::TempDirTest {};

TEST_F(SourceCacheNvrtc, RealCompileIsCachedAndItsCubinChecked) {
  auto tools = probe_tools(SourceKind::cuda);
  if (!tools) GTEST_SKIP() << tools.error().to_string();
  SpecRegistry registry;
  ASSERT_TRUE(registry.add(sample_schema()));
  KernelRequest r = sample_request();
  r.headers.clear();
  r.options = {"--use_fast_math"};
  expect_compiled_once_then_cached(dir() / "cache", registry, r);
}

TEST_F(SourceCacheNvrtc, PtxThroughNvJitLinkIsKeyedOnItsToolAndCached) {
  auto nvrtc = probe_tools(SourceKind::cuda);
  if (!nvrtc) GTEST_SKIP() << nvrtc.error().to_string();
  // PTX for the test kernel, from NVRTC directly (not cached).
  KernelRequest cu = sample_request();
  cu.headers.clear();
  cu.options.clear();
  auto made = compile_source(SourceInput{SourceKind::cuda, cu.text, {}, cu.entry, cu.target, {}, {}});
  ASSERT_TRUE(made) << made.error().to_string();
  auto jl = probe_tools(SourceKind::ptx);
  if (!jl) GTEST_SKIP() << jl.error().to_string();
  EXPECT_TRUE(jl->contains("nvjitlink"));
  EXPECT_FALSE(jl->contains("nvrtc"));

  SpecRegistry registry;
  SpecSchema ptx_schema = sample_schema();
  ptx_schema.kind = SourceKind::ptx;
  ASSERT_TRUE(registry.add(ptx_schema));
  KernelRequest r = cu;
  r.kind = SourceKind::ptx;
  r.text = made->ptx;
  expect_compiled_once_then_cached(dir() / "cache", registry, r);
}

// A compile whose tools are not the ones its key was made with (a toolkit replaced under a
// running process, a memo that lied) stores nothing.
TEST_F(SourceCacheNvrtc, AToolOtherThanTheKeysIsRefusedBeforeStoring) {
  auto real = probe_tools(SourceKind::cuda);
  if (!real) GTEST_SKIP() << real.error().to_string();
  SpecRegistry registry;
  ASSERT_TRUE(registry.add(sample_schema()));
  auto store = cache::Store::open(dir() / "cache");
  ASSERT_TRUE(store);
  SourceCacheOptions options;
  options.registry = &registry;
  options.tools = [&](SourceKind) -> Result<ToolFacts> {
    ToolFacts keyed = *real;
    keyed["nvrtc"].fingerprint = std::string(32, 'f');
    return keyed;
  };
  options.loaded_tools = [](SourceKind kind) { return probe_tools(kind); };
  SourceCache cache(**store, options);
  KernelRequest r = sample_request();
  r.headers.clear();
  auto refused = cache.compile(r);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable);
  EXPECT_NE(refused.error().message.find("was the toolkit replaced"), std::string::npos) << refused.error().message;
  auto entries = (*store)->list();
  ASSERT_TRUE(entries);
  EXPECT_TRUE(entries->empty());
}

TEST(SourceCacheTools, EachKindIsKeyedOnTheToolsItRuns) {
  for (SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx}) {
    auto tools = probe_tools(kind);
    if (!tools) {
      EXPECT_EQ(tools.error().code, ErrorCode::unavailable) << tools.error().to_string();
      continue;
    }
    ASSERT_EQ(tools->size(), tools_for(kind).size()) << to_string(kind);
    for (const auto& name : tools_for(kind)) {
      ASSERT_TRUE(tools->contains(name)) << name;
      EXPECT_FALSE(tools->at(name).version.empty()) << name;
      EXPECT_FALSE(tools->at(name).fingerprint.empty()) << name;
    }
    KernelRequest r = sample_request();
    r.kind = kind;
    auto facts = request_facts(r, *tools);
    ASSERT_TRUE(facts) << facts.error().to_string();
    for (const auto& name : tools_for(kind))
      EXPECT_EQ(facts->get("tool." + name + ".fingerprint"), tools->at(name).fingerprint);
  }
}

}  // namespace
}  // namespace jitcache
