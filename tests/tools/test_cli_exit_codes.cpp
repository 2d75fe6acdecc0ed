// The exit-code table of docs/cli.md ("Exit codes") held against every command: 0 success,
// 1 refused or found (the command read what it was given and refuses it, or found
// problems), 2 usage or environment (and, for audit and scales diff, whose 1 means
// findings, anything that keeps them from running). One row per command and outcome.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture_support.hpp"
#include "cli_checkpoint_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using testing::CliOutcome;
using testing::read_text_file;

struct Row {
  std::vector<std::string> args;  // after `--cache-dir <root>`
  int code;
  std::string named;              // a text stderr (or stdout, for findings) must hold
  std::vector<std::string> env = {};
};

class CliExitCodeTest : public testing::CliCheckpointTest {
 protected:
  void SetUp() override {
    CliCheckpointTest::SetUp();
    // A checkpoint whose sidecar reference leaves it: unsafe metadata, refused data.
    m_escaping = dir() / "escaping";
    fs::create_directory(m_escaping);
    std::string config = read_text_file(m_ckpt / "config.json");
    const std::string reference = "\"file\": \"nvfp4_ds_mla_outer_scales.json\"";
    config.replace(config.find(reference), reference.size(), "\"file\": \"../outside.json\"");
    std::ofstream(m_escaping / "config.json") << config;
    std::ofstream(dir() / "outside.json") << read_text_file(m_sidecar);
    // Another set of scales: layer 0 doubled.
    nlohmann::json other = nlohmann::json::parse(read_text_file(m_sidecar));
    other["scales"][0] = other["scales"][0].get<double>() * 2;
    other["max_abs"][0] = other["max_abs"][0].get<double>() * 2;
    std::ofstream(dir() / "other.json") << other.dump(2);
    std::ofstream(dir() / "invalid.json") << R"({"format": "nvfp4_ds_mla_outer_scale_v1"})";
    std::ofstream(dir() / "broken.cu") << "extern \"C\" __global__ void k() { this is not C++ }\n";
    std::ofstream(dir() / "k.cu") << "extern \"C\" __global__ void k() {}\n";
    std::ofstream(dir() / "garbage.jcexport") << "not an export file";
    std::ofstream(dir() / "x.npy") << "x";
    for (int r = 0; r < 2; ++r)
      std::ofstream(dir() / ("rank" + std::to_string(r) + ".json"))
          << testing::capture_json(r, 2, std::vector<double>(78, 1.5)).dump();
    fs::create_directory(dir() / "a-dir");
  }

  std::string path(const std::string& name) const { return (dir() / name).string(); }

  CliOutcome run_clean(std::vector<std::string> args, const std::vector<std::string>& env) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return testing::run_cli(dir(), std::move(args), env,
                            {"JITCACHE_", "VLLM_NVFP4_MLA_", "XDG_CACHE_HOME="});
  }

  void check(const std::vector<Row>& rows) const {
    for (const Row& row : rows) {
      std::string shown;
      for (const std::string& a : row.args) shown += a + " ";
      const CliOutcome o = run_clean(row.args, row.env);
      EXPECT_EQ(o.code, row.code) << shown << "\n" << o.out << o.err;
      EXPECT_NE((o.err + o.out).find(row.named), std::string::npos)
          << shown << ": should name " << row.named << "\n" << o.out << o.err;
    }
  }

  fs::path m_escaping;
};

