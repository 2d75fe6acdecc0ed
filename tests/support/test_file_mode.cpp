// A file's mode as the refusals of secret files and toolkit libraries print it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "support/file_mode.hpp"

namespace jitcache {
namespace {

TEST(FileMode, PermissionBitsInFourOctalDigits) {
  EXPECT_EQ(mode_text(0), "0000");
  EXPECT_EQ(mode_text(0600), "0600");
  EXPECT_EQ(mode_text(0644), "0644");
  EXPECT_EQ(mode_text(0777), "0777");
}

TEST(FileMode, SetIdAndStickyBitsAreTheFirstDigit) {
  EXPECT_EQ(mode_text(04755), "4755");
  EXPECT_EQ(mode_text(02775), "2775");
  EXPECT_EQ(mode_text(01777), "1777");
  EXPECT_EQ(mode_text(07777), "7777");
}

TEST(FileMode, TheFileTypeIsLeftOut) {
  EXPECT_EQ(mode_text(S_IFREG | 0644), "0644");
  EXPECT_EQ(mode_text(S_IFDIR | 01777), "1777");
  EXPECT_EQ(mode_text(S_IFIFO | 0620), "0620");
}

}  // namespace
}  // namespace jitcache
