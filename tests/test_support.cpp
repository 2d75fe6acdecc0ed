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
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

extern char** environ;

namespace jitcache::testing {

namespace {

// The only setenv/unsetenv of the tests: every change goes through ScopedEnv, and the
// leak check uses it to put a leaked value back.
void put_environment(const std::string& name, const std::optional<std::string>& value) {
  if (value)
    ::setenv(name.c_str(), value->c_str(), 1);
  else
    ::unsetenv(name.c_str());
}

std::optional<std::string> environment_value(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

bool watched(std::string_view name) {
  for (std::string_view prefix : {"JITCACHE_", "VLLM_", "XDG_", "JCTEST_"})
    if (name.starts_with(prefix)) return true;
  return name == "HOME" || name == "TMPDIR";
}

std::string describe(const std::optional<std::string>& value) {
  return value ? "\"" + *value + "\"" : std::string("unset");
}

std::optional<std::string> lookup(const EnvSnapshot& snapshot, const std::string& name) {
  const auto it = snapshot.find(name);
  return it != snapshot.end() ? std::optional<std::string>(it->second) : std::nullopt;
}

// Registered before main() runs, so every test of every program is checked. gtest owns
// the listener once appended.
[[maybe_unused]] const bool k_leak_check_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new EnvironmentLeakCheck);
  return true;
}();

}  // namespace

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

LogCapture::LogCapture() : m_old_level(log_level()) {
  set_log_level(LogLevel::debug);
  set_log_sink([this](LogLevel level, std::string_view message) {
    std::lock_guard lock(m_mutex);
    m_lines.emplace_back(level, std::string(message));
  });
}

LogCapture::~LogCapture() {
  set_log_sink(nullptr);
  set_log_level(m_old_level);
}

std::vector<std::string> LogCapture::at(LogLevel level) const {
  std::lock_guard lock(m_mutex);
  std::vector<std::string> lines;
  for (const auto& [line_level, line] : m_lines)
    if (line_level == level) lines.push_back(line);
  return lines;
}

std::size_t LogCapture::count_containing(const std::string& needle) const {
  std::lock_guard lock(m_mutex);
  std::size_t n = 0;
  for (const auto& [level, line] : m_lines)
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

std::size_t LogCapture::warnings() const {
  std::lock_guard lock(m_mutex);
  std::size_t n = 0;
  for (const auto& [level, line] : m_lines)
    if (level >= LogLevel::warning) ++n;
  return n;
}

std::string LogCapture::all() const {
  std::lock_guard lock(m_mutex);
  std::string text;
  for (const auto& [level, line] : m_lines) text += line + "\n";
  return text;
}

ScopedEnv::ScopedEnv(std::string name, const char* value) {
  if (value != nullptr)
    set(name, value);
  else
    unset(name);
}

ScopedEnv::ScopedEnv(std::string name, std::optional<std::string> value) {
  if (value)
    set(name, *value);
  else
    unset(name);
}

ScopedEnv::~ScopedEnv() {
  for (auto it = m_saved.rbegin(); it != m_saved.rend(); ++it) put_environment(it->first, it->second);
}

void ScopedEnv::set(const std::string& name, const std::string& value) {
  remember(name);
  put_environment(name, value);
}

void ScopedEnv::unset(const std::string& name) {
  remember(name);
  put_environment(name, std::nullopt);
}

void ScopedEnv::remember(const std::string& name) {
  for (const auto& [saved, value] : m_saved)
    if (saved == name) return;
  m_saved.emplace_back(name, environment_value(name));
}

EnvSnapshot watched_environment() {
  EnvSnapshot snapshot;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const auto equals = text.find('=');
    if (equals == std::string_view::npos || !watched(text.substr(0, equals))) continue;
    snapshot.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return snapshot;
}

std::vector<std::string> environment_changes(const EnvSnapshot& before, const EnvSnapshot& after) {
  std::set<std::string> names;
  for (const auto& [name, value] : before) names.insert(name);
  for (const auto& [name, value] : after) names.insert(name);
  std::vector<std::string> changes;
  for (const std::string& name : names) {
    const auto old_value = lookup(before, name), new_value = lookup(after, name);
    if (old_value != new_value)
      changes.push_back(name + ": was " + describe(old_value) + ", now " + describe(new_value));
  }
  return changes;
}

void EnvironmentLeakCheck::OnTestStart(const ::testing::TestInfo&) { m_before = watched_environment(); }

void EnvironmentLeakCheck::OnTestEnd(const ::testing::TestInfo&) {
  const EnvSnapshot after = watched_environment();
  for (const std::string& change : environment_changes(m_before, after))
    ADD_FAILURE() << "the test left the environment changed (use testing::ScopedEnv): " << change;
  for (const auto& [name, value] : after)
    if (!m_before.contains(name)) put_environment(name, std::nullopt);
  for (const auto& [name, value] : m_before) put_environment(name, value);
}

}  // namespace jitcache::testing
