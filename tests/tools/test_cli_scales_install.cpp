// `jitcache scales install` and `jitcache scales diff` as a user runs them: round trips
// through `scales show`, refusals that leave the checkpoint as it was, exit codes, and
// --json as one document.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "runtime/scales/scale_install.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "support/sha256.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_text_file;

constexpr const char* k_key = "nvfp4_ds_mla_outer_scales";

class CliScalesInstallTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_ckpt = dir() / "ckpt";
    fs::copy(example(), m_ckpt, fs::copy_options::recursive);
  }

  testing::CliOutcome run(const std::vector<std::string>& args) {
    return testing::run_cli(dir(), args, {}, {"JITCACHE_", "VLLM_NVFP4_MLA_"});
  }

  static fs::path example() { return testing::source_dir() / "examples" / "glm5-mini"; }
  static json example_scales() {
    return json::parse(read_text_file(example() / "nvfp4_ds_mla_outer_scales.json"));
  }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir() / name, std::ios::binary) << text;
    return dir() / name;
  }

  // The bundled scales with layer `layer` scaled by `factor` (max_abs kept consistent).
  fs::path changed(const std::string& name, int layer, double factor) {
    json scales = example_scales();
    scales["scales"][layer] = scales["scales"][layer].get<double>() * factor;
    scales["max_abs"][layer] = scales["max_abs"][layer].get<double>() * factor;
    return write(name, scales.dump(2));
  }

  std::string config() const { return read_text_file(m_ckpt / "config.json"); }

  // `scales show --json` for the checkpoint gives exactly the scales of `file`.
  void expect_shows(const fs::path& file, const std::string& form) {
    const testing::CliOutcome shown = run({"scales", "show", "--checkpoint", m_ckpt.string(), "--json"});
    ASSERT_EQ(shown.code, 0) << shown.err;
    const json doc = json::parse(shown.out);
    const json scales = json::parse(read_text_file(file));
    EXPECT_EQ(doc["provenance"]["source"], "checkpoint");
    EXPECT_EQ(doc["provenance"]["checkpoint_form"], form);
    ASSERT_EQ(doc["layers"].size(), scales["scales"].size() + 1);
    for (std::size_t i = 0; i < scales["scales"].size(); ++i) {
      EXPECT_EQ(doc["layers"][i]["scale"],
                scales::float_to_json(static_cast<float>(scales["scales"][i].get<double>())))
          << i;
      EXPECT_EQ(doc["layers"][i]["max_abs"], scales["max_abs"][i]) << i;
    }
  }

  // Everything outside the scales value is byte-identical.
  void expect_outside_unchanged(const std::string& before, const std::string& after) {
    const auto old_object = scales::scan_top_level_object(before, "before");
    const auto new_object = scales::scan_top_level_object(after, "after");
    ASSERT_TRUE(old_object && new_object);
    const auto find = [](const scales::TopLevelObject& o) {
      for (const auto& m : o.members)
        if (m.key == k_key) return m;
      return scales::TopLevelMember{};
    };
    const auto was = find(*old_object), now = find(*new_object);
    ASSERT_NE(now.value_end, 0u);
    ASSERT_NE(was.value_end, 0u);
    EXPECT_EQ(after.substr(0, now.value_begin), before.substr(0, was.value_begin));
    EXPECT_EQ(after.substr(now.value_end), before.substr(was.value_end));
  }

  fs::path m_ckpt;
};

