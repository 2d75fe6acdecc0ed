// What makes a compiler library fit to be loaded and keyed (runtime/compile/toolkit_trust.hpp,
// elf_build_id.hpp): a whole ELF shared object of this machine, that no user but the caller
// and root can replace; its identity the digest of its bytes.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/compile/elf_build_id.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

class ToolkitTrustTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
    if (!located) GTEST_SKIP() << "no NVRTC file here";
    m_nvrtc = located->path;
  }
  fs::path m_nvrtc;
};

TEST_F(ToolkitTrustTest, TheToolkitsLibraryIsWholeAndTrusted) {
  EXPECT_EQ(elf_library_problem(m_nvrtc), std::nullopt);
  EXPECT_EQ(library_refusal(m_nvrtc), std::nullopt);
}

// Every cut of the file is refused as truncated before anything maps it: 4 KB, 1 MB,
// half, all but the last 4 KB; 64 bytes is too short for a header.
TEST_F(ToolkitTrustTest, ATruncatedLibraryIsRefusedByItsOwnHeaders) {
  const auto size = fs::file_size(m_nvrtc);
  for (const std::uintmax_t keep : {std::uintmax_t{64}, std::uintmax_t{4096}, std::uintmax_t{1} << 20, size / 2,
                                    size - 4096}) {
    SCOPED_TRACE(keep);
    const fs::path cut = dir() / ("cut-" + std::to_string(keep)) / "libnvrtc.so.13";
    fs::create_directories(cut.parent_path());
    fs::copy_file(m_nvrtc, cut);
    fs::resize_file(cut, keep);
    const auto problem = elf_library_problem(cut);
    ASSERT_TRUE(problem);
    if (keep > 64) EXPECT_NE(problem->find("truncated"), std::string::npos) << *problem;
    const auto refusal = library_refusal(cut);
    ASSERT_TRUE(refusal);
    EXPECT_NE(refusal->find(cut.string()), std::string::npos) << *refusal;
  }
}

TEST_F(ToolkitTrustTest, NotASharedLibraryIsRefused) {
  std::ofstream(dir() / "text") << "not an ELF file at all, but long enough to hold a header of sixty-four bytes.";
  EXPECT_TRUE(elf_library_problem(dir() / "text"));
  EXPECT_TRUE(elf_library_problem(dir()));  // a directory
  EXPECT_TRUE(elf_library_problem(dir() / "missing"));
}

// A library another user could replace: the file or its directory group- or world-writable,
// or owned by another user (as root, the test gives a directory to uid 65534).
TEST_F(ToolkitTrustTest, ALibraryAnotherUserCouldReplaceIsRefused) {
  const fs::path lib_dir = dir() / "lib";
  fs::create_directories(lib_dir);
  const fs::path copy = lib_dir / "libnvrtc.so.13";
  fs::copy_file(m_nvrtc, copy);
  EXPECT_EQ(library_refusal(copy), std::nullopt);
  fs::permissions(copy, fs::perms::group_write, fs::perm_options::add);
  auto why = library_refusal(copy);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("group- or world-writable"), std::string::npos) << *why;
  fs::permissions(copy, fs::perms::group_write, fs::perm_options::remove);
  fs::permissions(lib_dir, fs::perms::others_write, fs::perm_options::add);
  why = library_refusal(copy);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("its directory " + fs::canonical(lib_dir).string()), std::string::npos) << *why;
  fs::permissions(lib_dir, fs::perms::others_write, fs::perm_options::remove);
  // Through a symbolic link, the real file is what is judged.
  fs::create_symlink(copy, dir() / "link.so");
  EXPECT_EQ(library_refusal(dir() / "link.so"), std::nullopt);
  if (::geteuid() != 0) return;
  ASSERT_EQ(::chown(lib_dir.c_str(), 65534, 65534), 0);
  why = library_refusal(copy);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("owned by uid 65534"), std::string::npos) << *why;
}

// The digest follows the bytes: a copy has the genuine one, one changed byte another, and
// a file rewritten in place is hashed again (its stat identity changed).
TEST_F(ToolkitTrustTest, TheContentDigestFollowsTheBytes) {
  const auto genuine = file_content_digest(m_nvrtc);
  ASSERT_TRUE(genuine);
  EXPECT_EQ(genuine->size(), 32u);
  const fs::path copy = dir() / "copy.so";
  fs::copy_file(m_nvrtc, copy);
  EXPECT_EQ(file_content_digest(copy), genuine);
  const auto before = file_stat_identity(copy);
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x42');
  }
  EXPECT_NE(file_stat_identity(copy), before);
  const auto patched = file_content_digest(copy);
  ASSERT_TRUE(patched);
  EXPECT_NE(*patched, *genuine);
  EXPECT_FALSE(file_content_digest(dir() / "missing"));
}

}  // namespace
}  // namespace jitcache
