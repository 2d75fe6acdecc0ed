#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jitcache/log.hpp"

namespace jitcache {
namespace {

TEST(Log, SinkReceivesLinesAtOrAboveLevel) {
  std::vector<std::pair<LogLevel, std::string>> lines;
  set_log_sink([&](LogLevel level, std::string_view m) { lines.emplace_back(level, std::string(m)); });
  set_log_level(LogLevel::info);
  log_debug("hidden");
  log_info("shown");
  log_warning("also shown");
  set_log_sink(nullptr);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].first, LogLevel::info);
  EXPECT_EQ(lines[0].second, "shown");
  EXPECT_EQ(lines[1].first, LogLevel::warning);
}

// Issue 10 item 11: a path with a newline split one message into two lines.
TEST(Log, ControlCharactersAreEscapedSoAMessageStaysOneLine) {
  std::vector<std::string> lines;
  set_log_sink([&](LogLevel, std::string_view m) { lines.emplace_back(m); });
  set_log_level(LogLevel::info);
  static constexpr char k_message[] = "outer scales for /ck\npt\r\t\x01\x7f: ok\0end";
  log_info(std::string_view(k_message, sizeof k_message - 1));
  log_info("plain /path/with spaces and \xc3\xa9");
  set_log_sink(nullptr);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "outer scales for /ck\\x0apt\\x0d\\x09\\x01\\x7f: ok\\x00end");
  EXPECT_EQ(lines[1], "plain /path/with spaces and \xc3\xa9");  // UTF-8 passes unchanged
}

TEST(Log, StderrLinesAreEscapedToo) {
  set_log_level(LogLevel::info);
  ::testing::internal::CaptureStderr();
  log_warning("a\nb");
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(text, "jitcache WARNING: a\\x0ab\n");
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(parse_log_level("WARNING"), LogLevel::warning);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  EXPECT_EQ(parse_log_level("verbose"), std::nullopt);
}

}  // namespace
}  // namespace jitcache
