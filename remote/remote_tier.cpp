#include "remote/remote_tier.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/tally.hpp"
#include "jitcache/log.hpp"
#include "remote/lease_protocol.hpp"

namespace jitcache::remote {
namespace {

constexpr std::string_view k_entry_infix = "v1:entry:";
constexpr std::string_view k_lease_infix = "v1:lease:";

// SCAN's MATCH is a glob: a prefix holding *, ?, [ or \\ would otherwise match more than itself.
std::string glob_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// A verified value as the Store takes it.
cache::TierHit to_hit(SignedEntry&& entry) {
  cache::TierHit hit;
  hit.bytes = std::make_shared<const cache::Bytes>(std::move(entry.bytes));
  hit.compile_ms = entry.compile_ms;
  hit.facts = std::move(entry.facts);
  return hit;
}

// Renews the lease while its holder produces, and gives it up when destroyed.
class RedisLease final : public cache::TierLease {
 public:
  RedisLease(RedisClient& client, std::string name, std::string token, std::chrono::milliseconds lifetime)
      : m_client(client), m_name(std::move(name)), m_token(std::move(token)), m_lifetime(lifetime) {
    m_renewer = std::thread([this] { renew_until_released(); });
  }
  ~RedisLease() override {
    {
      std::lock_guard lock(m_mutex);
      m_released = true;
    }
    m_wake.notify_all();
    m_renewer.join();
    auto released = m_client.command({"EVAL", k_release_script, "1", m_name, m_token});
    if (!released) log_debug("remote cache: releasing lease " + m_name + ": " + released.error().to_string());
  }

 private:
  void renew_until_released() {
    const std::string lifetime = std::to_string(m_lifetime.count());
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, m_lifetime / 3, [this] { return m_released; })) {
      lock.unlock();
      auto renewed = m_client.command({"EVAL", k_renew_script, "1", m_name, m_token, lifetime});
      if (!renewed)
        log_debug("remote cache: renewing lease " + m_name + ": " + renewed.error().to_string());
      else if (renewed->type == Reply::Type::integer && renewed->integer == 0)
        log_debug("remote cache: lease " + m_name + " was lost (expired); another node may compile too");
      lock.lock();
    }
  }

  RedisClient& m_client;
  std::string m_name;
  std::string m_token;
  std::chrono::milliseconds m_lifetime;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_released = false;
  std::thread m_renewer;
};

// A name holding a list, a hash, a set...: no node's value, and no reason to fail a read.
Result<std::optional<RemoteRead>> read_wrong_type(RedisClient& client, std::string_view name) {
  const Reply type = JC_TRY(client.command({"TYPE", name}));
  if (type.str == "none") return std::optional<RemoteRead>();  // removed since
  RemoteRead read;
  read.rejected = Rejected{Rejection::wrong_type, "a Redis " + type.str + " where a string value belongs"};
  return std::optional<RemoteRead>(std::move(read));
}

// Rejections remembered per tier before the memory starts again (a bound, not a target).
constexpr std::size_t k_max_reported = 4096;

}  // namespace

RemoteTier::RemoteTier(RemoteTierOptions options) : m_options(std::move(options)), m_client(m_options.redis) {}

RemoteTier::~RemoteTier() = default;

void RemoteTier::count(std::uint64_t cache::Counters::*field) {
  if (m_sink) m_sink(cache::one(field));
}

std::string RemoteTier::entry_name(const cache::CacheKey& key) const {
  return m_options.prefix + std::string(k_entry_infix) + key.to_hex();
}

std::string RemoteTier::lease_name(const cache::CacheKey& key) const {
  return m_options.prefix + std::string(k_lease_infix) + key.to_hex();
}

std::optional<cache::CacheKey> RemoteTier::key_of(std::string_view name) const {
  ParsedName parsed = parse(name);
  return parsed.kind == NameKind::entry ? parsed.key : std::nullopt;
}

