// RemoteTier against a real redis-server: a signed round trip, first writer wins.
#include <gtest/gtest.h>

#include "redis_server.hpp"
#include "remote/remote_tier.hpp"
#include "test_support.hpp"

namespace jitcache::remote {
namespace {

using jitcache::testing::RedisServer;

RemoteTierOptions options_for(const RedisServer& server, std::string key) {
  RemoteTierOptions options;
  auto url = parse_redis_url(server.url(), "test");
  EXPECT_TRUE(url.has_value());
  options.redis.url = *url;
  options.fleet_key = std::move(key);
  return options;
}

TEST(RemoteTierTest, SignedRoundTripAndFirstWriterWins) {
  auto server = RedisServer::start();
  ASSERT_TRUE(server) << server.error().to_string();
  RemoteTier tier(options_for(**server, std::string(32, 'k')));
  const cache::Facts facts{{"kernel", "writer"}, {"latent_scale", "dynamic"}};
  const cache::CacheKey key = facts.key();
  const std::string text = "cubin bytes";
  const auto bytes = std::make_shared<const cache::Bytes>(reinterpret_cast<const std::byte*>(text.data()),
                                                          reinterpret_cast<const std::byte*>(text.data()) + text.size());
  auto absent = tier.get(key);
  ASSERT_TRUE(absent) << absent.error().to_string();
  EXPECT_FALSE(*absent);
  ASSERT_TRUE(tier.put(key, cache::TierEntry{facts, bytes, 12.5}));
  auto hit = tier.get(key);
  ASSERT_TRUE(hit && *hit);
  EXPECT_EQ(*(*hit)->bytes, *bytes);
  EXPECT_EQ((*hit)->compile_ms, 12.5);
  ASSERT_TRUE((*hit)->facts);
  EXPECT_EQ(*(*hit)->facts, facts);
  // A second upload of the same key stores nothing: SET NX.
  auto again = tier.upload(key, facts, *bytes, 1.0);
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
}

}  // namespace
}  // namespace jitcache::remote
