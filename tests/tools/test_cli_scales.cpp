// `jitcache scales` and `jitcache env` as a user runs them: exit codes, where output goes,
// and that --json is one parsable document on stdout.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/sha256.hpp"
#include "cli_runner.hpp"
#include "test_support.hpp"


namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using CliRun = testing::CliOutcome;

class CliTest : public testing::TempDirTest {
 protected:
  // Runs the CLI with a clean jitcache environment plus `extra_env` ("NAME=value").
  CliRun run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    return testing::run_cli(dir(), args, extra_env, {"JITCACHE_", "VLLM_NVFP4_MLA_"});
  }

  fs::path example() const { return jitcache::testing::source_dir() / "examples" / "glm5-mini"; }
  fs::path example_sidecar() const { return example() / "nvfp4_ds_mla_outer_scales.json"; }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir() / name, std::ios::binary) << text;
    return dir() / name;
  }
};

TEST_F(CliTest, ShowPrintsTheTableAndProvenance) {
  const CliRun r = run({"scales", "show", "--checkpoint", example().string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("layer  scale"), std::string::npos);
  EXPECT_NE(r.out.find("   78  1.0            identity  draft-identity"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpoint (sidecar)"), std::string::npos);
  EXPECT_NE(r.out.find("wikitext-2"), std::string::npos);
  EXPECT_NE(r.err.find("INFO: outer scales for"), std::string::npos) << r.err;
}

TEST_F(CliTest, ShowJsonIsOneDocumentOnStdout) {
  const CliRun r = run({"scales", "show", "--checkpoint", example().string(), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);  // throws (fails the test) on anything but one document
  EXPECT_EQ(doc["layers"].size(), 79u);
  EXPECT_EQ(doc["provenance"]["sha256"], sha256_hex(testing::read_text_file(example_sidecar())));
  EXPECT_EQ(doc["layers"][0]["max_abs"], 0.02);
}

TEST_F(CliTest, ShowHonoursArgumentThenEnvironment) {
  json scales = json::parse(testing::read_text_file(example_sidecar()));
  scales["scales"][0] = 1.0;
  scales.erase("max_abs");
  const fs::path override_file = write("override.json", scales.dump());
  CliRun r = run({"scales", "show", "--checkpoint", example().string(), "--json"},
              {"VLLM_NVFP4_MLA_SCALES_FILE=" + override_file.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  json doc = json::parse(r.out);
  EXPECT_EQ(doc["provenance"]["source"], "override");
  EXPECT_EQ(doc["provenance"]["override_origin"], "environment");
  EXPECT_EQ(doc["layers"][0]["mode"], "identity");
  EXPECT_NE(r.err.find("WARNING"), std::string::npos) << "shadowing must be loud: " << r.err;

  r = run({"scales", "show", "--checkpoint", example().string(), "--json", "--scales",
           example_sidecar().string()},
          {"VLLM_NVFP4_MLA_SCALES_FILE=" + override_file.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  doc = json::parse(r.out);
  EXPECT_EQ(doc["provenance"]["override_origin"], "argument");
  EXPECT_EQ(doc["layers"][0]["mode"], "dynamic");
}

TEST_F(CliTest, ShowWithInvalidOverrideExitsOneNamingFileAndField) {
  json scales = json::parse(testing::read_text_file(example_sidecar()));
  scales["scales"][12] = nullptr;
  const fs::path bad = write("bad.json", scales.dump());
  const CliRun r = run({"scales", "show", "--checkpoint", example().string(), "--scales", bad.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find(bad.string() + ": field 'scales[12]': must be a number, got null"),
            std::string::npos)
      << r.err;
}

TEST_F(CliTest, ValidateExitCodes) {
  CliRun r = run({"scales", "validate", example_sidecar().string(), "--checkpoint", example().string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("valid nvfp4_ds_mla_outer_scale_v1: 78 layers"), std::string::npos);

  const fs::path truncated = write("t.json", testing::read_text_file(example_sidecar()).substr(0, 100));
  r = run({"scales", "validate", truncated.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(truncated.string() + ": not valid JSON"), std::string::npos) << r.err;

  r = run({"scales", "validate"});
  EXPECT_EQ(r.code, 2);

  r = run({"scales", "validate", (dir() / "absent.json").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("absent.json: cannot open"), std::string::npos) << r.err;
}

TEST_F(CliTest, ValidateJsonListsEveryReason) {
  json scales = json::parse(testing::read_text_file(example_sidecar()));
  scales["scales"][1] = true;
  scales["denominator"] = 448;
  const fs::path bad = write("bad.json", scales.dump());
  const CliRun r = run({"scales", "validate", bad.string(), "--json"});
  EXPECT_EQ(r.code, 1);
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["valid"], false);
  ASSERT_EQ(doc["errors"].size(), 2u);
  EXPECT_NE(doc["errors"][0].get<std::string>().find("field 'denominator'"), std::string::npos);
  EXPECT_NE(doc["errors"][1].get<std::string>().find("field 'scales[1]'"), std::string::npos);
}

TEST_F(CliTest, ValidateAgainstAnotherModelFails) {
  json scales = json::parse(testing::read_text_file(example_sidecar()));
  const fs::path ckpt = dir() / "ds";
  fs::create_directories(ckpt);
  write("ds/config.json", R"({"num_hidden_layers": 61, "kv_lora_rank": 512})");
  const CliRun r = run({"scales", "validate", example_sidecar().string(), "--checkpoint", ckpt.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("field 'num_layers': is 78 but the model has 61"), std::string::npos) << r.err;
}

// Issue 10 item 7: renaming the scales key gave 78 identity layers, exit 0, an INFO line.
TEST_F(CliTest, MisspeltScalesKeyWarnsWithDidYouMeanAndFailsInStrictMode) {
  const fs::path ckpt = dir() / "ckpt";
  fs::create_directories(ckpt);
  json config = json::parse(testing::read_text_file(example() / "config.json"));
  config["nvfp4_ds_mla_outer_scale"] = config["nvfp4_ds_mla_outer_scales"];
  config.erase("nvfp4_ds_mla_outer_scales");
  write("ckpt/config.json", config.dump());
  fs::copy_file(example_sidecar(), ckpt / "nvfp4_ds_mla_outer_scales.json");

  CliRun r = run({"scales", "show", "--checkpoint", ckpt.string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("WARNING: " + (ckpt / "config.json").string() +
                       ": key 'nvfp4_ds_mla_outer_scale' is not read (did you mean the top-level key "
                       "'nvfp4_ds_mla_outer_scales'?)"),
            std::string::npos)
      << r.err;
  r = run({"scales", "show", "--checkpoint", ckpt.string(), "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["provenance"]["warnings"].size(), 1u);

  r = run({"scales", "show", "--checkpoint", ckpt.string()}, {"JITCACHE_STRICT=1"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("error: " + (ckpt / "config.json").string() + ": key 'nvfp4_ds_mla_outer_scale'"),
            std::string::npos)
      << r.err;
}

TEST_F(CliTest, BlankScalesOptionMeansNoOverride) {
  const CliRun r = run({"scales", "show", "--checkpoint", example().string(), "--scales", "  ", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["provenance"]["source"], "checkpoint");
}

// Issue 10 item 7: JITCACHE_STRICT=maybe ran with strict mode off.
TEST_F(CliTest, UnparsableStrictModeStopsEveryCommandWithExit2) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"scales", "show", "--checkpoint", example().string()},
        std::vector<std::string>{"env"}}) {
    const CliRun r = run(args, {"JITCACHE_STRICT=maybe"});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("JITCACHE_STRICT=maybe: expected a boolean: 1, true, yes, on or 0, false, no, off"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST_F(CliTest, BadLogLevelWarnsOnceOrIsAnErrorInStrictMode) {
  CliRun r = run({"scales", "show", "--checkpoint", example().string()}, {"JITCACHE_LOG_LEVEL=bogus"});
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string warning = "JITCACHE_LOG_LEVEL=bogus: expected a log level";
  const auto first = r.err.find(warning);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << r.err;  // once
  r = run({"scales", "show", "--checkpoint", example().string()},
          {"JITCACHE_LOG_LEVEL=bogus", "JITCACHE_STRICT=1"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
}

TEST_F(CliTest, EnvPrintsRegistryAndFlagsTypos) {
  CliRun r = run({"env"}, {"JITCACHE_DIR=/some/where"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("JITCACHE_DIR=/some/where"), std::string::npos);
  EXPECT_NE(r.out.find("VLLM_NVFP4_MLA_SCALES_FILE=(unset)"), std::string::npos);

  r = run({"env", "--json"}, {"JITCACHE_STICT=1", "JITCACHE_LOG_LEVEL=chatty"});
  EXPECT_EQ(r.code, 1);
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["unknown"].size(), 1u);
  EXPECT_EQ(doc["unknown"][0]["name"], "JITCACHE_STICT");
  EXPECT_EQ(doc["unknown"][0]["suggestion"], "JITCACHE_STRICT");
  bool saw_invalid_level = false;
  for (const json& v : doc["variables"])
    if (v["name"] == "JITCACHE_LOG_LEVEL") saw_invalid_level = v["valid"] == false;
  EXPECT_TRUE(saw_invalid_level);
}

}  // namespace
}  // namespace jitcache
