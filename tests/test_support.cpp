#include "test_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
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

std::string run_read_only(const std::filesystem::path& dir, ReadOnlyMeans means,
                          const std::function<std::string()>& checks) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::alarm(60);
    auto finish = [&](const std::string& text) {
      (void)!::write(pipe_fds[1], text.data(), text.size());
      ::_exit(0);
    };
    if (means == ReadOnlyMeans::bind_mount) {
      if (::unshare(CLONE_NEWNS) != 0)
        finish(std::string("SKIP: unshare(CLONE_NEWNS): ") + std::strerror(errno));
      // Private first, so that nothing mounted here reaches the rest of the machine.
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
          ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
        finish(std::string("SKIP: read-only bind mount: ") + std::strerror(errno));
    } else if (::geteuid() == 0) {
      constexpr uid_t k_nobody = 65534;
      // The test's own directory is 0700: let the other user pass through it.
      ::chmod(dir.parent_path().c_str(), 0711);
      for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
        if (::lchown(entry.path().c_str(), k_nobody, k_nobody) != 0) finish("SKIP: chown failed");
        ::chmod(entry.path().c_str(), entry.is_directory() ? 0500 : 0400);
      }
      if (::lchown(dir.c_str(), k_nobody, k_nobody) != 0) finish("SKIP: chown failed");
      ::chmod(dir.c_str(), 0500);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(k_nobody, k_nobody, k_nobody) != 0 ||
          ::setresuid(k_nobody, k_nobody, k_nobody) != 0)
        finish(std::string("SKIP: cannot become uid 65534: ") + std::strerror(errno));
    } else {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
        ::chmod(entry.path().c_str(), entry.is_directory() ? 0500 : 0400);
      ::chmod(dir.c_str(), 0500);
    }
    // The means must really forbid writing, or the test would prove nothing.
    const std::string probe = (dir / "probe").string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    const int refused = errno;
    if (fd >= 0) finish("SKIP: the directory is still writable");
    const std::string probed = std::string("creating a file fails: ") + std::strerror(refused);
    finish(probed + "\n" + checks());
  }
  ::close(pipe_fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return "the child died: status " + std::to_string(status);
  return text;
}

std::string read_only_verdict(const std::string& text) {
  const auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

}  // namespace jitcache::testing
