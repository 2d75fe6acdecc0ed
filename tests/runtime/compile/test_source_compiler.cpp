// Kernels from outside (runtime/compile/source_compiler.hpp): one axpy kernel through
// the three paths (CUDA C++ -> NVRTC, NVVM IR -> libNVVM -> nvJitLink, PTX -> nvJitLink)
// for the product's targets; bad input of every kind comes back as an error naming the
// tool, the stage and the target with the tool's log, never a crash; the cubin ELF reader
// survives damaged images; libNVVM and nvJitLink load lazily and are fingerprinted by file.
#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/nvjitlink_library.hpp"
#include "runtime/compile/nvvm_library.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "build_id_copy.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

constexpr const char* k_axpy_cu = R"(extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

// The same kernel in NVVM IR: LLVM 7's typed-pointer dialect, the one libNVVM reads for
// every target (compute_90's front end reads nothing newer), with the 64-bit data layout
// libNVVM requires, the kernel annotation and the NVVM IR version.
constexpr const char* k_datalayout =
    "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:"
    "32-v64:64:64-v128:128:128-n16:32:64";
std::string axpy_ll(const std::string& datalayout = k_datalayout, const std::string& body_extra = "") {
  return "target datalayout = \"" + datalayout + R"("
target triple = "nvptx64-nvidia-cuda"

define void @axpy(float %a, float* %x, float* %y, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done
body:
  %i64 = sext i32 %i to i64
  %px = getelementptr float, float* %x, i64 %i64
  %py = getelementptr float, float* %y, i64 %i64
  %vx = load float, float* %px
  %vy = load float, float* %py
  %ax = fmul float %a, %vx
  %r = fadd float %ax, %vy
)" + body_extra + R"(  store float %r, float* %py
  br label %done
done:
  ret void
}

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind readnone
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind readnone
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind readnone

!nvvm.annotations = !{!0}
!0 = !{void (float, float*, float*, i32)* @axpy, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
)";
}

SourceInput input(SourceKind kind, std::string text, const std::string& target, std::string entry = "axpy") {
  SourceInput in;
  in.kind = kind;
  in.text = std::move(text);
  in.entry = std::move(entry);
  in.target = target;
  return in;
}

// PTX of the axpy for `target`, from NVRTC (the cuda path).
std::string axpy_ptx(const std::string& target) {
  auto out = compile_source(input(SourceKind::cuda, k_axpy_cu, target));
  EXPECT_TRUE(out.has_value()) << out.error().to_string();
  return out ? out->ptx : std::string();
}

// An error from `tool` at `stage` for `target`, whose detail holds `log_text`.
void expect_tool_error(const Result<SourceOutput>& r, const std::string& tool, const std::string& stage,
                       const std::string& target, const std::string& log_text) {
  ASSERT_FALSE(r.has_value()) << "compiled, but should not have";
  const Error& e = r.error();
  EXPECT_EQ(e.code, ErrorCode::compile) << e.to_string();
  EXPECT_NE(e.message.find(tool), std::string::npos) << e.to_string();
  EXPECT_NE(e.message.find(stage), std::string::npos) << e.to_string();
  EXPECT_NE(e.message.find(target), std::string::npos) << e.to_string();
  EXPECT_NE(e.detail.find(log_text), std::string::npos) << "log text '" << log_text << "' missing:\n" << e.to_string();
  EXPECT_NE(e.detail.find("options: "), std::string::npos) << e.to_string();
}

bool loaded(const char* soname) {
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  ::dlclose(handle);  // drops only the reference RTLD_NOLOAD took
  return true;
}