Result<std::optional<RemoteRead>> RemoteTier::read(std::string_view name) {
  // One byte more than the bound: a value that long is oversized, whatever follows.
  const std::string last = std::to_string(m_options.max_entry_bytes);
  // EXISTS tells an empty value (rejected) from no value: GETRANGE and STRLEN give "" and
  // 0 for both.
  auto replies =
      JC_TRY(m_client.pipeline({{"GETRANGE", name, "0", last}, {"STRLEN", name}, {"EXISTS", name}}));
  for (const Reply& reply : replies) {
    if (reply.type != Reply::Type::error) continue;
    if (reply.str.starts_with("WRONGTYPE")) return read_wrong_type(m_client, name);
    return make_error(ErrorCode::io,
                      "remote cache " + m_client.display() + ": reading " + std::string(name) + ": " + reply.str);
  }
  const std::string& value = replies[0].str;
  RemoteRead read;
  read.stored_bytes = static_cast<std::uint64_t>(replies[1].integer);
  if (value.empty()) {
    if (replies[2].integer == 0) return std::optional<RemoteRead>();
    read.rejected = Rejected{Rejection::truncated, "an empty value"};
    return std::optional<RemoteRead>(std::move(read));
  }
  if (value.size() > m_options.max_entry_bytes) {
    read.rejected = Rejected{Rejection::oversized, std::to_string(read.stored_bytes) + " bytes, more than the " +
                                                       last + " allowed (JITCACHE_REMOTE_MAX_ENTRY_BYTES)"};
    return std::optional<RemoteRead>(std::move(read));
  }
  const auto key = key_of(name);
  if (!key) {
    read.rejected = Rejected{Rejection::wrong_key, std::string(name) + " is not an entry name"};
    return std::optional<RemoteRead>(std::move(read));
  }
  auto decoded = decode_signed_entry(name, m_options.fleet_key, value, *key);
  if (!decoded) {
    read.rejected = std::move(decoded.error());
    return std::optional<RemoteRead>(std::move(read));
  }
  if (m_options.check_content) {
    if (auto ok = m_options.check_content(decoded->facts, decoded->bytes); !ok) {
      read.rejected = Rejected{Rejection::bad_content, ok.error().message};
      return std::optional<RemoteRead>(std::move(read));
    }
  }
  read.entry = std::move(*decoded);
  return std::optional<RemoteRead>(std::move(read));
}

Result<std::optional<cache::TierHit>> RemoteTier::fetch(const cache::CacheKey& key, Report report) {
  auto got = read(entry_name(key));
  if (!got) {
    count(&cache::Counters::remote_errors);
    return std::unexpected(std::move(got.error()));
  }
  if (!*got) return std::optional<cache::TierHit>();
  if ((*got)->rejected) {
    const std::string line = "remote cache: rejected the value of " + key.to_hex() + " (" + entry_name(key) +
                             "): " + (*got)->rejected->to_string() + "; not loaded";
    if (report == Report::quietly || !first_report(key, *(*got)->rejected)) {
      log_debug(line);
    } else {
      count(&cache::Counters::remote_rejects);
      log_warning(line);
    }
    return std::optional<cache::TierHit>();
  }
  return std::optional<cache::TierHit>(to_hit(std::move(*(*got)->entry)));
}

bool RemoteTier::first_report(const cache::CacheKey& key, const Rejected& rejected) {
  std::lock_guard lock(m_reported_mutex);
  if (m_reported.size() >= k_max_reported) m_reported.clear();
  return m_reported.insert(key.to_hex() + ":" + rejected.to_string()).second;
}

Result<std::optional<cache::TierHit>> RemoteTier::get(const cache::CacheKey& key) {
  auto hit = JC_TRY(fetch(key));
  count(hit ? &cache::Counters::remote_hits : &cache::Counters::remote_misses);
  return hit;
}

Result<bool> RemoteTier::upload(const cache::CacheKey& key, const cache::Facts& facts,
                                std::span<const std::byte> bytes, double compile_ms) {
  const std::string name = entry_name(key);
  const std::string value = encode_signed_entry(name, m_options.fleet_key, facts, bytes, compile_ms);
  if (value.size() > m_options.max_entry_bytes)
    return make_error(ErrorCode::invalid_argument,
                      "remote cache: entry " + key.to_hex() + " is " + std::to_string(value.size()) +
                          " bytes signed, more than JITCACHE_REMOTE_MAX_ENTRY_BYTES allows; not uploaded");
  auto stored = m_client.command({"SET", name, value, "NX"});
  if (!stored) {
    count(&cache::Counters::remote_errors);
    return std::unexpected(std::move(stored.error()));
  }
  if (!stored->is_ok()) return false;  // nil: another node stored it first
  count(&cache::Counters::remote_uploads);
  return true;
}

Status RemoteTier::put(const cache::CacheKey& key, const cache::TierEntry& entry) {
  JC_TRY(upload(key, entry.facts, *entry.bytes, entry.compile_ms));
  return {};
}

Result<std::optional<cache::TierHit>> RemoteTier::create(const cache::CacheKey& key,
                                                          const cache::TierEntry& entry) {
  // A value that expires or is deleted between our SET NX and our read is tried again.
  for (int round = 0; round < 3; ++round) {
    if (JC_TRY(upload(key, entry.facts, *entry.bytes, entry.compile_ms))) return std::optional<cache::TierHit>();
    auto got = read(entry_name(key));
    if (!got) {
      count(&cache::Counters::remote_errors);
      return std::unexpected(std::move(got.error()));
    }
    if (!*got) continue;
    if ((*got)->rejected) {
      const std::string what = "remote cache: " + entry_name(key) + " holds a value that fails verification (" +
                               (*got)->rejected->to_string() + "), so the first writer of " + key.to_hex() +
                               " is unknown";
      log_debug(what);
      return make_error(ErrorCode::invalid_input, what);
    }
    return std::optional<cache::TierHit>(to_hit(std::move(*(*got)->entry)));
  }
  return make_error(ErrorCode::io, "remote cache " + m_client.display() + ": creating " + entry_name(key) +
                                       ": a value kept appearing and vanishing; gave up");
}

