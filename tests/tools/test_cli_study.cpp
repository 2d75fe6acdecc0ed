// `jitcache kv study`: the identity-vs-calibrated error table over layer magnitudes, from
// the host executor's numerics. Same seed, same table; the shape of the result (identity
// error grows as layers get small, calibrated stays flat) is what the table is for. It
// reads no file, so its only errors are usage errors (2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_fixture.hpp"

namespace jitcache {
namespace {

using nlohmann::json;
using testing::CliOutcome;

class CliStudyTest : public testing::CliCommandTest {};

TEST_F(CliStudyTest, JsonShowsIdentityErrorGrowingAsLayersShrinkAndCalibratedFlat) {
  const CliOutcome o = run({"kv", "study", "--tokens", "64", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["tokens"], 64);
  EXPECT_EQ(doc["seed"], 20261129u) << "the documented default seed";
  EXPECT_EQ(doc["rope"], "bf16");
  const json& layers = doc["layers"];
  ASSERT_GE(layers.size(), 2u) << o.out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    for (const char* field : {"max_abs", "calibrated_scale", "identity_rel_rms", "calibrated_rel_rms",
                              "identity_subnormal_blocks", "calibrated_subnormal_blocks"})
      ASSERT_TRUE(l.contains(field)) << field << " in " << l.dump();
    if (i > 0) {
      EXPECT_GT(l["max_abs"].get<double>(), layers[i - 1]["max_abs"].get<double>()) << "ascending";
    }
    EXPECT_NEAR(l["calibrated_scale"].get<double>(), l["max_abs"].get<double>() / 2688.0,
                1e-6 * l["max_abs"].get<double>())
        << l.dump();
    EXPECT_EQ(l["calibrated_subnormal_blocks"], 0.0) << l.dump();
  }
  const json& shallow = layers.front();
  const json& deep = layers.back();
  const double deep_error = deep["identity_rel_rms"];
  EXPECT_GT(shallow["identity_rel_rms"].get<double>(), 5 * deep_error) << "the field failure: small layers";
  EXPECT_GT(shallow["identity_subnormal_blocks"].get<double>(), 0.9);
  for (const json& l : layers)
    EXPECT_NEAR(l["calibrated_rel_rms"].get<double>(), deep_error, 0.05 * deep_error)
        << "calibrated error must not depend on the layer's magnitude: " << l.dump();
}

TEST_F(CliStudyTest, SameSeedSameTableOtherSeedOtherTable) {
  const CliOutcome a = run({"kv", "study", "--tokens", "32", "--seed", "7", "--json"});
  const CliOutcome b = run({"kv", "study", "--tokens", "32", "--seed", "7", "--json"});
  const CliOutcome c = run({"kv", "study", "--tokens", "32", "--seed", "8", "--json"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(parse(a)["seed"], 7);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST_F(CliStudyTest, Fp8RopeIsReported) {
  const CliOutcome o = run({"kv", "study", "--tokens", "16", "--rope", "fp8", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(parse(o)["rope"], "fp8");
  const CliOutcome text = run({"kv", "study", "--tokens", "16", "--rope", "fp8"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("(NVFP4, fp8 RoPE; 16 synthetic"), std::string::npos) << text.out;
}

TEST_F(CliStudyTest, TextTableHasOneRowPerLayerMagnitude) {
  const CliOutcome o = run({"kv", "study", "--tokens", "16", "--seed", "3"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("Relative RMS round-trip error of the latent (NVFP4, bf16 RoPE; 16 synthetic "
                       "post-RMSNorm tokens per layer, seed 3)"),
            std::string::npos)
      << o.out;
  EXPECT_NE(
      o.out.find("max_abs          s_l |   identity  vs deep   subnorm | calibrated  vs deep   subnorm"),
      std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("'vs deep' divides by the identity error at max_abs 5.2"), std::string::npos) << o.out;
  const json doc = parse(run({"kv", "study", "--tokens", "16", "--seed", "3", "--json"}));
  std::size_t rows = 0;
  for (std::size_t at = 0; (at = o.out.find(" | ", at)) != std::string::npos; at += 3) ++rows;
  // Two " | " per row, header included.
  EXPECT_EQ(rows, 2 * (doc["layers"].size() + 1)) << o.out;
  EXPECT_EQ(o.err, "");
}

TEST_F(CliStudyTest, UsageErrorsExitTwo) {
  expect_usage_error({"kv", "study", "--tokens", "0"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens", "2000000"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens", "many"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens"}, "--tokens");
  expect_usage_error({"kv", "study", "--seed", "abc"}, "--seed");
  expect_usage_error({"kv", "study", "--rope", "fp16"}, "--rope");
  expect_usage_error({"kv", "study", "--bogus"}, "--bogus");
  expect_usage_error({"kv", "study", "stray"}, "stray");
  expect_usage_error({"kv"}, "A subcommand is required");
}

}  // namespace
}  // namespace jitcache
