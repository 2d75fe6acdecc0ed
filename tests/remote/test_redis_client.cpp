// RedisClient against a real redis-server: replies, pipelines, error replies that are not
// transport failures, the password, the database, timeouts and the circuit breaker.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "remote_test_support.hpp"

namespace jitcache::remote {
namespace {

using namespace jitcache::remote::testing;

RedisOptions client_options(const std::string& url, milliseconds breaker = milliseconds(300)) {
  RedisOptions options;
  auto parsed = parse_redis_url(url, "test");
  EXPECT_TRUE(parsed.has_value());
  if (parsed) options.url = *parsed;
  options.connect_timeout = milliseconds(200);
  options.op_timeout = milliseconds(300);
  options.breaker = breaker;
  return options;
}

TEST(RedisClientTest, RepliesOfEveryType) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url()));
  auto set = client.command({"SET", "k", std::string("a\0b", 3)});
  ASSERT_OK(set);
  EXPECT_TRUE(set->is_ok());
  auto get = client.command({"GET", "k"});
  ASSERT_OK(get);
  EXPECT_EQ(get->type, Reply::Type::string);
  EXPECT_EQ(get->str, std::string("a\0b", 3)) << "binary-safe";
  auto missing = client.command({"GET", "absent"});
  ASSERT_OK(missing);
  EXPECT_TRUE(missing->is_nil());
  auto n = client.command({"INCRBY", "counter", "41"});
  ASSERT_OK(n);
  EXPECT_EQ(n->type, Reply::Type::integer);
  EXPECT_EQ(n->integer, 41);
  ASSERT_OK(client.command({"RPUSH", "list", "x", "y"}));
  auto list = client.command({"LRANGE", "list", "0", "-1"});
  ASSERT_OK(list);
  ASSERT_EQ(list->type, Reply::Type::array);
  ASSERT_EQ(list->elements.size(), 2u);
  EXPECT_EQ(list->elements[1].str, "y");
  EXPECT_FALSE(client.breaker_open());
}

TEST(RedisClientTest, PipelineKeepsOrderAndErrorRepliesInPlace) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url()));
  auto replies = client.pipeline({{"SET", "a", "1"}, {"INCR", "a"}, {"LPUSH", "a", "x"}, {"GET", "a"}});
  ASSERT_OK(replies);
  ASSERT_EQ(replies->size(), 4u);
  EXPECT_TRUE((*replies)[0].is_ok());
  EXPECT_EQ((*replies)[1].integer, 2);
  EXPECT_EQ((*replies)[2].type, Reply::Type::error);
  EXPECT_NE((*replies)[2].str.find("WRONGTYPE"), std::string::npos);
  EXPECT_EQ((*replies)[3].str, "2");
  auto none = client.pipeline({});
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
}

TEST(RedisClientTest, AnErrorReplyFailsOneCommandAndLeavesTheBreakerClosed) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url()));
  ASSERT_OK(client.command({"SET", "s", "text"}));
  auto wrong = client.command({"LPUSH", "s", "x"});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::io);
  EXPECT_NE(wrong.error().message.find("LPUSH refused: WRONGTYPE"), std::string::npos) << wrong.error().message;
  EXPECT_FALSE(client.breaker_open()) << "the server answered: not a transport failure";
  EXPECT_OK(client.command({"PING"}));
}

TEST(RedisClientTest, DatabaseNumberIsSelected) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient db3(client_options(server->url() + "/3"));
  ASSERT_OK(db3.command({"SET", "where", "three"}));
  RedisClient db0(client_options(server->url()));
  auto in_db0 = db0.command({"GET", "where"});
  ASSERT_OK(in_db0);
  EXPECT_TRUE(in_db0->is_nil());
  auto in_db3 = server->command({"EVAL", "redis.call('select', 3) return redis.call('get', 'where')", "0"});
  ASSERT_OK(in_db3);
  EXPECT_EQ(in_db3->str, "three");
}

TEST(RedisClientTest, PasswordIsSentAndAWrongOneOpensTheBreaker) {
  auto server = start_server({.password = "right-password"});
  ASSERT_TRUE(server);
  RedisClient good(client_options(server->url()));
  EXPECT_OK(good.command({"PING"}));

  const std::string wrong_url = "redis://:wrong-password@127.0.0.1:" + std::to_string(server->port());
  RedisClient wrong(client_options(wrong_url));
  auto refused = wrong.command({"PING"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable);
  EXPECT_NE(refused.error().message.find("AUTH refused"), std::string::npos) << refused.error().message;
  EXPECT_EQ(refused.error().message.find("wrong-password"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(wrong.breaker_open());

  RedisClient none(client_options(server->url(/*with_password=*/false)));
  auto anonymous = none.command({"GET", "k"});
  ASSERT_FALSE(anonymous);
  EXPECT_NE(anonymous.error().message.find("NOAUTH"), std::string::npos) << anonymous.error().message;
}

TEST(RedisClientTest, DeadServerCostsOneConnectThenNothingUntilTheBreakerCloses) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url(), milliseconds(400)));
  ASSERT_OK(client.command({"SET", "k", "v"}));
  server->kill();

  auto start = std::chrono::steady_clock::now();
  auto first = client.command({"GET", "k"});
  const double first_ms = ms_since(start);
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code, ErrorCode::unavailable);
  EXPECT_NE(first.error().message.find("not asked again for 400 ms"), std::string::npos) << first.error().message;
  EXPECT_LT(first_ms, 200 + 300 + 200) << "one connect or one operation timeout, with slack";
  EXPECT_TRUE(client.breaker_open());

  start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    auto skipped = client.command({"GET", "k"});
    ASSERT_FALSE(skipped);
    EXPECT_NE(skipped.error().message.find("skipped for another"), std::string::npos) << skipped.error().message;
  }
  EXPECT_LT(ms_since(start), 50.0) << "an open breaker touches no network";

  ASSERT_OK(server->restart());
  std::this_thread::sleep_for(milliseconds(450));
  EXPECT_FALSE(client.breaker_open());
  auto again = client.command({"SET", "k", "w"});
  ASSERT_OK(again);
  EXPECT_TRUE(again->is_ok());
}

TEST(RedisClientTest, PausedServerCostsOneOperationTimeout) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url(), milliseconds(300)));
  ASSERT_OK(client.command({"PING"}));  // the connection is open before the pause
  ASSERT_OK(server->pause(milliseconds(1500)));
  const auto start = std::chrono::steady_clock::now();
  auto stalled = client.command({"GET", "k"});
  const double ms = ms_since(start);
  ASSERT_FALSE(stalled);
  EXPECT_EQ(stalled.error().code, ErrorCode::unavailable);
  EXPECT_NE(stalled.error().message.find("timed out"), std::string::npos) << stalled.error().message;
  EXPECT_GE(ms, 250.0);
  EXPECT_LT(ms, 300.0 + 400.0);
  EXPECT_TRUE(client.breaker_open());
}

TEST(RedisClientTest, ConcurrentCommandsShareThePool) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RedisClient client(client_options(server->url()));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        if (!client.command({"INCR", "n"})) ++failures;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto n = client.command({"GET", "n"});
  ASSERT_OK(n);
  EXPECT_EQ(n->str, "400");
}

}  // namespace
}  // namespace jitcache::remote
