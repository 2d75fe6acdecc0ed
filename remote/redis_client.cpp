#include "remote/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace jitcache::remote {
namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// hiredis's reply type as ours; nil for every type this client does not read.
Reply::Type reply_type(int type) {
  switch (type) {
    case REDIS_REPLY_STRING: return Reply::Type::string;
    case REDIS_REPLY_STATUS: return Reply::Type::status;
    case REDIS_REPLY_ERROR: return Reply::Type::error;
    case REDIS_REPLY_INTEGER: return Reply::Type::integer;
    case REDIS_REPLY_ARRAY: return Reply::Type::array;
    default: return Reply::Type::nil;
  }
}

Reply convert(const redisReply* r) {
  Reply out;
  out.type = reply_type(r->type);
  switch (out.type) {
    case Reply::Type::string:
    case Reply::Type::status:
    case Reply::Type::error:
      out.str.assign(r->str, r->len);
      break;
    case Reply::Type::integer:
      out.integer = r->integer;
      break;
    case Reply::Type::array:
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    case Reply::Type::nil:
      break;
  }
  return out;
}

struct ReplyFree {
  void operator()(void* reply) const { freeReplyObject(reply); }
};

std::string context_error(const redisContext* c) {
  if (c == nullptr) return "out of memory";
  std::string text = c->errstr[0] ? c->errstr : "connection error";
  // A receive timeout surfaces as EAGAIN; say what it means.
  if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) text = "timed out";
  return text;
}

}  // namespace

RedisClient::RedisClient(RedisOptions options) : m_options(std::move(options)) {}

RedisClient::~RedisClient() {
  for (redisContext* c : m_idle) redisFree(c);
}

bool RedisClient::breaker_open() const { return steady_ms() < m_open_until_ms.load(); }

Error RedisClient::transport_failure(const std::string& what) {
  m_open_until_ms = steady_ms() + m_options.breaker.count();
  {
    std::lock_guard lock(m_mutex);
    m_last_failure = what;
  }
  return Error{ErrorCode::unavailable,
               "remote cache " + display() + ": " + what + "; not asked again for " +
                   std::to_string(m_options.breaker.count()) + " ms",
               {}};
}

Result<redisContext*> RedisClient::take(bool& pooled) {
  {
    std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      redisContext* c = m_idle.back();
      m_idle.pop_back();
      pooled = true;
      return c;
    }
  }
  pooled = false;
  const RedisUrl& url = m_options.url;
  redisContext* c = redisConnectWithTimeout(url.host.c_str(), url.port, to_timeval(m_options.connect_timeout));
  if (c == nullptr || c->err) {
    const std::string why = context_error(c);
    if (c) redisFree(c);
    return std::unexpected(transport_failure("cannot connect: " + why));
  }
  if (redisSetTimeout(c, to_timeval(m_options.op_timeout)) != REDIS_OK) {
    redisFree(c);
    return std::unexpected(transport_failure("cannot set the operation timeout"));
  }
  (void)redisEnableKeepAlive(c);
  auto handshake = [&](const Args& args, const char* what) -> Status {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    std::unique_ptr<redisReply, ReplyFree> reply(static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!reply) return std::unexpected(transport_failure(std::string(what) + ": " + context_error(c)));
    if (reply->type == REDIS_REPLY_ERROR)
      return std::unexpected(transport_failure(std::string(what) + " refused: " + std::string(reply->str, reply->len)));
    return {};
  };
  Status ready;
  if (!url.password.empty()) {
    const std::string user = url.user.empty() ? "default" : url.user;
    ready = handshake({"AUTH", user, url.password}, "AUTH");
  }
  if (ready && url.db != 0) {
    const std::string db = std::to_string(url.db);
    ready = handshake({"SELECT", db}, "SELECT");
  }
  if (!ready) {
    redisFree(c);
    return std::unexpected(std::move(ready.error()));
  }
  return c;
}

void RedisClient::give_back(redisContext* c) {
  std::lock_guard lock(m_mutex);
  if (c->err == 0 && m_idle.size() < m_options.max_idle_connections) {
    m_idle.push_back(c);
    return;
  }
  redisFree(c);
}

// Sends every command and reads every reply on one connection. On a transport failure the
// connection is freed and the failure (and whether it was a timeout) returned.
struct Exchange {
  std::vector<Reply> replies;
  std::string failure;  // empty on success
  bool timed_out = false;
};

static Exchange exchange(redisContext* c, const std::vector<Args>& commands) {
  Exchange out;
  auto fail = [&](const std::string& what) {
    out.timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    out.failure = what + ": " + context_error(c);
    return out;
  };
  for (const Args& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
      return fail("sending " + std::string(args.front()));
  }
  out.replies.reserve(commands.size());
  for (const Args& args : commands) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) return fail(std::string(args.front()));
    std::unique_ptr<void, ReplyFree> owned(raw);
    out.replies.push_back(convert(static_cast<const redisReply*>(raw)));
  }
  return out;
}

Result<std::vector<Reply>> RedisClient::run(const std::vector<Args>& commands) {
  if (breaker_open()) {
    std::string last;
    {
      std::lock_guard lock(m_mutex);
      last = m_last_failure;
    }
    return make_error(ErrorCode::unavailable,
                      "remote cache " + display() + " skipped for another " +
                          std::to_string(m_open_until_ms.load() - steady_ms()) + " ms after: " + last);
  }
  for (int attempt = 0;; ++attempt) {
    bool pooled = false;
    redisContext* c = JC_TRY(take(pooled));
    Exchange done = exchange(c, commands);
    if (!done.failure.empty()) {
      redisFree(c);
      // A pooled connection that the server closed since it was last used (a restart, an
      // idle timeout) fails at once; one fresh connection decides whether the server is
      // really gone. A timeout is not retried: it has cost its time already.
      if (pooled && !done.timed_out && attempt == 0) continue;
      return std::unexpected(transport_failure(done.failure));
    }
    // A server that wants a password, or no longer takes ours, answers every command with
    // an error: that is the connection failing, not the command.
    for (const Reply& reply : done.replies) {
      if (reply.type == Reply::Type::error &&
          (reply.str.starts_with("NOAUTH") || reply.str.starts_with("WRONGPASS"))) {
        redisFree(c);
        return std::unexpected(transport_failure("refused: " + reply.str));
      }
    }
    give_back(c);
    m_open_until_ms = 0;
    return std::move(done.replies);
  }
}

Result<std::vector<Reply>> RedisClient::pipeline(const std::vector<Args>& commands) {
  if (commands.empty()) return std::vector<Reply>();
  return run(commands);
}

Result<Reply> RedisClient::command(const Args& args) {
  auto replies = JC_TRY(run({args}));
  Reply reply = std::move(replies.front());
  if (reply.type == Reply::Type::error)
    return make_error(ErrorCode::io, "remote cache " + display() + ": " + std::string(args.front()) +
                                         " refused: " + reply.str);
  return reply;
}

}  // namespace jitcache::remote
