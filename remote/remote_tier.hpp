// RemoteTier: a cache tier shared by a fleet, on Redis, that no node has to trust.
//
// Keys. Under a prefix (JITCACHE_REMOTE_PREFIX, default "jitcache:"):
//   <prefix>v1:entry:<cache key hex>   a signed value (remote/signed_entry.hpp)
//   <prefix>v1:lease:<cache key hex>   a compile lease: a random token, with an expiry
// A name belongs to one prefix only (remote/remote_names.hpp has the grammar): a fleet
// under "jitcache:" never reads, counts or removes the names of a fleet under "jitcache:b:".
//
// Reads. get() reads at most max_entry_bytes + 1 bytes (GETRANGE), so a value larger than
// the bound is rejected without being transferred; then checks length, format, the
// HMAC-SHA256 signature under the fleet key (which covers the Redis key name), that the
// facts inside hash to the key asked for, the digest of the bytes, and last the caller's
// content check (the kernel cache: the bundle parses and its embedded facts agree). A
// value failing any check is rejected: counted (remote_rejects), logged with its key, and
// treated as a miss; nothing of it is returned.
//
// Writes. put() is SET NX: the first writer wins, nothing is ever overwritten. The Store
// writes the disk first, so an entry is published locally before the remote sees it.
// create() is the same SET NX, which then reads the winner's value back when it lost
// (Store::put_if_absent asks the remote first: a record the fleet shares has one author).
//
// Leases. claim() takes <prefix>v1:lease:<key> with SET NX PX and a random token. The
// holder renews it (every third of its lifetime) while it compiles and deletes it (only
// if it still holds the token) when done; a holder that dies stops renewing, so its lease
// expires and another node takes over. A node that finds the lease taken waits, polling
// for the entry, at most `wait`; it then compiles itself rather than wait forever. A lease
// with no expiry (set by hand or by a broken client) was never taken by a node: it is
// ignored (one warning per tier) and the node compiles at once.
//
// Rejections. A rejected value is counted and warned about once per key and reason in a
// tier's life: the probe and the get of one request, or a later request of the same
// process, read the same poisoned value and do not report it again.
//
// Failures. Every Redis operation is bounded by the client's timeouts and circuit breaker
// (remote/redis_client.hpp). Errors are returned to the Store, which counts them, logs
// one warning per episode and carries on with the local tiers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/tier.hpp"
#include "remote/redis_client.hpp"
#include "remote/remote_names.hpp"
#include "remote/signed_entry.hpp"

namespace jitcache::remote {

// A check of an entry's bytes against its facts, run on every remote value before it is
// served; an error rejects the value (Rejection::bad_content).
using ContentCheck = std::function<Status(const cache::Facts& facts, std::span<const std::byte> bytes)>;

struct RemoteTierOptions {
  RedisOptions redis;
  std::string fleet_key;  // >= 32 bytes (remote/remote_config.hpp reads it)
  std::string prefix = "jitcache:";
  std::uint64_t max_entry_bytes = 16u << 20;
  std::chrono::milliseconds lease{10000};
  std::chrono::milliseconds wait{60000};
  ContentCheck check_content;
};

// What reading one stored value gave, for the CLI's audit.
struct RemoteRead {
  std::optional<SignedEntry> entry;  // verified
  std::optional<Rejected> rejected;  // or why not
  std::uint64_t stored_bytes = 0;    // the value's size in Redis
};

class RemoteTier final : public cache::StorageTier {
 public:
  explicit RemoteTier(RemoteTierOptions options);
  ~RemoteTier() override;