// First in this file, so that in a whole test_runtime run nothing has loaded them yet.
TEST(SourceCompilerLoading, NvvmAndNvJitLinkAreLoadedAtTheirFirstUseOnly) {
  const std::string jitlink = "libnvJitLink.so." + std::to_string(nvrtc_major_version());
  if (loaded("libnvvm.so.4") || loaded(jitlink.c_str()))
    GTEST_SKIP() << "an earlier test in this process already loaded libNVVM or nvJitLink";
  // In the tool worker (compile_source), this process loads neither, whatever it compiles.
  ASSERT_OK(compile_source(input(SourceKind::nvvm, axpy_ll(), "sm_90")));
  ASSERT_OK(compile_source(input(SourceKind::ptx, axpy_ptx("sm_90"), "sm_90")));
  EXPECT_FALSE(loaded("libnvvm.so.4")) << "the worker's compile loaded libNVVM here";
  EXPECT_FALSE(loaded(jitlink.c_str())) << "the worker's compile loaded nvJitLink here";
  // In this process: each at its first use.
  ASSERT_OK(compile_source_in_process(input(SourceKind::cuda, k_axpy_cu, "sm_90")));
  EXPECT_FALSE(loaded("libnvvm.so.4")) << "a CUDA C++ compile loaded libNVVM";
  EXPECT_FALSE(loaded(jitlink.c_str())) << "a CUDA C++ compile loaded nvJitLink";
  // Refused requests load nothing either: they are checked first.
  EXPECT_FALSE(compile_source_in_process(input(SourceKind::nvvm, axpy_ll(), "sm_999")));
  EXPECT_FALSE(compile_source_in_process(input(SourceKind::nvvm, "", "sm_90")));
  EXPECT_FALSE(loaded("libnvvm.so.4"));
  ASSERT_OK(compile_source_in_process(input(SourceKind::ptx, axpy_ptx("sm_90"), "sm_90")));
  EXPECT_TRUE(loaded(jitlink.c_str()));
  EXPECT_FALSE(loaded("libnvvm.so.4")) << "a PTX compile loaded libNVVM";
  ASSERT_OK(compile_source_in_process(input(SourceKind::nvvm, axpy_ll(), "sm_90")));
  EXPECT_TRUE(loaded("libnvvm.so.4"));
}

class ThreePaths : public ::testing::TestWithParam<std::string> {};

