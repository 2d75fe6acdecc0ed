// The compiler libraries as a process meets them: opened only when a compile needs them
// (a warm start maps none), keyed by their build, and named with what to install when
// none is found.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "build_id_copy.hpp"
#include "cli_fixture.hpp"
#include "compile_golden.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "runtime/compile/nvrtc_library.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "runtime/compile/toolkit_search.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;

const fs::path k_checkpoint = testing::example_checkpoint();
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class CliCompilerLibrariesTest : public testing::CliCommandTest {
 protected:
  // The CLI on the test's cache with `env` added; the caller's compiler choices dropped.
  CliOutcome run_with(const std::vector<std::string>& args, const std::vector<std::string>& env) const {
    std::vector<std::string> full = {"--cache-dir", m_root.string()};
    full.insert(full.end(), args.begin(), args.end());
    return testing::run_cli(dir(), full, env,
                            {"JITCACHE_DIR=", "XDG_CACHE_HOME=", "JITCACHE_NVRTC=", "JITCACHE_NVJITLINK=",
                             "JITCACHE_NVVM="});
  }
};

// A warm start, every variant in the cache and the fingerprints in the memo, maps no
// compiler at all; the dynamic loader's own trace (LD_DEBUG=files) says what it opened.
TEST_F(CliCompilerLibrariesTest, AWarmStartMapsNoCompiler) {
  const std::vector<std::string> warm = {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90",
                                         "--jobs", "2", "--json"};
  const CliOutcome cold = run_with(warm, {"LD_DEBUG=files"});
  ASSERT_EQ(cold.code, 0) << cold.err.substr(0, 4000);
  EXPECT_TRUE(has(cold.err, "libnvrtc")) << "the trace should show the cold warm loading NVRTC";
  const CliOutcome hot = run_with(warm, {"LD_DEBUG=files"});
  ASSERT_EQ(hot.code, 0) << hot.err.substr(0, 4000);
  const json doc = parse(hot);
  EXPECT_EQ(doc["compiled"], 0) << hot.out;
  EXPECT_EQ(doc["already_cached"], doc["variants_needed"]) << hot.out;
  for (const char* library : {"libnvrtc", "libnvJitLink", "libnvvm"})
    EXPECT_FALSE(has(hot.err, library)) << library << " was mapped:\n" << hot.err.substr(0, 4000);
  // The trace works: the process did map what it links.
  EXPECT_TRUE(has(hot.err, "libsqlite3")) << hot.err.substr(0, 2000);
  // Without the memo (a fresh node given a filled cache), the files still tell the
  // version and the build: nothing is loaded either, and the memo is written again.
  ASSERT_TRUE(fs::remove(m_root / "compiler-fingerprints.json"));
  const CliOutcome fresh = run_with(warm, {"LD_DEBUG=files"});
  ASSERT_EQ(fresh.code, 0) << fresh.err.substr(0, 4000);
  EXPECT_EQ(parse(fresh)["compiled"], 0) << fresh.out;
  EXPECT_FALSE(has(fresh.err, "libnvrtc")) << fresh.err.substr(0, 4000);
  EXPECT_TRUE(fs::exists(m_root / "compiler-fingerprints.json"));
}

// Keys follow the compiler's build, not its place: the same libnvrtc (and builtins) in
// another directory hits the entries the toolkit's made; another build misses them.
TEST_F(CliCompilerLibrariesTest, TheSameBuildElsewhereHitsAndAnotherBuildMisses) {
  auto nvrtc = nvrtc_library();
  ASSERT_TRUE(nvrtc) << nvrtc.error().to_string();
  const fs::path file = (*nvrtc)->library.file;
  const std::string version = (*nvrtc)->version();
  const auto copy_to = [&](const fs::path& to, testing::Build build) {
    testing::copy_library(file, to / file.filename(), build);
    testing::copy_library(nvrtc_builtins_file(file, version), nvrtc_builtins_file(to / file.filename(), version),
                          testing::Build::same);
    return "JITCACHE_NVRTC=" + (to / file.filename()).string();
  };
  const std::vector<std::string> args = {
      "compile", "--source", (testing::k_golden / "axpy.cu").string(), "--entry", "axpy", "--arch", "sm_90", "--json"};
  const CliOutcome first = run_with(args, {});
  ASSERT_EQ(first.code, 0) << first.err;
  const std::string key = parse(first)["key"];

  const CliOutcome same = run_with(args, {copy_to(dir() / "same", testing::Build::same)});
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(parse(same)["key"], key);
  EXPECT_EQ(parse(same)["from_cache"], true);

  const CliOutcome other = run_with(args, {copy_to(dir() / "other", testing::Build::other)});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(parse(other)["key"], key);
  EXPECT_EQ(parse(other)["from_cache"], false);
}

