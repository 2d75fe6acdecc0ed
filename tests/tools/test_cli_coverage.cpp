// `jitcache coverage`, `jitcache explain` and the no-compile mode of `warm` and `compile`,
// through the binary: coverage says which tier holds each variant the bundled checkpoint
// needs (exit 1 while any is missing) and counts nothing; explain names the key, its facts
// and, for a miss, the nearest entries with what differs; a no-compile warm of a cold cache
// exits 2 naming every missing variant and compiles nothing.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path k_checkpoint = testing::source_dir() / "examples" / "glm5-mini";

class CliCoverageTest : public testing::CliCommandTest {
 protected:
  std::vector<std::string> model(const std::string& command, const std::string& arch = "sm_90") const {
    return {command, "--checkpoint", k_checkpoint.string(), "--arch", arch};
  }
  testing::CliOutcome with_env(std::vector<std::string> args, const std::vector<std::string>& env) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return testing::run_cli(dir(), std::move(args), env, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  }
  json counters() {
    const testing::CliOutcome o = run({"stats", "--json"});
    EXPECT_EQ(o.code, 0) << o.err;
    json doc = parse(o);
    doc.erase("cache_dir");
    return doc;
  }
  json coverage(int expected_code, const std::string& arch = "sm_90") {
    auto args = model("coverage", arch);
    args.push_back("--json");
    const testing::CliOutcome o = run(args);
    EXPECT_EQ(o.code, expected_code) << o.out << o.err;
    return parse(o);
  }
};