TEST_P(ThreePaths, TheSameKernelGivesACubinForTheTargetHoldingTheEntry) {
  const std::string target = GetParam();
  const std::string ptx = axpy_ptx(target);
  ASSERT_NE(ptx.find(".target " + target), std::string::npos) << ptx.substr(0, 400);
  for (const SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx}) {
    SCOPED_TRACE(std::string(to_string(kind)) + " for " + target);
    const std::string text = kind == SourceKind::cuda ? k_axpy_cu : kind == SourceKind::nvvm ? axpy_ll() : ptx;
    auto out = compile_source(input(kind, text, target));
    ASSERT_OK(out);
    auto info = read_cubin_info(out->cubin);
    ASSERT_OK(info);
    EXPECT_EQ(info->sm, target_sm(target));
    EXPECT_EQ(info->functions, std::vector<std::string>{"axpy"});
    EXPECT_NE(out->ptx.find(".entry axpy"), std::string::npos);
    EXPECT_EQ(out->ptx.find('\0'), std::string::npos) << "the PTX keeps a NUL terminator";
    // ptxas' report through NVRTC's -v and nvJitLink's -verbose alike.
    EXPECT_GT(out->usage.registers, 0) << out->log;
    EXPECT_EQ(out->usage.spill_store_bytes, 0) << out->log;
    EXPECT_EQ(out->usage.stack_frame_bytes, 0) << out->log;
    EXPECT_GT(out->compile_ms, 0.0);
    switch (kind) {
      case SourceKind::cuda:
        EXPECT_EQ(out->tools.size(), 1u);
        EXPECT_TRUE(out->tools.contains("nvrtc"));
        EXPECT_NE(out->log.find("== NVRTC =="), std::string::npos);
        break;
      case SourceKind::nvvm:
        EXPECT_EQ(out->tools.size(), 2u);
        EXPECT_TRUE(out->tools.contains("libnvvm"));
        EXPECT_TRUE(out->tools.contains("nvjitlink"));
        EXPECT_NE(std::find(out->effective_options.begin(), out->effective_options.end(),
                            "libnvvm: -arch=compute_" + target.substr(3)),
                  out->effective_options.end());
        break;
      case SourceKind::ptx:
        EXPECT_EQ(out->tools.size(), 1u);
        EXPECT_TRUE(out->tools.contains("nvjitlink"));
        EXPECT_EQ(out->ptx, ptx);
        break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ProductTargets, ThreePaths, ::testing::Values("sm_90", "sm_100a", "sm_120a"));
// The family-specific targets through all three paths: NVRTC, libNVVM and nvJitLink take
// them, and the cubin is of the family's first SM.
INSTANTIATE_TEST_SUITE_P(FamilyTargets, ThreePaths, ::testing::Values("sm_100f", "sm_120f"));

// golden/axpy_nvvm.bc is `llvm-as-14 golden/axpy_nvvm.ll`, and that .ll is axpy_ll():
// libNVVM takes bitcode as it is, through the same call as text.
std::string golden(const char* name) {
  std::ifstream in(jitcache::testing::source_dir() / "tests" / "runtime" / "compile" / "golden" / name, std::ios::binary);
  EXPECT_TRUE(in) << "missing golden file " << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SourceCompiler, NvvmBitcodeForEveryTarget) {
  ASSERT_EQ(golden("axpy_nvvm.ll"), axpy_ll()) << "regenerate golden/axpy_nvvm.ll and .bc from axpy_ll()";
  // bench_compile_paths compiles these files: they must stay the kernel the tests check.
  ASSERT_EQ(golden("axpy.cu"), k_axpy_cu) << "golden/axpy.cu must be k_axpy_cu";
  const std::string bitcode = golden("axpy_nvvm.bc");
  ASSERT_EQ(bitcode.substr(0, 2), "BC");
  for (const char* target : {"sm_90", "sm_100a", "sm_120a"}) {
    auto out = compile_source(input(SourceKind::nvvm, bitcode, target));
    ASSERT_OK(out);
    auto info = read_cubin_info(out->cubin);
    ASSERT_OK(info);
    EXPECT_EQ(info->sm, target_sm(target));
    EXPECT_EQ(info->functions, std::vector<std::string>{"axpy"});
  }
  // Cut short: a clean error from libNVVM, whatever its stage.
  for (std::size_t n : {std::size_t{4}, bitcode.size() / 2, bitcode.size() - 1}) {
    auto r = compile_source(input(SourceKind::nvvm, bitcode.substr(0, n), "sm_100a"));
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error().code, ErrorCode::compile) << r.error().to_string();
    EXPECT_NE(r.error().message.find("libNVVM could not compile input.ll for sm_100a"), std::string::npos)
        << r.error().to_string();
  }
}

TEST(SourceCompiler, OptionsReachTheTool) {
  auto out = compile_source([] {
    auto in = input(SourceKind::ptx, axpy_ptx("sm_90"), "sm_90");
    in.options = {"-maxrregcount=16"};
    return in;
  }());
  ASSERT_OK(out);
  EXPECT_NE(std::find(out->effective_options.begin(), out->effective_options.end(), "nvjitlink: -maxrregcount=16"),
            out->effective_options.end());
  auto bad = compile_source([] {
    auto in = input(SourceKind::nvvm, axpy_ll(), "sm_90");
    in.options = {"-no-such-option"};
    return in;
  }());
  expect_tool_error(bad, "libNVVM", "nvvmVerifyProgram", "sm_90", "-no-such-option");
}

TEST(SourceCompiler, NamedHeadersReachNvrtc) {
  auto in = input(SourceKind::cuda, "#include \"axpy_scale.h\"\n" + std::string(k_axpy_cu), "sm_100a");
  in.headers = {{"axpy_scale.h", "#define AXPY_SCALE 2.0f\n"}};
  in.text += "extern \"C\" __global__ void scaled(float* y) { y[0] *= AXPY_SCALE; }\n";
  in.entry = "scaled";
  auto out = compile_source(in);
  ASSERT_OK(out);
  auto info = read_cubin_info(out->cubin);
  ASSERT_OK(info);
  EXPECT_NE(std::find(info->functions.begin(), info->functions.end(), "scaled"), info->functions.end());
}

