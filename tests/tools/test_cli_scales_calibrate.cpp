// `jitcache scales calibrate` as a user runs it, on synthetic capture files: exit codes,
// messages naming file and field, nothing written on failure (an old file kept byte for
// byte), and an output that `scales validate` accepts and `scales show` reproduces.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture_support.hpp"
#include "cli_runner.hpp"
#include "support/sha256.hpp"
#include "test_support.hpp"

// Substring check that prints the whole text on failure.
#define EXPECT_CONTAINS(text, needle)                                  \
  EXPECT_NE(std::string(text).find(needle), std::string::npos)         \
      << "expected to find: " << (needle) << "\n              in: " << (text)

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;
using testing::read_text_file;

constexpr const char* k_rev = testing::k_capture_revision;

class CalibrateCliTest : public testing::TempDirTest {
 protected:
  CliOutcome run(std::vector<std::string> args) {
    args.insert(args.begin(), {"scales", "calibrate"});
    return testing::run_cli(dir(), args, {}, {"JITCACHE_", "VLLM_NVFP4_MLA_"});
  }
  CliOutcome run_raw(const std::vector<std::string>& args) {
    return testing::run_cli(dir(), args, {}, {"JITCACHE_", "VLLM_NVFP4_MLA_"});
  }

  static fs::path example() { return testing::source_dir() / "examples" / "glm5-mini"; }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir() / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    return path;
  }

  static json capture(int rank, int tp, const std::vector<double>& max_abs) {
    return testing::capture_json(rank, tp, max_abs);
  }

  // GLM-5.x-shaped maxima (log-uniform in [0.02, 5.2]), the same on every rank up to a
  // relative jitter of 2e-4.
  static std::vector<std::vector<double>> values(std::uint64_t seed, int tp, int layers = 78) {
    return testing::rank_maxima(seed, tp, layers, 2e-4);
  }

  // Writes one capture per rank as <stem><rank>.json; returns their paths in rank order.
  std::vector<std::string> write_run(const std::vector<std::vector<double>>& v, const std::string& stem = "rank") {
    std::vector<std::string> paths;
    const int tp = static_cast<int>(v.size());
    for (int r = 0; r < tp; ++r)
      paths.push_back(write(stem + std::to_string(r) + ".json",
                            capture(r, tp, v[static_cast<std::size_t>(r)]).dump(2))
                          .string());
    return paths;
  }

  std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  fs::path out() const { return dir() / "scales.json"; }
};

TEST_F(CalibrateCliTest, CompleteRunWritesExactScalesThatValidateAndShow) {
  const auto v = values(testing::test_seed("cli calibrate complete run"), 4);
  const auto captures = write_run(v);
  const CliOutcome r = run(with(captures, {"--out", out().string(), "--checkpoint", example().string()}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "calibrated 78 layers");
  EXPECT_CONTAINS(r.out, "envelope            none");
  const std::string text = read_text_file(out());
  EXPECT_CONTAINS(r.out, "wrote " + out().string() + " (sha256 " + sha256_hex(text) + ")");
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.rfind("{\n  \"format\": \"nvfp4_ds_mla_outer_scale_v1\",\n  \"num_layers\": 78,", 0), 0u)
      << text.substr(0, 200);

  const json doc = json::parse(text);
  const std::vector<double> expected = testing::max_over_ranks(v);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(doc["max_abs"][i].get<double>(), expected[i]) << "layer " << i;
    EXPECT_EQ(doc["scales"][i].get<double>(), expected[i] / 2688.0) << "layer " << i;
  }
  EXPECT_EQ(doc["provenance"]["captures"][2]["file"], captures[2]);
  EXPECT_EQ(doc["provenance"]["captures"][2]["sha256"], sha256_hex(read_text_file(captures[2])));

  const CliOutcome validated = run_raw({"scales", "validate", out().string(), "--checkpoint", example().string()});
  EXPECT_EQ(validated.code, 0) << validated.err;

  const CliOutcome shown = run_raw({"scales", "show", "--checkpoint", example().string(), "--scales",
                                    out().string(), "--json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  const json layers = json::parse(shown.out)["layers"];
  ASSERT_EQ(layers.size(), 79u);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(static_cast<float>(layers[i]["scale"].get<double>()), static_cast<float>(expected[i] / 2688.0))
        << "layer " << i;
    EXPECT_EQ(layers[i]["max_abs"].get<double>(), expected[i]);
    EXPECT_EQ(layers[i]["source"], "override");
  }
  EXPECT_EQ(layers[78]["source"], "draft-identity");
}

