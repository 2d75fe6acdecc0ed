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

Reply convert(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = Reply::Type::nil;
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

Result<redisContext*> RedisClient::take() {
  {
    std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      redisContext* c = m_idle.back();
      m_idle.pop_back();
      return c;
    }
  }
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
  redisContext* c = JC_TRY(take());
  for (const Args& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      const std::string why = context_error(c);
      redisFree(c);
      return std::unexpected(transport_failure("sending " + std::string(args.front()) + ": " + why));
    }
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (const Args& args : commands) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
      const std::string why = context_error(c);
      redisFree(c);
      return std::unexpected(transport_failure(std::string(args.front()) + ": " + why));
    }
    std::unique_ptr<void, ReplyFree> owned(raw);
    replies.push_back(convert(static_cast<const redisReply*>(raw)));
  }
  give_back(c);
  m_open_until_ms = 0;
  return replies;
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
