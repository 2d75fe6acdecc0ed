#include <gtest/gtest.h>

#include "support/text.hpp"

namespace jitcache::text {
namespace {

TEST(Text, EditDistanceCountsTranspositionsAsOne) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("scales", "scale"), 1u);
  EXPECT_EQ(edit_distance("scales", "sclaes"), 1u);  // Levenshtein alone says 2
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);  // optimal string alignment, not full Damerau
  EXPECT_EQ(edit_distance("Scales", "scales"), 1u);
  EXPECT_EQ(edit_distance(ascii_lower("SCALES"), "scales"), 0u);
}

TEST(Text, BlankIsEmptyOrWhitespaceOnly) {
  EXPECT_TRUE(is_blank(""));
  EXPECT_TRUE(is_blank(" \t\r\n\v\f"));
  EXPECT_FALSE(is_blank(" x "));
  EXPECT_EQ(trim("  a b \n"), "a b");
  EXPECT_EQ(trim(" \t "), "");
}

TEST(Text, ControlCharactersAreEscaped) {
  EXPECT_EQ(escape_control("plain"), "plain");
  EXPECT_EQ(escape_control("a\nb\tc\x1f\x7f"), "a\\x0ab\\x09c\\x1f\\x7f");
  EXPECT_EQ(escape_control(std::string_view("\0", 1)), "\\x00");
  EXPECT_EQ(escape_control("\xc3\xa9"), "\xc3\xa9");  // bytes >= 0x80 are UTF-8, kept
  EXPECT_EQ(shown(""), "(empty path)");
  EXPECT_EQ(shown("/a\nb"), "/a\\x0ab");
}

}  // namespace
}  // namespace jitcache::text
