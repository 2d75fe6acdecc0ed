// `jitcache kv study`: the identity / calibrated / per-token error table over layer
// magnitudes, from the host executor's numerics. Same seed, same table; the shape of the
// result (identity error grows as layers get small, calibrated and per-token stay flat) is
// what the table is for. It reads files only with --checkpoint, whose errors are those of
// `scales show`; the others are usage errors (2). flashinfer-glm-416 adds the error of its reader's FP8
// expansion, per layer of the example checkpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_fixture.hpp"
#include "kernel_templates/variant_dimensions.hpp"

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
  EXPECT_EQ(doc["format"], "b12x-368") << "the default: the format written with all three modes";
  EXPECT_EQ(doc["rope"], "fp8");
  EXPECT_EQ(doc["bytes_per_token"], 368);
  ASSERT_EQ(doc["formats"].size(), k_record_formats.size());
  EXPECT_EQ(doc["formats"][2], json({{"name", "b12x-304"}, {"bytes_per_token", 304}, {"modes", {"per-token"}}}));
  EXPECT_EQ(doc["formats"][std::to_underlying(RecordFormat::flashmla_v41_288)],
            json({{"name", "flashmla-v41-288"}, {"bytes_per_token", 288}, {"modes", {"identity"}}}));
  const json& layers = doc["layers"];
  ASSERT_GE(layers.size(), 2u) << o.out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    for (const char* field : {"max_abs", "calibrated_scale", "identity_rel_rms", "calibrated_rel_rms",
                              "per_token_rel_rms", "identity_subnormal_blocks", "calibrated_subnormal_blocks",
                              "per_token_subnormal_blocks"})
      ASSERT_TRUE(l[field].is_number()) << field << " in " << l.dump();
    // 'lowest' names the mode with the smallest error.
    const std::string lowest = l["lowest"];
    const double best = l[lowest == "per-token" ? "per_token_rel_rms" : lowest + "_rel_rms"];
    for (const char* error : {"identity_rel_rms", "calibrated_rel_rms", "per_token_rel_rms"})
      EXPECT_LE(best, l[error].get<double>()) << lowest << " in " << l.dump();
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
  for (const json& l : layers) {
    EXPECT_NEAR(l["calibrated_rel_rms"].get<double>(), deep_error, 0.05 * deep_error)
        << "calibrated error must not depend on the layer's magnitude: " << l.dump();
    EXPECT_NEAR(l["per_token_rel_rms"].get<double>(), deep_error, 0.05 * deep_error)
        << "nor per-token error: " << l.dump();
    EXPECT_EQ(l["per_token_subnormal_blocks"], 0.0) << l.dump();
  }
}

