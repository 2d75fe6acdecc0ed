// A small, thread-safe Redis client over hiredis for the remote tier: a pool of blocking
// connections with connect and per-operation timeouts, and a circuit breaker.
//
// Timeouts. Connecting gives up after connect_timeout; each command after op_timeout (the
// socket's send and receive timeouts), so a server that stops answering (CLIENT PAUSE, a
// stalled network) costs one op_timeout, not a hang.
//
// The breaker. A transport failure (cannot connect, the password is refused, a timeout, a
// broken connection) opens the breaker for `breaker`: every command fails at once with
// ErrorCode::unavailable, without touching the network. The first command after that
// period tries again; one success closes the breaker. An error *reply* (READONLY, OOM,
// WRONGTYPE) is the server answering: it fails that command only, except NOAUTH and
// WRONGPASS, which every command would get. A pooled connection that fails at once (the
// server restarted since) is retried once on a fresh connection before the breaker opens.
//
// Replies are read whole by hiredis; callers bound what they ask for (GETRANGE) so that
// a hostile value cannot make a node allocate without limit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"
#include "remote/redis_url.hpp"

struct redisContext;

namespace jitcache::remote {

struct RedisOptions {
  RedisUrl url;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds op_timeout{500};
  std::chrono::milliseconds breaker{30000};
  std::size_t max_idle_connections = 4;
};

struct Reply {
  enum class Type { nil, string, integer, array, status, error };
  Type type = Type::nil;
  std::string str;  // string, status and error replies
  long long integer = 0;
  std::vector<Reply> elements;

  bool is_nil() const { return type == Type::nil; }
  bool is_ok() const { return type == Type::status && str == "OK"; }
};

using Args = std::vector<std::string_view>;

class RedisClient {
 public:
  explicit RedisClient(RedisOptions options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One command. An error reply is ErrorCode::io naming the command's verb and the
  // server's words; a transport failure or an open breaker is ErrorCode::unavailable.
  Result<Reply> command(const Args& args);
  // Several commands in one round trip; one reply each, in order (error replies included).
  Result<std::vector<Reply>> pipeline(const std::vector<Args>& commands);

  // Whether the breaker is open now (commands fail without trying).
  bool breaker_open() const;
  // The URL without its password.
  std::string display() const { return m_options.url.display(); }
  const RedisOptions& options() const { return m_options; }

 private:
  // A pooled connection (pooled = true) or a new one.
  Result<redisContext*> take(bool& pooled);
  void give_back(redisContext* context);
  Error transport_failure(const std::string& what);
  Result<std::vector<Reply>> run(const std::vector<Args>& commands);

  RedisOptions m_options;
  std::mutex m_mutex;
  std::vector<redisContext*> m_idle;  // under m_mutex
  std::string m_last_failure;         // under m_mutex
  std::atomic<std::int64_t> m_open_until_ms{0};
};

}  // namespace jitcache::remote