TEST_F(CliExitCodeTest, ScalesCommands) {
  const std::string ckpt = m_ckpt.string(), escaping = m_escaping.string();
  const std::string config = (m_ckpt / "config.json").string();
  check({
      {{"scales", "show", "--checkpoint", ckpt}, 0, "provenance"},
      {{"scales", "show", "--checkpoint", escaping}, 1, "leaves the checkpoint directory"},
      {{"scales", "show", "--checkpoint", path("absent")}, 2, "absent"},
      {{"scales", "validate", m_sidecar.string()}, 0, "valid"},
      {{"scales", "validate", path("invalid.json")}, 1, "invalid.json"},
      {{"scales", "validate", path("absent.json")}, 2, "absent.json"},
      {{"scales", "calibrate", path("rank0.json"), path("rank1.json"), "--out", path("out.json")}, 0, "wrote"},
      {{"scales", "calibrate", path("rank0.json"), path("rank1.json"), "--out", path("a-dir")}, 1, "a directory"},
      {{"scales", "calibrate", path("rank0.json"), path("rank1.json"), "--envelope", path("rank0.json"),
        path("rank1.json"), "--out", path("out2.json")},
       1, "an envelope must be an independent run"},
      {{"scales", "calibrate", path("rank0.json"), path("rank1.json"), "--headroom", "x", "--out",
        path("out3.json")},
       2, "--headroom"},
      {{"scales", "calibrate", path("absent.json"), "--out", path("out4.json")}, 2, "absent.json"},
      {{"scales", "install", path("other.json"), "--checkpoint", ckpt, "--sidecar", "config.json", "--replace"},
       1, "the same file as the input '" + config},
      {{"scales", "install", path("other.json"), "--checkpoint", ckpt, "--sidecar", "../x.json", "--replace"},
       1, "leaves the checkpoint directory"},
      {{"scales", "install", path("other.json"), "--checkpoint", ckpt, "--sidecar", "s.json"}, 1, "--replace"},
      {{"scales", "install", path("invalid.json"), "--checkpoint", ckpt, "--inline", "--replace"}, 1,
       "invalid.json"},
      {{"scales", "install", path("other.json"), "--checkpoint", ckpt, "--inline", "--sidecar", "s.json"}, 2,
       "exactly one of --inline or --sidecar"},
      {{"scales", "install", path("other.json"), "--checkpoint", ckpt, "--sidecar", "s.json", "--replace"}, 0,
       "installed"},
      {{"scales", "diff", ckpt, path("other.json")}, 0, "identical"},  // other.json is installed now
      {{"scales", "diff", m_sidecar.string(), path("other.json")}, 1, "1 layer above it"},
      {{"scales", "diff", m_sidecar.string(), path("absent.json")}, 2, "absent.json"},
  });
}

TEST_F(CliExitCodeTest, CacheAndCheckpointCommands) {
  const std::string ckpt = m_ckpt.string(), escaping = m_escaping.string();
  check({
      {{"stats"}, 0, "entries"},
      {{"verify"}, 0, "0 entries"},
      {{"inspect", "zz"}, 2, "hex"},
      {{"gc", "--max-size", "lots"}, 2, "lots"},
      {{"clear"}, 2, "--all"},
      {{"audit"}, 0, "no findings"},
      {{"audit", "--checkpoint", ckpt}, 2, "needs --arch"},
      {{"audit", "--checkpoint", escaping, "--arch", "sm_90"}, 2, "leaves the checkpoint directory"},
      {{"warm", "--checkpoint", ckpt}, 2, "--arch"},
      {{"warm", "--checkpoint", escaping, "--arch", "sm_90"}, 1, "leaves the checkpoint directory"},
      {{"warm", "--checkpoint", path("absent"), "--arch", "sm_90"}, 2, "absent"},
      {{"export", "--checkpoint", ckpt, "--arch", "sm_90", "--out", path("a-dir")}, 1, "a directory"},
      {{"export", "--checkpoint", escaping, "--arch", "sm_90", "--out", path("e.jcexport")}, 1,
       "leaves the checkpoint directory"},
      {{"export", "--checkpoint", ckpt, "--arch", "sm_90"}, 2, "--out"},
      {{"import", path("garbage.jcexport")}, 1, "garbage.jcexport"},
      {{"import", path("absent.jcexport")}, 2, "absent.jcexport"},
      {{"remote", "status"}, 2, "remote"},
      {{"no-such-command"}, 2, "A subcommand is required"},
  });
}