TEST_F(CalibrateCliTest, JsonIsOneDocumentWithTheSameFacts) {
  const auto v = values(testing::test_seed("cli calibrate json"), 2);
  auto envelope = values(7, 1);
  envelope[0][5] = 100.0;  // raises exactly one layer
  for (std::size_t i = 0; i < envelope[0].size(); ++i)
    if (i != 5) envelope[0][i] = 0.001;
  const auto env = write_run(envelope, "env");
  const CliOutcome r = run(with(write_run(v), {"--out", out().string(), "--json", "--headroom", "1.25",
                                               "--envelope", env[0]}));
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["written"], true);
  EXPECT_EQ(doc["sha256"], sha256_hex(read_text_file(out())));
  EXPECT_EQ(doc["num_layers"], 78);
  EXPECT_EQ(doc["headroom"], 1.25);
  EXPECT_EQ(doc["envelope"]["layers_raised"], 1);
  EXPECT_EQ(doc["primary"]["tp"], 2);
  const json file = json::parse(read_text_file(out()));
  EXPECT_EQ(file["max_abs"][5].get<double>(), 125.0);
  EXPECT_EQ(file["scales"][5].get<double>(), 125.0 / 2688.0);
  EXPECT_EQ(file["provenance"]["envelope"]["layers_raised"], 1);
  EXPECT_EQ(doc["scale_max"].get<double>(), 125.0 / 2688.0);
}

TEST_F(CalibrateCliTest, EnvelopeRaisesLayersAndHeadroomMultiplies) {
  const auto v = values(testing::test_seed("cli calibrate envelope"), 4, 10);
  const std::vector<double> p = testing::max_over_ranks(v);
  std::vector<std::vector<double>> e(2, p);
  for (auto& rank : e)
    for (std::size_t i = 0; i < rank.size(); ++i) rank[i] = i < 3 ? p[i] * 2 : p[i] / 2;
  const CliOutcome r = run(with(write_run(v), with({"--out", out().string(), "--headroom", "1.25", "--envelope"},
                                                   write_run(e, "env"))));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "raised 3 of 10 layers");
  EXPECT_CONTAINS(r.out, "headroom            1.25");
  const json file = json::parse(read_text_file(out()));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double m = std::max(p[i], e[0][i]) * 1.25;
    EXPECT_EQ(file["max_abs"][i].get<double>(), m) << i;
    EXPECT_EQ(file["scales"][i].get<double>(), m / 2688.0) << i;
  }
}

