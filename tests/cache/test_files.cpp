// The cache root must be private: created 0700 whatever the umask, files 0600, and a
// root another user could write to, or redirect, is refused before anything is read.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include "cache/files.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;

class RootSafetyTest : public jitcache::testing::TempDirTest {
 protected:
  std::filesystem::path root() const { return dir() / "cache"; }

  static mode_t mode_of(const std::filesystem::path& path) {
    struct stat st;
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  void expect_refused(const std::string& needle) {
    auto store = Store::open(root());
    ASSERT_FALSE(store) << "a hostile root was accepted";
    EXPECT_EQ(store.error().code, ErrorCode::unsafe);
    EXPECT_NE(store.error().message.find(needle), std::string::npos) << store.error().message;
    EXPECT_NE(store.error().message.find(root().string()), std::string::npos) << "names the directory";
  }
};

// Restores the umask when the test ends.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : m_old(::umask(mask)) {}
  ~ScopedUmask() { ::umask(m_old); }

 private:
  mode_t m_old;
};

TEST_F(RootSafetyTest, CreatedPrivateWhateverTheUmask) {
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0777}}) {
    std::filesystem::remove_all(root());
    {
      ScopedUmask umask(mask);
      auto store = Store::open(root() / "nested" / "deeper");
      ASSERT_OK(store);
      const Facts facts = sample_facts("modes");
      ASSERT_OK((*store)->put(facts.key(), facts, make_bytes(10, 1), 1.0));
      CountingProducer producer{make_bytes(10, 2)};
      const Facts other = sample_facts("modes2");
      ASSERT_OK((*store)->get_or_create(other.key(), other, producer.producer()));
    }
    EXPECT_EQ(mode_of(root()), 0700u) << "umask " << mask;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root())) {
      const mode_t mode = mode_of(entry.path());
      if (entry.is_directory()) EXPECT_EQ(mode, 0700u) << entry.path() << " umask " << mask;
      else EXPECT_EQ(mode, 0600u) << entry.path() << " umask " << mask;
    }
  }
}

TEST_F(RootSafetyTest, ExistingPrivateRootIsAccepted) {
  std::filesystem::create_directory(root());
  std::filesystem::permissions(root(), std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  EXPECT_OK(Store::open(root()));
}

TEST_F(RootSafetyTest, SymlinkRootIsRefused) {
  std::filesystem::create_directory(dir() / "real");
  std::filesystem::permissions(dir() / "real", std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
  std::filesystem::create_directory_symlink(dir() / "real", root());
  expect_refused("symbolic link");
  EXPECT_TRUE(std::filesystem::is_empty(dir() / "real")) << "nothing was written through the link";
}

TEST_F(RootSafetyTest, DanglingSymlinkRootIsRefused) {
  std::filesystem::create_directory_symlink(dir() / "nowhere", root());
  expect_refused("symbolic link");
  EXPECT_FALSE(std::filesystem::exists(dir() / "nowhere"));
}

TEST_F(RootSafetyTest, GroupWritableRootIsRefused) {
  std::filesystem::create_directory(root());
  ::chmod(root().c_str(), 0770);
  expect_refused("group- or world-writable");
}

TEST_F(RootSafetyTest, WorldWritableRootIsRefused) {
  std::filesystem::create_directory(root());
  ::chmod(root().c_str(), 01777);  // like /tmp, sticky bit included
  expect_refused("mode 1777");
}

TEST_F(RootSafetyTest, RootOwnedByAnotherUserIsRefused) {
  std::filesystem::create_directory(root());
  ::chmod(root().c_str(), 0700);
  if (::geteuid() != 0) {
    // Without root we cannot give a directory away; /etc is root's for certain.
    auto store = Store::open("/etc");
    ASSERT_FALSE(store);
    EXPECT_EQ(store.error().code, ErrorCode::unsafe);
    EXPECT_NE(store.error().message.find("owned by uid 0"), std::string::npos);
    GTEST_SKIP() << "needs root to create a directory owned by another user";
  }
  ASSERT_EQ(::chown(root().c_str(), 65534, 65534), 0);
  expect_refused("owned by uid 65534");
}

TEST_F(RootSafetyTest, RegularFileRootIsRefused) {
  write_file(root(), "not a directory");
  expect_refused("not a directory");
}

TEST_F(RootSafetyTest, SymlinkedSubdirectoryIsRefused) {
  ASSERT_OK(Store::open(root()));
  std::filesystem::remove_all(root() / "blobs");
  std::filesystem::create_directory(dir() / "other");
  std::filesystem::create_directory_symlink(dir() / "other", root() / "blobs");
  auto store = Store::open(root());
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::unsafe);
  EXPECT_NE(store.error().message.find("blobs"), std::string::npos) << store.error().message;
}

TEST_F(RootSafetyTest, WorldWritableSubdirectoryIsRefused) {
  ASSERT_OK(Store::open(root()));
  ::chmod((root() / "locks").c_str(), 0777);
  auto store = Store::open(root());
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::unsafe);
  EXPECT_NE(store.error().message.find("locks"), std::string::npos) << store.error().message;
}