TEST_F(CliStudyTest, ModesAFormatIsNotWrittenWithAreNull) {
  const json bf16 = parse(run({"kv", "study", "--tokens", "16", "--rope", "bf16", "--json"}));
  EXPECT_EQ(bf16["format"], "b12x-432");
  for (const json& l : bf16["layers"]) {
    EXPECT_TRUE(l["per_token_rel_rms"].is_null()) << l.dump();
    EXPECT_TRUE(l["per_token_subnormal_blocks"].is_null()) << l.dump();
    EXPECT_NE(l["lowest"], "per-token");
  }
  const json glm = parse(run({"kv", "study", "--tokens", "16", "--format", "b12x-304", "--json"}));
  EXPECT_TRUE(glm["rope"].is_null());
  EXPECT_EQ(glm["bytes_per_token"], 304);
  for (const json& l : glm["layers"]) {
    EXPECT_TRUE(l["identity_rel_rms"].is_null()) << l.dump();
    EXPECT_TRUE(l["calibrated_rel_rms"].is_null()) << l.dump();
    EXPECT_TRUE(l["per_token_rel_rms"].is_number()) << l.dump();
    EXPECT_EQ(l["lowest"], "per-token");
  }
  const CliOutcome text = run({"kv", "study", "--tokens", "16", "--format", "b12x-304"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("|          -       -       - |          -       -       - |"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("'vs deep' divides by the per-token error at max_abs 5.2"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("'-': b12x-304 is not written with identity or calibrated."), std::string::npos)
      << text.out;
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

TEST_F(CliStudyTest, FormatIsReportedUnderEitherName) {
  const CliOutcome o = run({"kv", "study", "--tokens", "16", "--rope", "bf16", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(parse(o)["rope"], "bf16");
  EXPECT_EQ(parse(o)["format"], "b12x-432");
  const CliOutcome text = run({"kv", "study", "--tokens", "16", "--format", "flashmla-352"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("(NVFP4, flashmla-352, 352 bytes per token; 16 synthetic"), std::string::npos)
      << text.out;
  // Every format's bytes per token, whichever was studied.
  for (const char* line : {"  b12x-432            432  identity, dynamic\n",
                           "  b12x-368            368  identity, dynamic, per-token\n",
                           "  b12x-304            304  per-token\n", "  flashmla-352        352  identity, dynamic\n",
                           "  flashinfer-glm-416  416  identity, dynamic\n"})
    EXPECT_NE(text.out.find(line), std::string::npos) << line << text.out;
}

TEST_F(CliStudyTest, TextTableHasOneRowPerLayerMagnitude) {
  const CliOutcome o = run({"kv", "study", "--tokens", "16", "--seed", "3"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("Relative RMS round-trip error of the latent (NVFP4, b12x-368, 368 bytes per token; 16 "
                       "synthetic post-RMSNorm tokens per layer, seed 3)"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find(" max_abs         s_l |   identity vs deep subnorm | calibrated vs deep subnorm |  "
                       "per-token vs deep subnorm | lowest\n"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("'vs deep' divides by the identity error at max_abs 5.2"), std::string::npos) << o.out;
  const json doc = parse(run({"kv", "study", "--tokens", "16", "--seed", "3", "--json"}));
  std::size_t rows = 0;
  for (std::size_t at = 0; (at = o.out.find(" | ", at)) != std::string::npos; at += 3) ++rows;
  // Four " | " per row, header included.
  EXPECT_EQ(rows, 4 * (doc["layers"].size() + 1)) << o.out;
  EXPECT_EQ(o.err, "");
}

// One row per layer of the example checkpoint, at its magnitude; for flashinfer-glm-416
// the FP8 expansion's added error beside the bf16 gather's, which is b12x-432's.
TEST_F(CliStudyTest, FlashInferGlmAddsItsFp8ExpansionPerCheckpointLayer) {
  const std::string checkpoint = testing::example_checkpoint().string();
  const CliOutcome o =
      run({"kv", "study", "--tokens", "32", "--format", "flashinfer-glm-416", "--checkpoint", checkpoint, "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json glm = parse(o);
  const json b12x = parse(run({"kv", "study", "--tokens", "32", "--format", "b12x-432", "--checkpoint", checkpoint, "--json"}));
  EXPECT_EQ(glm["bytes_per_token"], 416);
  EXPECT_EQ(glm["reader_expands_to_fp8"], true);
  EXPECT_EQ(b12x["reader_expands_to_fp8"], false);
  const json& layers = glm["layers"];
  ASSERT_EQ(layers.size(), 78u) << "the example's layers";
  ASSERT_EQ(b12x["layers"].size(), 78u);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    const json& b = b12x["layers"][i];
    EXPECT_EQ(l["layer"], i);
    EXPECT_EQ(l["max_abs"], b["max_abs"]);
    // s_l is calibrated from the bf16-rounded synthetic latent, whose maximum is the layer's
    // magnitude within bf16's rounding (2^-9).
    EXPECT_NEAR(l["calibrated_scale"].get<double>(), l["max_abs"].get<double>() / 2688.0,
                0x1p-8 * l["max_abs"].get<double>() / 2688.0);
    // The same latent bytes as b12x-432, so the same bf16 gather and error.
    EXPECT_EQ(l["calibrated_rel_rms"], b["calibrated_rel_rms"]) << l.dump();
    EXPECT_EQ(l["identity_rel_rms"], b["identity_rel_rms"]) << l.dump();
    EXPECT_TRUE(b["calibrated_fp8_added_rel_rms"].is_null());
    EXPECT_TRUE(l["per_token_rel_rms"].is_null());
    // The expansion rounds each value once more to E4M3 (at most 2^-4 relative): some
    // error, below the NVFP4 error itself, and the expanded row's error at least near it.
    const double added = l["calibrated_fp8_added_rel_rms"];
    const double nvfp4 = l["calibrated_rel_rms"];
    EXPECT_GT(added, 0.0) << l.dump();
    EXPECT_LT(added, nvfp4) << l.dump();
    EXPECT_LT(added, 0.0625) << l.dump();
    EXPECT_GE(l["calibrated_fp8_rel_rms"].get<double>(), 0.9 * nvfp4) << l.dump();
    EXPECT_TRUE(l["identity_fp8_added_rel_rms"].is_number()) << l.dump();
  }
  const CliOutcome text =
      run({"kv", "study", "--tokens", "16", "--format", "flashinfer-glm-416", "--checkpoint", checkpoint});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("layer  max_abs         s_l |   identity vs deep subnorm  fp8 add      fp8 |"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("'fp8 add' is the error that adds to the bf16 gather"), std::string::npos) << text.out;
}

// As `scales show`: a checkpoint directory that is not there is an environment error (2).
TEST_F(CliStudyTest, AMissingCheckpointIsAnErrorNamingIt) {
  const CliOutcome o = run({"kv", "study", "--checkpoint", (dir() / "nowhere").string()});
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  EXPECT_NE(o.err.find("nowhere"), std::string::npos) << o.err;
}

TEST_F(CliStudyTest, UsageErrorsExitTwo) {
  expect_usage_error({"kv", "study", "--tokens", "0"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens", "2000000"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens", "many"}, "--tokens");
  expect_usage_error({"kv", "study", "--tokens"}, "--tokens");
  expect_usage_error({"kv", "study", "--seed", "abc"}, "--seed");
  expect_usage_error({"kv", "study", "--rope", "fp16"}, "--rope");
  expect_usage_error({"kv", "study", "--rope", "b12x-432"}, "--rope");
  expect_usage_error({"kv", "study", "--format", "b12x-512"}, "--format");
  expect_usage_error({"kv", "study", "--format", "b12x-432", "--rope", "bf16"}, "excludes");
  expect_usage_error({"kv", "study", "--latent-scale", "per-token"}, "--latent-scale");
  expect_usage_error({"kv", "study", "--bogus"}, "--bogus");
  expect_usage_error({"kv", "study", "stray"}, "stray");
  expect_usage_error({"kv"}, "A subcommand is required");
}

}  // namespace
}  // namespace jitcache