  cache::Tier kind() const override { return cache::Tier::remote; }
  std::string name() const override { return "redis"; }
  Result<std::optional<cache::TierHit>> get(const cache::CacheKey& key) override;
  // A verified read that counts no hit or miss (a rejected value is a miss, logged at debug level).
  Result<std::optional<cache::TierHit>> peek(const cache::CacheKey& key) override {
    return fetch(key, Report::quietly);
  }
  Status put(const cache::CacheKey& key, const cache::TierEntry& entry) override;
  // SET NX, and on losing the value stored first, read back and verified as every value
  // is. A value there that fails verification cannot say who was first: an error (the
  // Store then lets the next tier decide), logged at debug level and not counted as a
  // rejection (the lookup just before has counted and reported it).
  Result<std::optional<cache::TierHit>> create(const cache::CacheKey& key, const cache::TierEntry& entry) override;
  Status remove(const cache::CacheKey& key) override;
  Result<cache::Claim> claim(const cache::CacheKey& key, std::string_view label) override;
  void count_into(cache::CountSink sink) override { m_sink = std::move(sink); }

  // Stores a verified local entry unless the key has one (remote push). Returns whether
  // this call stored it.
  Result<bool> upload(const cache::CacheKey& key, const cache::Facts& facts, std::span<const std::byte> bytes,
                      double compile_ms);

  // For the CLI (remote status, audit --remote, clear --remote).
  RedisClient& client() { return m_client; }
  const RemoteTierOptions& options() const { return m_options; }
  std::string entry_name(const cache::CacheKey& key) const;
  std::string lease_name(const cache::CacheKey& key) const;
  // The start of every entry name and of every lease name under the prefix.
  std::string entry_prefix() const;
  std::string lease_prefix() const;
  // The Redis keys of every stored entry under the prefix (SCAN, not KEYS: the server
  // keeps serving others while it runs).
  Result<std::vector<std::string>> list_entry_names();
  // Every Redis key under the prefix: entries, leases, and names this build does not write
  // (another format version's, or not jitcache's), for the CLI's audit and clear.
  Result<std::vector<std::string>> list_all_names();
  // Reads and checks the value stored under `name` (an entry name; its key comes from the
  // name) without counting anything. std::nullopt when nothing is stored there.
  Result<std::optional<RemoteRead>> read(std::string_view name);
  // What this node may do under the prefix (remote status), each refusal an error with the
  // server's words: write as a lease is taken (SET NX PX, on <prefix>v1:probe:<random>,
  // which expires in 10 s whatever happens), read as an entry is read, delete as a lease
  // is released (a script). `remove` is not tried when nothing could be written.
  struct Access {
    Status read;
    Status write;
    std::optional<Status> remove;
  };
  Access probe_access();
  // The cache key an entry name stands for, or std::nullopt for any other name.
  std::optional<cache::CacheKey> key_of(std::string_view name) const;
  // What `name` is under this tier's prefix (remote/remote_names.hpp).
  ParsedName parse(std::string_view name) const { return parse_name(m_options.prefix, name); }

 private:
  void count(std::uint64_t cache::Counters::*field);
  Result<std::vector<std::string>> scan(const std::string& pattern);
  // Whether fetch() counts and warns about a rejected value, or only logs it at debug
  // level (claim's re-reads: the Store's get() just before has reported that value).
  enum class Report { rejections, quietly };
  // The value under `key`, checked; a rejection is logged and, per `report`, counted.
  Result<std::optional<cache::TierHit>> fetch(const cache::CacheKey& key, Report report = Report::rejections);
  // Whether this rejection of `key` is reported for the first time (then remembered).
  bool first_report(const cache::CacheKey& key, const Rejected& rejected);
  // Whether the lease `name`, found taken, has no expiry: no node holds it. False when
  // that cannot be told (the wait that follows is bounded anyway).
  bool lease_without_expiry(const std::string& name);

  RemoteTierOptions m_options;
  RedisClient m_client;
  cache::CountSink m_sink;
  std::mutex m_reported_mutex;
  std::unordered_set<std::string> m_reported;  // "<key>:<reason>", under m_reported_mutex
  std::atomic<bool> m_warned_broken_lease{false};
};

}  // namespace jitcache::remote
