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

TEST(Log, ParsesLevels) {
  EXPECT_EQ(parse_log_level("WARNING"), LogLevel::warning);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  EXPECT_EQ(parse_log_level("verbose"), std::nullopt);
}

}  // namespace
}  // namespace jitcache
