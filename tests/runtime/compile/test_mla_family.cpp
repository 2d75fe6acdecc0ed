// jitcache's own NVFP4 MLA kernels as a family of the compile API: the schema is the
// variant dimension tables, every planned variant is a valid request, a tampered fact is
// refused by name, and the NVRTC back end, which now compiles through compile_source,
// hands NVRTC exactly the options it did before and gets the same binary, under the same
// cache key.
#include <algorithm>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/mla_family.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using jitcache::testing::ScopedEnv;

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(MlaFamily, SchemaIsTheVariantDimensionTables) {
  const SpecSchema& schema = mla_schema();
  EXPECT_EQ(schema.family, "jitcache.nvfp4_mla");
  EXPECT_OK(check_schema(schema));
  ASSERT_EQ(schema.facts.size(), 3u);
  const auto domain = [&](std::string_view fact) {
    const auto it = schema.facts.find(std::string(fact));
    EXPECT_NE(it, schema.facts.end()) << "no fact " << fact;
    return it == schema.facts.end() ? std::vector<std::string>{} : sorted(it->second.allowed);
  };
  EXPECT_EQ(domain(k_kernel_kinds.fact), sorted(k_kernel_kinds.names()));
  EXPECT_EQ(domain(k_latent_scales.fact), sorted(k_latent_scales.names()));
  EXPECT_EQ(domain(k_record_formats.fact), sorted(k_record_formats.names()));
  // Every domain is a closed list: no fact of the family takes an arbitrary string.
  for (const auto& [name, d] : schema.facts) EXPECT_FALSE(d.any()) << name;
}

TEST(MlaFamily, EveryPlannedVariantForEveryTargetIsAValidRequest) {
  const auto compiler = make_nvrtc_compiler();
  std::set<std::string> seen;
  for (std::string_view t : supported_targets()) {
    const Target target{std::string(t)};
    for (const KernelSpec& spec : all_variants(target)) {
      {
        const GeneratedSource source = generate(spec);
        const KernelRequest request = mla_request(source, compiler->options(spec));
        SCOPED_TRACE(spec.label());
        EXPECT_OK(validate_mla_request(request));
        seen.insert(spec.label());

        EXPECT_EQ(request.family, k_mla_family);
        EXPECT_EQ(request.kind, SourceKind::cuda);
        EXPECT_EQ(request.target, spec.target.name);
        EXPECT_EQ(request.entry, source.entry);
        EXPECT_EQ(request.text, source.source);
        const FactMap expected_spec{{"kernel", to_string(spec.kernel)},
                                    {"latent_scale", to_string(spec.latent_scale)},
                                    {"format", to_string(spec.format)}};
        EXPECT_EQ(request.spec, expected_spec) << spec.label();
        ASSERT_EQ(request.headers.size(), source.headers.size());
        for (std::size_t i = 0; i < source.headers.size(); ++i) {
          EXPECT_EQ(request.headers[i].first, source.headers[i].include_name);
          EXPECT_EQ(request.headers[i].second, source.headers[i].text);
        }
        // The architecture moves to the target field; everything else stays, in order.
        std::vector<std::string> expected_options = compiler->options(spec);
        expected_options.erase(expected_options.begin());
        EXPECT_EQ(request.options, expected_options) << spec.label();
      }
    }
  }
  EXPECT_EQ(seen.size(), supported_targets().size() * all_variants(Target{"sm_90"}).size());
}

TEST(MlaFamily, ATamperedFactIsRefusedNamingIt) {
  const KernelSpec spec{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_100a"}};
  const KernelRequest good = mla_request(generate(spec), {});
  ASSERT_OK(validate_mla_request(good));

  // The seed's bug: a scale value the family does not know.
  KernelRequest out_of_range = good;
  out_of_range.spec["latent_scale"] = "1.0";
  auto r = validate_mla_request(out_of_range);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("latent_scale='1.0'"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("jitcache.nvfp4_mla"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("dynamic"), std::string::npos) << "names the allowed values: "
                                                                   << r.error().message;

  KernelRequest missing = good;
  missing.spec.erase("format");
  r = validate_mla_request(missing);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("missing fact format"), std::string::npos) << r.error().message;

  // The target is the request's field, not a spec fact.
  KernelRequest unknown = good;
  unknown.spec["target"] = "sm_100a";
  r = validate_mla_request(unknown);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("unknown fact target"), std::string::npos) << r.error().message;

  KernelRequest other_family = good;
  other_family.family = "b12x.mla";
  r = validate_mla_request(other_family);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("b12x.mla"), std::string::npos) << r.error().message;
}

TEST(MlaFamily, OnlyTheTargetsOwnArchitectureOptionMovesToTheTargetField) {
  const KernelSpec spec{KernelKind::gather, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}};
  const KernelRequest request =
      mla_request(generate(spec), {"--gpu-architecture=sm_90", "--std=c++17", "--gpu-architecture=sm_120a"});
  EXPECT_EQ(request.options, (std::vector<std::string>{"--std=c++17", "--gpu-architecture=sm_120a"}));
  // ... and compile_source refuses the stray one before NVRTC runs.
  auto r = compile_source(source_input(request));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("--gpu-architecture=sm_120a"), std::string::npos) << r.error().message;
}

