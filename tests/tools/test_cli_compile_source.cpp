// `jitcache compile --source`: one kernel from outside (CUDA C++, NVVM IR, PTX) compiled
// through the cache as a library would with Runtime::compile: keyed on its family and spec
// facts, a hit the second time, shadow-verified against the spec's record, with the
// tools' refusals and every bad argument reported.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_fixture.hpp"
#include "compile_golden.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;

class CliCompileSourceTest : public testing::CliCommandTest {
 protected:
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path path = dir() / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
};

TEST_F(CliCompileSourceTest, NvvmIrIsCompiledThenAHitThenVerified) {
  const std::vector<std::string> args = {"compile", "--source",  (testing::k_golden / "axpy_nvvm.ll").string(),
                                         "--entry", "axpy",      "--arch",
                                         "sm_100a", "--family",  "axpy",
                                         "--fact",  "dtype=f32", "--json"};
  const CliOutcome first = run(args);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const json a = parse(first);
  EXPECT_EQ(a["kind"], "nvvm");  // from the extension
  EXPECT_EQ(a["entry"], "axpy");
  EXPECT_EQ(a["target"], "sm_100a");
  EXPECT_EQ(a["family"], "axpy");
  EXPECT_EQ(a["spec"]["dtype"], "f32");
  EXPECT_EQ(a["from_cache"], false);
  EXPECT_GT(a["cubin_bytes"].get<int>(), 0);
  EXPECT_GT(a["resources"]["registers"].get<int>(), 0);
  EXPECT_NE(a["log"].get<std::string>().find("nvJitLink"), std::string::npos);

  const CliOutcome second = run(args);
  ASSERT_EQ(second.code, 0) << second.out << second.err;
  const json b = parse(second);
  EXPECT_EQ(b["from_cache"], true);
  EXPECT_EQ(b["verified"], true);
  EXPECT_EQ(b["key"], a["key"]);

  // The text form, and the cubin written out.
  const fs::path cubin = dir() / "axpy.cubin";
  const CliOutcome text =
      run({"compile", "--source", (testing::k_golden / "axpy_nvvm.ll").string(), "--entry", "axpy", "--arch", "sm_100a",
           "--family", "axpy", "--fact", "dtype=f32", "--cubin-out", cubin.string()});
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("nvvm axpy for sm_100a: from the cache, key " + a["key"].get<std::string>()),
            std::string::npos)
      << text.out;
  EXPECT_EQ(fs::file_size(cubin), a["cubin_bytes"].get<std::uintmax_t>());
}

TEST_F(CliCompileSourceTest, ASourceThatChangedUnderOneSpecIsRefused) {
  const fs::path v1 = write("k.cu", "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n");
  ASSERT_EQ(run({"compile", "--source", v1.string(), "--entry", "k", "--arch", "sm_90", "--fact", "v=1"}).code, 0);
  const fs::path v2 = write("k2.cu", "extern \"C\" __global__ void k(float* x) { x[0] = 2.0f; }\n");
  expect_refused({"compile", "--source", v2.string(), "--entry", "k", "--arch", "sm_90", "--fact", "v=1"}, 1,
                 {"spec of kernel family cli is incomplete", "v=1", "source_xxh3"});
  // Saying what changed in a fact makes it another spec.
  EXPECT_EQ(run({"compile", "--source", v2.string(), "--entry", "k", "--arch", "sm_90", "--fact", "v=2"}).code, 0);
}

