#include "test_support.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

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

bool make_unix_socket(const std::filesystem::path& path) {
  // A socket address holds ~108 bytes; a longer path is reached through a descriptor of
  // its directory (/proc/self/fd/N/name), which the kernel resolves like any path.
  const int dir_fd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return false;
  const std::string short_path =
      "/proc/self/fd/" + std::to_string(dir_fd) + "/" + path.filename().string();
  const std::string& chosen = path.string().size() < sizeof(sockaddr_un{}.sun_path) ? path.string()
                                                                                     : short_path;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  bool bound = false;
  if (chosen.size() < sizeof address.sun_path) {
    std::strcpy(address.sun_path, chosen.c_str());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
      ::close(fd);
    }
  }
  ::close(dir_fd);
  return bound;
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