TEST_F(CliScalesInstallTest, InlineRoundTripThroughShow) {
  const fs::path file = changed("new.json", 3, 1.1);
  const std::string before = config();
  const testing::CliOutcome r =
      run({"scales", "install", file.string(), "--checkpoint", m_ckpt.string(), "--inline", "--replace"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("inline into"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sidecar nvfp4_ds_mla_outer_scales.json, left in place"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resolves to: checkpoint (inline)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(m_ckpt / "nvfp4_ds_mla_outer_scales.json"));
  expect_outside_unchanged(before, config());
  expect_shows(file, "inline");
}

TEST_F(CliScalesInstallTest, SidecarRoundTripThroughShowWithJson) {
  const fs::path file = changed("new.json", 10, 0.9);
  const std::string before = config();
  const testing::CliOutcome r = run({"scales", "install", file.string(), "--checkpoint", m_ckpt.string(),
                                     "--sidecar", "recal.json", "--replace", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["form"], "sidecar");
  EXPECT_EQ(doc["sidecar"], "recal.json");
  EXPECT_EQ(doc["sha256"], sha256_hex(read_text_file(file)));
  EXPECT_EQ(doc["previous"]["left_in_place"], true);
  EXPECT_EQ(doc["resolved"]["provenance"]["file"], "recal.json");
  EXPECT_EQ(read_text_file(m_ckpt / "recal.json"), read_text_file(file));
  expect_outside_unchanged(before, config());
  EXPECT_EQ(json::parse(config())[k_key],
            json({{"file", "recal.json"}, {"sha256", sha256_hex(read_text_file(file))}}));
  expect_shows(file, "sidecar");
}

TEST_F(CliScalesInstallTest, ExistingScalesAreKeptWithoutReplace) {
  const fs::path file = changed("new.json", 3, 1.1);
  const std::string before = config();
  for (const std::vector<std::string>& form : {std::vector<std::string>{"--inline"},
                                               std::vector<std::string>{"--sidecar", "x.json"}}) {
    std::vector<std::string> args = {"scales", "install", file.string(), "--checkpoint", m_ckpt.string()};
    args.insert(args.end(), form.begin(), form.end());
    const testing::CliOutcome r = run(args);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("config.json: field 'nvfp4_ds_mla_outer_scales': the checkpoint already has "
                         "scales (a sidecar reference to nvfp4_ds_mla_outer_scales.json)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(config(), before);
    EXPECT_FALSE(fs::exists(m_ckpt / "x.json"));
  }
  expect_shows(example() / "nvfp4_ds_mla_outer_scales.json", "sidecar");
}

TEST_F(CliScalesInstallTest, UsageErrors) {
  const fs::path file = changed("new.json", 3, 1.1);
  const std::string before = config();
  const std::vector<std::vector<std::string>> cases = {
      {"scales", "install", file.string(), "--checkpoint", m_ckpt.string()},
      {"scales", "install", file.string(), "--checkpoint", m_ckpt.string(), "--inline", "--sidecar", "x.json"},
      {"scales", "install", file.string(), "--inline"},
      {"scales", "install", "--checkpoint", m_ckpt.string(), "--inline"},
  };
  for (const auto& args : cases) {
    const testing::CliOutcome r = run(args);
    EXPECT_EQ(r.code, 2) << args.size() << "\n" << r.out << r.err;
    EXPECT_FALSE(r.err.empty());
    EXPECT_EQ(config(), before);
  }
  const testing::CliOutcome r = run({"scales", "install", file.string(), "--checkpoint", m_ckpt.string()});
  EXPECT_NE(r.err.find("exactly one of --inline or --sidecar"), std::string::npos) << r.err;
  // A missing file is a usage error too; nothing is written.
  const testing::CliOutcome missing = run(
      {"scales", "install", (dir() / "nope.json").string(), "--checkpoint", m_ckpt.string(), "--inline", "--replace"});
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos);
  EXPECT_EQ(config(), before);
}

TEST_F(CliScalesInstallTest, RefusedDataExitsOne) {
  const std::string before = config();
  json scales = example_scales();
  scales["num_layers"] = 61;
  scales["scales"] = json(std::vector<double>(61, 1e-3));
  scales.erase("max_abs");
  const fs::path short_file = write("short.json", scales.dump());
  testing::CliOutcome r = run({"scales", "install", short_file.string(), "--checkpoint", m_ckpt.string(),
                               "--sidecar", "s.json", "--replace"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("short.json: field 'num_layers': is 61 but the model has 78"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("config.json has field 'num_hidden_layers' 78"), std::string::npos) << r.err;

  r = run({"scales", "install", changed("new.json", 1, 2.0).string(), "--checkpoint", m_ckpt.string(),
           "--sidecar", "../escaped.json", "--replace"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("leaves the checkpoint directory"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "escaped.json"));

  r = run({"scales", "install", changed("new.json", 1, 2.0).string(), "--checkpoint", m_ckpt.string(),
           "--inline", "--replace", "--revision", "abcdef0123"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("field 'model_revision'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(m_ckpt / "s.json"));
  EXPECT_EQ(config(), before);
}

// Installs racing on one checkpoint (--replace --sidecar with the same name, each its own
// scales) run one at a time: after every round the checkpoint resolves, config.json pins
// the sidecar's bytes, and those are one of the installed files'; no lock file is left.
TEST_F(CliScalesInstallTest, ConcurrentInstallsOfOneSidecarLeaveAResolvingCheckpoint) {
  constexpr int k_processes = 6, k_rounds = 4;
  std::vector<std::string> digests;
  std::vector<fs::path> files;
  for (int i = 0; i < k_processes; ++i) {
    files.push_back(changed("race" + std::to_string(i) + ".json", i, 1.0 + 0.01 * (i + 1)));
    digests.push_back(sha256_hex(read_text_file(files.back())));
    fs::create_directory(dir() / ("p" + std::to_string(i)));
  }
  // A reader resolving the checkpoint all along: it resolved before, so it resolves at every
  // step of every install.
  fs::create_directory(dir() / "reader");
  std::atomic<bool> racing{true};
  std::atomic<int> reads{0}, unresolved{0};
  std::thread reader([&] {
    while (racing) {
      const testing::CliOutcome o = testing::run_cli(dir() / "reader", {"scales", "show", "--checkpoint",
                                                                        m_ckpt.string()},
                                                     {}, {"JITCACHE_", "VLLM_NVFP4_MLA_"});
      ++reads;
      if (o.code != 0) {
        ++unresolved;
        ADD_FAILURE() << "the checkpoint did not resolve during an install:\n" << o.err;
      }
    }
  });
  for (int round = 0; round < k_rounds; ++round) {
    std::vector<std::thread> racers;
    std::vector<int> codes(k_processes, -1);
    for (int i = 0; i < k_processes; ++i)
      racers.emplace_back([&, i] {
        codes[static_cast<std::size_t>(i)] =
            testing::run_cli(dir() / ("p" + std::to_string(i)),
                             {"scales", "install", files[static_cast<std::size_t>(i)].string(), "--checkpoint",
                              m_ckpt.string(), "--sidecar", "same.json", "--replace"},
                             {}, {"JITCACHE_", "VLLM_NVFP4_MLA_"})
                .code;
      });
    for (auto& racer : racers) racer.join();
    for (int i = 0; i < k_processes; ++i) EXPECT_EQ(codes[static_cast<std::size_t>(i)], 0) << "round " << round;
    const testing::CliOutcome shown = run({"scales", "show", "--checkpoint", m_ckpt.string(), "--json"});
    ASSERT_EQ(shown.code, 0) << "round " << round << ": the checkpoint does not resolve\n" << shown.err;
    const std::string pinned = json::parse(config())[k_key]["sha256"];
    const std::string held = sha256_hex(read_text_file(m_ckpt / "same.json"));
    EXPECT_EQ(held, pinned) << "round " << round;
    EXPECT_NE(std::find(digests.begin(), digests.end(), held), digests.end()) << "round " << round;
    EXPECT_EQ(json::parse(shown.out)["provenance"]["sha256"], pinned) << "round " << round;
    EXPECT_FALSE(fs::exists(fs::symlink_status(m_ckpt / ".jitcache-scales-install.lock"))) << "round " << round;
  }
  racing = false;
  reader.join();
  EXPECT_GT(reads, 0);
  EXPECT_EQ(unresolved, 0);
}

TEST_F(CliScalesInstallTest, RevisionOfASnapshotDirectory) {
  const fs::path snapshot = dir() / "models--org--glm" / "snapshots" / "1111111111111111111111111111111111111111";
  fs::create_directories(snapshot.parent_path());
  fs::rename(m_ckpt, snapshot);
  const std::string before = read_text_file(snapshot / "config.json");
  // The bundled file records model_revision 0ea160f...: another revision.
  const testing::CliOutcome r = run({"scales", "install", changed("new.json", 1, 2.0).string(),
                                     "--checkpoint", snapshot.string(), "--inline", "--replace"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not match the checkpoint revision \"1111111111111111111111111111111111111111\""),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_text_file(snapshot / "config.json"), before);
}

// --- diff ---

TEST_F(CliScalesInstallTest, DiffIdenticalFilesExitZero) {
  const fs::path a = example() / "nvfp4_ds_mla_outer_scales.json";
  const testing::CliOutcome r = run({"scales", "diff", a.string(), write("copy.json", read_text_file(a)).string()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("78 layers: identical; tolerance 0: within"), std::string::npos) << r.out;
}

TEST_F(CliScalesInstallTest, DiffNamesTheChangedLayerWithBothValuesAndTheRatio) {
  // Doubled: exact in float32 too, so the ratio prints as exactly 2.
  const fs::path a = example() / "nvfp4_ds_mla_outer_scales.json";
  const fs::path b = changed("b.json", 5, 2.0);
  const json scales = example_scales();
  const std::string value_a = scales::float_to_json(static_cast<float>(scales["scales"][5].get<double>())).dump();
  const std::string value_b =
      scales::float_to_json(static_cast<float>(scales["scales"][5].get<double>() * 2.0)).dump();
  testing::CliOutcome r = run({"scales", "diff", a.string(), b.string()});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  // The table's row for layer 5 and nothing else; the summary with the largest change.
  EXPECT_NE(r.out.find("    5  " + value_a), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(value_b + " "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("    6  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 differs; largest change 1 (100%) at layer 5, " + value_a + " -> " + value_b +
                       ", ratio 2; tolerance 0: 1 layer above it"),
            std::string::npos)
      << r.out;

  r = run({"scales", "diff", a.string(), b.string(), "--tolerance", "1.5"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tolerance 1.5: within"), std::string::npos) << r.out;
  r = run({"scales", "diff", a.string(), b.string(), "--tolerance", "0.99"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;

  r = run({"scales", "diff", a.string(), b.string(), "--all"});
  EXPECT_NE(r.out.find("    6  "), std::string::npos) << r.out;
}

TEST_F(CliScalesInstallTest, DiffCheckpointAgainstAFileAndJson) {
  const fs::path b = changed("b.json", 77, 0.5);
  testing::CliOutcome r = run({"scales", "diff", example().string(), b.string(), "--json"});
  EXPECT_EQ(r.code, 1) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["a"]["kind"], "checkpoint");
  EXPECT_EQ(doc["a"]["checkpoint_form"], "sidecar");
  EXPECT_EQ(doc["b"]["kind"], "file");
  EXPECT_EQ(doc["layers"].size(), 78u);
  EXPECT_EQ(doc["differing_layers"], json({77}));
  EXPECT_EQ(doc["largest_change"]["layer"], 77);
  EXPECT_DOUBLE_EQ(doc["largest_change"]["ratio"].get<double>(), 0.5);
  EXPECT_EQ(doc["within_tolerance"], false);

  // The checkpoint and its own sidecar: identical.
  r = run({"scales", "diff", example().string(), (example() / "nvfp4_ds_mla_outer_scales.json").string()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST_F(CliScalesInstallTest, DiffRefusesWhatItCannotCompare) {
  json other = example_scales();
  other["num_layers"] = 61;
  other["scales"] = json(std::vector<double>(61, 1e-3));
  other.erase("max_abs");
  const fs::path a = example() / "nvfp4_ds_mla_outer_scales.json";
  testing::CliOutcome r = run({"scales", "diff", a.string(), write("61.json", other.dump()).string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("layer counts differ"), std::string::npos) << r.err;
  r = run({"scales", "diff", a.string(), (dir() / "missing.json").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  for (const char* bad : {"-1", "nan", "inf"}) {
    r = run({"scales", "diff", a.string(), a.string(), "--tolerance", bad});
    EXPECT_EQ(r.code, 2) << bad << r.err;
  }
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace jitcache
