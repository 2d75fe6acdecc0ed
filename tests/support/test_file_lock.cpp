// The lock of one job per thing (support/file_lock.hpp): holders never overlap, across
// descriptors as across processes; the lock file exists only while held; a wait is bounded.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "support/file_lock.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FileLockTest : public testing::TempDirTest {};

TEST_F(FileLockTest, HoldersNeverOverlapAndTheFileGoesWithTheLastOne) {
  const fs::path path = dir() / "job.lock";
  std::atomic<int> inside{0}, most{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto lock = FileLock::acquire(path, 10s, "a test");
        ASSERT_TRUE(lock) << lock.error().to_string();
        const int now = ++inside;
        most = std::max(most.load(), now);
        std::this_thread::sleep_for(100us);
        --inside;
        ++done;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(done, 120);
  EXPECT_EQ(most, 1) << "two holders at once";
  EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << "the lock file was left behind";
}

TEST_F(FileLockTest, AWaitIsBoundedAndNamesTheLockAndItsHolder) {
  const fs::path path = dir() / "job.lock";
  auto held = FileLock::acquire(path, 1s, "a test");
  ASSERT_TRUE(held);
  const auto start = std::chrono::steady_clock::now();
  const auto waited = FileLock::acquire(path, 200ms, "another install");
  ASSERT_FALSE(waited);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_EQ(waited.error().code, ErrorCode::io);
  EXPECT_EQ(waited.error().message.rfind(path.string() + ": another install has held this lock", 0), 0u)
      << waited.error().message;
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(FileLockTest, AKilledHolderLeavesTheFileButNotTheLock) {
  const fs::path path = dir() / "job.lock";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = FileLock::acquire(path, 1s, "a child");
    ::_exit(lock ? 0 : 1);  // no destructor runs: as if killed while holding it
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(path));
  auto lock = FileLock::acquire(path, 1s, "a test");
  EXPECT_TRUE(lock) << lock.error().to_string();
}

TEST_F(FileLockTest, ANonRegularFileAtThePathIsRefused) {
  fs::create_symlink(dir() / "elsewhere", dir() / "link.lock");
  const auto refused = FileLock::acquire(dir() / "link.lock", 1s, "a test");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("link.lock: cannot open the lock file"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(fs::exists(dir() / "elsewhere")) << "the symlink was followed";
}

}  // namespace
}  // namespace jitcache
