// Facts read back from the artifact itself: the cubin's ELF and the PTX agree with the
// generator, and damaged images give errors, never crashes.
#include <random>

#include "runtime/compile/artifact_facts.hpp"
#include "runtime/compile/compiler.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

class ArtifactFacts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto compiler = make_nvrtc_compiler();
    for (LatentScale l : {LatentScale::identity, LatentScale::dynamic}) {
      auto a = compiler->compile(generate({KernelKind::gather, l, RecordFormat::b12x_432, Target{"sm_100a"}}));
      ASSERT_TRUE(a.has_value()) << a.error().to_string();
      s_artifacts->push_back(*a);
    }
  }
  static inline std::vector<CompiledArtifact>* s_artifacts = new std::vector<CompiledArtifact>();
};

TEST_F(ArtifactFacts, CubinAndPtxCarryTheGeneratorFacts) {
  for (const CompiledArtifact& a : *s_artifacts) {
    auto from_cubin = facts_from_cubin(a.cubin);
    ASSERT_OK(from_cubin);
    auto from_ptx = facts_from_ptx(a.ptx);
    ASSERT_OK(from_ptx);
    const FactMap expected(a.facts.begin(), a.facts.end());
    EXPECT_EQ(*from_cubin, expected);
    EXPECT_EQ(*from_ptx, expected);
    EXPECT_EQ(from_cubin->at("latent_scale"), to_string(a.spec.latent_scale));
  }
}

TEST_F(ArtifactFacts, TruncatedOrDamagedCubinsNeverCrash) {
  const std::uint64_t seed = jitcache::testing::test_seed("ArtifactFacts.TruncatedOrDamagedCubinsNeverCrash");
  std::mt19937_64 rng(seed);
  const auto& cubin = s_artifacts->front().cubin;
  int errors = 0;
  for (std::size_t n = 0; n < cubin.size(); n += 1 + rng() % 61) {
    auto r = facts_from_cubin(std::span(cubin).first(n));
    if (!r) ++errors;
  }
  EXPECT_GT(errors, 0);
  for (int trial = 0; trial < 3000; ++trial) {
    auto damaged = cubin;
    for (int k = 0; k < 4; ++k) damaged[rng() % damaged.size()] = static_cast<std::uint8_t>(rng());
    (void)facts_from_cubin(damaged);  // any answer but a crash
  }
  EXPECT_FALSE(facts_from_cubin(std::vector<std::uint8_t>(64, 0)));
  auto r = facts_from_cubin({});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cubin"), std::string::npos);
}

TEST(EmbeddedFacts, ParsesAndRejects) {
  auto ok = parse_embedded_facts("a=1;b=two;");
  ASSERT_OK(ok);
  EXPECT_EQ(ok->at("b"), "two");
  EXPECT_FALSE(parse_embedded_facts("a=1"));
  EXPECT_FALSE(parse_embedded_facts("a=1;a=2;"));
  EXPECT_FALSE(parse_embedded_facts("=1;"));
  EXPECT_FALSE(parse_embedded_facts("novalue;"));
  EXPECT_FALSE(facts_from_ptx(".global .b8 other[2] = {1, 2};"));
  EXPECT_EQ(facts_from_ptx("nothing here").error().code, ErrorCode::not_found);
  EXPECT_FALSE(facts_from_ptx(".global .align 1 .b8 jc_artifact_facts[3] = {97, 300, 0};"));
}

}  // namespace
}  // namespace jitcache
