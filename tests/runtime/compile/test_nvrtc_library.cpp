// NVRTC opened at run time (runtime/compile/nvrtc_library.hpp), the search for the compiler
// libraries (toolkit_search.hpp) and the build-id fingerprints: the same build in two
// directories has one fingerprint, another build another one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "build_id_copy.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/elf_build_id.hpp"
#include "runtime/compile/nvjitlink_library.hpp"
#include "runtime/compile/nvrtc_library.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using testing::Build;
using testing::ScopedEnv;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class NvrtcLibraryTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    auto nvrtc = nvrtc_library();
    ASSERT_TRUE(nvrtc) << nvrtc.error().to_string();
    m_nvrtc = *nvrtc;
    m_version = m_nvrtc->version();
  }

  // libnvrtc and its builtins copied into `to`, either of them as another build.
  fs::path copy_nvrtc(const fs::path& to, Build nvrtc, Build builtins) const {
    const fs::path& file = m_nvrtc->library.file;
    copy_library(file, to / file.filename(), nvrtc);
    copy_library(nvrtc_builtins_file(file, m_version), nvrtc_builtins_file(to / file.filename(), m_version), builtins);
    return to / file.filename();
  }

  const NvrtcLibrary* m_nvrtc = nullptr;
  std::string m_version;
};

TEST_F(NvrtcLibraryTest, TheBuildIdIsReadFromTheFile) {
  const auto id = read_build_id(m_nvrtc->library.file);
  ASSERT_TRUE(id) << m_nvrtc->library.file << " has no build-id note";
  EXPECT_GE(id->size(), 16u);
  EXPECT_EQ(id->find_first_not_of("0123456789abcdef"), std::string::npos) << *id;
  // Not ELF, empty, truncated or missing: no build-id, no error.
  std::ofstream(dir() / "text") << "not an ELF file";
  std::ofstream(dir() / "empty");
  {
    std::ifstream in(m_nvrtc->library.file, std::ios::binary);
    std::string head(64, '\0');
    in.read(head.data(), 64);
    std::ofstream(dir() / "truncated", std::ios::binary) << head;
  }
  for (const char* name : {"text", "empty", "truncated", "missing"}) EXPECT_FALSE(read_build_id(dir() / name)) << name;
}

// NVRTC opens its builtins by soname; the loader would take them from wherever its search
// finds them first (a toolkit in ld.so.cache, say). The ones beside libnvrtc, which the
// fingerprint hashes, are loaded with it and are the only builtins mapped.
TEST_F(NvrtcLibraryTest, TheBuiltinsBesideNvrtcAreTheOnesMapped) {
  ASSERT_TRUE(make_nvrtc_compiler()->fingerprint());
  const fs::path beside = fs::canonical(nvrtc_builtins_file(m_nvrtc->library.file, m_version));
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> mapped;
  for (std::string line; std::getline(maps, line);)
    if (const auto at = line.find('/'); at != std::string::npos && has(line, "libnvrtc-builtins"))
      mapped.insert(fs::canonical(line.substr(at)).string());
  EXPECT_EQ(mapped, std::set<std::string>{beside.string()});
}

TEST_F(NvrtcLibraryTest, TheSameBuildInTwoDirectoriesHasOneFingerprint) {
  const fs::path copy = copy_nvrtc(dir() / "elsewhere", Build::same, Build::same);
  const auto here = nvrtc_file_fingerprint(m_nvrtc->library.file, m_version);
  ASSERT_TRUE(here);
  EXPECT_EQ(nvrtc_file_fingerprint(copy, m_version), here);
  // ... which is the compiler's fingerprint: no test compile, and no place, in it.
  EXPECT_EQ(make_nvrtc_compiler()->fingerprint().value_or(""), *here);
}

TEST_F(NvrtcLibraryTest, AnotherBuildOfNvrtcOrOfItsBuiltinsHasAnotherFingerprint) {
  const auto here = nvrtc_file_fingerprint(m_nvrtc->library.file, m_version);
  ASSERT_TRUE(here);
  const fs::path other_nvrtc = copy_nvrtc(dir() / "a", Build::other, Build::same);
  const fs::path other_builtins = copy_nvrtc(dir() / "b", Build::same, Build::other);
  ASSERT_NE(read_build_id(other_nvrtc), read_build_id(m_nvrtc->library.file));
  const auto a = nvrtc_file_fingerprint(other_nvrtc, m_version);
  const auto b = nvrtc_file_fingerprint(other_builtins, m_version);
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_NE(*a, *here);
  EXPECT_NE(*b, *here);
  EXPECT_NE(*a, *b);
  // The version is part of it too; a library without builtins beside it is yet another.
  EXPECT_NE(nvrtc_file_fingerprint(m_nvrtc->library.file, "99.9"), here);
  fs::remove(nvrtc_builtins_file(other_builtins, m_version));
  EXPECT_NE(nvrtc_file_fingerprint(other_builtins, m_version), b);
}