// A program started from a virtual environment's bin/ (the CLI a wheel installs, or
// `.venv/bin/python` without activating it) takes the environment's NVIDIA pip packages,
// NVRTC's builtins from beside its libnvrtc, though a toolkit is installed as well; by its
// path, or by its bare name with that bin/ on PATH (a container image that puts the
// environment on PATH without activating it).
class VirtualEnvironmentTest : public CliCompilerLibrariesTest, public ::testing::WithParamInterface<bool> {};

TEST_P(VirtualEnvironmentTest, AProgramStartedFromAVirtualEnvironmentUsesItsPipPackages) {
  const bool bare_name = GetParam();
  auto nvrtc = nvrtc_library();
  ASSERT_TRUE(nvrtc) << nvrtc.error().to_string();
  const fs::path venv = dir() / "venv";
  const fs::path lib = venv / "lib" / "python3.11" / "site-packages" / "nvidia" /
                       ("cu" + std::to_string(nvrtc_major_version())) / "lib";
  if (nvrtc_major_version() < 13) GTEST_SKIP() << "the cu12 packages' layout is tested in test_nvrtc_library";
  const fs::path file = (*nvrtc)->library.file;
  testing::copy_library(file, lib / file.filename(), testing::Build::same);
  testing::copy_library(nvrtc_builtins_file(file, (*nvrtc)->version()),
                        nvrtc_builtins_file(lib / file.filename(), (*nvrtc)->version()), testing::Build::same);
  std::ofstream(venv / "pyvenv.cfg") << "home = /usr/bin\n";
  fs::create_directories(venv / "bin");
  fs::create_symlink(JITCACHE_CLI_PATH, venv / "bin" / "jitcache");
  const std::string program = bare_name ? "PATH='" + (venv / "bin").string() + "':\"$PATH\" jitcache"
                                         : "'" + (venv / "bin" / "jitcache").string() + "'";
  const std::string command = "env -u JITCACHE_NVRTC -u VIRTUAL_ENV -u CONDA_PREFIX -u PYTHONHOME -u JITCACHE_DIR "
                              "LD_DEBUG=files " + program + " --cache-dir '" +
                              m_root.string() + "' warm --checkpoint '" + k_checkpoint.string() +
                              "' --arch sm_90 --jobs 2 --json > '" + (dir() / "out").string() + "' 2> '" +
                              (dir() / "err").string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << testing::read_text_file(dir() / "err").substr(0, 4000);
  const std::string err = testing::read_text_file(dir() / "err");
  const std::string ours = fs::canonical(lib / file.filename()).string();
  EXPECT_TRUE(has(err, "file=" + ours + " ")) << err.substr(0, 4000);
  EXPECT_TRUE(has(err, "file=" + fs::canonical(nvrtc_builtins_file(ours, (*nvrtc)->version())).string() + " "))
      << err.substr(0, 4000);
  EXPECT_FALSE(has(err, "file=" + file.string() + " ")) << "the toolkit's NVRTC was loaded";
  EXPECT_TRUE(has(err, "NVRTC " + (*nvrtc)->version() + ": " + ours + " (the pip package")) << err.substr(0, 4000);
}

INSTANTIATE_TEST_SUITE_P(ByPathOrName, VirtualEnvironmentTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("BareNameOnPath") : std::string("ByPath");
                         });