Status RemoteTier::remove(const cache::CacheKey& key) {
  auto removed = m_client.command({"DEL", entry_name(key)});
  if (!removed) {
    count(&cache::Counters::remote_errors);
    return std::unexpected(std::move(removed.error()));
  }
  return {};
}

std::string RemoteTier::entry_prefix() const { return m_options.prefix + std::string(k_entry_infix); }

std::string RemoteTier::lease_prefix() const { return m_options.prefix + std::string(k_lease_infix); }

Result<std::vector<std::string>> RemoteTier::list_entry_names() { return scan(glob_escaped(entry_prefix()) + "*"); }

Result<std::vector<std::string>> RemoteTier::list_all_names() { return scan(glob_escaped(m_options.prefix) + "*"); }

Result<std::vector<std::string>> RemoteTier::scan(const std::string& pattern) {
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    Reply reply = JC_TRY(m_client.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}));
    if (reply.type != Reply::Type::array || reply.elements.size() != 2)
      return make_error(ErrorCode::io, "remote cache " + m_client.display() + ": SCAN gave an unexpected reply");
    cursor = reply.elements[0].str;
    for (Reply& name : reply.elements[1].elements) names.push_back(std::move(name.str));
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());  // SCAN may repeat a key
  return names;
}

Result<cache::Claim> RemoteTier::claim(const cache::CacheKey& key, std::string_view label) {
  using clock = std::chrono::steady_clock;
  const std::string name = lease_name(key);
  const std::string token = random_token();
  const std::string lifetime = std::to_string(m_options.lease.count());
  const auto start = clock::now();
  const auto deadline = start + m_options.wait;
  bool waiting = false;
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    auto taken = m_client.command({"SET", name, token, "NX", "PX", lifetime});
    if (!taken) {
      count(&cache::Counters::remote_errors);
      return std::unexpected(std::move(taken.error()));
    }
    if (taken->is_ok()) {
      auto lease = std::make_unique<RedisLease>(m_client, name, token, m_options.lease);
      // The previous holder may have stored the entry between our miss and our lease.
      // A value rejected here is the one the Store's get() has just reported (once per
      // request: a poisoned key must not count two rejections and log two warnings).
      auto stored = fetch(key, Report::quietly);
      if (stored && *stored) {
        count(&cache::Counters::remote_hits);
        return cache::Claim{std::move(*stored), nullptr};
      }
      return cache::Claim{std::nullopt, std::move(lease)};
    }
    if (lease_without_expiry(name)) {
      const std::string line = "remote cache: the lease " + name +
                               " has no expiry, so no node holds it (set by hand or by a broken client); "
                               "compiling " + std::string(label.empty() ? key.to_hex() : label) +
                               " here without it (`jitcache clear --remote --stale` removes such leases)";
      if (!m_warned_broken_lease.exchange(true)) log_warning(line);
      else log_debug(line);
      return cache::Claim{};
    }
    if (!waiting) {
      waiting = true;
      count(&cache::Counters::remote_lease_waits);
      log_info("remote cache: another node is compiling " + std::string(label.empty() ? key.to_hex() : label) +
               "; waiting for it (at most " + std::to_string(m_options.wait.count()) + " ms)");
    }
    if (clock::now() >= deadline) {
      log_warning("remote cache: waited " + std::to_string(m_options.wait.count()) + " ms for another node compiling " +
                  std::string(label.empty() ? key.to_hex() : label) + "; compiling it here too");
      return cache::Claim{};
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
    // Polled every 100 ms: a poisoned value must not log a warning per poll.
    auto stored = fetch(key, Report::quietly);
    if (!stored) return std::unexpected(std::move(stored.error()));
    if (*stored) {
      count(&cache::Counters::remote_hits);
      return cache::Claim{std::move(*stored), nullptr};
    }
  }
}

bool RemoteTier::lease_without_expiry(const std::string& name) {
  auto ttl = m_client.command({"PTTL", name});
  if (!ttl) {
    log_debug("remote cache: the expiry of lease " + name + ": " + ttl.error().to_string());
    return false;
  }
  return ttl->type == Reply::Type::integer && ttl->integer == -1;
}

}  // namespace jitcache::remote