TEST_F(CliExitCodeTest, KvCompileAndEnvCommands) {
  check({
      {{"kv", "quantize", "--input", path("x.npy"), "--out", path("a-dir")}, 1, "a directory"},
      {{"kv", "quantize", "--input", path("x.npy"), "--out", path("x.npy")}, 1, "the same file as the input"},
      {{"kv", "quantize", "--input", path("absent.npy"), "--out", path("r.bin")}, 2, "absent.npy"},
      {{"kv", "dequantize", "--input", path("x.npy"), "--out", path("a-dir")}, 1, "a directory"},
      {{"kv", "error", "--input", path("absent.npy")}, 2, "absent.npy"},
      {{"kv", "quantize", "--input", path("x.npy")}, 2, "--out"},
      {{"compile", "--arch", "sm_12"}, 2, "sm_12"},
      {{"compile", "--source", path("k.cu"), "--entry", "k", "--arch", "sm_90", "--cubin-out", path("a-dir")}, 1,
       "a directory"},
      {{"compile", "--source", path("k.cu"), "--entry", "k", "--arch", "sm_90", "--cubin-out", path("k.cu")}, 1,
       "the same file as the input"},
      {{"compile", "--source", path("broken.cu"), "--entry", "k", "--arch", "sm_90"}, 1, "NVRTC could not compile"},
      {{"compile", "--source", path("absent.cu"), "--entry", "k", "--arch", "sm_90"}, 2, "absent.cu"},
      {{"compile", "--source", path("k.cu"), "--arch", "sm_90"}, 2, "--entry"},
      {{"env"}, 0, "JITCACHE_DIR"},
      {{"env"}, 1, "JITCACHE_BOGUS", {"JITCACHE_BOGUS=1"}},
      {{"env"}, 2, "JITCACHE_STRICT", {"JITCACHE_STRICT=maybe"}},
  });
}

// The compilers and the tool worker are the environment: exit 2, never 1 (which would say
// the source was refused).
TEST_F(CliExitCodeTest, CompileExitsTwoForProblemsOfTheEnvironment) {
  const std::vector<std::string> source{"compile", "--source", path("k.cu"), "--entry", "k", "--arch", "sm_90"};
  std::vector<Row> rows;
  for (const char* value : {"abc", "0", "-1", "100000000000000000000"})
    rows.push_back({source, 2, "JITCACHE_TOOL_TIMEOUT_MS", {std::string("JITCACHE_TOOL_TIMEOUT_MS=") + value}});
  for (const char* value : {"0", "some"})
    rows.push_back({source, 2, "JITCACHE_TOOL_WORKERS", {std::string("JITCACHE_TOOL_WORKERS=") + value}});
  rows.push_back({source, 2, "JITCACHE_TOOL_WORKER", {"JITCACHE_TOOL_WORKER=/bin/true"}});
  rows.push_back({source, 2, "JITCACHE_TOOL_WORKER", {"JITCACHE_TOOL_WORKER=" + path("absent-worker")}});
  // No compiler: JITCACHE_NVRTC names the only candidate, and it is not there.
  const std::string no_nvrtc = "JITCACHE_NVRTC=" + path("absent/libnvrtc.so.12");
  rows.push_back({{"compile", "--arch", "sm_90"}, 2, "absent/libnvrtc.so.12", {no_nvrtc}});
  rows.push_back({{"compile", "--arch", "sm_90", "--json"}, 2, "absent/libnvrtc.so.12", {no_nvrtc}});
  rows.push_back({source, 2, "absent/libnvrtc.so.12", {no_nvrtc}});
  check(rows);
}

