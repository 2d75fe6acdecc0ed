// The one factory of the kernel cache (runtime/compile/open_kernel_cache.hpp): the store
// under the directory, the compiler's fingerprint memo beside it, a KernelCache over
// both; an unusable directory is an error, or a memory-only store that says why.
#include <sys/stat.h>

#include "runtime/compile/open_kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

class OpenKernelCacheTest : public jitcache::testing::TempDirTest {
 protected:
  // A directory the store refuses: group- and world-writable.
  fs::path unusable_dir() const {
    const fs::path path = dir() / "shared";
    fs::create_directories(path);
    ::chmod(path.c_str(), 0777);
    return path;
  }
};

TEST_F(OpenKernelCacheTest, OpensTheStoreTheCompilerAndTheKernelCacheTogether) {
  KernelCacheOptions options;
  options.cache_dir = dir() / "cache";
  options.store.max_bytes = 1 << 20;
  auto opened = open_kernel_cache(options);
  ASSERT_OK(opened);
  EXPECT_EQ(opened->dir, dir() / "cache");
  EXPECT_FALSE(opened->unusable);
  ASSERT_TRUE(opened->store && opened->compiler && opened->kernels);
  EXPECT_EQ(opened->store->root(), opened->dir);
  EXPECT_EQ(opened->store->mode(), cache::StoreMode::read_write);
  auto stats = opened->store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->max_bytes, 1u << 20) << "the store options reach the store";
  // The compiler remembers its fingerprint in the cache directory.
  ASSERT_OK(opened->compiler->fingerprint());
  EXPECT_TRUE(fs::exists(opened->dir / k_fingerprint_memo_name));
  // The kernel cache works over the two: a probe of an empty cache finds nothing.
  auto found = opened->kernels->find(
      KernelSpec{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_90"}});
  ASSERT_OK(found);
  EXPECT_FALSE(*found);
}

TEST_F(OpenKernelCacheTest, AnUnusableDirectoryIsAnErrorByDefault) {
  KernelCacheOptions options;
  options.cache_dir = unusable_dir();
  auto opened = open_kernel_cache(options);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().message.find(options.cache_dir->string()), std::string::npos)
      << opened.error().to_string();
}

TEST_F(OpenKernelCacheTest, AnUnusableDirectoryCanFallBackToMemoryOnly) {
  KernelCacheOptions options;
  options.cache_dir = unusable_dir();
  options.unusable = UnusableCache::memory_only;
  auto opened = open_kernel_cache(options);
  ASSERT_OK(opened);
  ASSERT_TRUE(opened->unusable);
  EXPECT_NE(opened->unusable->message.find(options.cache_dir->string()), std::string::npos);
  EXPECT_EQ(opened->dir, options.cache_dir) << "the directory that was refused";
  EXPECT_EQ(opened->store->mode(), cache::StoreMode::memory_only);
  ASSERT_TRUE(opened->compiler && opened->kernels);
  // A refused directory is not written to: no fingerprint memo lands in it.
  ASSERT_OK(opened->compiler->fingerprint());
  EXPECT_FALSE(fs::exists(*options.cache_dir / k_fingerprint_memo_name));
}

// An empty path given is the caller's mistake: even a caller that accepts a memory-only
// store (the runtime of an engine) gets the error, and no directory is opened.
TEST_F(OpenKernelCacheTest, AnEmptyDirectoryIsAnErrorEvenForMemoryOnly) {
  jitcache::testing::ScopedEnv env("JITCACHE_DIR", (dir() / "env-cache").string());
  for (const UnusableCache unusable : {UnusableCache::fail, UnusableCache::memory_only}) {
    KernelCacheOptions options;
    options.cache_dir = fs::path();
    options.unusable = unusable;
    auto opened = open_kernel_cache(options);
    ASSERT_FALSE(opened) << "opened " << opened->dir;
    EXPECT_EQ(opened.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(opened.error().message.find("cache_dir"), std::string::npos) << opened.error().to_string();
  }
  EXPECT_FALSE(fs::exists(dir() / "env-cache"));
}

}  // namespace
}  // namespace jitcache
