// The one output rule, held against every command that writes a file: an output that is
// one of the command's inputs (however it is spelt: the path itself, `./`, `..`, a hard
// link), a file a checkpoint it reads pins by sha256 (by identity or by its bytes), or not a
// regular file (a symbolic link, a directory) is refused with exit 1, naming both files,
// before anything is read or written, and the file is left byte for byte as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capture_support.hpp"
#include "cli_checkpoint_fixture.hpp"
#include "support/sha256.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using testing::CliOutcome;
using testing::read_text_file;

struct Case {
  std::string what;                 // printed on failure
  std::vector<std::string> args;    // after `--cache-dir <root>`
  fs::path victim;                  // must keep its bytes
  std::vector<std::string> needles; // stderr must name each
  std::vector<std::string> env = {};
};

class CliOutputRuleTest : public testing::CliCheckpointTest {
 protected:
  void SetUp() override {
    CliCheckpointTest::SetUp();
    m_source = write("k.cu", "extern \"C\" __global__ void k() {}\n");
    m_header = write("h.cuh", "#define H 1\n");
    // One complete run of the checkpoint's shape, so that a command that did not refuse
    // would go on to write.
    const std::vector<double> max_abs(78, 1.5);
    for (int r = 0; r < 2; ++r) {
      m_primary.push_back(write("rank" + std::to_string(r) + ".json",
                                testing::capture_json(r, 2, max_abs).dump(2)).string());
      m_envelope.push_back(write("env" + std::to_string(r) + ".json",
                                 testing::capture_json(r, 2, std::vector<double>(78, 2.0)).dump(2)).string());
    }
    fs::create_directory(dir() / "sub");
  }

  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir() / name, std::ios::binary) << text;
    return dir() / name;
  }

  // Another name for `target`, made by `make` (a hard link, a symlink).
  fs::path hard_link(const fs::path& target, const std::string& name) const {
    EXPECT_EQ(::link(target.c_str(), (dir() / name).c_str()), 0) << name;
    return dir() / name;
  }

  CliOutcome run_clean(std::vector<std::string> args, const std::vector<std::string>& env) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return testing::run_cli(dir(), std::move(args), env,
                            {"JITCACHE_", "VLLM_NVFP4_MLA_", "XDG_CACHE_HOME="});
  }

  void expect_refused_and_kept(const Case& c) const {
    const std::string before = read_text_file(c.victim);
    ASSERT_FALSE(before.empty()) << c.what;
    const CliOutcome o = run_clean(c.args, c.env);
    EXPECT_EQ(o.code, 1) << c.what << "\n" << o.out << o.err;
    for (const std::string& needle : c.needles)
      EXPECT_NE(o.err.find(needle), std::string::npos) << c.what << ": stderr should name " << needle << "\n"
                                                       << o.err;
    EXPECT_EQ(read_text_file(c.victim), before) << c.what << ": the file was overwritten";
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(c.victim))) << c.what;
  }

  std::vector<std::string> compile_args(const fs::path& out) const {
    return {"compile", "--source", m_source.string(), "--entry", "k", "--arch", "sm_90",
            "--include-header", "h.cuh=" + m_header.string(), "--cubin-out", out.string()};
  }
  std::vector<std::string> export_args(const fs::path& out) const {
    return {"export", "--checkpoint", m_ckpt.string(), "--arch", "sm_90", "--out", out.string()};
  }
  std::vector<std::string> calibrate_args(const fs::path& out) const {
    return {"scales", "calibrate", m_primary[0], m_primary[1], "--envelope", m_envelope[0], m_envelope[1],
            "--checkpoint", m_ckpt.string(), "--out", out.string()};
  }

  fs::path m_source, m_header;
  std::vector<std::string> m_primary, m_envelope;
};

TEST_F(CliOutputRuleTest, CompileNeverWritesTheCubinOverItsSourceAHeaderOrTheFleetKey) {
  const fs::path key = write("fleet.key", std::string(32, 'k'));
  const std::string same_as = ": the output is the same file as the input '";
  const std::vector<Case> cases = {
      {"source", compile_args(m_source), m_source, {m_source.string() + same_as + m_source.string()}},
      {"source via ./", compile_args(dir() / "." / "k.cu"), m_source, {same_as + m_source.string()}},
      {"source via ..", compile_args(dir() / "sub" / ".." / "k.cu"), m_source, {same_as + m_source.string()}},
      {"header via a hard link", compile_args(hard_link(m_header, "h-link.cuh")), m_header,
       {same_as + m_header.string()}},
      {"the fleet key", compile_args(key), key, {same_as + key.string()}, {"JITCACHE_REMOTE_KEY_FILE=" + key.string()}},
  };
  for (const Case& c : cases) expect_refused_and_kept(c);
  fs::create_symlink(m_source, dir() / "k-link.cu");
  expect_refused_and_kept({"source via a symlink", compile_args(dir() / "k-link.cu"), m_source,
                           {"k-link.cu: the output exists and is a symbolic link"}});
}

