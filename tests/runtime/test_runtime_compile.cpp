// Kernels from outside through the linked runtime (Runtime::declare_family, compile,
// lookup; include/jitcache/compile.hpp) with the real tools: NVVM IR through libNVVM and
// nvJitLink, and CUDA C++ through NVRTC, cached, found by spec from a fresh runtime, and
// shadow-verified (always on compile; on the hits lookup chooses, by option or by
// JITCACHE_VERIFY_SPEC). Skipped where a tool is missing.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "compile_golden.hpp"
#include "expect_error.hpp"
#include "jitcache/runtime.hpp"
#include "support/regular_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::k_golden;

std::string golden(const char* name) {
  auto text = read_regular_file(k_golden / name, 1 << 20);
  EXPECT_TRUE(text) << text.error().to_string();
  return text ? *text : std::string();
}

SpecSchema axpy_schema(SourceKind kind) {
  return SpecSchema{"axpy", kind, {{"dtype", FactDomain{{"f32"}}}, {"unroll", FactDomain{}}}};
}

KernelRequest axpy_nvvm(const std::string& target) {
  KernelRequest r;
  r.family = "axpy";
  r.spec = {{"dtype", "f32"}, {"unroll", "1"}};
  r.kind = SourceKind::nvvm;
  r.text = golden("axpy_nvvm.ll");
  r.entry = "axpy";
  r.target = target;
  return r;
}

class RuntimeCompileTest : public jitcache::testing::TempDirTest {
 protected:
  std::unique_ptr<Runtime> open(std::optional<double> verify = 0.0) {
    RuntimeOptions options;
    options.cache_dir = dir() / "cache";
    options.device = DeviceUse::none;
    options.cache_requirement = CacheRequirement::required;
    options.verify_spec = verify;
    auto runtime = Runtime::open(options);
    EXPECT_TRUE(runtime) << runtime.error().to_string();
    return runtime ? std::move(*runtime) : nullptr;
  }
};

// The libNVVM path for each product target: compiled once, then a hit, then found by spec
// alone from a runtime that never saw the source.
TEST_F(RuntimeCompileTest, NvvmIrIsCompiledCachedAndFoundBySpecOnEveryTarget) {
  {
    auto runtime = open();
    ASSERT_TRUE(runtime);
    ASSERT_TRUE(runtime->declare_family(axpy_schema(SourceKind::nvvm)));
    for (const char* target : {"sm_90", "sm_100a", "sm_120a"}) {
      auto first = runtime->compile(axpy_nvvm(target));
      if (!first && first.error().code == ErrorCode::unavailable) GTEST_SKIP() << first.error().to_string();
      ASSERT_TRUE(first) << first.error().to_string();
      EXPECT_FALSE(first->from_cache);
      EXPECT_FALSE(first->verified);  // no record yet
      EXPECT_EQ(first->entry, "axpy");
      EXPECT_EQ(first->target, target);
      EXPECT_EQ(first->kind, SourceKind::nvvm);
      EXPECT_GT(first->usage.registers, 0);
      EXPECT_EQ(first->key.size(), 32u);
      EXPECT_NE(first->log.find("libNVVM"), std::string::npos) << first->log;
      auto second = runtime->compile(axpy_nvvm(target));
      ASSERT_TRUE(second) << second.error().to_string();
      EXPECT_TRUE(second->from_cache);
      EXPECT_TRUE(second->verified);
      EXPECT_EQ(second->cubin, first->cubin);
      EXPECT_EQ(second->key, first->key);
    }
  }
  auto fresh = open();
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->declare_family(axpy_schema(SourceKind::nvvm)));
  for (const char* target : {"sm_90", "sm_100a", "sm_120a"}) {
    auto found = fresh->lookup("axpy", {{"dtype", "f32"}, {"unroll", "1"}}, target);
    ASSERT_TRUE(found) << found.error().to_string();
    ASSERT_EQ(found->outcome, LookupOutcome::hit) << target;
    ASSERT_TRUE(found->kernel);
    EXPECT_TRUE(found->kernel->from_cache);
    EXPECT_EQ(found->kernel->entry, "axpy");
    EXPECT_EQ(found->kernel->kind, SourceKind::nvvm);
    EXPECT_FALSE(found->kernel->cubin.empty());
  }
  auto other = fresh->lookup("axpy", {{"dtype", "f32"}, {"unroll", "4"}}, "sm_90");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->outcome, LookupOutcome::miss);
  EXPECT_FALSE(other->kernel);
}