TEST_F(CalibrateCliTest, EnvelopeWithOtherLayerCountIsRefused) {
  const CliOutcome r = run(with(write_run(values(1, 2, 10)),
                                with({"--out", out().string(), "--envelope"}, write_run(values(2, 1, 12), "env"))));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, "env0.json: field 'num_layers': envelope has 12, the primary run has 10");
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(CalibrateCliTest, EnvelopeOfAnotherRevisionWarns) {
  auto env = values(3, 1, 10);
  json c = capture(0, 1, env[0]);
  c["model_revision"] = "fedcba9876543210";
  const fs::path e = write("env.json", c.dump());
  const CliOutcome r = run(with(write_run(values(4, 2, 10)), {"--out", out().string(), "--envelope", e.string()}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.err, "WARNING");
  EXPECT_CONTAINS(r.err, "'fedcba9876543210'");
  EXPECT_CONTAINS(r.err, k_rev);
  EXPECT_EQ(json::parse(read_text_file(out()))["provenance"]["warnings"].size(), 1u);
}

TEST_F(CalibrateCliTest, IncompleteOrInconsistentRunsAreFindings) {
  const auto v = values(5, 4, 6);
  auto captures = write_run(v);
  CliOutcome r = run(with({captures[0], captures[1], captures[3]}, {"--out", out().string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, "missing rank 2 of tp 4 (have 0, 1, 3)");

  const fs::path dup = write("dup.json", capture(1, 4, v[1]).dump());
  r = run({captures[0], captures[1], dup.string(), captures[3], "--out", out().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, dup.string() + ": field 'rank': rank 1 also in " + captures[1]);

  r = run(with(captures, {captures[2], "--out", out().string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, captures[2] + ": given twice");

  json other = capture(3, 4, v[3]);
  other["model_revision"] = "abcdef0";
  write("rank3.json", other.dump());
  r = run(with(captures, {"--out", out().string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, captures[3] + ": field 'model_revision': 'abcdef0' differs from '" +
                             std::string(k_rev) + "' in " + captures[0]);

  other = capture(3, 4, v[3]);
  other["dataset"] = "c4";
  write("rank3.json", other.dump());
  r = run(with(captures, {"--out", out().string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, captures[3] + ": field 'dataset': 'c4' differs from 'wikitext-2' in " + captures[0]);
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(CalibrateCliTest, DisagreeingLayerIsNamedWithEveryRanksValueAndNothingIsWritten) {
  std::vector<std::vector<double>> v(3, std::vector<double>{0.5, 1.0, 2.0, 4.0});
  v[2][2] = 1.5;  // spread (2 - 1.5) / 2 = 0.25, exact in binary
  const CliOutcome r = run(with(write_run(v), {"--out", out().string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, "disagree at 1 layer");
  EXPECT_CONTAINS(r.err, "layer 2: spread 0.25 (rank 0: 2, rank 1: 2, rank 2: 1.5)");
  EXPECT_FALSE(fs::exists(out()));
  for (const auto& entry : fs::directory_iterator(dir()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();

  // The same data passes with a tolerance at its spread.
  const CliOutcome ok = run(with(write_run(v), {"--out", out().string(), "--agreement", "0.25"}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_CONTAINS(ok.out, "worst spread 0.25 at layer 2 (tolerance 0.25)");
}

TEST_F(CalibrateCliTest, BadCaptureValuesAreFindingsNamingFileAndField) {
  const auto v = values(6, 1, 5);
  struct Row {
    const char* name;
    std::string text;
    std::string expected;
  };
  json negative = capture(0, 1, v[0]);
  negative["max_abs"][3] = -1;
  json zero = capture(0, 1, v[0]);
  zero["max_abs"][2] = 0;
  json short_array = capture(0, 1, v[0]);
  short_array["max_abs"].erase(1);
  json extra = capture(0, 1, v[0]);
  extra["comment"] = "x";
  json format = capture(0, 1, v[0]);
  format["format"] = "nvfp4_ds_mla_outer_scale_v1";
  json rank = capture(1, 1, v[0]);
  std::string nan_text = capture(0, 1, {1.0, 2.0}).dump();
  nan_text.replace(nan_text.find("2.0"), 3, "NaN");
  const std::vector<Row> rows = {
      {"negative", negative.dump(), "c.json: field 'max_abs[3]': must be finite and >= 0, got -1"},
      {"zero", zero.dump(), "layer 2: max_abs is 0 in every capture (the layer was never observed)"},
      {"short", short_array.dump(), "c.json: field 'max_abs': has 4 entries, expected 5 (num_layers)"},
      {"extra", extra.dump(), "c.json: field 'comment': unknown field"},
      {"format", format.dump(), "c.json: field 'format': must be \"nvfp4_ds_mla_capture_v1\""},
      {"rank", rank.dump(), "c.json: field 'rank': must be in [0, tp) = [0, 1), got 1"},
      {"nan", nan_text, "NaN"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const fs::path c = write("c.json", row.text);
    const CliOutcome r = run({c.string(), "--out", out().string()});
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_CONTAINS(r.err, row.expected);
    EXPECT_EQ(r.err.find("terminate"), std::string::npos);
    EXPECT_FALSE(fs::exists(out()));
  }
  // The NaN parse error names the file too.
  const CliOutcome r = run({write("c.json", nan_text).string(), "--out", out().string()});
  EXPECT_CONTAINS(r.err, (dir() / "c.json").string());
}

TEST_F(CalibrateCliTest, BadOptionValuesAreUsageErrors) {
  const auto captures = write_run(values(7, 1, 3));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--headroom", "0.5"}, {"--headroom", "nan"}, {"--headroom", "inf"},
        {"--headroom", "1.5x"}, {"--headroom", ""}, {"--agreement", "-0.1"}, {"--agreement", "NaN"}}) {
    SCOPED_TRACE(bad[0] + " " + bad[1]);
    const CliOutcome r = run(with(with(captures, {"--out", out().string()}), bad));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_CONTAINS(r.err, bad[0]);
    EXPECT_FALSE(fs::exists(out()));
  }
  CliOutcome r = run(with(captures, {"--out", (dir() / "no" / "such" / "dir" / "s.json").string()}));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_CONTAINS(r.err, "no/such/dir");
  // An output it may not replace is refused data (1), as for every command.
  r = run(with(captures, {"--out", dir().string()}));
  EXPECT_EQ(r.code, 1) << r.err;
  r = run(with(captures, {"--out", captures[0]}));  // never overwrite an input
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(json::parse(read_text_file(captures[0]))["format"], "nvfp4_ds_mla_capture_v1");
  r = run({"--out", out().string()});
  EXPECT_EQ(r.code, 2);
  r = run({(dir() / "missing.json").string(), "--out", out().string()});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_CONTAINS(r.err, "missing.json");
}

TEST_F(CalibrateCliTest, CheckpointWithOtherCountsIsRefusedNamingConfigJson) {
  json config = json::parse(read_text_file(example() / "config.json"));
  config["num_hidden_layers"] = 40;
  config.erase("nvfp4_ds_mla_outer_scales");
  const fs::path ckpt_config = write("ckpt/config.json", config.dump(2));
  const auto captures = write_run(values(8, 2, 78));
  CliOutcome r = run(with(captures, {"--out", out().string(), "--checkpoint", (dir() / "ckpt").string()}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, ckpt_config.string() +
                             ": field 'num_hidden_layers': is 40 but the captures have num_layers 78");
  EXPECT_FALSE(fs::exists(out()));

  r = run(with(captures, {"--out", out().string(), "--checkpoint", example().string(), "--revision", "fedcba9"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_CONTAINS(r.err, "field 'model_revision': '" + std::string(k_rev) +
                             "' does not match the checkpoint revision 'fedcba9' (given explicitly)");
  r = run(with(captures, {"--out", out().string(), "--checkpoint", example().string(), "--revision", "0123456789"}));
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CalibrateCliTest, AnExistingOutputIsReplacedOnlyOnSuccess) {
  const std::string old_text = "{\"old\": true}\n";
  write("scales.json", old_text);
  const auto v = values(testing::test_seed("cli calibrate replace"), 2, 6);
  auto captures = write_run(v);
  const fs::path lonely = captures[0];
  CliOutcome r = run({lonely.string(), "--out", out().string()});  // rank 1 missing
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(read_text_file(out()), old_text);
  r = run(with(captures, {"--out", out().string(), "--headroom", "0.9"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(read_text_file(out()), old_text);
  r = run(with(captures, {"--out", out().string(), "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_text_file(out()), old_text);
  EXPECT_EQ(json::parse(read_text_file(out()))["num_layers"], 6);
}

TEST_F(CalibrateCliTest, JsonErrorsAreOneDocumentToo) {
  const auto captures = write_run(values(9, 3, 4));
  const CliOutcome r = run({captures[0], captures[2], "--out", out().string(), "--json"});
  EXPECT_EQ(r.code, 1);
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["written"], false);
  ASSERT_EQ(doc["errors"].size(), 1u);
  EXPECT_CONTAINS(doc["errors"][0].get<std::string>(), "missing rank 1 of tp 3 (have 0, 2)");
}

}  // namespace
}  // namespace jitcache