TEST_F(CliExitCodeTest, EveryArchFilterIsCheckedAgainstTheSupportedTargets) {
  const std::string ckpt = m_ckpt.string();
  check({
      {{"inspect", "--arch", "sm_91"}, 2, "jitcache: error: --arch: unknown target 'sm_91' (supported: sm_90,"},
      {{"clear", "--arch", "sm_91"}, 2, "unknown target 'sm_91' (supported: sm_90,"},
      {{"remote", "push", "--arch", "sm_91"}, 2, "unknown target 'sm_91' (supported: sm_90,"},
      {{"warm", "--checkpoint", ckpt, "--arch", "sm_91"}, 2, "unknown target 'sm_91'"},
      {{"export", "--checkpoint", ckpt, "--arch", "sm_91", "--out", path("x.jcexport")}, 2, "unknown target 'sm_91'"},
      {{"audit", "--checkpoint", ckpt, "--arch", "sm_91"}, 2, "sm_91"},
      {{"compile", "--arch", "sm_91"}, 2, "unknown target 'sm_91'"},
      {{"inspect", "--arch", "sm_90"}, 0, ""},
      {{"clear", "--arch", "sm_120a"}, 0, ""},
  });
}

TEST_F(CliExitCodeTest, HelpListsTheExitCodes) {
  const CliOutcome o = run_clean({"--help"}, {});
  EXPECT_EQ(o.code, 0);
  for (const char* row : {"Exit codes:", "  0  success", "  1  refused or found", "  2  usage or environment"})
    EXPECT_NE(o.out.find(row), std::string::npos) << row << "\n" << o.out;
}

// An empty --cache-dir (a script's unset variable) or JITCACHE_DIR="" is a usage error for
// every command, never the default cache: `--cache-dir "" clear --all` empties nothing.
TEST_F(CliExitCodeTest, AnEmptyCacheDirIsAUsageErrorForEveryCommand) {
  const fs::path env_cache = dir() / "env-cache";
  const std::vector<std::string> drop{"JITCACHE_", "VLLM_NVFP4_MLA_", "XDG_CACHE_HOME="};
  ASSERT_EQ(testing::run_cli(dir(), {"--cache-dir", env_cache.string(), "stats"}, {}, drop).code, 0);
  const std::string ckpt = m_ckpt.string();
  const std::vector<std::vector<std::string>> commands{
      {"stats"},
      {"verify"},
      {"clear", "--all"},
      {"gc", "--max-size", "1M"},
      {"inspect"},
      {"audit"},
      {"warm", "--checkpoint", ckpt, "--arch", "sm_90"},
      {"export", "--checkpoint", ckpt, "--arch", "sm_90", "--out", path("e.jcexport")},
      {"import", path("garbage.jcexport")},
      {"compile", "--source", path("k.cu"), "--entry", "k", "--arch", "sm_90"},
      {"remote", "status"},
  };
  for (std::vector<std::string> args : commands) {
    std::string shown;
    for (const std::string& a : args) shown += a + " ";
    args.insert(args.begin(), {"--cache-dir", ""});
    const CliOutcome o = testing::run_cli(dir(), args, {"JITCACHE_DIR=" + env_cache.string()}, drop);
    EXPECT_EQ(o.code, 2) << shown << "\n" << o.out << o.err;
    EXPECT_NE(o.err.find("jitcache: error: --cache-dir"), std::string::npos) << shown << "\n" << o.err;
  }
  // HOME is a scratch directory: without the rule the default cache would be the user's.
  std::vector<std::string> drop_home = drop;
  drop_home.push_back("HOME=");
  for (const char* value : {"", "  "}) {
    for (const std::vector<std::string>& args : {std::vector<std::string>{"stats"}, {"clear", "--all"}}) {
      const CliOutcome o = testing::run_cli(
          dir(), args, {std::string("JITCACHE_DIR=") + value, "HOME=" + (dir() / "home").string()}, drop_home);
      EXPECT_EQ(o.code, 2) << args[0] << " with JITCACHE_DIR='" << value << "'\n" << o.out << o.err;
      EXPECT_NE(o.err.find("JITCACHE_DIR"), std::string::npos) << o.err;
    }
  }
}

}  // namespace
}  // namespace jitcache
