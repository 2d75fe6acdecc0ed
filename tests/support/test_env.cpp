#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/log.hpp"
#include "support/env.hpp"
#include "test_support.hpp"

namespace jitcache::env {
namespace {

using jitcache::testing::ScopedEnv;

// Runs `check` twice, each time succeeding, and returns the warnings logged meanwhile: a
// problem outside strict mode is warned about once per process, not once per check.
template <class Check>
std::vector<std::string> warnings_of_two_checks(Check check) {
  std::vector<std::string> warnings;
  set_log_sink([&](LogLevel level, std::string_view m) {
    if (level == LogLevel::warning) warnings.emplace_back(m);
  });
  EXPECT_TRUE(check());
  EXPECT_TRUE(check());
  set_log_sink(nullptr);
  return warnings;
}

TEST(EnvRegistry, DeclaresTheIssueVariablesOnceEach) {
  std::vector<std::string> names;
  for (const EnvVar* var : registry()) {
    names.emplace_back(var->name);
    EXPECT_FALSE(var->doc.empty()) << var->name;
  }
  for (const char* required :
       {"JITCACHE_DIR", "JITCACHE_LOG_LEVEL", "JITCACHE_STRICT", "VLLM_NVFP4_MLA_SCALES_FILE"})
    EXPECT_EQ(std::count(names.begin(), names.end(), required), 1) << required;
}

// A URL that may carry a password is marked so, and shown without it (issue 24: `jitcache
// env` printed JITCACHE_REMOTE verbatim); other values are shown as they are.
TEST(EnvRegistry, TheRemoteUrlIsShownWithoutItsPassword) {
  EXPECT_TRUE(jitcache_remote.url_with_password);
  for (const EnvVar* var : registry())
    EXPECT_EQ(var->url_with_password, var == &jitcache_remote) << var->name;
  ScopedEnv remote("JITCACHE_REMOTE", "redis://jc:Qz7/sek@re:t@127.0.0.1:6390/1");
  EXPECT_EQ(get(jitcache_remote), "redis://jc:Qz7/sek@re:t@127.0.0.1:6390/1") << "the value itself is whole";
  EXPECT_EQ(shown_value(jitcache_remote), "redis://jc:***@127.0.0.1:6390/1");
  ScopedEnv dir("JITCACHE_DIR", "/tmp/a:b@c");
  EXPECT_EQ(shown_value(jitcache_dir), "/tmp/a:b@c");
  ScopedEnv unset("JITCACHE_REMOTE_PREFIX", nullptr);
  EXPECT_EQ(shown_value(jitcache_remote_prefix), std::nullopt);
}

TEST(EnvRegistry, BlankValuesReadAsAbsentAndValuesAreTrimmed) {
  ScopedEnv blank("VLLM_NVFP4_MLA_SCALES_FILE", " \t ");
  EXPECT_EQ(get(vllm_nvfp4_mla_scales_file), std::nullopt);
  ScopedEnv padded("JITCACHE_DIR", "  /tmp/x  ");
  EXPECT_EQ(get(jitcache_dir), "/tmp/x");
}

TEST(EnvRegistry, BooleansParseAndBadOnesAreErrors) {
  for (const char* yes : {"1", "true", "YES", "On"}) {
    ScopedEnv v("JITCACHE_STRICT", yes);
    EXPECT_EQ(get_bool(jitcache_strict), true) << yes;
    EXPECT_TRUE(strict_mode());
  }
  for (const char* no : {"0", "false", "No", "off"}) {
    ScopedEnv v("JITCACHE_STRICT", no);
    EXPECT_EQ(get_bool(jitcache_strict), false) << no;
  }
  ScopedEnv bad("JITCACHE_STRICT", "maybe");
  const auto parsed = get_bool(jitcache_strict);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message,
            "JITCACHE_STRICT=maybe: expected a boolean: 1, true, yes, on or 0, false, no, off (any case)");
  EXPECT_FALSE(check_value(jitcache_strict));
}

// Issue 10 item 7: an unparsable JITCACHE_STRICT read as "off" with a warning, so a
// deployment that asked for strictness ran without it.
TEST(EnvRegistry, UnparsableStrictModeIsAnErrorAtStartup) {
  ScopedEnv bad("JITCACHE_STRICT", "maybe");
  const auto strict = strict_mode();
  ASSERT_FALSE(strict);
  EXPECT_EQ(strict.error().code, ErrorCode::invalid_input);
  const auto started = check_startup();
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().code, ErrorCode::invalid_input);
  EXPECT_NE(started.error().message.find("1, true, yes, on or 0, false, no, off"), std::string::npos)
      << started.error().message;
  ScopedEnv unset("JITCACHE_STRICT", nullptr);
  EXPECT_EQ(strict_mode(), false);
  EXPECT_TRUE(check_startup());
}

TEST(EnvRegistry, BadLogLevelWarnsOnceOrFailsInStrictMode) {
  ScopedEnv strict_off("JITCACHE_STRICT", nullptr);
  ScopedEnv bad("JITCACHE_LOG_LEVEL", "bogus");
  const std::vector<std::string> warnings = warnings_of_two_checks([] { return check_startup(); });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("JITCACHE_LOG_LEVEL=bogus: expected a log level"), std::string::npos)
      << warnings[0];

  ScopedEnv strict("JITCACHE_STRICT", "1");
  const auto started = check_startup();
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().code, ErrorCode::invalid_input);
  EXPECT_NE(started.error().message.find("JITCACHE_LOG_LEVEL=bogus"), std::string::npos);
}

