// parse_redis_url: every form JITCACHE_REMOTE may take, every way it can be wrong, and
// that a password never shows in display() or in an error message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "remote/redis_url.hpp"
#include "support/text.hpp"
#include "test_support.hpp"

namespace jitcache::remote {
namespace {

RedisUrl parsed(std::string_view text) {
  auto url = parse_redis_url(text, "JITCACHE_REMOTE");
  EXPECT_TRUE(url.has_value()) << text << ": " << (url ? "" : url.error().to_string());
  return url ? *url : RedisUrl{};
}

// A URL that parses, and every part of what it parses to.
struct GoodUrl {
  const char* text;
  const char* user;
  const char* password;
  const char* host;
  int port;
  int db;
  const char* display;  // the password as ***
};

TEST(RedisUrlTest, EveryFormParsesToItsParts) {
  const std::vector<GoodUrl> cases = {
      // A host alone takes the default port and database.
      {"redis://cache.example", "", "", "cache.example", 6379, 0, "redis://cache.example:6379"},
      {"redis://10.0.0.7:7000/3", "", "", "10.0.0.7", 7000, 3, "redis://10.0.0.7:7000/3"},
      {"redis://h:1", "", "", "h", 1, 0, "redis://h:1"},
      {"redis://h:65535", "", "", "h", 65535, 0, "redis://h:65535"},
      {"redis://h/0", "", "", "h", 6379, 0, "redis://h:6379"},
      // A trailing slash names no database: the default one.
      {"redis://h:6380/", "", "", "h", 6380, 0, "redis://h:6380"},
      {"redis://alice@h:6380", "alice", "", "h", 6380, 0, "redis://alice@h:6380"},
      {"redis://alice:s3cret@h:6380/2", "alice", "s3cret", "h", 6380, 2, "redis://alice:***@h:6380/2"},
      // A password without a user is for the default user.
      {"redis://:s3cret@127.0.0.1:6390", "", "s3cret", "127.0.0.1", 6390, 0, "redis://:***@127.0.0.1:6390"},
      {"redis://[::1]:6380", "", "", "::1", 6380, 0, "redis://[::1]:6380"},
      {"redis://[fe80::1:2]/5", "", "", "fe80::1:2", 6379, 5, "redis://[fe80::1:2]:6379/5"},
      // Percent escapes are decoded in the user and the password.
      {"redis://svc%2Djit:p%40ss%3aw%2Fd%25@h", "svc-jit", "p@ss:w/d%", "h", 6379, 0, "redis://svc-jit:***@h:6379"},
      // An unencoded '@' in the password: the user info ends at the last '@'.
      {"redis://bob:p@ss@w0rd@h:7001", "bob", "p@ss@w0rd", "h", 7001, 0, "redis://bob:***@h:7001"},
  };
  for (const GoodUrl& c : cases) {
    SCOPED_TRACE(c.text);
    const RedisUrl url = parsed(c.text);
    EXPECT_EQ(url.user, c.user);
    EXPECT_EQ(url.password, c.password);
    EXPECT_EQ(url.host, c.host);
    EXPECT_EQ(url.port, c.port);
    EXPECT_EQ(url.db, c.db);
    EXPECT_EQ(url.display(), c.display);
  }
}

struct BadUrl {
  const char* text;
  const char* says;  // a part of the message naming what is wrong
};

TEST(RedisUrlTest, EveryMalformedUrlIsRefusedNamingTheSourceAndThePart) {
  const std::vector<BadUrl> cases = {
      {"http://h:6379", "unsupported scheme 'http'"},
      {"rediss://h:6379", "unsupported scheme 'rediss'"},
      {"h:6379", "not a redis:// URL"},
      {"", "not a redis:// URL"},
      {"redis://", "no host"},
      {"redis://:6379", "no host"},
      {"redis://user:pw@", "no host"},
      {"redis://user:pw@:6379/1", "no host"},
      {"redis://[]:6379", "no host"},
      {"redis://h:0", "port '0'"},
      {"redis://h:65536", "port '65536'"},
      {"redis://h:abc", "port 'abc'"},
      {"redis://h:-1", "port '-1'"},
      {"redis://h:63 79", "port '63 79'"},
      {"redis://h:", "an empty port"},
      {"redis://[::1]:", "an empty port"},
      {"redis://[::1", "closing ']'"},
      {"redis://[::1]x", "after the IPv6 address"},
      {"redis://h/abc", "database 'abc'"},
      {"redis://h/-1", "database '-1'"},
      {"redis://h/1/2", "database '1/2'"},
      {"redis://h/99999999", "database '99999999'"},
      {"redis://us%4@h", "user name has a malformed %-escape"},
      {"redis://u%zz@h", "user name has a malformed %-escape"},
      {"redis://u:pw%g1@h", "password has a malformed %-escape"},
      {"redis://u:pw%@h", "password has a malformed %-escape"},
      {"redis://h st", "character that no host name has"},
  };
  for (const BadUrl& c : cases) {
    auto url = parse_redis_url(c.text, "JITCACHE_REMOTE");
    ASSERT_FALSE(url.has_value()) << "accepted: '" << c.text << "'";
    EXPECT_EQ(url.error().code, ErrorCode::invalid_input) << c.text;
    EXPECT_NE(url.error().message.find("JITCACHE_REMOTE: "), std::string::npos) << url.error().message;
    EXPECT_NE(url.error().message.find(c.says), std::string::npos)
        << "'" << c.text << "' gave: " << url.error().message;
  }
}

TEST(RedisUrlTest, ThePasswordIsInNoErrorMessageAndNotInDisplay) {
  const std::string secret = "Hunter2SecretPw";
  const std::vector<std::string> bad = {
      "redis://u:" + secret + "@h:0",
      "redis://u:" + secret + "@h:abc",
      "redis://u:" + secret + "@h/xyz",
      "redis://u:" + secret + "@",
      "redis://u:" + secret + "@[::1",
      "redis://u:" + secret + "%zz@h",
      "redis://:" + secret + "@h:99999",
  };
  for (const std::string& text : bad) {
    auto url = parse_redis_url(text, "--remote");
    ASSERT_FALSE(url.has_value()) << text;
    EXPECT_EQ(url.error().to_string().find(secret), std::string::npos) << url.error().to_string();
    EXPECT_NE(url.error().message.find("--remote"), std::string::npos) << url.error().message;
  }
  for (const std::string& text : {"redis://u:" + secret + "@h", "redis://:" + secret + "@[::1]:7/2",
                                  "redis://u:" + secret + "@host@h"}) {
    const RedisUrl url = parsed(text);
    EXPECT_NE(url.password.find(secret), std::string::npos) << text;
    EXPECT_EQ(url.display().find(secret), std::string::npos) << url.display();
    EXPECT_NE(url.display().find(":***@"), std::string::npos) << url.display();
  }
}

// A password holding '/', '@' and ':' unencoded (issue 24: the '/' used to end the
// authority early, so the rest of the password was quoted as a port or a database in the
// error, which reached the CLI and the engine log). The parser takes it whole; a malformed
// URL around it names the broken part and quotes no piece of it; and the redaction used by
// `jitcache env` hides exactly what the parser sends as the password.
TEST(RedisUrlTest, APasswordWithSlashAtAndColonIsParsedWholeAndNeverQuoted) {
  const std::string secret = "Qz7sekret/Vx9part@Wm4tail:Kp2end";
  const std::vector<std::string> pieces = {"Qz7sekret", "Vx9part", "Wm4tail", "Kp2end"};
  auto leaks = [&](const std::string& text) {
    std::string found;
    for (const std::string& piece : pieces)
      if (text.find(piece) != std::string::npos) found += piece + " ";
    return found;
  };
  for (const std::string& text : {"redis://jc:" + secret + "@h:7001/2", "redis://:" + secret + "@[::1]:7001/2"}) {
    const RedisUrl url = parsed(text);
    EXPECT_EQ(url.password, secret) << text;
    EXPECT_EQ(url.port, 7001);
    EXPECT_EQ(url.db, 2);
    EXPECT_EQ(leaks(url.display()), "") << url.display();
    const std::string redacted = text::redact_url_password(text);
    EXPECT_EQ(leaks(redacted), "") << redacted;
    EXPECT_NE(redacted.find(":***@"), std::string::npos) << redacted;
    EXPECT_NE(redacted.find(":7001/2"), std::string::npos) << "the rest stays readable: " << redacted;
  }
  // Whether the text still has a host after its password: without one, no reader can tell
  // where the password ends, so only the parser's errors are held to quote none of it.
  const std::vector<std::pair<std::string, bool>> bad = {
      {"redis://jc:" + secret + "@h:notaport", true},
      {"redis://jc:" + secret + "@h:7001/db", true},
      {"redis://jc:" + secret + "@", true},
      {"redis://jc:" + secret + "%zz@h", true},
      {"rediss://jc:" + secret + "@h", true},
      {"jc:" + secret + "@h:6379", true},
      {"redis:/jc:" + secret + "@h", true},
      {"redis://jc:" + secret, false},
      {"jc:" + secret + "://h", false},
  };
  for (const auto& [text, has_host] : bad) {
    auto url = parse_redis_url(text, "JITCACHE_REMOTE");
    ASSERT_FALSE(url.has_value()) << "accepted: " << text;
    EXPECT_EQ(leaks(url.error().to_string()), "") << url.error().to_string();
    if (has_host) {
      EXPECT_EQ(leaks(text::redact_url_password(text)), "") << text::redact_url_password(text);
    }
  }
}

}  // namespace
}  // namespace jitcache::remote
