// A process waiting on another's compile lock says so: after k_wait_report_first it logs
// which process holds the key and what it is producing (issue 10, item 9).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/files.hpp"
#include "cache/key_lock.hpp"
#include "cache_test_support.hpp"
#include "jitcache/log.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

class KeyLockTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_locks = UniqueFd(::open(dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(m_locks);
    set_log_sink([this](LogLevel, std::string_view line) {
      std::lock_guard lock(m_mutex);
      m_lines.emplace_back(line);
    });
  }
  void TearDown() override {
    set_log_sink(nullptr);
    TempDirTest::TearDown();
  }

  std::vector<std::string> lines() {
    std::lock_guard lock(m_mutex);
    return m_lines;
  }

  UniqueFd m_locks;
  std::mutex m_mutex;
  std::vector<std::string> m_lines;
};

TEST_F(KeyLockTest, WaiterNamesTheHolderAndWhatItCompiles) {
  const CacheKey key = testing::sample_facts("lock").key();
  auto held = KeyLock::acquire(m_locks.get(), dir(), key, std::chrono::seconds(1), "writer/dynamic/bf16/sm_90");
  ASSERT_OK(held);
  ASSERT_TRUE(held->has_value());
  // flock conflicts between two opens of the file, also within one process.
  const auto waited = KeyLock::acquire(m_locks.get(), dir(), key, k_wait_report_first + std::chrono::milliseconds(600));
  ASSERT_OK(waited);
  EXPECT_FALSE(waited->has_value()) << "the lock was held throughout";
  const std::string expected = "waiting for process " + std::to_string(::getpid()) +
                               " compiling writer/dynamic/bf16/sm_90 (key " + key.to_hex();
  bool found = false;
  for (const std::string& line : lines()) found = found || line.find(expected) != std::string::npos;
  EXPECT_TRUE(found) << "no line contains: " << expected;
}

TEST_F(KeyLockTest, ShortWaitsStaySilent) {
  const CacheKey key = testing::sample_facts("quiet").key();
  std::optional<KeyLock> held;
  {
    auto first = KeyLock::acquire(m_locks.get(), dir(), key, std::chrono::seconds(1), "gather/identity/fp8/sm_90");
    ASSERT_OK(first);
    held = std::move(*first);
  }
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    held.reset();
  });
  auto second = KeyLock::acquire(m_locks.get(), dir(), key, std::chrono::seconds(10), "gather/identity/fp8/sm_90");
  release.join();
  ASSERT_OK(second);
  EXPECT_TRUE(second->has_value());
  for (const std::string& line : lines()) EXPECT_EQ(line.find("waiting for"), std::string::npos) << line;
}

}  // namespace
}  // namespace jitcache::cache