// ----- refused before any tool runs -----

TEST(SourceCompilerRefuses, UnknownTargetsForEveryKind) {
  for (const SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx})
    for (const char* target : {"sm_999", "compute_90", "90", "", "sm_90x", "SM_90"}) {
      auto r = compile_source(input(kind, "anything", target));
      ASSERT_FALSE(r) << to_string(kind) << " " << target;
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << r.error().to_string();
      EXPECT_NE(r.error().message.find("unknown target '" + std::string(target) + "'"), std::string::npos)
          << r.error().to_string();
      EXPECT_NE(r.error().message.find("sm_100a"), std::string::npos) << "the supported targets are listed";
    }
}

TEST(SourceCompilerRefuses, EmptySourceMissingEntryAndStrayHeaders) {
  for (const SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx}) {
    auto empty = compile_source(input(kind, "", "sm_90"));
    ASSERT_FALSE(empty);
    EXPECT_EQ(empty.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(empty.error().message.find("source is empty"), std::string::npos) << empty.error().to_string();
    auto no_entry = compile_source(input(kind, "x", "sm_90", ""));
    ASSERT_FALSE(no_entry);
    EXPECT_NE(no_entry.error().message.find("no entry"), std::string::npos) << no_entry.error().to_string();
  }
  auto in = input(SourceKind::ptx, "x", "sm_90");
  in.headers = {{"a.h", ""}};
  auto r = compile_source(in);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("headers are for cuda sources only"), std::string::npos) << r.error().to_string();
}

TEST(SourceCompilerRefuses, OptionsThatSetTheArchitecture) {
  const std::vector<std::pair<SourceKind, std::string>> cases = {
      {SourceKind::cuda, "--gpu-architecture=sm_80"}, {SourceKind::cuda, "-arch=sm_120a"},
      {SourceKind::nvvm, "-arch=compute_80"},         {SourceKind::ptx, "-arch=sm_80"},
      {SourceKind::nvvm, "-gen-lto"},
  };
  for (const auto& [kind, option] : cases) {
    auto in = input(kind, "x", "sm_90");
    in.options = {option};
    auto r = compile_source(in);
    ASSERT_FALSE(r) << option;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find(option), std::string::npos) << r.error().to_string();
  }
}

TEST(SourceCompilerRefuses, ParsesKindNames) {
  for (const SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx})
    EXPECT_EQ(parse_source_kind(to_string(kind)), kind);
  EXPECT_FALSE(parse_source_kind("CUDA"));
  EXPECT_FALSE(parse_source_kind("llvm"));
}

// ----- bad input, each tool -----

TEST(SourceCompilerBadNvvm, NotIr) {
  expect_tool_error(compile_source(input(SourceKind::nvvm, "this is not LLVM IR at all", "sm_90")), "libNVVM",
                    "nvvmVerifyProgram", "sm_90", "expected top-level entity");
}