TEST_F(RootSafetyTest, EmptyPathIsRefused) {
  auto store = Store::open("");
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::invalid_argument);
}

// Clusters link /home to /data/home: a symlink above the root is resolved like every
// tool resolves it; only the root and what is inside it must be real.
TEST_F(RootSafetyTest, SymlinkAboveTheRootIsResolved) {
  std::filesystem::create_directories(dir() / "data" / "home");
  std::filesystem::create_directory_symlink(dir() / "data" / "home", dir() / "home");
  const std::filesystem::path given = dir() / "home" / ".cache" / "jitcache";
  auto store = Store::open(given);
  ASSERT_OK(store);
  const std::filesystem::path real = std::filesystem::canonical(dir()) / "data" / "home" / ".cache" / "jitcache";
  EXPECT_EQ((*store)->root(), real);
  const Facts facts = sample_facts("above");
  ASSERT_OK((*store)->put(facts.key(), facts, make_bytes(32, 7), 1.0));
  store->reset();
  auto again = Store::open(given);
  ASSERT_OK(again);
  auto hit = (*again)->get(facts.key());
  ASSERT_OK(hit);
  EXPECT_TRUE(hit->has_value()) << "the entry survives a reopen through the link";
  EXPECT_TRUE(std::filesystem::exists(real / "index.db"));
}

TEST_F(RootSafetyTest, SymlinkAboveTheRootWithDotDotIsResolvedPhysically) {
  std::filesystem::create_directories(dir() / "a" / "b");
  std::filesystem::create_directory_symlink(dir() / "a" / "b", dir() / "link");
  // link/.. is a, not dir(): the kernel takes ".." after following the link.
  auto store = Store::open(dir() / "link" / ".." / "cache");
  ASSERT_OK(store);
  EXPECT_EQ((*store)->root(), std::filesystem::canonical(dir()) / "a" / "cache");
}

TEST_F(RootSafetyTest, RootThatIsASymlinkBelowALinkedParentIsStillRefused) {
  std::filesystem::create_directories(dir() / "data" / "real");
  std::filesystem::create_directory_symlink(dir() / "data", dir() / "home");
  std::filesystem::create_directory_symlink(dir() / "data" / "real", dir() / "data" / "cache");
  auto store = Store::open(dir() / "home" / "cache");
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::unsafe);
  EXPECT_NE(store.error().message.find("symbolic link"), std::string::npos) << store.error().message;
}

// Every check that can be made before the root exists is made before anything is created.
TEST_F(RootSafetyTest, TooLongPathIsRefusedBeforeAnythingIsCreated) {
  std::filesystem::path deep = dir();
  while (deep.string().size() < 540) deep /= std::string(60, 'd');
  auto store = Store::open(deep / "cache");
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::invalid_input);
  EXPECT_NE(store.error().message.find("path too long"), std::string::npos) << store.error().message;
  EXPECT_NE(store.error().message.find("512"), std::string::npos) << "names the rule: " << store.error().message;
  EXPECT_TRUE(std::filesystem::is_empty(dir())) << "nothing was created";
}

TEST_F(RootSafetyTest, LongPathWithinTheLimitWorks) {
  std::filesystem::path deep = dir();
  while (deep.string().size() < 400) deep /= std::string(40, 'd');
  auto store = Store::open(deep / "cache");
  ASSERT_OK(store);
  const Facts facts = sample_facts("long");
  ASSERT_OK((*store)->put(facts.key(), facts, make_bytes(16, 3), 1.0));
}

TEST_F(RootSafetyTest, FileInThePathIsRefusedBeforeAnythingIsCreated) {
  write_file(dir() / "plain", "a file");
  auto store = Store::open(dir() / "plain" / "sub" / "cache");
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find((dir() / "plain").string() + ": not a directory"), std::string::npos)
      << store.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir() / "plain" / "sub"));
}

TEST_F(RootSafetyTest, HostileExistingRootGetsNothingCreatedInside) {
  std::filesystem::create_directory(root());
  ::chmod(root().c_str(), 0777);
  expect_refused("world-writable");
  EXPECT_TRUE(std::filesystem::is_empty(root())) << "no blobs/, locks/ or index.db in a refused root";
}

TEST(NetworkFilesystems, AreRecognized) {
  EXPECT_TRUE(is_network_filesystem(0x6969));        // NFS
  EXPECT_TRUE(is_network_filesystem(0xFF534D42));    // CIFS
  EXPECT_TRUE(is_network_filesystem(0xFE534D42));    // SMB2
  EXPECT_FALSE(is_network_filesystem(0xEF53));       // ext4
  EXPECT_FALSE(is_network_filesystem(0x58465342));   // XFS
  EXPECT_FALSE(is_network_filesystem(0x01021994));   // tmpfs
}

}  // namespace
}  // namespace jitcache::cache
