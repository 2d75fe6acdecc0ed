// Helpers shared by the remote tier's tests: a node (a cache directory with its own
// RemoteTier, as one machine of a fleet has), short timeouts, and bytes and facts.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "cache/cache_test_support.hpp"
#include "cache/store.hpp"
#include "redis_server.hpp"
#include "remote/remote_tier.hpp"
#include "test_support.hpp"

namespace jitcache::remote::testing {

// The store's vocabulary that every remote test speaks; `using namespace
// jitcache::remote::testing` brings it in.
using cache::Counters;
using cache::Facts;
using cache::Source;
using cache::testing::CountingProducer;
using jitcache::cache::testing::make_bytes;
using jitcache::cache::testing::sample_facts;
using jitcache::testing::RedisServer;
using std::chrono::milliseconds;

inline std::string bytes_string(const cache::Bytes& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

inline cache::Bytes to_bytes(std::string_view text) {
  const auto* begin = reinterpret_cast<const std::byte*>(text.data());
  return cache::Bytes(begin, begin + text.size());
}

// Options for a tier talking to `url`, with timeouts short enough for tests: a dead server
// costs a test 200-300 ms, not the production defaults.
inline RemoteTierOptions fast_options(const std::string& url, std::string fleet_key) {
  RemoteTierOptions options;
  auto parsed = parse_redis_url(url, "test");
  EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().to_string());
  if (parsed) options.redis.url = *parsed;
  options.redis.connect_timeout = std::chrono::milliseconds(200);
  options.redis.op_timeout = std::chrono::milliseconds(300);
  options.redis.breaker = std::chrono::milliseconds(2000);
  options.fleet_key = std::move(fleet_key);
  options.lease = std::chrono::milliseconds(2000);
  options.wait = std::chrono::milliseconds(5000);
  return options;
}

// Passes every call on to a tier and adds up the time spent in it: what the remote costs
// a call, apart from the disk writes and producers around it (which a loaded machine
// makes slow for reasons of its own).
class TimedTier final : public cache::StorageTier {
 public:
  explicit TimedTier(std::shared_ptr<cache::StorageTier> inner) : m_inner(std::move(inner)) {}

 private:
  template <class F>
  decltype(auto) timed(F f) {
    const auto start = std::chrono::steady_clock::now();
    decltype(f()) result = f();
    m_spent_us += std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start)
                      .count();
    return result;
  }

 public:
  cache::Tier kind() const override { return m_inner->kind(); }
  std::string name() const override { return m_inner->name(); }
  Result<std::optional<cache::TierHit>> get(const cache::CacheKey& key) override {
    return timed([&] { return m_inner->get(key); });
  }
  Status put(const cache::CacheKey& key, const cache::TierEntry& entry) override {
    return timed([&] { return m_inner->put(key, entry); });
  }
  Result<std::optional<cache::TierHit>> create(const cache::CacheKey& key, const cache::TierEntry& entry) override {
    return timed([&] { return m_inner->create(key, entry); });
  }
  Status remove(const cache::CacheKey& key) override {
    return timed([&] { return m_inner->remove(key); });
  }
  Result<cache::Claim> claim(const cache::CacheKey& key, std::string_view label) override {
    return timed([&] { return m_inner->claim(key, label); });
  }
  void count_into(cache::CountSink sink) override { m_inner->count_into(std::move(sink)); }

  double spent_ms() const { return static_cast<double>(m_spent_us.load()) / 1000.0; }

 private:
  std::shared_ptr<cache::StorageTier> m_inner;
  std::atomic<std::int64_t> m_spent_us{0};
};

// One machine of the fleet: its own cache directory and its own connection to Redis.
struct Node {
  std::shared_ptr<RemoteTier> tier;
  std::shared_ptr<TimedTier> timed;  // `tier` as the store sees it
  std::unique_ptr<cache::Store> store;

  // Destroys the store before the tier: the tier's count sink points into the store.
  void close() {
    store.reset();
    timed.reset();
    tier.reset();
  }
};

inline Node open_node(const std::filesystem::path& root, const RemoteTierOptions& options) {
  Node node;
  node.tier = std::make_shared<RemoteTier>(options);
  node.timed = std::make_shared<TimedTier>(node.tier);
  cache::StoreOptions store_options;
  store_options.extra_tiers = {node.timed};
  auto store = cache::Store::open(root, std::move(store_options));
  EXPECT_TRUE(store.has_value()) << store.error().to_string();
  if (store) node.store = std::move(*store);
  return node;
}

inline std::unique_ptr<cache::Store> open_local_only(const std::filesystem::path& root) {
  auto store = cache::Store::open(root);
  EXPECT_TRUE(store.has_value()) << store.error().to_string();
  return store ? std::move(*store) : nullptr;
}

inline std::unique_ptr<RedisServer> start_server(RedisServer::Options options = {}) {
  auto server = RedisServer::start(std::move(options));
  EXPECT_TRUE(server.has_value()) << server.error().to_string();
  return server ? std::move(*server) : nullptr;
}

inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A fresh temporary directory and a fresh redis-server for each test.
class RedisTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    server = start_server();
    ASSERT_TRUE(server);
  }
  // The remote tier's options for this test's server, with short timeouts.
  RemoteTierOptions options() const { return fast_options(server->url(), fleet_key); }

  std::string fleet_key = std::string(32, 'K');
  std::unique_ptr<RedisServer> server;
};

}  // namespace jitcache::remote::testing
