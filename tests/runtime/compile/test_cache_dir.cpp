// Cache directory precedence: --cache-dir > JITCACHE_DIR > $XDG_CACHE_HOME/jitcache >
// ~/.cache/jitcache, and never a shared temporary directory by default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/compile/cache_dir.hpp"
#include "test_support.hpp"

namespace jitcache::runtime {
namespace {

// Unsets the variables the resolver reads; the guard restores them afterwards.
class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override { unset_all(); }
  void unset_all() {
    for (const char* name : k_names) m_env.unset(name);
  }
  void set(const char* name, const char* value) { m_env.set(name, value); }

  static constexpr const char* k_names[] = {"JITCACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  jitcache::testing::ScopedEnv m_env;
};

// One environment (nullptr: unset), the explicit argument if any, and where the cache is.
struct Precedence {
  const char* what;
  const char* jitcache_dir;
  const char* xdg_cache_home;
  const char* home;
  std::optional<std::filesystem::path> argument;
  const char* path;
  CacheDirSource source;
};

TEST_F(CacheDirTest, EachPlaceBeatsTheOnesAfterIt) {
  const std::vector<Precedence> cases = {
      {"the explicit argument wins", "/srv/env-cache", "/home/u/.xdg", "/home/u", "/srv/explicit", "/srv/explicit",
       CacheDirSource::argument},
      {"JITCACHE_DIR beats XDG_CACHE_HOME and HOME", "/srv/env-cache", "/home/u/.xdg", "/home/u", std::nullopt,
       "/srv/env-cache", CacheDirSource::jitcache_dir},
      {"XDG_CACHE_HOME beats HOME", nullptr, "/home/u/.xdg", "/home/u", std::nullopt, "/home/u/.xdg/jitcache",
       CacheDirSource::xdg_cache_home},
      {"HOME is the fallback", nullptr, nullptr, "/home/u", std::nullopt, "/home/u/.cache/jitcache",
       CacheDirSource::home},
      // Empty is unset, as the XDG spec says (an empty JITCACHE_DIR is an error, below).
      {"an empty XDG_CACHE_HOME counts as unset", nullptr, "", "/home/u", std::nullopt, "/home/u/.cache/jitcache",
       CacheDirSource::home},
      {"a relative XDG_CACHE_HOME is ignored", nullptr, "relative/cache", "/home/u", std::nullopt,
       "/home/u/.cache/jitcache", CacheDirSource::home},
  };
  for (const Precedence& c : cases) {
    SCOPED_TRACE(c.what);
    unset_all();
    if (c.jitcache_dir) set("JITCACHE_DIR", c.jitcache_dir);
    if (c.xdg_cache_home) set("XDG_CACHE_HOME", c.xdg_cache_home);
    if (c.home) set("HOME", c.home);
    auto dir = resolve_cache_dir(c.argument);
    ASSERT_OK(dir);
    EXPECT_EQ(dir->path, c.path);
    EXPECT_EQ(dir->source, c.source);
  }
  EXPECT_STREQ(to_string(CacheDirSource::jitcache_dir), "JITCACHE_DIR");
}

TEST_F(CacheDirTest, AnEmptyOrBlankJitcacheDirIsAnErrorNamingIt) {
  set("HOME", "/home/u");
  for (const char* value : {"", "   "}) {
    set("JITCACHE_DIR", value);
    auto dir = resolve_cache_dir();
    ASSERT_FALSE(dir) << "'" << value << "' resolved to " << dir->path;
    EXPECT_EQ(dir.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(dir.error().message.find("JITCACHE_DIR"), std::string::npos) << dir.error().to_string();
  }
}

TEST_F(CacheDirTest, AnEmptyExplicitPathIsAnErrorNotTheDefault) {
  set("JITCACHE_DIR", "/srv/env-cache");
  auto dir = resolve_cache_dir(std::filesystem::path());
  ASSERT_FALSE(dir) << "resolved to " << dir->path;
  EXPECT_EQ(dir.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(dir.error().message.find("cache_dir"), std::string::npos) << dir.error().to_string();
  auto absent = resolve_cache_dir(std::nullopt);
  ASSERT_OK(absent);
  EXPECT_EQ(absent->path, "/srv/env-cache");
}

TEST_F(CacheDirTest, RelativeXdgCacheHomeIsIgnored) {
  set("XDG_CACHE_HOME", "relative/cache");
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir();
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/home/u/.cache/jitcache");
}

TEST_F(CacheDirTest, RelativeExplicitPathsBecomeAbsolute) {
  auto dir = resolve_cache_dir(std::filesystem::path("some/where"));
  ASSERT_OK(dir);
  EXPECT_TRUE(dir->path.is_absolute());
  EXPECT_EQ(dir->path, (std::filesystem::current_path() / "some/where").lexically_normal());
  set("JITCACHE_DIR", "rel/env");
  auto env_dir = resolve_cache_dir();
  ASSERT_OK(env_dir);
  EXPECT_TRUE(env_dir->path.is_absolute());
}

TEST_F(CacheDirTest, WithoutHomeFallsBackToThePasswordDatabaseNeverTmp) {
  // HOME unset: the user's home from getpwuid, as ssh and cron sessions need.
  auto dir = resolve_cache_dir();
  if (!dir) {
    EXPECT_EQ(dir.error().code, ErrorCode::unavailable);
    EXPECT_NE(dir.error().message.find("--cache-dir"), std::string::npos);
    return;
  }
  EXPECT_EQ(dir->source, CacheDirSource::home);
  EXPECT_EQ(dir->path.filename(), "jitcache");
  EXPECT_FALSE(dir->path.string().starts_with("/tmp")) << dir->path;
}

}  // namespace
}  // namespace jitcache::runtime