// The version is told by the builtins' name beside libnvrtc, without loading it; when the
// files cannot tell (no builtins, two versions), nothing is guessed.
TEST_F(NvrtcLibraryTest, TheVersionIsToldByTheBuiltinsBesideIt) {
  EXPECT_EQ(nvrtc_version_from_files(m_nvrtc->library.file), m_version);
  const fs::path copy = copy_nvrtc(dir() / "copy", Build::same, Build::same);
  EXPECT_EQ(nvrtc_version_from_files(copy), m_version);
  std::ofstream(copy.parent_path() / ("libnvrtc-builtins.so." + std::to_string(toolkit_major()) + ".99"));
  EXPECT_FALSE(nvrtc_version_from_files(copy));
  fs::create_directories(dir() / "alone");
  fs::copy_file(copy, dir() / "alone" / copy.filename());
  EXPECT_FALSE(nvrtc_version_from_files(dir() / "alone" / copy.filename()));
}

TEST_F(NvrtcLibraryTest, NvJitLinkIsWhatItsBytesAreToo) {
  auto jl = nvjitlink_library();
  if (!jl) GTEST_SKIP() << jl.error().to_string();
  const auto digest = file_content_digest((*jl)->library.file);
  ASSERT_TRUE(digest);
  EXPECT_EQ((*jl)->identity, "nvjitlink " + (*jl)->version() + "; content xxh3-128 " + *digest);
  const fs::path same = dir() / "same" / (*jl)->library.file.filename();
  const fs::path other = dir() / "other" / (*jl)->library.file.filename();
  copy_library((*jl)->library.file, same, Build::same);
  copy_library((*jl)->library.file, other, Build::other);
  auto a = load_nvjitlink({{same.string(), "a copy"}});
  auto b = load_nvjitlink({{other.string(), "another build"}});
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(fingerprint_digest(a->identity), *nvjitlink_fingerprint());
  EXPECT_NE(fingerprint_digest(b->identity), *nvjitlink_fingerprint());
}

// ----- the search -----

class ToolkitSearchTest : public testing::TempDirTest {
 protected:
  ScopedEnv m_env;
};

TEST_F(ToolkitSearchTest, TheVariableIsTheOnlyCandidateAndAMissingFileIsAnErrorNamingIt) {
  const fs::path missing = dir() / "no" / "libnvrtc.so.13";
  m_env.set("JITCACHE_NVRTC", missing.string());
  const auto candidates = toolkit_candidates(ToolkitTool::nvrtc);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].path, missing.string());
  EXPECT_EQ(candidates[0].origin, "JITCACHE_NVRTC");
  EXPECT_FALSE(locate_toolkit_file(ToolkitTool::nvrtc));
  auto loaded = load_nvrtc(candidates);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::unavailable);
  EXPECT_TRUE(has(loaded.error().message, missing.string())) << loaded.error().to_string();
  EXPECT_TRUE(has(loaded.error().message, "pip install " + tool_pip_package(ToolkitTool::nvrtc)))
      << loaded.error().to_string();
}

