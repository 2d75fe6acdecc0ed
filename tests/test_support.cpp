#include "test_support.hpp"

#include <cstdlib>
#include <iostream>

namespace jitcache::testing {

void TempDirTest::SetUp() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  std::random_device rd;
  m_dir = std::filesystem::temp_directory_path() /
          ("jitcache-test-" + name + "-" + std::to_string(rd()));
  std::filesystem::create_directories(m_dir);
  std::filesystem::permissions(m_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
}

void TempDirTest::TearDown() {
  std::error_code ec;
  std::filesystem::remove_all(m_dir, ec);
}

std::uint64_t test_seed(const char* what) {
  std::uint64_t seed;
  if (const char* env = std::getenv("JITCACHE_TEST_SEED"); env && *env) {
    seed = std::strtoull(env, nullptr, 0);
  } else {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  std::cout << "[seed] " << what << ": " << seed << " (replay with JITCACHE_TEST_SEED=" << seed
            << ")\n";
  return seed;
}

std::filesystem::path source_dir() {
  if (const char* env = std::getenv("JCTEST_SOURCE_DIR"); env && *env) return env;
  return JITCACHE_TEST_SOURCE_DIR;
}

}  // namespace jitcache::testing
