#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace jitcache::testing {
namespace {

// A port the kernel just handed out for loopback: free now, and unlikely to be taken in
// the moment before redis-server binds it (start() retries if it is).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

remote::RedisOptions admin_options(int port, const std::string& password) {
  remote::RedisOptions options;
  options.url.host = "127.0.0.1";
  options.url.port = port;
  options.url.password = password;
  options.connect_timeout = std::chrono::milliseconds(1000);
  options.op_timeout = std::chrono::milliseconds(5000);
  options.breaker = std::chrono::milliseconds(0);
  return options;
}

}  // namespace

Result<std::unique_ptr<RedisServer>> RedisServer::start(Options options) {
  std::unique_ptr<RedisServer> server(new RedisServer());
  server->m_options = std::move(options);
  std::string pattern = (std::filesystem::temp_directory_path() / "jctest-redis-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    return make_error(ErrorCode::io, "cannot create a directory for redis-server");
  server->m_dir = pattern;
  Status launched;
  for (int attempt = 0; attempt < 5; ++attempt) {
    server->m_port = free_loopback_port();
    launched = server->launch();
    if (launched) return server;
  }
  return std::unexpected(std::move(launched.error()));
}

Status RedisServer::launch() {
  const std::string port = std::to_string(m_port);
  const std::string dir = m_dir.string();
  const std::string log = (m_dir / "redis.log").string();
  std::vector<std::string> args = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", dir, "--logfile", log, "--daemonize", "no"};
  if (!m_options.password.empty()) {
    args.push_back("--requirepass");
    args.push_back(m_options.password);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (const int err = ::posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(), environ); err != 0)
    return make_error(ErrorCode::unavailable,
                      "cannot run redis-server (" + std::string(std::strerror(err)) +
                          "): the remote tier's tests need it; scripts/deps.sh installs it (Debian redis-server)");
  m_pid = pid;
  remote::RedisClient client(admin_options(m_port, m_options.password));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      return make_error(ErrorCode::unavailable, "redis-server on port " + port + " exited at start: " + read_text(log));
    }
    auto pong = client.command({"PING"});
    if (pong && pong->str == "PONG") return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill();
  return make_error(ErrorCode::unavailable, "redis-server on port " + port + " did not answer within 10 s: " + read_text(log));
}

RedisServer::~RedisServer() {
  kill();
  std::error_code ignored;
  std::filesystem::remove_all(m_dir, ignored);
}

std::string RedisServer::url(bool with_password) const {
  std::string text = "redis://";
  if (with_password && !m_options.password.empty()) text += ":" + m_options.password + "@";
  return text + "127.0.0.1:" + std::to_string(m_port);
}

void RedisServer::kill() {
  if (m_pid <= 0) return;
  ::kill(m_pid, SIGKILL);
  int status = 0;
  while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
  }
  m_pid = -1;
}

Status RedisServer::restart() {
  kill();
  return launch();
}

Status RedisServer::pause(std::chrono::milliseconds duration) {
  JC_TRY(command({"CLIENT", "PAUSE", std::to_string(duration.count()), "ALL"}));
  return {};
}

Result<remote::Reply> RedisServer::command(const remote::Args& args) {
  remote::RedisClient client(admin_options(m_port, m_options.password));
  return client.command(args);
}

std::filesystem::path write_fleet_key(const std::filesystem::path& dir, std::string_view name) {
  const std::filesystem::path path = dir / name;
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (::write(fd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) std::abort();
    ::fchmod(fd, 0600);
    ::close(fd);
  }
  return path;
}

}  // namespace jitcache::testing
