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

// ---------------------------------------------------------------------------------------
// find_invalid_utf8: the one UTF-8 check (fact values, scales and config JSON).

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_EQ(find_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8(std::string_view("nul \0 inside", 12)), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::nullopt);  // é € 😀
}

// The smallest and largest value of each length, and the neighbours of the surrogates.
TEST(Utf8, AcceptsEveryBoundaryOfEachLength) {
  for (const char* text : {"\x7f",                      // U+007F, last 1-byte
                           "\xc2\x80", "\xdf\xbf",       // U+0080, U+07FF
                           "\xe0\xa0\x80", "\xef\xbf\xbf", // U+0800, U+FFFF
                           "\xed\x9f\xbf", "\xee\x80\x80", // U+D7FF and U+E000, around the surrogates
                           "\xf0\x90\x80\x80",             // U+10000, first 4-byte
                           "\xf4\x8f\xbf\xbf"}) {          // U+10FFFF, the largest code point
    SCOPED_TRACE(::testing::PrintToString(std::string(text)));
    EXPECT_EQ(find_invalid_utf8(text), std::nullopt);
  }
}

TEST(Utf8, RejectsIllFormedSequencesAtTheirOffset) {
  struct Case {
    const char* text;
    std::size_t offset;
    const char* why;
  };
  for (const Case& c : {
           Case{"ab\xff", 2, "never valid"},
           Case{"\xfe", 0, "never valid"},
           Case{"\x80", 0, "lone continuation byte"},
           Case{"a\xbf", 1, "lone continuation byte"},
           Case{"a\xc0\xaf", 1, "overlong '/' in two bytes"},
           Case{"\xc1\xbf", 0, "overlong U+007F"},
           Case{"\xe0\x80\xaf", 0, "overlong '/' in three bytes"},
           Case{"\xe0\x9f\xbf", 0, "overlong U+07FF"},
           Case{"\xf0\x80\x80\xaf", 0, "overlong '/' in four bytes"},
           Case{"\xf0\x8f\xbf\xbf", 0, "overlong U+FFFF"},
           Case{"x\xed\xa0\x80", 1, "surrogate U+D800"},
           Case{"\xed\xbf\xbf", 0, "surrogate U+DFFF"},
           Case{"\xf4\x90\x80\x80", 0, "U+110000, above U+10FFFF"},
           Case{"\xf5\x80\x80\x80", 0, "lead byte F5, above U+10FFFF"},
           Case{"\xf7\xbf\xbf\xbf", 0, "U+1FFFFF"},
           Case{"\xf8\x88\x80\x80\x80", 0, "five-byte form"},
           Case{"ok\xe2\x82", 2, "three-byte sequence cut short at the end"},
           Case{"\xc3", 0, "two-byte sequence cut short at the end"},
           Case{"\xf0\x9f\x98", 0, "four-byte sequence cut short at the end"},
           Case{"\xc3\x28", 0, "bad second byte"},
           Case{"\xe2\x82\x28", 0, "bad third byte"},
           Case{"\xf0\x9f\x98\x28", 0, "bad fourth byte"},
           Case{"\xc3\xa9\xe2\x82\xac!\xc3", 6, "the first bad byte, after good ones"},
       }) {
    SCOPED_TRACE(c.why);
    EXPECT_EQ(find_invalid_utf8(c.text), std::optional<std::size_t>(c.offset));
  }
}

TEST(TextTest, RedactUrlPasswordHidesThePasswordAndKeepsTheRest) {
  struct Case {
    const char* url;
    const char* shown;
  };
  for (const Case& c : {
           Case{"redis://h:6379", "redis://h:6379"},
           Case{"redis://alice@h:6379/2", "redis://alice@h:6379/2"},
           Case{"redis://alice:s3cret@h:6379/2", "redis://alice:***@h:6379/2"},
           Case{"redis://:s3cret@[::1]:7000", "redis://:***@[::1]:7000"},
           Case{"redis://u:a/b@c:d@h:1", "redis://u:***@h:1"},
           Case{"redis://u:@h", "redis://u:***@h"},
           Case{"u:s3cret@h:6379", "u:***@h:6379"},
           Case{"rediss://u:s3cret@h", "rediss://u:***@h"},
           Case{"", ""},
           Case{"not a url", "not a url"},
       })
    EXPECT_EQ(redact_url_password(c.url), c.shown) << c.url;
}

}  // namespace
}  // namespace jitcache::text