// The CLI where no compiler can be found at all: a mount namespace of the command's own in
// which every /usr/local/cuda* directory is an empty one (the loader's cache points there
// too), without the variables that point at a toolkit or a Python environment, and started
// by its path from the build tree (no virtual environment above it). std::nullopt where
// this machine does not permit unshare --mount (root in a mount namespace is needed).
std::optional<CliOutcome> run_without_compilers(const fs::path& scratch, const fs::path& root,
                                                const std::vector<std::string>& args,
                                                const std::vector<std::string>& env = {}) {
  if (std::system("unshare --mount true >/dev/null 2>&1") != 0) return std::nullopt;
  const auto quoted = [](const std::string& text) {
    std::string out = "'";
    for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  fs::create_directories(scratch / "empty");
  std::string command = "unshare --mount -- sh -c 'mount --make-rprivate / && for d in /usr/local/cuda*; do "
                        "[ -d \"$d\" ] && mount --bind \"$0\" \"$d\"; done; ls /usr/local/cuda*/lib*/libnvrtc* "
                        ">/dev/null 2>&1 && exit 97; shift; exec \"$@\"' " +
                        quoted((scratch / "empty").string()) +
                        " sh env -u JITCACHE_NVRTC -u JITCACHE_NVJITLINK -u JITCACHE_NVVM -u VIRTUAL_ENV "
                        "-u CONDA_PREFIX -u PYTHONHOME -u CUDA_HOME -u CUDA_PATH -u LD_LIBRARY_PATH -u JITCACHE_DIR "
                        "-u XDG_CACHE_HOME";
  for (const std::string& e : env) command += " " + quoted(e);
  command += " " + quoted(JITCACHE_CLI_PATH) + " --cache-dir " + quoted(root.string());
  for (const std::string& a : args) command += " " + quoted(a);
  command += " > " + quoted((scratch / "hidden-out").string()) + " 2> " + quoted((scratch / "hidden-err").string());
  const int status = std::system(command.c_str());
  CliOutcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = testing::read_text_file(scratch / "hidden-out");
  o.err = testing::read_text_file(scratch / "hidden-err");
  EXPECT_NE(o.code, 97) << "the toolkit is still visible in the mount namespace";
  return o;
}

// No NVRTC anywhere (a node given a filled cache but no compiler): a cache hit still works,
// keyed with the NVRTC the memo says this cache was last keyed with, and says so in a
// warning (the same for libNVVM and nvJitLink, for kernels from outside); a miss is an
// error naming every place searched and the package to install. A cache whose memo does
// not know the build cannot key anything; a compiler named by JITCACHE_NVRTC is never
// stood in for.
TEST_F(CliCompilerLibrariesTest, WithNoNvrtcAnywhereAHitStillWorksAndAMissSaysWhatToInstall) {
  const std::vector<std::string> warm = {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90",
                                         "--jobs", "2", "--json"};
  const CliOutcome cold = run_with(warm, {});
  ASSERT_EQ(cold.code, 0) << cold.err;
  ASSERT_EQ(parse(cold)["compiled"], parse(cold)["variants_needed"]) << cold.out;

  const auto hit = run_without_compilers(dir(), m_root, warm, {"LD_DEBUG=files"});
  if (!hit) GTEST_SKIP() << "unshare --mount is not permitted on this machine";
  ASSERT_EQ(hit->code, 0) << hit->err.substr(0, 4000);
  const json doc = parse(*hit);
  EXPECT_EQ(doc["compiled"], 0) << hit->out;
  EXPECT_EQ(doc["already_cached"], doc["variants_needed"]) << hit->out;
  EXPECT_TRUE(has(hit->err, "NVRTC: none found; lookups are keyed with the NVRTC this cache was last keyed with"))
      << hit->err.substr(0, 4000);
  EXPECT_FALSE(has(hit->err, "calling init: /usr/local/cuda")) << hit->err.substr(0, 4000);

  // A variant not in the cache cannot be compiled: the error names the places and the package.
  const std::vector<std::string> other = {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_100a",
                                          "--jobs", "2", "--json"};
  const auto miss = run_without_compilers(dir(), m_root, other);
  ASSERT_TRUE(miss);
  EXPECT_NE(miss->code, 0) << miss->out;
  EXPECT_TRUE(has(miss->err, "pip install nvidia-cuda-nvrtc")) << miss->err;
  EXPECT_TRUE(has(miss->err, "/usr/local/cuda")) << miss->err;  // among the places searched

  // Kernels from outside too: CUDA C++ (NVRTC), NVVM IR (libNVVM and nvJitLink).
  for (const char* source : {"axpy.cu", "axpy_nvvm.ll"}) {
    SCOPED_TRACE(source);
    const std::vector<std::string> compile = {
        "compile", "--source", (testing::k_golden / source).string(), "--entry", "axpy", "--arch", "sm_90", "--json"};
    const CliOutcome first = run_with(compile, {});
    if (first.code != 0 && has(first.err, "libNVVM is not available")) continue;  // a toolkit without it
    ASSERT_EQ(first.code, 0) << first.err;
    const auto again = run_without_compilers(dir(), m_root, compile);
    ASSERT_TRUE(again);
    ASSERT_EQ(again->code, 0) << again->err;
    EXPECT_EQ(parse(*again)["key"], parse(first)["key"]);
    EXPECT_EQ(parse(*again)["from_cache"], true);
    // Another source is a miss, which needs the compiler.
    const fs::path changed = dir() / (std::string("changed-") + source);
    fs::copy_file(testing::k_golden / source, changed);
    std::ofstream(changed, std::ios::app) << "\n";
    const auto miss_source = run_without_compilers(
        dir(), m_root, {"compile", "--source", changed.string(), "--entry", "axpy", "--arch", "sm_90", "--json"});
    ASSERT_TRUE(miss_source);
    EXPECT_NE(miss_source->code, 0) << miss_source->out;
    EXPECT_TRUE(has(miss_source->err, "is not available")) << miss_source->err;
  }

  // A compiler named by its variable is the only one: not found, nothing is keyed.
  const auto named = run_without_compilers(dir(), m_root, warm,
                                           {"JITCACHE_NVRTC=" + (dir() / "nowhere" / "libnvrtc.so.13").string()});
  ASSERT_TRUE(named);
  EXPECT_NE(named->code, 0) << named->out;
  EXPECT_TRUE(has(named->err, (dir() / "nowhere" / "libnvrtc.so.13").string())) << named->err;

  // Without the memo, nothing tells the build the cache was keyed with.
  ASSERT_TRUE(fs::remove(m_root / "compiler-fingerprints.json"));
  const auto unknown = run_without_compilers(dir(), m_root, warm);
  ASSERT_TRUE(unknown);
  EXPECT_NE(unknown->code, 0) << unknown->out;
  EXPECT_TRUE(has(unknown->err, "pip install nvidia-cuda-nvrtc")) << unknown->err;
}

// An export imported into a fresh cache on a node with no compiler anywhere (the air-gapped
// image an export is for) serves every kernel it carries: the import records the compiler
// builds its entries were keyed with, so the no-compiler mode has a build to key with.
TEST_F(CliCompilerLibrariesTest, AnImportIntoAFreshCacheServesWithNoCompilerAnywhere) {
  const std::vector<std::string> args = {"--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--jobs", "2"};
  std::vector<std::string> exported = {"export", "--out", (dir() / "fleet.jcx").string()};
  exported.insert(exported.end(), args.begin(), args.end());
  const CliOutcome made = run_with(exported, {});
  ASSERT_EQ(made.code, 0) << made.out << made.err;

  const fs::path fresh = dir() / "fresh-cache";
  const auto imported = run_without_compilers(dir(), fresh, {"import", (dir() / "fleet.jcx").string()});
  if (!imported) GTEST_SKIP() << "unshare --mount is not permitted on this machine";
  ASSERT_EQ(imported->code, 0) << imported->out << imported->err;
  std::vector<std::string> warm = {"warm", "--json"};
  warm.insert(warm.end(), args.begin(), args.end());
  const auto served = run_without_compilers(dir(), fresh, warm);
  ASSERT_TRUE(served);
  ASSERT_EQ(served->code, 0) << served->out << served->err.substr(0, 4000);
  const json doc = parse(*served);
  EXPECT_EQ(doc["compiled"], 0) << served->out;
  EXPECT_EQ(doc["variants_needed"], 4) << served->out;
  EXPECT_EQ(doc["already_cached"], 4) << served->out;
  // The audit knows the imported build: nothing is reported as from an unknown compiler.
  const auto audit = run_without_compilers(dir(), fresh, {"audit", "--json"});
  ASSERT_TRUE(audit);
  EXPECT_EQ(audit->code, 0) << audit->out << audit->err;
}

// A fresh node given its kernels by a cache provider (what an installed cache wheel holds),
// with no compiler anywhere and an empty cache without a fingerprint memo: the build the
// provider's kernels were compiled with keys the lookups (one warning says so), every variant
// comes from the provider, nothing is compiled, and the build is remembered, so the next
// start needs the provider no more. Without the provider the same start cannot key anything.
TEST_F(CliCompilerLibrariesTest, AFreshCacheGivenAProviderServesWithNoCompilerAnywhere) {
  const std::vector<std::string> args = {"--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--jobs", "2"};
  std::vector<std::string> warm = {"warm", "--json"};
  warm.insert(warm.end(), args.begin(), args.end());
  const CliOutcome cold = run_with(warm, {});
  ASSERT_EQ(cold.code, 0) << cold.out << cold.err;
  // The provider, laid out as `jitcache pack` lays it out, from the kernels just compiled.
  const fs::path provider = dir() / "provider";
  {
    KernelCacheOptions options;
    options.cache_dir = m_root;
    options.remote = RemoteUse::off;
    options.provider_use = ProviderUse::off;
    auto opened = open_kernel_cache(options);
    ASSERT_TRUE(opened.has_value()) << opened.error().to_string();
    ResolveOptions resolve;
    resolve.checkpoint_dir = k_checkpoint;
    auto scales = resolve_scales(resolve);
    ASSERT_TRUE(scales.has_value()) << scales.error().to_string();
    auto plan = plan_variants(*scales, RecordFormat::b12x_432, *parse_target("sm_90"),
                              default_policy(RecordFormat::b12x_432));
    ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
    auto gathered = gather_export_entries(*opened->kernels, *opened->compiler, plan->variants, 1);
    ASSERT_TRUE(gathered.has_value()) << gathered.error().to_string();
    for (const ExportEntry& e : *gathered) EXPECT_FALSE(e.compiled_now) << e.label;
    ASSERT_TRUE(write_provider(provider, ProviderInfo{"test", "now", "jitcache_cache_test", "glm5-mini", "b12x-432",
                                                      {"sm_90"}},
                               *gathered, std::nullopt)
                    .has_value());
  }
  const fs::path fresh = dir() / "fresh-cache";
  const auto unkeyed = run_without_compilers(dir(), fresh, warm);
  if (!unkeyed) GTEST_SKIP() << "unshare --mount is not permitted on this machine";
  EXPECT_NE(unkeyed->code, 0) << unkeyed->out;
  EXPECT_TRUE(has(unkeyed->err, "pip install nvidia-cuda-nvrtc")) << unkeyed->err;

  const auto served = run_without_compilers(dir(), fresh, warm, {"JITCACHE_PROVIDERS=" + provider.string()});
  ASSERT_TRUE(served);
  ASSERT_EQ(served->code, 0) << served->out << served->err.substr(0, 4000);
  json doc = parse(*served);
  EXPECT_EQ(doc["compiled"], 0) << served->out;
  EXPECT_EQ(doc["already_cached"], 4) << served->out;
  EXPECT_EQ(doc["from_provider"], 4) << served->out;
  EXPECT_TRUE(has(served->err, "named by the cache provider " + provider.string())) << served->err;

  // Copied into the local cache, keyed with the build the memo now remembers.
  const auto again = run_without_compilers(dir(), fresh, warm);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->code, 0) << again->out << again->err.substr(0, 4000);
  doc = parse(*again);
  EXPECT_EQ(doc["compiled"], 0) << again->out;
  EXPECT_EQ(doc["from_provider"], 0) << again->out;
  EXPECT_EQ(doc["already_cached"], 4) << again->out;
}