TEST_F(RuntimeCompileTest, FamiliesAreDeclaredPerRuntimeAndChecked) {
  auto runtime = open();
  ASSERT_TRUE(runtime);
  auto undeclared = runtime->compile(axpy_nvvm("sm_90"));
  ASSERT_FALSE(undeclared);
  EXPECT_EQ(undeclared.error().code, ErrorCode::not_found);
  EXPECT_NE(undeclared.error().message.find("'axpy' is not declared"), std::string::npos);
  EXPECT_EQ(runtime->lookup("axpy", {}, "sm_90").error().code, ErrorCode::not_found);

  ASSERT_TRUE(runtime->declare_family(axpy_schema(SourceKind::nvvm)));
  EXPECT_TRUE(runtime->declare_family(axpy_schema(SourceKind::nvvm)));
  auto redeclared = runtime->declare_family(axpy_schema(SourceKind::ptx));
  ASSERT_FALSE(redeclared);
  EXPECT_EQ(redeclared.error().code, ErrorCode::invalid_argument);

  KernelRequest r = axpy_nvvm("sm_90");
  r.spec.erase("unroll");
  auto missing = runtime->compile(r);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(missing.error().message.find("missing fact unroll"), std::string::npos);
  r = axpy_nvvm("sm_90");
  r.spec["dtype"] = "f64";
  EXPECT_NE(runtime->compile(r).error().message.find("dtype='f64' is out of range (one of {f32})"),
            std::string::npos);
  r = axpy_nvvm("sm_90");
  r.kind = SourceKind::cuda;
  r.text = golden("axpy.cu");
  EXPECT_EQ(runtime->compile(r).error().code, ErrorCode::invalid_argument);
  r = axpy_nvvm("sm_89");
  auto target = runtime->compile(r);
  ASSERT_FALSE(target);
  EXPECT_EQ(target.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(target.error().message.find("sm_89"), std::string::npos);
}

// The seed's bug, caught: a family whose CUDA source depends on a latent scale that is not
// a spec fact. The calibrated layer's source is refused, and the identity kernel is not
// served for it.
TEST_F(RuntimeCompileTest, AForgettingFamilyIsCaughtOnTheFirstVerifiedHit) {
  auto runtime = open(1.0);
  ASSERT_TRUE(runtime);
  ASSERT_TRUE(runtime->declare_family(SpecSchema{"forgetful", SourceKind::cuda, {{"rope", FactDomain{{"bf16"}}}}}));
  auto source = [](const std::string& scale) {
    return "extern \"C\" __global__ void quant(float* x) { x[threadIdx.x] *= " + scale + "f; }\n";
  };
  KernelRequest identity;
  identity.family = "forgetful";
  identity.spec = {{"rope", "bf16"}};
  identity.kind = SourceKind::cuda;
  identity.text = source("1.0");
  identity.entry = "quant";
  identity.target = "sm_100a";
  auto compiled = runtime->compile(identity);
  if (!compiled && compiled.error().code == ErrorCode::unavailable) GTEST_SKIP() << compiled.error().to_string();
  ASSERT_TRUE(compiled) << compiled.error().to_string();

  // The library looks the calibrated layer's kernel up by its (incomplete) spec: a hit,
  // chosen for verification, so it generates the source and compiles it...
  auto looked = runtime->lookup("forgetful", {{"rope", "bf16"}}, "sm_100a");
  ASSERT_TRUE(looked);
  EXPECT_EQ(looked->outcome, LookupOutcome::verify);
  EXPECT_FALSE(looked->kernel);
  KernelRequest calibrated = identity;
  calibrated.text = source("0.0123");
  auto refused = runtime->compile(calibrated);
  // ... and the difference is the spec's fault, reported as such.
  ASSERT_FALSE(refused);
  jitcache::testing::expect_error_naming(refused.error(), ErrorCode::invalid_input,
                                         {"spec of kernel family forgetful is incomplete", "rope=bf16", "source_xxh3"});
}

TEST_F(RuntimeCompileTest, VerificationIsChosenByOptionEnvironmentOrSample) {
  {
    auto runtime = open();
    ASSERT_TRUE(runtime);
    ASSERT_TRUE(runtime->declare_family(axpy_schema(SourceKind::nvvm)));
    auto compiled = runtime->compile(axpy_nvvm("sm_90"));
    if (!compiled && compiled.error().code == ErrorCode::unavailable) GTEST_SKIP() << compiled.error().to_string();
    ASSERT_TRUE(compiled) << compiled.error().to_string();
  }
  const std::map<std::string, std::string> spec{{"dtype", "f32"}, {"unroll", "1"}};
  auto outcomes = [&](Runtime& runtime, int n) {
    std::map<LookupOutcome, int> seen;
    EXPECT_TRUE(runtime.declare_family(axpy_schema(SourceKind::nvvm)));
    for (int i = 0; i < n; ++i) {
      auto found = runtime.lookup("axpy", spec, "sm_90");
      EXPECT_TRUE(found) << found.error().to_string();
      if (found) ++seen[found->outcome];
    }
    return seen;
  };
  EXPECT_EQ(outcomes(*open(0.0), 20)[LookupOutcome::hit], 20);
  EXPECT_EQ(outcomes(*open(1.0), 20)[LookupOutcome::verify], 20);
  // A sample of one in two: binomial(400, 0.5) has a standard deviation of 10, so the
  // bounds are 8 deviations out.
  auto sampled = outcomes(*open(0.5), 400);
  EXPECT_GT(sampled[LookupOutcome::verify], 120);
  EXPECT_GT(sampled[LookupOutcome::hit], 120);
  EXPECT_EQ(sampled[LookupOutcome::verify] + sampled[LookupOutcome::hit], 400);
  {
    jitcache::testing::ScopedEnv env;
    env.set("JITCACHE_VERIFY_SPEC", "1");
    EXPECT_EQ(outcomes(*open(std::nullopt), 5)[LookupOutcome::verify], 5);
    env.set("JITCACHE_VERIFY_SPEC", "off");
    EXPECT_EQ(outcomes(*open(std::nullopt), 5)[LookupOutcome::hit], 5);
    env.set("JITCACHE_VERIFY_SPEC", "yes");
    EXPECT_EQ(outcomes(*open(0.0), 5)[LookupOutcome::hit], 5);  // the option beats the environment
    for (const char* bad : {"2", "-0.5", "nan", "half", "0.5x"}) {
      env.set("JITCACHE_VERIFY_SPEC", bad);
      RuntimeOptions options;
      options.cache_dir = dir() / "cache";
      options.device = DeviceUse::none;
      auto refused = Runtime::open(options);
      ASSERT_FALSE(refused) << bad;
      EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
      EXPECT_NE(refused.error().message.find("JITCACHE_VERIFY_SPEC=" + std::string(bad)), std::string::npos)
          << refused.error().message;
    }
  }
  RuntimeOptions options;
  options.cache_dir = dir() / "cache";
  options.device = DeviceUse::none;
  options.verify_spec = 1.5;
  auto refused = Runtime::open(options);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
}

// A tool's refusal reaches the caller with the tool's log, and nothing is cached.
TEST_F(RuntimeCompileTest, AToolsRefusalIsACompileErrorWithItsLog) {
  auto runtime = open();
  ASSERT_TRUE(runtime);
  ASSERT_TRUE(runtime->declare_family(axpy_schema(SourceKind::nvvm)));
  KernelRequest r = axpy_nvvm("sm_90");
  r.text = "this is not NVVM IR\n";
  auto refused = runtime->compile(r);
  if (!refused && refused.error().code == ErrorCode::unavailable) GTEST_SKIP() << refused.error().to_string();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::compile);
  EXPECT_NE(refused.error().message.find("libNVVM"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(refused.error().detail.empty());
  auto found = runtime->lookup("axpy", r.spec, "sm_90");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->outcome, LookupOutcome::miss);
}

// The stale kernel of issue 24: a header NVRTC read from disk was not in the key, so after
// an edit of val.h the second compile returned the first cubin as from_cache and verified.
// Now NVRTC reads nothing from disk: each way of reaching val.h is refused before the
// compile, or fails it naming the file; only a named header (in the key) works, and its
// edit is a change of the source for the spec.
TEST_F(RuntimeCompileTest, AHeaderOnDiskIsNeverReadSoNeverServedStale) {
  auto runtime = open();
  ASSERT_TRUE(runtime);
  ASSERT_TRUE(runtime->declare_family(SpecSchema{"disk", SourceKind::cuda, {{"way", FactDomain{}}}}));
  const auto val = dir() / "val.h";
  auto write_val = [&](const char* value) { std::ofstream(val) << "#define VAL " << value << "\n"; };
  write_val("1.0f");
  const std::string body = "extern \"C\" __global__ void k(float* x) { x[0] = VAL; }\n";
  auto request = [&](const std::string& way, const std::string& include, std::vector<std::string> options = {}) {
    KernelRequest r;
    r.family = "disk";
    r.spec = {{"way", way}};
    r.kind = SourceKind::cuda;
    r.text = include + body;
    r.entry = "k";
    r.target = "sm_90";
    r.options = std::move(options);
    return r;
  };
  const std::vector<std::pair<KernelRequest, std::vector<std::string>>> refused = {
      {request("absolute", "#include \"" + val.string() + "\"\n"), {"absolute", "val.h", "disk.k:1"}},
      {request("dotdot", "#include \"../" + dir().filename().string() + "/val.h\"\n"), {"'..'", "val.h"}},
      {request("dash-I", "#include \"val.h\"\n", {"-I" + dir().string()}), {"option '-I", "--include-header"}},
      {request("include-path", "#include \"val.h\"\n", {"--include-path=" + dir().string()}),
       {"--include-path", "--include-header"}},
      {request("pre-include", "", {"--pre-include=" + val.string()}), {"--pre-include", "--include-header"}},
  };
  for (int round = 0; round < 2; ++round) {
    for (const auto& [r, parts] : refused) {
      SCOPED_TRACE(r.spec.at("way") + " round " + std::to_string(round));
      auto out = runtime->compile(r);
      ASSERT_FALSE(out) << "compiled with a header from disk (from_cache " << out->from_cache << ")";
      EXPECT_EQ(out.error().code, ErrorCode::invalid_argument) << out.error().to_string();
      for (const auto& part : parts) EXPECT_NE(out.error().message.find(part), std::string::npos) << out.error().to_string();
    }
    write_val("2.0f");  // the edit that main served stale
  }
  // Relative to the working directory: NVRTC runs in an empty one and cannot open it.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir());
  auto relative = runtime->compile(request("relative", "#include \"val.h\"\n"));
  std::filesystem::current_path(cwd);
  ASSERT_FALSE(relative) << "read val.h from the working directory";
  EXPECT_EQ(relative.error().code, ErrorCode::compile);
  EXPECT_NE((relative.error().message + relative.error().detail).find("val.h"), std::string::npos)
      << relative.error().to_string();
  // As a named header it works, and its bytes are in the key.
  KernelRequest named = request("named", "#include \"val.h\"\n");
  named.headers = {{"val.h", "#define VAL 1.0f\n"}};
  auto first = runtime->compile(named);
  ASSERT_TRUE(first) << first.error().to_string();
  named.headers = {{"val.h", "#define VAL 2.0f\n"}};
  auto edited = runtime->compile(named);
  ASSERT_FALSE(edited) << "an edited named header was served from the cache";
}

}  // namespace
}  // namespace jitcache
