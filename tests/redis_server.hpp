// A real redis-server for the tests of the remote tier: started on a free loopback port
// in a temporary directory, with no persistence, and controlled the way a fleet's Redis
// misbehaves: killed, stopped, restarted empty, paused (CLIENT PAUSE), or requiring a
// password. scripts/test.sh installs redis-server (scripts/deps.sh); a machine without it
// fails these tests with a message saying so rather than skipping them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"
#include "remote/redis_client.hpp"

namespace jitcache::testing {

class RedisServer {
 public:
  struct Options {
    std::string password;  // requirepass, when not empty
  };
  // Starts a server and waits until it answers PING (at most 10 s). An error names what
  // went wrong (redis-server not installed, did not start; its log is in the message).
  static Result<std::unique_ptr<RedisServer>> start(Options options);
  static Result<std::unique_ptr<RedisServer>> start() { return start(Options{}); }
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return m_port; }
  // redis://127.0.0.1:<port>, with the password when `with_password`.
  std::string url(bool with_password = true) const;
  const std::filesystem::path& dir() const { return m_dir; }

  // SIGKILL, and waits for the process to go.
  void kill();
  // Starts again on the same port, empty (no persistence).
  Status restart();
  bool running() const { return m_pid > 0; }
  // CLIENT PAUSE for `duration` (ALL: reads too): the server accepts connections and
  // commands but answers none of them until the pause ends.
  Status pause(std::chrono::milliseconds duration);

  // A command as an administrator (generous timeouts, no breaker worth the name).
  Result<remote::Reply> command(const remote::Args& args);

 private:
  RedisServer() = default;
  Status launch();

  Options m_options;
  std::filesystem::path m_dir;
  int m_port = 0;
  pid_t m_pid = -1;
};

// A fleet key file in `dir`: 32 random bytes, mode 0600, owned by this user.
std::filesystem::path write_fleet_key(const std::filesystem::path& dir, std::string_view name = "fleet.key");

}  // namespace jitcache::testing