// A libnvrtc cut short by an interrupted pip install, found first in the Python
// environment's package, is passed over with one warning naming it (never loaded: it would
// kill the process with SIGBUS), and the toolkit's copy compiles: 4 KB, 1 MB, half, and all
// but the last 4 KB.
TEST_F(CliCompilerLibrariesTest, ATruncatedLibnvrtcInThePythonEnvironmentIsSkippedNotLoaded) {
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  if (!located) GTEST_SKIP() << "no NVRTC file here";
  const auto size = fs::file_size(located->path);
  for (const std::uintmax_t keep : {std::uintmax_t{4096}, std::uintmax_t{1} << 20, size / 2, size - 4096}) {
    SCOPED_TRACE(keep);
    const fs::path venv = dir() / ("venv-" + std::to_string(keep));
    const fs::path lib = venv / "lib" / "python3.11" / "site-packages" / "nvidia" /
                         ("cu" + std::to_string(toolkit_major())) / "lib";
    fs::create_directories(lib);
    std::ofstream(venv / "pyvenv.cfg") << "home = /usr/bin\n";
    const fs::path cut = lib / tool_soname(ToolkitTool::nvrtc);
    fs::copy_file(located->path, cut);
    fs::resize_file(cut, keep);
    const fs::path root = dir() / ("cache-" + std::to_string(keep));
    const CliOutcome o = testing::run_cli(
        dir(),
        {"--cache-dir", root.string(), "compile", "--source", (testing::k_golden / "axpy.cu").string(), "--entry",
         "axpy", "--arch", "sm_90", "--json"},
        {"VIRTUAL_ENV=" + venv.string()}, {"JITCACHE_DIR=", "JITCACHE_NVRTC=", "CONDA_PREFIX=", "PYTHONHOME="});
    ASSERT_EQ(o.code, 0) << o.out << o.err;
    EXPECT_TRUE(has(o.err, "not using the compiler library " + cut.string())) << o.err;
    EXPECT_TRUE(has(o.err, "truncated")) << o.err;
  }
}

