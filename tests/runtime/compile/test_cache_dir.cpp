// Cache directory precedence: --cache-dir > JITCACHE_DIR > $XDG_CACHE_HOME/jitcache >
// ~/.cache/jitcache, and never a shared temporary directory by default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/compile/cache_dir.hpp"
#include "test_support.hpp"

namespace jitcache::runtime {
namespace {

// Unsets the variables the resolver reads; the guard restores them afterwards.
class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : k_names) m_env.unset(name);
  }
  void set(const char* name, const char* value) { m_env.set(name, value); }

  static constexpr const char* k_names[] = {"JITCACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  jitcache::testing::ScopedEnv m_env;
};

TEST_F(CacheDirTest, ExplicitArgumentWins) {
  set("JITCACHE_DIR", "/srv/env-cache");
  set("XDG_CACHE_HOME", "/home/u/.xdg");
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir(std::filesystem::path("/srv/explicit"));
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/srv/explicit");
  EXPECT_EQ(dir->source, CacheDirSource::argument);
}

TEST_F(CacheDirTest, JitcacheDirBeatsXdgAndHome) {
  set("JITCACHE_DIR", "/srv/env-cache");
  set("XDG_CACHE_HOME", "/home/u/.xdg");
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir();
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/srv/env-cache");
  EXPECT_EQ(dir->source, CacheDirSource::jitcache_dir);
  EXPECT_STREQ(to_string(dir->source), "JITCACHE_DIR");
}

TEST_F(CacheDirTest, XdgCacheHomeBeatsHome) {
  set("XDG_CACHE_HOME", "/home/u/.xdg");
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir();
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/home/u/.xdg/jitcache");
  EXPECT_EQ(dir->source, CacheDirSource::xdg_cache_home);
}

TEST_F(CacheDirTest, HomeIsTheFallback) {
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir();
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/home/u/.cache/jitcache");
  EXPECT_EQ(dir->source, CacheDirSource::home);
}

// XDG_CACHE_HOME empty is unset, as the XDG spec says; JITCACHE_DIR empty is a script's
// unset variable and must not pick the default cache.
TEST_F(CacheDirTest, EmptyXdgCacheHomeCountsAsUnset) {
  set("XDG_CACHE_HOME", "");
  set("HOME", "/home/u");
  auto dir = resolve_cache_dir();
  ASSERT_OK(dir);
  EXPECT_EQ(dir->path, "/home/u/.cache/jitcache");
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