TEST_F(CliCoverageTest, AColdCacheIsNotCoveredAndANoCompileWarmFailsNamingEveryVariant) {
  const json cold = coverage(1);
  ASSERT_TRUE(cold["variants"].is_array());
  ASSERT_FALSE(cold["variants"].empty());
  EXPECT_EQ(cold["covered"], false);
  EXPECT_EQ(cold["missing"], cold["variants"].size());
  std::set<std::string> labels;
  for (const json& v : cold["variants"]) {
    EXPECT_TRUE(v["tier"].is_null()) << v.dump();
    EXPECT_EQ(v["key"].get<std::string>().size(), 32u);
    EXPECT_FALSE(v["layers"].empty()) << "every variant is some layer's";
    labels.insert(v["label"].get<std::string>());
  }

  for (const auto& run_it : {std::vector<std::string>{"--no-compile"}, std::vector<std::string>{}}) {
    auto args = model("warm");
    args.insert(args.end(), run_it.begin(), run_it.end());
    const testing::CliOutcome o = run_it.empty() ? with_env(args, {"JITCACHE_NO_COMPILE=1"}) : run(args);
    EXPECT_EQ(o.code, 2) << o.out << o.err;
    EXPECT_NE(o.err.find("no-compile mode"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("looked up in memory, disk ("), std::string::npos) << o.err;
    for (const std::string& label : labels) EXPECT_NE(o.err.find(label), std::string::npos) << label << o.err;
  }
  EXPECT_EQ(coverage(1)["missing"], cold["missing"]) << "a no-compile warm stores nothing";
  const json stats = counters();
  EXPECT_EQ(stats["compiles"], 0) << stats.dump();
}

TEST_F(CliCoverageTest, AWarmedCacheIsCoveredFromTheLocalTierAndCoverageCountsNothing) {
  const testing::CliOutcome warmed = run(model("warm"));
  ASSERT_EQ(warmed.code, 0) << warmed.out << warmed.err;
  const json before = counters();
  const json covered = coverage(0);
  EXPECT_EQ(covered["covered"], true);
  EXPECT_EQ(covered["missing"], 0);
  for (const json& v : covered["variants"]) {
    EXPECT_EQ(v["tier"], "local") << v.dump();
    EXPECT_EQ(v["tier_name"], "disk");
  }
  const testing::CliOutcome table = run(model("coverage"));
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("0 missing"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("local (disk)"), std::string::npos) << table.out;
  EXPECT_EQ(counters(), before) << "coverage must not count hits or misses";

  // Now every variant is there: a no-compile warm serves them all.
  auto args = model("warm");
  args.push_back("--no-compile");
  const testing::CliOutcome again = run(args);
  EXPECT_EQ(again.code, 0) << again.out << again.err;
}

TEST_F(CliCoverageTest, ExplainNamesTheKeyAndForAMissTheNearestEntriesWithWhatDiffers) {
  ASSERT_EQ(run(model("warm")).code, 0);
  // A hit: found in the local tier, exit 0.
  auto hit_args = model("explain");
  hit_args.insert(hit_args.end(), {"--layer", "3", "--json"});
  const testing::CliOutcome hit = run(hit_args);
  ASSERT_EQ(hit.code, 0) << hit.out << hit.err;
  const json found = parse(hit);
  EXPECT_EQ(found["found"], true);
  ASSERT_EQ(found["lookups"].size(), 2u) << "the layer's writer and gather";
  for (const json& l : found["lookups"]) {
    EXPECT_EQ(l["tier"], "local");
    EXPECT_EQ(l["facts"]["target"], "sm_90");
    EXPECT_TRUE(l["facts"].contains("compiler_fingerprint"));
  }

  // A miss: another target; the entries warmed for sm_90 are the nearest.
  auto miss_args = model("explain", "sm_100a");
  miss_args.insert(miss_args.end(), {"--layer", "3"});
  const testing::CliOutcome miss = run(miss_args);
  EXPECT_EQ(miss.code, 1) << miss.out << miss.err;
  EXPECT_NE(miss.out.find("in no tier"), std::string::npos) << miss.out;
  EXPECT_NE(miss.out.find("local (disk)"), std::string::npos) << miss.out;
  EXPECT_NE(miss.out.find("target: cache has sm_90, layer 3 needs sm_100a"), std::string::npos) << miss.out;
  EXPECT_NE(miss.out.find("compiler_fingerprint="), std::string::npos) << "each fact of the key:\n" << miss.out;

  miss_args.push_back("--json");
  const json missed = parse(run(miss_args));
  EXPECT_EQ(missed["found"], false);
  const json& tiers = missed["lookups"][0]["tiers"];
  ASSERT_FALSE(tiers.empty());
  EXPECT_EQ(tiers[0]["tier"], "local");
  ASSERT_FALSE(tiers[0]["nearest"].empty());
  const json& differences = tiers[0]["nearest"][0]["differences"];
  // The target alone: the options' --gpu-architecture and the generated source follow it.
  ASSERT_EQ(differences.size(), 1u) << differences.dump(2);
  EXPECT_EQ(differences[0]["fact"], "target");
  EXPECT_EQ(differences[0]["cached"], "sm_90");
  EXPECT_EQ(differences[0]["wanted"], "sm_100a");
}

TEST_F(CliCoverageTest, UsageErrorsExitTwo) {
  expect_usage_error({"explain", "--arch", "sm_90"}, "--checkpoint with --layer, or --family");
  expect_usage_error({"explain", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90"}, "--layer");
  expect_usage_error({"explain", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--layer", "999"},
                     "layer 999");
  expect_usage_error({"coverage", "--checkpoint", k_checkpoint.string()}, "--arch");
  expect_usage_error({"coverage", "--checkpoint", k_checkpoint.string(), "--arch", "sm_99x"}, "sm_99x");
  expect_usage_error({"compile", "--no-compile", "--arch", "sm_90"}, "no-compile mode");
  const testing::CliOutcome bad = with_env({"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90"},
                                           {"JITCACHE_NO_COMPILE=sometimes"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("JITCACHE_NO_COMPILE"), std::string::npos) << bad.err;
}

TEST_F(CliCoverageTest, ExplainsASpecKeyedKernelFromOutside) {
  const fs::path source = dir() / "scale.cu";
  { std::ofstream(source) << "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n"; }
  const testing::CliOutcome compiled = run({"compile", "--source", source.string(), "--entry", "scale", "--family",
                                            "scaler", "--fact", "dtype=f32", "--arch", "sm_90"});
  if (compiled.code == 2 && compiled.err.find("NVRTC") != std::string::npos) GTEST_SKIP() << compiled.err;
  ASSERT_EQ(compiled.code, 0) << compiled.out << compiled.err;
  const testing::CliOutcome hit =
      run({"explain", "--family", "scaler", "--spec", "dtype=f32", "--arch", "sm_90", "--json"});
  ASSERT_EQ(hit.code, 0) << hit.out << hit.err;
  EXPECT_EQ(parse(hit)["lookups"][0]["facts"]["record"], "spec_index");
  const testing::CliOutcome miss = run({"explain", "--family", "scaler", "--spec", "dtype=bf16", "--arch", "sm_90"});
  EXPECT_EQ(miss.code, 1) << miss.out << miss.err;
  EXPECT_NE(miss.out.find("spec fact dtype: cache has f32, this lookup needs bf16"), std::string::npos) << miss.out;

  // The same source in no-compile mode for another target: exit 2, nothing compiled.
  const testing::CliOutcome refused = run({"compile", "--no-compile", "--source", source.string(), "--entry", "scale",
                                           "--family", "scaler", "--fact", "dtype=f32", "--arch", "sm_100a"});
  EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("no-compile mode"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("family scaler"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace jitcache