// ptxas reports its own wall time, which differs from run to run.
std::string without_timings(const std::string& log) {
  return std::regex_replace(log, std::regex(R"(Compile time = [0-9.]+ ms)"), "Compile time = (t) ms");
}

// The previous back end called run_nvrtc(program_name, source, headers, options(spec)):
// the route through compile_source must give NVRTC that same list, in order, and yield the
// same cubin, PTX, log and resources.
void expect_same_as_direct_nvrtc(const KernelSpec& spec) {
  const auto compiler = make_nvrtc_compiler();
  const GeneratedSource source = generate(spec);
  const std::vector<std::string> options = compiler->options(spec);

  std::vector<NvrtcHeader> headers;
  for (const auto& h : source.headers) headers.push_back({h.include_name.data(), h.text.data()});
  auto direct = run_nvrtc(source.program_name, source.source, headers, options, "the previous route");
  ASSERT_OK(direct);

  const KernelRequest request = mla_request(source, options);
  // As the back end compiles it: jitcache's own kernel, trusted, in this process. (In the
  // tool worker, whose working directory is another, -lineinfo's cubins differ.)
  SourceInput input = source_input(request, source.program_name);
  input.trusted = true;
  auto routed = compile_source(input);
  ASSERT_OK(routed);
  std::vector<std::string> effective;
  for (const std::string& o : routed->effective_options) {
    ASSERT_TRUE(o.starts_with("nvrtc: ")) << o;
    effective.push_back(o.substr(7));
  }
  EXPECT_EQ(effective, options) << spec.label();

  auto artifact = compiler->compile(source);
  ASSERT_OK(artifact);
  EXPECT_EQ(artifact->options, options);
  EXPECT_TRUE(artifact->cubin == direct->cubin) << spec.label() << ": the cubin differs from the previous route's";
  EXPECT_TRUE(routed->cubin == direct->cubin) << spec.label();
  EXPECT_EQ(artifact->ptx, direct->ptx);
  EXPECT_EQ(without_timings(artifact->log), without_timings(direct->log))
      << "the artifact keeps NVRTC's own log, unlabelled";
  const ResourceUsage usage = parse_ptxas_usage(direct->log, source.entry);
  EXPECT_GT(artifact->usage.registers, 0);
  EXPECT_EQ(artifact->usage.registers, usage.registers);
  EXPECT_EQ(artifact->usage.stack_frame_bytes, usage.stack_frame_bytes);
  EXPECT_EQ(artifact->usage.spill_store_bytes, usage.spill_store_bytes);
  EXPECT_EQ(artifact->usage.spill_load_bytes, usage.spill_load_bytes);
}

TEST(MlaOneCompilePath, TheBackEndGivesNvrtcTheSameOptionsAndGetsTheSameCubin) {
  ScopedEnv lineinfo("JITCACHE_LINEINFO", nullptr);
  expect_same_as_direct_nvrtc({KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_100a"}});
}

TEST(MlaOneCompilePath, TheSameWithLineInformation) {
  ScopedEnv lineinfo("JITCACHE_LINEINFO", "1");
  const KernelSpec spec{KernelKind::gather, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_120a"}};
  ASSERT_EQ(make_nvrtc_compiler()->options(spec).back(), "--generate-line-info");
  expect_same_as_direct_nvrtc(spec);
}

// The cache key of own kernels is unchanged: its options fact is what it was before the
// back end moved onto compile_source (the rest of the key is machine-specific: the
// compiler's version and fingerprint).
TEST(MlaOneCompilePath, TheKeysOptionsFactIsUnchanged) {
  const auto compiler = make_nvrtc_compiler();
  const KernelSpec spec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}};
  {
    ScopedEnv lineinfo("JITCACHE_LINEINFO", nullptr);
    auto facts = kernel_facts(generate(spec), *compiler);
    ASSERT_OK(facts);
    EXPECT_EQ(facts->get("options"),
              "--gpu-architecture=sm_90 --std=c++17 --fmad=false --prec-div=true --prec-sqrt=true --ftz=false "
              "--ptxas-options=-v");
  }
  ScopedEnv lineinfo("JITCACHE_LINEINFO", "1");
  auto facts = kernel_facts(generate(spec), *compiler);
  ASSERT_OK(facts);
  EXPECT_EQ(facts->get("options"),
            "--gpu-architecture=sm_90 --std=c++17 --fmad=false --prec-div=true --prec-sqrt=true --ftz=false "
            "--ptxas-options=-v --generate-line-info");
}

TEST(MlaOneCompilePath, ATargetOutsideTheTableFailsBeforeNvrtcRuns) {
  const auto compiler = make_nvrtc_compiler();
  auto r = compiler->compile(generate({KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_75"}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("sm_75"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace jitcache