// A libnvrtc patched in one string of its .rodata, its GNU build-id note intact, in a
// world-writable directory owned by another user and named by VIRTUAL_ENV, is refused with
// a warning naming it, its owner and mode; the toolkit's NVRTC keys and compiles instead.
// The patched bytes are another compiler, whatever its note says: keyed by content, its
// fingerprint differs from the genuine one (in a private directory, named by
// JITCACHE_NVRTC, it is used, and keys apart from the genuine build).
TEST_F(CliCompilerLibrariesTest, APatchedLibnvrtcUnderTheGenuineBuildIdIsAnotherCompilerAndAHostileOneIsRefused) {
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  if (!located) GTEST_SKIP() << "no NVRTC file here";
  const auto version = nvrtc_version_from_files(located->path);
  if (!version) GTEST_SKIP() << "the NVRTC found has no single builtins file beside it";
  const fs::path private_lib = dir() / "private" / tool_soname(ToolkitTool::nvrtc);
  testing::copy_library(located->path, private_lib, testing::Build::patched);
  fs::copy_file(nvrtc_builtins_file(located->path, *version), nvrtc_builtins_file(private_lib, *version));
  EXPECT_EQ(read_build_id(private_lib), read_build_id(located->path));
  const auto genuine = nvrtc_file_fingerprint(located->path, *version);
  const auto patched = nvrtc_file_fingerprint(private_lib, *version);
  ASSERT_TRUE(genuine && patched);
  EXPECT_NE(*patched, *genuine);

  const fs::path venv = dir() / "hostile-venv";
  const fs::path lib = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / ("cu" + std::to_string(toolkit_major())) / "lib";
  fs::create_directories(lib);
  std::ofstream(venv / "pyvenv.cfg") << "home = /usr/bin\n";
  fs::copy_file(private_lib, lib / private_lib.filename());
  fs::copy_file(nvrtc_builtins_file(private_lib, *version), nvrtc_builtins_file(lib / private_lib.filename(), *version));
  fs::permissions(lib, fs::perms::all, fs::perm_options::replace);  // 0777
  if (::geteuid() == 0) {
    if (::chown(lib.c_str(), 65534, 65534) != 0) GTEST_SKIP() << "cannot give the directory to another user";
  }
  const std::vector<std::string> warm = {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90",
                                         "--jobs", "2", "--json"};
  const CliOutcome refused = testing::run_cli(dir(), [&] {
    std::vector<std::string> full = {"--cache-dir", m_root.string()};
    full.insert(full.end(), warm.begin(), warm.end());
    return full;
  }(), {"VIRTUAL_ENV=" + venv.string()}, {"JITCACHE_DIR=", "JITCACHE_NVRTC=", "CONDA_PREFIX=", "PYTHONHOME="});
  ASSERT_EQ(refused.code, 0) << refused.out << refused.err;
  const std::string planted = (fs::canonical(lib) / private_lib.filename()).string();
  EXPECT_TRUE(has(refused.err, "not using the compiler library " + planted)) << refused.err;
  EXPECT_TRUE(has(refused.err, "0777")) << refused.err;
  // Keyed with the genuine build: the same keys as a warm with the toolkit's NVRTC.
  const CliOutcome again = run_with(warm, {});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(parse(again)["compiled"], 0) << again.out;
  // Named in a private directory, the patched copy is used, and is another compiler.
  const CliOutcome other = run_with(warm, {"JITCACHE_NVRTC=" + private_lib.string()});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_EQ(parse(other)["compiled"], parse(other)["variants_needed"]) << other.out;
  // Named in the hostile directory, it is refused: JITCACHE_NVRTC is the only candidate.
  const CliOutcome named = run_with(warm, {"JITCACHE_NVRTC=" + planted});
  EXPECT_EQ(named.code, 2) << named.out << named.err;
  EXPECT_TRUE(has(named.err, planted)) << named.err;
  // The entries the patched build compiled are never served to the genuine one, and the
  // audit, run with the genuine NVRTC, knows them (the memo holds the digest of each file
  // this cache has seen); once that record is gone, nothing vouches for the patched build:
  // its entries are superseded by the genuine build's of the same kernels.
  const CliOutcome audit = run_with({"audit", "--json"}, {});
  EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
  ASSERT_TRUE(fs::remove(m_root / "compiler-fingerprints.json"));
  const CliOutcome unknown = run_with({"audit", "--json"}, {});
  EXPECT_EQ(unknown.code, 1) << unknown.out << unknown.err;
  std::size_t flagged = 0;
  const json findings = parse(unknown)["findings"];
  for (const json& f : findings) {
    EXPECT_EQ(f["kind"], "superseded") << f.dump();
    EXPECT_TRUE(has(f["explanation"].get<std::string>(), *patched)) << f.dump();
    ++flagged;
  }
  EXPECT_EQ(flagged, 4u) << unknown.out;
}

// No NVRTC where it is looked for: a compile is an error naming the places searched and
// the package that provides it.
TEST_F(CliCompilerLibrariesTest, NoNvrtcIsAnErrorNamingThePlacesAndThePackage) {
  const fs::path missing = dir() / "nowhere" / "libnvrtc.so.13";
  const CliOutcome o = run_with(
      {"compile", "--source", (testing::k_golden / "axpy.cu").string(), "--entry", "axpy", "--arch", "sm_90", "--json"},
      {"JITCACHE_NVRTC=" + missing.string()});
  EXPECT_NE(o.code, 0) << o.out;
  EXPECT_TRUE(has(o.err, missing.string())) << o.err;
  EXPECT_TRUE(has(o.err, "pip install nvidia-cuda-nvrtc")) << o.err;
}

}  // namespace
}  // namespace jitcache
