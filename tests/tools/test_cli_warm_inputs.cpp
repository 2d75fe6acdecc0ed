// `jitcache warm`'s main paths and every way its input can be wrong (test_cli_warm.cpp
// covers what the cache does under it: read-only, full, raced). Exit codes: 0 warmed,
// 1 invalid input (a config.json or scales file that does not parse or validate), 2 a
// usage or environment error (a missing option, an absent file, an unknown target, a cache
// directory that cannot be used: warming never falls back to memory-only).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;

class CliWarmInputsTest : public testing::CliCommandTest {
 protected:
  CliOutcome warm(std::vector<std::string> extra) const {
    std::vector<std::string> args{
        "warm", "--checkpoint", testing::example_checkpoint().string(), "--arch", "sm_90", "--jobs", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }

  // The example's scales file with `edit` applied, written into the scratch directory.
  template <typename Edit>
  fs::path scales_file(const std::string& name, Edit edit) const {
    std::ifstream in(testing::example_checkpoint() / "nvfp4_ds_mla_outer_scales.json");
    json doc = json::parse(in);
    edit(doc);
    const fs::path path = dir() / name;
    std::ofstream(path) << doc.dump(2);
    return path;
  }
};

TEST_F(CliWarmInputsTest, TextRunPrintsTheModelTheCountsAndOneProgressLinePerVariant) {
  const CliOutcome o = warm({});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("warm " + testing::example_checkpoint().string() +
                       " for sm_90 (b12x-432): 79 layers (78 dynamic, 1 identity)"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("variants needed 4, already cached 0, compiled 4, stored 4 of 4, wall time"),
            std::string::npos)
      << o.out;
  // stderr is a file, not a terminal: one plain line per variant, no redrawn bar.
  for (const char* step : {"[1/4] ", "[2/4] ", "[3/4] ", "[4/4] "})
    EXPECT_NE(o.err.find(step), std::string::npos) << step << "\n" << o.err;
  EXPECT_NE(o.err.find("writer/dynamic/b12x-432/sm_90 compiled"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find('\r'), std::string::npos) << "a redrawn bar in a file";

  const CliOutcome again = warm({});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("writer/dynamic/b12x-432/sm_90 cached"), std::string::npos) << again.err;
}

TEST_F(CliWarmInputsTest, JsonDescribesTheModelAndEachVariant) {
  const CliOutcome o = warm({"--rope", "fp8", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(o.err.find("[1/4]"), std::string::npos) << "no progress lines with --json: " << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["checkpoint"], testing::example_checkpoint().string());
  EXPECT_EQ(doc["cache_dir"], m_root.string());
  EXPECT_EQ(doc["target"], "sm_90");
  EXPECT_EQ(doc["format"], "b12x-368");
  EXPECT_EQ(doc["layers"], 79);
  EXPECT_EQ(doc["dynamic_layers"], 78);
  EXPECT_EQ(doc["identity_layers"], 1);
  EXPECT_EQ(doc["variants_needed"], 4);
  EXPECT_EQ(doc["already_cached"], 0);
  EXPECT_EQ(doc["cache_mode"], "read-write");
  EXPECT_GT(doc["wall_ms"].get<double>(), 0.0);
  ASSERT_EQ(doc["variants"].size(), 4u);
  std::set<std::string> seen;
  for (const json& v : doc["variants"]) {
    seen.insert(v["kernel"].get<std::string>() + "/" + v["latent_scale"].get<std::string>());
    EXPECT_EQ(v["format"], "b12x-368") << v.dump();
    EXPECT_EQ(v["target"], "sm_90") << v.dump();
    EXPECT_EQ(v["key"].get<std::string>().size(), 32u) << v.dump();
    EXPECT_TRUE(v["compiled"].get<bool>()) << v.dump();
    EXPECT_TRUE(v["stored"].get<bool>()) << v.dump();
    EXPECT_GT(v["registers"].get<int>(), 0) << v.dump();
    EXPECT_GT(v["cubin_bytes"].get<int>(), 0) << v.dump();
  }
  EXPECT_EQ(seen, (std::set<std::string>{"writer/dynamic", "writer/identity", "gather/dynamic",
                                         "gather/identity"}));

  const json again = parse(warm({"--rope", "fp8", "--json"}));
  EXPECT_EQ(again["already_cached"], 4);
  EXPECT_EQ(again["compiled"], 0);
  for (const json& v : again["variants"]) EXPECT_FALSE(v["compiled"].get<bool>()) << v.dump();
}

// --scales beats the checkpoint's own file (with a warning saying so): all-1.0 scales make
// every layer identity, so only the two identity variants are needed.
TEST_F(CliWarmInputsTest, ScalesOverrideDecidesWhichVariantsAreNeeded) {
  const fs::path identity = scales_file("identity.json", [](json& doc) {
    for (json& s : doc["scales"]) s = 1.0;
    for (json& m : doc["max_abs"]) m = doc["denominator"];
  });
  const CliOutcome o = warm({"--scales", identity.string(), "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["identity_layers"], 79);
  EXPECT_EQ(doc["dynamic_layers"], 0);
  EXPECT_EQ(doc["variants_needed"], 2);
  for (const json& v : doc["variants"]) EXPECT_EQ(v["latent_scale"], "identity") << v.dump();
  EXPECT_NE(o.err.find("explicit override " + identity.string()), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("shadows the checkpoint's scales metadata"), std::string::npos) << o.err;
}

TEST_F(CliWarmInputsTest, UsageErrorsExitTwo) {
  const std::string checkpoint = testing::example_checkpoint().string();
  expect_usage_error({"warm"}, "--checkpoint is required");
  expect_usage_error({"warm", "--arch", "sm_90"}, "--checkpoint is required");
  expect_usage_error({"warm", "--checkpoint", checkpoint}, "--arch is required");
  expect_usage_error({"warm", "--checkpoint", checkpoint, "--arch", "sm_90", "--rope", "fp16"}, "--rope");
  expect_usage_error({"warm", "--checkpoint", checkpoint, "--arch", "sm_90", "--jobs", "many"}, "--jobs");
  expect_usage_error({"warm", "--checkpoint", checkpoint, "--arch", "sm_90", "--jobs", "-1"}, "--jobs");
  expect_usage_error({"warm", "--checkpoint", checkpoint, "--arch", "sm_90", "--bogus"}, "--bogus");
  expect_usage_error({"warm", "--checkpoint", checkpoint, "--arch", "sm_90", "stray"}, "stray");
  expect_usage_error({"warm", "--checkpoint"}, "--checkpoint");
  EXPECT_FALSE(fs::exists(m_root)) << "a refused command must not make the cache";
}

// A file that exists but does not parse or validate is invalid input (1), named with the
// field; a file or directory that is not there, or a target that does not exist, is an
// environment or usage error (2). Nothing is printed on stdout either way.
TEST_F(CliWarmInputsTest, BadInputsExitPerTheContractNamingTheFileAndField) {
  const fs::path broken = dir() / "broken";
  fs::create_directories(broken);
  std::ofstream(broken / "config.json") << "{\"num_hidden_layers\": ";
  const fs::path short_scales = scales_file("short.json", [](json& doc) { doc["num_layers"] = 77; });
  const fs::path disagreeing = scales_file(
      "disagreeing.json", [](json& doc) { doc["scales"][0] = doc["scales"][0].get<double>() * 2; });
  const fs::path absent = dir() / "absent";
  struct Case {
    std::vector<std::string> args;
    int code;
    std::vector<std::string> named;
  };
  const std::string checkpoint = testing::example_checkpoint().string();
  const std::vector<Case> cases{
      {{"--checkpoint", broken.string(), "--arch", "sm_90"},
       1,
       {(broken / "config.json").string(), "not valid JSON"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_90", "--scales", short_scales.string()},
       1,
       {short_scales.string(), "field 'num_layers'", "field 'scales'"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_90", "--scales", disagreeing.string()},
       1,
       {disagreeing.string(), "field 'max_abs[0]'"}},
      {{"--checkpoint", absent.string(), "--arch", "sm_90"}, 2, {absent.string(), "does not exist"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_90", "--scales", (absent / "s.json").string()},
       2,
       {(absent / "s.json").string(), "cannot open"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_12"}, 2, {"unknown target 'sm_12'", "sm_120a"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"warm"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.push_back("--json");
    expect_refused(args, c.code, c.named);
  }
}

TEST_F(CliWarmInputsTest, UnusableCacheDirectoryExitsTwoNamingIt) {
  const std::vector<std::string> warm{"warm", "--checkpoint", testing::example_checkpoint().string(),
                                      "--arch", "sm_90"};
  expect_unusable_cache_dirs_refused(warm);
  // Refused before anything is compiled: no progress line either.
  fs::permissions(m_root, fs::perms::all, fs::perm_options::replace);
  const CliOutcome o = run(warm);
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err.find("[1/4]"), std::string::npos) << o.err;
  fs::permissions(m_root, fs::perms::owner_all, fs::perm_options::replace);
}

}  // namespace
}  // namespace jitcache