TEST(SourceCompilerBadNvvm, BinaryGarbage) {
  std::mt19937_64 rng(jitcache::testing::test_seed("SourceCompilerBadNvvm.BinaryGarbage"));
  std::string garbage(512, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  garbage[0] = 'B', garbage[1] = 'C';  // bitcode's magic, then nonsense
  auto r = compile_source(input(SourceKind::nvvm, garbage, "sm_100a"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::compile) << r.error().to_string();
  EXPECT_NE(r.error().message.find("libNVVM"), std::string::npos) << r.error().to_string();
}

TEST(SourceCompilerBadNvvm, WrongDataLayoutIsCaughtByVerify) {
  // A 32-bit layout: nvvmCompileProgram alone would accept it and leave ptxas to fail.
  expect_tool_error(compile_source(input(SourceKind::nvvm, axpy_ll("e-p:32:32:32-i64:64:64-f64:64:64-n16:32"), "sm_90")),
                    "libNVVM", "nvvmVerifyProgram", "sm_90", "DataLayoutError");
}

TEST(SourceCompilerBadNvvm, SyntaxError) {
  const std::string ir = axpy_ll(k_datalayout, "  %oops = fadd float %r, %undefined_value\n");
  for (const char* target : {"sm_90", "sm_120a"})
    expect_tool_error(compile_source(input(SourceKind::nvvm, ir, target)), "libNVVM", "nvvmVerifyProgram", target,
                      "undefined value '%undefined_value'");
}

TEST(SourceCompilerBadNvvm, IrVersionFromAnotherRelease) {
  std::string ir = axpy_ll();
  ir.replace(ir.find("!{i32 2, i32 0}"), 15, "!{i32 3, i32 0}");
  expect_tool_error(compile_source(input(SourceKind::nvvm, ir, "sm_100a")), "libNVVM", "nvvmVerifyProgram", "sm_100a",
                    "IR version 3.0");
}

TEST(SourceCompilerBadNvvm, MissingEntryListsTheFunctions) {
  for (const char* target : {"sm_90", "sm_120a"}) {
    auto r = compile_source(input(SourceKind::nvvm, axpy_ll(), target, "no_such_kernel"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::compile);
    EXPECT_NE(r.error().message.find("entry 'no_such_kernel' is not a function of nvJitLink's cubin"), std::string::npos)
        << r.error().to_string();
    EXPECT_NE(r.error().message.find("(functions: axpy)"), std::string::npos) << r.error().to_string();
    EXPECT_NE(r.error().message.find(target), std::string::npos) << r.error().to_string();
  }
}

TEST(SourceCompilerBadPtx, Garbage) {
  expect_tool_error(compile_source(input(SourceKind::ptx, "garbage, not PTX", "sm_90")), "nvJitLink",
                    "nvJitLinkAddData", "sm_90", "error log:\nERROR");
}

TEST(SourceCompilerBadPtx, UnknownInstruction) {
  std::string ptx = axpy_ptx("sm_90");
  ptx.insert(ptx.find("ret;"), "bogus_instruction;\n\t");
  expect_tool_error(compile_source(input(SourceKind::ptx, ptx, "sm_90")), "nvJitLink", "nvJitLinkAddData", "sm_90",
                    "bogus_instruction");
}

TEST(SourceCompilerBadPtx, NewerVersionOrTargetThanTheLinkerTakes) {
  std::string newer = axpy_ptx("sm_90");
  const auto at = newer.find(".version ");
  ASSERT_NE(at, std::string::npos);
  newer.replace(at, newer.find('\n', at) - at, ".version 99.9");
  expect_tool_error(compile_source(input(SourceKind::ptx, newer, "sm_90")), "nvJitLink", "nvJitLinkAddData", "sm_90",
                    "Unsupported .version 99.9");
  // PTX for sm_100a linked for sm_90.
  expect_tool_error(compile_source(input(SourceKind::ptx, axpy_ptx("sm_100a"), "sm_90")), "nvJitLink",
                    "nvJitLinkAddData", "sm_90", ".target");
}

TEST(SourceCompilerBadPtx, MissingEntry) {
  auto r = compile_source(input(SourceKind::ptx, axpy_ptx("sm_100a"), "sm_100a", "axp"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("entry 'axp' is not a function"), std::string::npos) << r.error().to_string();
  EXPECT_NE(r.error().message.find("functions: axpy"), std::string::npos) << r.error().to_string();
}

TEST(SourceCompilerBadCuda, SyntaxError) {
  expect_tool_error(compile_source(input(SourceKind::cuda, "extern \"C\" __global__ void axpy( { this }", "sm_120a")),
                    "NVRTC", "nvrtcCompileProgram", "sm_120a", "error");
}

TEST(SourceCompilerBadCuda, MissingHeader) {
  expect_tool_error(
      compile_source(input(SourceKind::cuda, "#include \"not_given.h\"\n" + std::string(k_axpy_cu), "sm_90")), "NVRTC",
      "nvrtcCompileProgram", "sm_90", "not_given.h");
}

TEST(SourceCompilerBadCuda, MissingEntry) {
  auto r = compile_source(input(SourceKind::cuda, k_axpy_cu, "sm_90", "saxpy"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("entry 'saxpy' is not a function of NVRTC's cubin"), std::string::npos)
      << r.error().to_string();
}

// ----- libraries -----

TEST(ToolkitLibraries, VersionsAndFingerprints) {
  auto nvvm = nvvm_library();
  ASSERT_OK(nvvm);
  auto jl = nvjitlink_library();
  ASSERT_OK(jl);
  EXPECT_GE((*nvvm)->major, 2);
  EXPECT_GE((*nvvm)->ir_major, 2);
  EXPECT_EQ(static_cast<int>((*jl)->major), nvrtc_major_version());
  // The same toolkit as NVRTC: found beside it.
  const auto dir = nvrtc_library_dir();
  ASSERT_TRUE(dir.has_value());
  EXPECT_TRUE((*jl)->library.file.is_absolute());
  // The bytes, not the place: the digest of the file that was loaded.
  const auto nvvm_build = file_content_digest((*nvvm)->library.file);
  ASSERT_TRUE(nvvm_build);
  EXPECT_NE((*nvvm)->identity.find("; content xxh3-128 " + *nvvm_build), std::string::npos) << (*nvvm)->identity;
  EXPECT_NE((*jl)->identity.find("nvjitlink " + (*jl)->version()), std::string::npos);
  auto f1 = nvvm_fingerprint();
  auto f2 = nvjitlink_fingerprint();
  ASSERT_OK(f1);
  ASSERT_OK(f2);
  EXPECT_EQ(f1->size(), 32u);
  EXPECT_EQ(f1->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(*f1, *nvvm_fingerprint());
  EXPECT_NE(*f1, *f2);
}

class ToolkitLibraryFiles : public jitcache::testing::TempDirTest {};

TEST_F(ToolkitLibraryFiles, TheSameBuildElsewhereSharesTheFingerprintAnotherBuildDoesNot) {
  auto nvvm = nvvm_library();
  ASSERT_OK(nvvm);
  // A copy is the same build in another place; a copy whose build-id note differs stands
  // for another build that reports the same version numbers.
  const auto same = dir() / "same" / "libnvvm.so.4";
  const auto other = dir() / "other" / "libnvvm.so.4";
  testing::copy_library((*nvvm)->library.file, same, testing::Build::same);
  testing::copy_library((*nvvm)->library.file, other, testing::Build::other);
  auto a = load_nvvm({{same.string(), "a copy"}});
  auto b = load_nvvm({{other.string(), "another build"}});
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(b->version(), (*nvvm)->version());
  EXPECT_EQ(b->library.file, std::filesystem::canonical(other));
  EXPECT_EQ(fingerprint_digest(a->identity), *nvvm_fingerprint());
  EXPECT_NE(fingerprint_digest(b->identity), *nvvm_fingerprint());
}

TEST_F(ToolkitLibraryFiles, AMissingLibraryOrSymbolIsUnavailableAndSaysWhere) {
  const std::string absent = (dir() / "libnvvm.so.4").string();
  auto r = load_nvvm({{absent, "the test"}, {"libjitcache_no_such_nvvm.so.4", "the loader's search"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable);
  EXPECT_NE(r.error().message.find("libNVVM is not available"), std::string::npos) << r.error().to_string();
  EXPECT_NE(r.error().message.find(absent), std::string::npos) << r.error().to_string();
  EXPECT_NE(r.error().message.find("libjitcache_no_such_nvvm.so.4"), std::string::npos) << r.error().to_string();
  EXPECT_NE(r.error().detail.find("libjitcache_no_such_nvvm.so.4"), std::string::npos) << r.error().to_string();

  // libNVVM's file is no nvJitLink.
  auto nvvm = nvvm_library();
  ASSERT_OK(nvvm);
  auto wrong = load_nvjitlink({{(*nvvm)->library.file.string(), "libNVVM's file"}});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::unavailable);
  EXPECT_NE(wrong.error().message.find("has no symbol nvJitLink"), std::string::npos) << wrong.error().to_string();
  EXPECT_NE(wrong.error().message.find((*nvvm)->library.file.string()), std::string::npos);
}

TEST(ToolkitLibraries, FirstUseFromManyThreads) {
  const std::string ptx = axpy_ptx("sm_120a");
  std::vector<std::future<Result<SourceOutput>>> jobs;
  for (int i = 0; i < 6; ++i)
    jobs.push_back(std::async(std::launch::async, [&, i] {
      return i % 2 == 0 ? compile_source(input(SourceKind::nvvm, axpy_ll(), "sm_120a"))
                        : compile_source(input(SourceKind::ptx, ptx, "sm_120a"));
    }));
  for (auto& j : jobs) EXPECT_OK(j.get());
}

// ----- the cubin reader -----

TEST(CubinElf, TruncatedGarbageOrBitFlippedImagesNeverCrash) {
  auto out = compile_source(input(SourceKind::cuda, k_axpy_cu, "sm_100a"));
  ASSERT_OK(out);
  const std::vector<std::uint8_t>& cubin = out->cubin;
  ASSERT_OK(read_cubin_info(cubin));
  // Every truncation: an error or (past the last section) the same answer, never a crash.
  for (std::size_t n = 0; n < cubin.size(); ++n) {
    auto r = read_cubin_info(std::span(cubin).first(n));
    if (r) {
      EXPECT_EQ(r->sm, 100);
    }
  }
  EXPECT_FALSE(read_cubin_info(std::span(cubin).first(63)));
  const std::uint64_t seed = jitcache::testing::test_seed("CubinElf.TruncatedGarbageOrBitFlippedImagesNeverCrash");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    auto damaged = cubin;
    for (int k = 0; k < 1 + trial % 8; ++k) damaged[rng() % damaged.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    (void)read_cubin_info(damaged);  // any answer but a crash
  }
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::uint8_t> garbage(rng() % 4096);
    for (auto& b : garbage) b = static_cast<std::uint8_t>(rng());
    if (garbage.size() >= 4) std::copy_n(cubin.begin(), 64 < garbage.size() ? 64 : 4, garbage.begin());
    (void)read_cubin_info(garbage);
  }
  auto empty = read_cubin_info({});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::invalid_input);
  EXPECT_NE(empty.error().message.find("cubin"), std::string::npos);
}

TEST(CubinElf, AHostElfIsNotACubin) {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  std::vector<std::uint8_t> head(4096);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  auto r = read_cubin_info(head);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("is not EM_CUDA"), std::string::npos) << r.error().to_string();
}

TEST(CubinElf, TargetSm) {
  EXPECT_EQ(target_sm("sm_90"), 90);
  EXPECT_EQ(target_sm("sm_100a"), 100);
  EXPECT_EQ(target_sm("sm_120a"), 120);
  EXPECT_EQ(target_sm("compute_90"), 0);
  EXPECT_EQ(target_sm("sm_"), 0);
  EXPECT_EQ(target_sm(""), 0);
}

// ----- ptxas' report -----

TEST(PtxasUsage, TheEntrysOwnReportNotOneWhoseNameItPrefixes) {
  const std::string log =
      "ptxas info    : Function properties for axpy2\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers\n"
      "ptxas info    : Function properties for axpy\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers\n"
      "info    : Function properties for 'axpy':\n"
      "info    : used 10 registers, used 0 barriers, 0 stack, 0 bytes smem, 556 bytes cmem[0], 0 bytes lmem\n";
  const ResourceUsage axpy = parse_ptxas_usage(log, "axpy");
  EXPECT_EQ(axpy.registers, 10);
  EXPECT_EQ(axpy.stack_frame_bytes, 0);
  EXPECT_EQ(axpy.spill_store_bytes, 0);
  const ResourceUsage axpy2 = parse_ptxas_usage(log, "axpy2");
  EXPECT_EQ(axpy2.registers, 40);
  EXPECT_EQ(axpy2.spill_load_bytes, 4);
  EXPECT_EQ(parse_ptxas_usage(log, "axp").registers, -1);
}

}  // namespace
}  // namespace jitcache