TEST_F(CliOutputRuleTest, ExportNeverReplacesTheCheckpointItsScalesOrThePinnedSidecar) {
  const fs::path config = m_ckpt / "config.json";
  const fs::path override_file = write("override.json", read_text_file(m_sidecar));
  const std::string pins = "which " + config.string() + " pins by sha256";
  // A copy elsewhere with the pinned bytes: the same file as far as the pin can tell.
  const fs::path copy = write("copy.json", read_text_file(m_sidecar));
  std::vector<std::string> with_override = export_args(override_file);
  with_override.insert(with_override.end(), {"--scales", override_file.string()});
  const std::vector<Case> cases = {
      {"config.json", export_args(config), config, {"the same file as the input '" + config.string()}},
      {"the pinned sidecar", export_args(m_sidecar), m_sidecar, {m_sidecar.string(), pins}},
      {"the pinned sidecar via ./", export_args(m_ckpt / "." / m_sidecar.filename()), m_sidecar, {pins}},
      {"the pinned sidecar via a hard link", export_args(hard_link(m_sidecar, "pin-link.json")), m_sidecar, {pins}},
      {"a copy of the pinned bytes", export_args(copy), copy, {"holds the very bytes of", pins}},
      {"the --scales override", with_override, override_file, {"the same file as the input"}},
      {"the override from VLLM_NVFP4_MLA_SCALES_FILE", export_args(override_file), override_file,
       {"the same file as the input '" + override_file.string()},
       {"VLLM_NVFP4_MLA_SCALES_FILE=" + override_file.string()}},
  };
  for (const Case& c : cases) expect_refused_and_kept(c);
}

TEST_F(CliOutputRuleTest, CalibrateNeverReplacesACaptureTheCheckpointOrThePinnedSidecar) {
  const fs::path config = m_ckpt / "config.json";
  const std::vector<Case> cases = {
      {"a primary capture via ..", calibrate_args(dir() / "sub" / ".." / "rank1.json"), m_primary[1],
       {"the same file as the input '" + m_primary[1]}},
      {"an envelope capture via a hard link", calibrate_args(hard_link(m_envelope[0], "e-link.json")),
       m_envelope[0], {"the same file as the input '" + m_envelope[0]}},
      {"config.json", calibrate_args(config), config, {"the same file as the input '" + config.string()}},
      {"the pinned sidecar", calibrate_args(m_sidecar), m_sidecar,
       {m_sidecar.string() + ": the output is the same file as '" + m_sidecar.string() + "', which " +
        config.string() + " pins by sha256 "}},
  };
  for (const Case& c : cases) expect_refused_and_kept(c);
  // The checkpoint still resolves.
  EXPECT_EQ(run_clean({"scales", "show", "--checkpoint", m_ckpt.string()}, {}).code, 0);
}

TEST_F(CliOutputRuleTest, InstallNeverWritesTheSidecarOverConfigJson) {
  const fs::path config = m_ckpt / "config.json";
  ASSERT_EQ(::link(config.c_str(), (m_ckpt / "config-link.json").c_str()), 0);
  const fs::path scales = write("new.json", read_text_file(m_sidecar));
  for (const std::string& name : {std::string("config.json"), std::string("./config.json"),
                                  std::string("config-link.json")}) {
    expect_refused_and_kept({"--sidecar " + name,
                             {"scales", "install", scales.string(), "--checkpoint", m_ckpt.string(), "--sidecar",
                              name, "--replace"},
                             config,
                             {"the same file as the input '" + config.string()}});
  }
}

TEST_F(CliOutputRuleTest, KvToolsNeverWriteOverTheirInput) {
  // kv quantize's input is an .npy file; the rule is met before the file is even parsed.
  const fs::path input = write("x.npy", "not parsed: the output check comes first");
  expect_refused_and_kept({"kv quantize onto its input", {"kv", "quantize", "--input", input.string(), "--out",
                                                          (dir() / "." / "x.npy").string()},
                           input, {"the same file as the input '" + input.string()}});
}

}  // namespace
}  // namespace jitcache