TEST_F(CliCompileSourceTest, PtxAndCudaKindsAndOptions) {
  const fs::path cu = testing::k_golden / "axpy.cu";
  const CliOutcome o = run({"compile", "--source", cu.string(), "--entry", "axpy", "--arch", "sm_120a",
                            "--option=--use_fast_math", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(parse(o)["kind"], "cuda");
  // A named header, and a change in it is a change of the key.
  const fs::path header = write("defs.h", "#define SCALE 2.0f\n");
  const fs::path user = write("scaled.cu", "#include \"defs.h\"\n"
                                           "extern \"C\" __global__ void k(float* x) { x[0] *= SCALE; }\n");
  const std::vector<std::string> with_header = {"compile", "--source", user.string(), "--entry", "k", "--arch",
                                                "sm_90", "--include-header", "defs.h=" + header.string(),
                                                "--fact", "scale=2", "--json"};
  const CliOutcome h1 = run(with_header);
  ASSERT_EQ(h1.code, 0) << h1.out << h1.err;
  write("defs.h", "#define SCALE 3.0f\n");
  expect_refused(with_header, 1, {"header.defs.h", "was cached"});
  // Without the header the source does not compile: refused data (1), naming the header.
  expect_refused({"compile", "--source", user.string(), "--entry", "k", "--arch", "sm_90"}, 1, {"defs.h"});
  // PTX under a name that says nothing: --kind.
  const fs::path ptx = write("axpy.txt", ".version 8.0\n.target sm_90\n.address_size 64\n"
                                         ".visible .entry axpy() { ret; }\n");
  const CliOutcome p = run({"compile", "--source", ptx.string(), "--kind", "ptx", "--entry", "axpy", "--arch",
                            "sm_90", "--family", "asm", "--json"});
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_EQ(parse(p)["kind"], "ptx");
}

TEST_F(CliCompileSourceTest, BadArgumentsAndToolErrorsAreNamed) {
  const std::string cu = (testing::k_golden / "axpy.cu").string();
  expect_usage_error({"compile", "--source", cu, "--arch", "sm_90"}, "--source needs --entry");
  expect_usage_error({"compile", "--source", cu, "--entry", "axpy"}, "exactly one --arch");
  expect_usage_error({"compile", "--source", cu, "--entry", "axpy", "--arch", "sm_90", "sm_100a"},
                     "exactly one --arch");
  expect_usage_error({"compile", "--source", write("x.bin", "x").string(), "--entry", "k", "--arch", "sm_90"},
                     "give --kind");
  expect_usage_error({"compile", "--source", cu, "--kind", "rust", "--entry", "axpy", "--arch", "sm_90"},
                     "--kind rust");
  expect_usage_error({"compile", "--source", cu, "--entry", "axpy", "--arch", "sm_90", "--fact", "novalue"},
                     "--fact novalue: expected NAME=VALUE");
  expect_usage_error({"compile", "--source", cu, "--entry", "axpy", "--arch", "sm_90", "--fact", "a=1", "--fact",
                      "a=2"},
                     "--fact a is given twice");
  expect_usage_error({"compile", "--source", cu, "--entry", "axpy", "--arch", "sm_75"}, "sm_75");
  expect_usage_error({"compile", "--source", (dir() / "missing.cu").string(), "--entry", "k", "--arch", "sm_90"},
                     "missing.cu");
  expect_usage_error({"compile", "--entry", "axpy"}, "need --source");
  expect_usage_error({"compile", "--fact", "a=1"}, "need --source");
  // The tools' refusals name the tool and carry its log.
  const CliOutcome ir = run({"compile", "--source", write("bad.ll", "not IR\n").string(), "--entry", "k", "--arch",
                             "sm_90"});
  EXPECT_NE(ir.code, 0);
  EXPECT_NE(ir.err.find("libNVVM"), std::string::npos) << ir.err;
  const CliOutcome entry = run({"compile", "--source", cu, "--entry", "nope", "--arch", "sm_90"});
  EXPECT_NE(entry.code, 0);
  EXPECT_NE(entry.err.find("nope"), std::string::npos) << entry.err;
}

// A hit keys its request without loading libNVVM or nvJitLink: the fingerprint memo in
// the cache directory knows their versions from the first process that loaded them. The
// dynamic loader's own trace (LD_DEBUG=files) says which libraries a process opened.
TEST_F(CliCompileSourceTest, AHitInAFreshProcessLoadsNeitherLibnvvmNorNvJitLink) {
  const std::vector<std::string> args = {
      "--cache-dir", m_root.string(), "compile", "--source", (testing::k_golden / "axpy_nvvm.ll").string(),
      "--entry",     "axpy",          "--arch",  "sm_90",    "--json"};
  const std::vector<std::string> env = {"LD_DEBUG=files"};
  const CliOutcome cold = testing::run_cli(dir(), args, env, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_NE(cold.err.find("libnvvm"), std::string::npos) << "the trace should show the cold compile loading it";
  EXPECT_NE(cold.err.find("libnvJitLink"), std::string::npos);
  const CliOutcome hit = testing::run_cli(dir(), args, env, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  ASSERT_EQ(hit.code, 0) << hit.err;
  EXPECT_EQ(parse(hit)["from_cache"], true);
  EXPECT_EQ(hit.err.find("libnvvm"), std::string::npos) << hit.err.substr(0, 4000);
  EXPECT_EQ(hit.err.find("libnvJitLink"), std::string::npos);
  EXPECT_EQ(parse(hit)["key"], parse(cold)["key"]);
}

// The cache commands see kernels from outside for what they are.
TEST_F(CliCompileSourceTest, InspectVerifyAndAuditKnowTheEntries) {
  ASSERT_EQ(run({"compile", "--source", (testing::k_golden / "axpy.cu").string(), "--entry", "axpy", "--arch", "sm_90",
                 "--family", "blas", "--fact", "dtype=f32"})
                .code,
            0);
  const CliOutcome inspect = run({"inspect"});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("blas:axpy"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("blas (spec record)"), std::string::npos) << inspect.out;
  const CliOutcome verify = run({"verify"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("checked 2 entries: 0 bad"), std::string::npos) << verify.out;
  const CliOutcome audit = run({"audit"});
  EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
  EXPECT_NE(audit.out.find("no findings"), std::string::npos) << audit.out;
}

// Issue 24: one flipped byte of NVVM bitcode made libNVVM call exit(1) inside the CLI,
// which ended with status 1 and no output at all. Now libNVVM runs in the tool worker: the
// CLI lives to report a compile error naming the tool, the stage and the worker's exit.
TEST_F(CliCompileSourceTest, BitcodeThatMakesLibNvvmExitIsAReportedCompileError) {
  std::ifstream in(testing::k_golden / "axpy_nvvm.bc", std::ios::binary);
  std::string bitcode((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bitcode.size(), 44u);
  bitcode[44] = static_cast<char>(bitcode[44] ^ 0xff);
  const fs::path corrupted = write("corrupted.bc", bitcode);
  const CliOutcome o = run({"compile", "--source", corrupted.string(), "--kind", "nvvm", "--entry", "axpy",
                            "--arch", "sm_90"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;  // a source that does not compile (docs/cli.md); main exited 1 too, silently
  EXPECT_NE(o.err.find("libNVVM"), std::string::npos) << "no report of the tool's end:\n" << o.err;
  EXPECT_NE(o.err.find("exited with status 1"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("jitcache-tool-worker"), std::string::npos) << o.err;
}

// Issue 24's stale kernel through the CLI: val.h reached from disk (absolute, '..', -I,
// --include-path, --pre-include, the working directory), compiled, edited, compiled again:
// main served the first cubin as "from_cache": true, "verified": true. Now never compiled.
TEST_F(CliCompileSourceTest, AHeaderOnDiskIsRefusedBeforeAndAfterItsEdit) {
  const fs::path val = write("val.h", "#define VAL 1.0f\n");
  const std::string body = "extern \"C\" __global__ void k(float* x) { x[0] = VAL; }\n";
  const fs::path absolute = write("absolute.cu", "#include \"" + val.string() + "\"\n" + body);
  const fs::path dotdot = write("dotdot.cu", "#include \"../" + dir().filename().string() + "/val.h\"\n" + body);
  const fs::path relative = write("relative.cu", "#include \"val.h\"\n" + body);
  const fs::path bare = write("bare.cu", body);
  auto args = [&](const fs::path& source, const std::string& way, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"compile", "--source", source.string(), "--entry", "k", "--arch", "sm_90",
                                  "--fact", "way=" + way, "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    expect_refused(args(absolute, "absolute"), 2, {"cli.k:1", "val.h", "absolute path", "--include-header"});
    expect_refused(args(dotdot, "dotdot"), 2, {"'..'", "--include-header"});
    expect_refused(args(relative, "I", {"--option=-I" + dir().string()}), 2, {"'-I" + dir().string() + "'"});
    expect_refused(args(relative, "include-path", {"--option=--include-path=" + dir().string()}), 2,
                   {"--include-path", "--include-header"});
    expect_refused(args(bare, "pre-include", {"--option=--pre-include=" + val.string()}), 2,
                   {"--pre-include", "--include-header"});
    // The CLI's working directory is the one that holds val.h (a child inherits it).
    const fs::path cwd = fs::current_path();
    fs::current_path(dir());
    const CliOutcome rel = run(args(relative, "relative"));
    fs::current_path(cwd);
    // A compile error (NVRTC cannot open val.h): exit 1 by the exit-code table.
    EXPECT_EQ(rel.code, 1) << rel.out << rel.err;
    EXPECT_NE(rel.err.find("val.h"), std::string::npos) << rel.err;
    write("val.h", "#define VAL 2.0f\n");
  }
}

TEST_F(CliCompileSourceTest, AHeaderNamedTwiceIsRefusedNamingIt) {
  const fs::path a = write("a.h", "#define A 1\n");
  const fs::path user = write("u.cu", "#include \"a.h\"\nextern \"C\" __global__ void k(int* x) { x[0] = A; }\n");
  expect_usage_error({"compile", "--source", user.string(), "--entry", "k", "--arch", "sm_90", "--include-header",
                      "a.h=" + a.string(), "--include-header", "a.h=" + a.string()},
                     "--include-header a.h is given twice");
}

TEST_F(CliCompileSourceTest, TheLogHasNoNulByte) {
  const fs::path warn = write("w.cu", "extern \"C\" __global__ void k(int* x) { int unused = 1; x[0] = 2; }\n");
  const CliOutcome o = run({"compile", "--source", warn.string(), "--entry", "k", "--arch", "sm_90", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string log = parse(o)["log"].get<std::string>();
  EXPECT_EQ(log.find('\0'), std::string::npos) << "a NUL in the log";
  EXPECT_EQ(o.out.find("\\u0000"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace jitcache