TEST(EnvRegistry, LogLevelValuesAreChecked) {
  ScopedEnv good("JITCACHE_LOG_LEVEL", "warning");
  EXPECT_TRUE(check_value(jitcache_log_level));
  ScopedEnv bad("JITCACHE_LOG_LEVEL", "loud");
  const auto checked = check_value(jitcache_log_level);
  ASSERT_FALSE(checked);
  EXPECT_NE(checked.error().message.find("JITCACHE_LOG_LEVEL=loud"), std::string::npos);
}

TEST(EnvRegistry, UnknownPrefixedVariablesGetSuggestions) {
  const std::vector<std::string> entries = {
      "PATH=/usr/bin",           "JITCACHE_DIR=/x",        "JITCACHE_DIRR=/y",
      "JITCACHE_STRCT=1",        "JITCACHE_LOGLEVEL=info", "JITCACHE_SOMETHING_ELSE=1",
      "VLLM_NVFP4_MLA_SCALE_FILE=/s", "VLLM_OTHER=1"};
  const auto unknown = unknown_prefixed_vars(entries);
  ASSERT_EQ(unknown.size(), 5u);
  EXPECT_EQ(unknown[0].name, "JITCACHE_DIRR");
  EXPECT_EQ(unknown[0].suggestion, "JITCACHE_DIR");
  EXPECT_EQ(unknown[1].suggestion, "JITCACHE_STRICT");
  EXPECT_EQ(unknown[2].suggestion, "JITCACHE_LOG_LEVEL");
  EXPECT_EQ(unknown[3].name, "JITCACHE_SOMETHING_ELSE");
  EXPECT_EQ(unknown[3].suggestion, "");  // nothing close: no guess
  EXPECT_EQ(unknown[4].suggestion, "VLLM_NVFP4_MLA_SCALES_FILE");
}

TEST(EnvRegistry, UnknownVariableWarnsOnceOrFailsInStrictMode) {
  ScopedEnv typo("JITCACHE_DIRECTORY_X", "1");
  ScopedEnv strict_off("JITCACHE_STRICT", nullptr);
  const std::vector<std::string> warnings = warnings_of_two_checks([] { return check_unknown_vars(); });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("JITCACHE_DIRECTORY_X is not a declared jitcache variable"), std::string::npos);

  ScopedEnv strict("JITCACHE_STRICT", "1");
  const auto checked = check_unknown_vars();
  ASSERT_FALSE(checked);
  // A value problem, not a bad handle: the C ABI reserves INVALID_ARGUMENT for those.
  EXPECT_EQ(checked.error().code, ErrorCode::invalid_input);
  EXPECT_NE(checked.error().message.find("JITCACHE_DIRECTORY_X"), std::string::npos);
  EXPECT_NE(checked.error().message.find("strict mode"), std::string::npos);
}

TEST(EnvRegistry, UnsignedNumbersParseWithTheirDefaults) {
  {
    ScopedEnv unset("JITCACHE_REMOTE_TIMEOUT_MS", nullptr);
    EXPECT_EQ(get_uint(jitcache_remote_timeout_ms), 500u) << "the registered default";
  }
  {
    ScopedEnv unset("JITCACHE_REMOTE_MAX_ENTRY_BYTES", nullptr);
    EXPECT_EQ(get_uint(jitcache_remote_max_entry_bytes), 16777216u);
  }
  for (const auto& [text, value] : std::vector<std::pair<const char*, std::uint64_t>>{
           {"0", 0}, {"7", 7}, {" 250 ", 250}, {"007", 7}, {"9007199254740992", std::uint64_t{1} << 53}}) {
    ScopedEnv v("JITCACHE_REMOTE_LEASE_MS", text);
    auto parsed = get_uint(jitcache_remote_lease_ms);
    ASSERT_TRUE(parsed) << text << ": " << parsed.error().to_string();
    EXPECT_EQ(*parsed, value) << text;
    EXPECT_TRUE(check_value(jitcache_remote_lease_ms)) << text;
  }
  // A blank value reads as unset: the default.
  ScopedEnv blank("JITCACHE_REMOTE_WAIT_MS", "   ");
  EXPECT_EQ(get_uint(jitcache_remote_wait_ms), 60000u);
}

TEST(EnvRegistry, BadUnsignedNumbersAreErrorsNamingTheVariable) {
  for (const char* bad : {"-1", "+5", "1.5", "12ms", "0x10", "1e3", "9007199254740993", "99999999999999999999",
                          "1 000"}) {
    ScopedEnv v("JITCACHE_REMOTE_BREAKER_MS", bad);
    auto parsed = get_uint(jitcache_remote_breaker_ms);
    ASSERT_FALSE(parsed) << bad << " gave " << *parsed;
    EXPECT_EQ(parsed.error().code, ErrorCode::invalid_input);
    EXPECT_NE(parsed.error().message.find(std::string("JITCACHE_REMOTE_BREAKER_MS=") + bad), std::string::npos)
        << parsed.error().message;
    EXPECT_NE(parsed.error().message.find("milliseconds"), std::string::npos) << parsed.error().message;
    EXPECT_FALSE(check_value(jitcache_remote_breaker_ms)) << bad;
  }
  ScopedEnv bytes("JITCACHE_REMOTE_MAX_ENTRY_BYTES", "16M");
  auto parsed = get_uint(jitcache_remote_max_entry_bytes);
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.error().message.find("bytes"), std::string::npos) << parsed.error().message;
}

}  // namespace
}  // namespace jitcache::env