// Without the variable: every place, the Python environment's pip package before the
// toolkit, and the soname last; the error names every one of them.
TEST_F(ToolkitSearchTest, ThePipPackageOfTheEnvironmentComesBeforeTheToolkit) {
  m_env.unset("JITCACHE_NVRTC");
  const fs::path venv = dir() / "venv";
  const int major = toolkit_major();
  const fs::path lib = venv / "lib" / "python3.11" / "site-packages" / "nvidia" /
                       (major >= 13 ? "cu" + std::to_string(major) + "/lib" : std::string("cuda_nvrtc/lib"));
  fs::create_directories(lib);
  std::ofstream(lib / tool_soname(ToolkitTool::nvrtc)) << "stands for the pip package's NVRTC";
  const fs::path cuda = dir() / "cuda";
  fs::create_directories(cuda / "lib64");
  std::ofstream(cuda / "lib64" / tool_soname(ToolkitTool::nvrtc)) << "stands for a toolkit's NVRTC";
  m_env.set("VIRTUAL_ENV", venv.string());
  m_env.set("CUDA_HOME", cuda.string());
  m_env.set("LD_LIBRARY_PATH", (dir() / "ld").string() + "::/nonexistent");
  const auto candidates = toolkit_candidates(ToolkitTool::nvrtc);
  ASSERT_GE(candidates.size(), 3u);
  EXPECT_EQ(candidates.front().path, (lib / tool_soname(ToolkitTool::nvrtc)).string());
  EXPECT_TRUE(has(candidates.front().origin, "VIRTUAL_ENV")) << candidates.front().origin;
  EXPECT_EQ(candidates.back().path, tool_soname(ToolkitTool::nvrtc));
  std::size_t pip = candidates.size(), toolkit = candidates.size(), ld = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].path == (lib / tool_soname(ToolkitTool::nvrtc)).string()) pip = i;
    if (candidates[i].path == (cuda / "lib64" / tool_soname(ToolkitTool::nvrtc)).string()) toolkit = i;
    if (candidates[i].path == (dir() / "ld" / tool_soname(ToolkitTool::nvrtc)).string()) ld = i;
  }
  ASSERT_LT(toolkit, candidates.size()) << "CUDA_HOME is searched";
  ASSERT_LT(ld, candidates.size()) << "LD_LIBRARY_PATH is searched";
  EXPECT_LT(pip, toolkit);
  EXPECT_LT(toolkit, ld);
  // Its two directories (the empty entry is none), then the soname.
  EXPECT_EQ(candidates[ld + 1].path, "/nonexistent/" + tool_soname(ToolkitTool::nvrtc));
  EXPECT_EQ(ld + 3, candidates.size());
  // The test's files are not libraries: the search passes over each (never loading it) and
  // goes on to the machine's own places.
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  if (located) {
    EXPECT_FALSE(located->path.starts_with(dir().string())) << located->path;
  }
  // Neither of the test's files loads: the error names each place searched and the package
  // to install. (Only those: the machine's own places and the soname would load.)
  std::vector<ToolkitCandidate> files;
  for (const auto& c : candidates)
    if (c.path.starts_with(dir().string())) files.push_back(c);
  ASSERT_EQ(files.size(), 4u);  // the package, CUDA_HOME's lib64 and lib, LD_LIBRARY_PATH's
  auto loaded = load_nvrtc(files);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::unavailable);
  for (const auto& c : files) EXPECT_TRUE(has(loaded.error().message, c.path + " (" + c.origin + ")")) << c.path;
  EXPECT_TRUE(has(loaded.error().message, "pip install " + tool_pip_package(ToolkitTool::nvrtc)));
  EXPECT_TRUE(has(not_found_message(ToolkitTool::nvrtc, candidates), tool_soname(ToolkitTool::nvrtc) + " (the loader"));
}

TEST_F(ToolkitSearchTest, NvJitLinkAndLibNvvmHaveThePipLayoutsOfTheirPackages) {
  m_env.unset("JITCACHE_NVJITLINK");
  m_env.unset("JITCACHE_NVVM");
  m_env.set("VIRTUAL_ENV", (dir() / "venv").string());
  const std::string site = (dir() / "venv" / "lib" / "python3.12" / "site-packages").string();
  fs::create_directories(site);
  const std::string cu = "nvidia/cu" + std::to_string(toolkit_major());
  const auto first = [](ToolkitTool tool) { return toolkit_candidates(tool).front().path; };
  if (toolkit_major() >= 13) {
    EXPECT_EQ(first(ToolkitTool::nvjitlink), site + "/" + cu + "/lib/libnvJitLink.so." + std::to_string(toolkit_major()));
    EXPECT_EQ(first(ToolkitTool::nvvm), site + "/" + cu + "/lib/libnvvm.so.4");
    bool nvvm_layout = false;
    for (const auto& c : toolkit_candidates(ToolkitTool::nvvm)) nvvm_layout |= c.path == site + "/" + cu + "/nvvm/lib64/libnvvm.so.4";
    EXPECT_TRUE(nvvm_layout);
  }
  m_env.set("JITCACHE_NVVM", "/x/libnvvm.so.4");
  EXPECT_EQ(first(ToolkitTool::nvvm), "/x/libnvvm.so.4");
}

}  // namespace
}  // namespace jitcache
