// The remote tier as a fleet uses it, through the CLI: cache directories stand for nodes,
// a real redis-server (tests/redis_server.hpp) for the fleet's Redis. Two nodes share one
// compile per variant; sixteen concurrent warms on two nodes compile each variant once; a
// remote that is dead, paused, emptied or refusing the password never fails a warm; and
// `remote status`, `remote push`, `audit --remote` and `clear --remote` do what an
// operator needs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_json_checks.hpp"
#include "cli_remote_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace testing;  // the fleet fixture (cli_remote_fixture.hpp) and the CLI runner

// ---- two nodes --------------------------------------------------------------------------

TEST_F(CliRemoteTest, SecondNodeGetsEveryVariantFromTheRemoteAndKeepsIt) {
  const json a = warm("a");
  EXPECT_EQ(a["compiled"], k_variants);
  EXPECT_EQ(a["from_remote"], 0);
  const json a_stats = stats("a");
  EXPECT_EQ(a_stats["compiles"], k_variants);
  EXPECT_EQ(a_stats["remote"]["uploads"], k_variants);
  EXPECT_EQ(a_stats["remote"]["errors"], 0);

  const json b = warm("b");
  EXPECT_EQ(b["compiled"], 0);
  EXPECT_EQ(b["from_remote"], k_variants);
  EXPECT_EQ(b["stored"], k_variants);
  for (const json& v : b["variants"]) EXPECT_TRUE(v["from_remote"].get<bool>()) << v.dump();
  const json b_stats = stats("b");
  EXPECT_EQ(b_stats["compiles"], 0);
  EXPECT_EQ(b_stats["remote"]["hits"], k_variants);
  EXPECT_EQ(b_stats["remote"]["rejected"], 0);
  EXPECT_EQ(b_stats["remote"]["uploads"], 0);
  EXPECT_EQ(b_stats["entries"], k_variants);

  // Backfilled: with the remote gone, node b still compiles nothing.
  m_server->kill();
  const json again = warm("b");
  EXPECT_EQ(again["compiled"], 0);
  EXPECT_EQ(again["from_remote"], 0);
  EXPECT_EQ(stats("b")["compiles"], 0);

  // The human line names the remote's share.
  const CliOutcome text = jc("c", {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90"});
  EXPECT_EQ(text.code, 0) << text.err;  // a dead remote: compiled here
  EXPECT_NE(text.out.find("compiled 4, stored 4 of 4"), std::string::npos) << text.out;
}

// 2 nodes x 8 processes, every cache cold: the leases let one process of the fleet compile
// each variant; every other one waits for it (same node: the key's file lock; other node:
// the Redis lease) and loads the entry.
TEST_F(CliRemoteTest, SixteenConcurrentWarmsOnTwoNodesCompileEachVariantOnce) {
  constexpr int k_per_node = 8;
  std::vector<CliOutcome> outcomes(2 * k_per_node);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2 * k_per_node; ++i)
    threads.emplace_back([&, i] {
      const std::string node = i % 2 == 0 ? "a" : "b";
      outcomes[static_cast<std::size_t>(i)] =
          jc(node, warm_args(), dir() / "scratch" / std::to_string(i));
    });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t compiled_by_processes = 0;
  for (const CliOutcome& o : outcomes) {
    ASSERT_EQ(o.code, 0) << o.out << o.err;
    compiled_by_processes += parse(o)["compiled"].get<std::size_t>();
    EXPECT_EQ(count_lines(o.err, "WARNING"), 0u) << o.err;
  }
  const json a = stats("a"), b = stats("b");
  EXPECT_EQ(a["compiles"].get<std::size_t>() + b["compiles"].get<std::size_t>(), k_variants)
      << a.dump() << b.dump();
  EXPECT_EQ(compiled_by_processes, k_variants);
  EXPECT_EQ(a["remote"]["uploads"].get<std::size_t>() + b["remote"]["uploads"].get<std::size_t>(), k_variants);
  EXPECT_EQ(a["entries"], k_variants);
  EXPECT_EQ(b["entries"], k_variants);
  std::printf("16 concurrent warms on 2 nodes: %.1f s, compiles a=%zu b=%zu\n", seconds,
              a["compiles"].get<std::size_t>(), b["compiles"].get<std::size_t>());
}

// ---- faults: every warm succeeds from the local tiers, soon, with one warning ------------

// A warm on a cold node despite the fault: compiles everything, within `budget`, with
// exactly one warning, about the remote.
void expect_local_warm(const CliOutcome& o, double seconds, double budget) {
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  json doc = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << o.out;
  EXPECT_EQ(doc["compiled"], k_variants);
  EXPECT_EQ(doc["stored"], k_variants);
  EXPECT_EQ(count_lines(o.err, "WARNING"), 1u) << o.err;
  EXPECT_EQ(count_lines(o.err, "WARNING: cache: tier redis"), 1u) << o.err;
  EXPECT_LT(seconds, budget) << o.err;
}

double timed(const std::function<CliOutcome()>& run, CliOutcome& outcome) {
  const auto start = std::chrono::steady_clock::now();
  outcome = run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A cold warm alone, for the budget: what the fault may add is the connect or operation
// timeout once (the breaker then keeps the remote out of the way).
TEST_F(CliRemoteTest, WarmWithTheRemoteKilledBeforeOrDuring) {
  m_server->kill();
  CliOutcome before;
  const double before_s = timed([&] { return jc("a", warm_args()); }, before);
  expect_local_warm(before, before_s, 30.0);
  EXPECT_EQ(stats("a")["remote"]["uploads"], 0);

  ASSERT_TRUE(m_server->restart());
  CliOutcome during;
  std::thread warm([&] { during = jc("b", warm_args()); });
  // The remote dies after the warm's first upload: the warm has compiled one or two of its
  // variants (two at a time) and has the others still to compile and upload.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto entries = m_server->command({"KEYS", "jitcache:v1:entry:*"});
    ASSERT_TRUE(entries) << entries.error().to_string();
    if (!entries->elements.empty() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  m_server->kill();
  warm.join();
  ASSERT_EQ(during.code, 0) << during.err;
  const json doc = parse(during);
  EXPECT_EQ(doc["compiled"], k_variants);
  EXPECT_EQ(doc["stored"], k_variants);
  EXPECT_EQ(count_lines(during.err, "WARNING"), 1u) << during.err;
  EXPECT_EQ(count_lines(during.err, "WARNING: cache: tier redis"), 1u) << during.err;
  const json b = stats("b");
  EXPECT_GE(b["remote"]["uploads"].get<std::size_t>(), 1u) << b.dump();
  EXPECT_LT(b["remote"]["uploads"].get<std::size_t>(), k_variants) << b.dump();
  EXPECT_GE(b["remote"]["errors"].get<std::size_t>(), 1u) << b.dump();
}

TEST_F(CliRemoteTest, WarmWithTheRemotePausedBeyondTheTimeout) {
  ASSERT_TRUE(m_server->pause(std::chrono::seconds(20)));
  CliOutcome o;
  const double s = timed([&] { return jc("a", warm_args()); }, o);
  // One operation timeout (300 ms) at most before the breaker opens, then none.
  expect_local_warm(o, s, 30.0);
  EXPECT_GE(stats("a")["remote"]["errors"].get<int>(), 1);
}

TEST_F(CliRemoteTest, WarmWithTheRemoteRestartedEmpty) {
  warm("a");
  ASSERT_TRUE(m_server->restart());
  // Node a keeps what it has; node b finds an empty remote (not a fault: no warning),
  // compiles and fills it again.
  const CliOutcome a = jc("a", warm_args());
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(parse(a)["compiled"], 0);
  const CliOutcome b = jc("b", warm_args());
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(parse(b)["compiled"], k_variants);
  EXPECT_EQ(count_lines(b.err, "WARNING"), 0u) << b.err;
  EXPECT_EQ(stats("b")["remote"]["uploads"], k_variants);
}

TEST_F(CliRemoteTest, WarmWithAWrongPassword) {
  auto server = RedisServer::start({.password = "the-right-password"});
  ASSERT_TRUE(server) << server.error().to_string();
  m_remote = "redis://:a-wrong-password@127.0.0.1:" + std::to_string((*server)->port());
  CliOutcome o;
  const double s = timed([&] { return jc("a", warm_args()); }, o);
  expect_local_warm(o, s, 30.0);
  EXPECT_EQ(o.err.find("a-wrong-password"), std::string::npos) << "the password is never shown:\n" << o.err;
}

// ---- remote status ----------------------------------------------------------------------

TEST_F(CliRemoteTest, StatusReportsReachabilityEntriesAndKey) {
  warm("a");
  const CliOutcome o = jc("", {"remote", "status", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  expect_fields(doc, {{"configured", true},
                      {"remote", m_server->url(false)},
                      {"source", "JITCACHE_REMOTE"},
                      {"prefix", "jitcache:"},
                      {"key_configured", true},
                      {"reachable", true},
                      {"entries", k_variants},
                      {"leases", 0}});
  EXPECT_TRUE(doc["latency_ms"].is_number());
  EXPECT_GT(doc["latency_ms"].get<double>(), 0.0);
  EXPECT_TRUE(doc["server_version"].is_string()) << doc.dump();
  EXPECT_EQ(doc["usable"], true);

  const CliOutcome text = jc("", {"remote", "status"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("entries    4"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reachable  yes"), std::string::npos) << text.out;

  // --remote beats JITCACHE_REMOTE.
  m_remote = "redis://127.0.0.1:1";
  const CliOutcome flag = jc("", {"--remote", m_server->url(), "remote", "status", "--json"});
  EXPECT_EQ(flag.code, 0) << flag.err;
  EXPECT_EQ(parse(flag)["source"], "--remote");
}

TEST_F(CliRemoteTest, StatusOfAnUnreachableRemoteIsAnError) {
  const int port = m_server->port();
  m_server->kill();
  const CliOutcome o = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  expect_fields(parse(o), {{"reachable", false}, {"key_configured", true}, {"usable", false}, {"entries", nullptr}});
  EXPECT_NE(o.err.find("unreachable"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(std::to_string(port)), std::string::npos) << o.err;
}

TEST_F(CliRemoteTest, StatusWithoutAKeySaysSo) {
  m_key_file.clear();
  const CliOutcome o = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["key_configured"], false);
  EXPECT_EQ(doc["reachable"], true);  // reachability does not need the key
  EXPECT_NE(doc["key_problem"].get<std::string>().find("no fleet key"), std::string::npos) << doc.dump();
  EXPECT_NE(o.err.find("no fleet key"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("JITCACHE_REMOTE_KEY_FILE"), std::string::npos) << o.err;

  const CliOutcome text = jc("", {"remote", "status"});
  EXPECT_EQ(text.code, 2);
  EXPECT_NE(text.out.find("fleet key  NONE"), std::string::npos) << text.out;
}

TEST_F(CliRemoteTest, StatusRefusesAnUnsafeKeyAndNoRemote) {
  fs::permissions(m_key_file, fs::perms::group_read | fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::replace);
  const CliOutcome unsafe = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(unsafe.code, 2);
  EXPECT_EQ(parse(unsafe)["key_configured"], false);
  EXPECT_NE(unsafe.err.find(m_key_file.string()), std::string::npos) << unsafe.err;

  m_remote.clear();
  const CliOutcome none = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(parse(none)["configured"], false);
  EXPECT_NE(none.err.find("no remote cache configured"), std::string::npos) << none.err;
}

// ---- remote push ------------------------------------------------------------------------

TEST_F(CliRemoteTest, PushUploadsLocalEntriesOnce) {
  // A node warmed before the fleet had a remote.
  const std::string remote = m_remote;
  m_remote.clear();
  warm("a");
  m_remote = remote;

  const CliOutcome first = jc("a", {"remote", "push", "--json"});
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const json pushed = parse(first);
  EXPECT_EQ(pushed["entries"], k_variants);
  EXPECT_EQ(pushed["uploaded"], k_variants);
  EXPECT_EQ(pushed["already_present"], 0);
  EXPECT_TRUE(pushed["skipped"].empty());

  const CliOutcome second = jc("a", {"remote", "push"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("0 uploaded, 4 already present, 0 skipped"), std::string::npos) << second.out;

  // Filters: only the writer entries are considered.
  const CliOutcome writers = jc("a", {"remote", "push", "--kernel", "writer", "--json"});
  ASSERT_EQ(writers.code, 0) << writers.err;
  EXPECT_EQ(parse(writers)["entries"], 2);

  // What was pushed serves another node.
  const json b = warm("b");
  EXPECT_EQ(b["compiled"], 0);
  EXPECT_EQ(b["from_remote"], k_variants);
}

TEST_F(CliRemoteTest, PushWithoutAKeyOrRemoteIsRefused) {
  warm("a");
  m_key_file.clear();
  const CliOutcome no_key = jc("a", {"remote", "push"});
  EXPECT_EQ(no_key.code, 2);
  EXPECT_EQ(no_key.out, "");
  EXPECT_NE(no_key.err.find("no fleet key"), std::string::npos) << no_key.err;
}

// ---- audit --remote and clear --remote --------------------------------------------------

TEST_F(CliRemoteTest, AuditRemoteFindsPoisonedEntriesAndClearRemovesThem) {
  warm("a");
  const CliOutcome clean = jc("", {"audit", "--remote", "--json"});
  ASSERT_EQ(clean.code, 0) << clean.out << clean.err;
  EXPECT_EQ(parse(clean)["verified"], k_variants);
  EXPECT_TRUE(parse(clean)["findings"].empty());

  auto entries = remote_entries();
  ASSERT_EQ(entries.size(), k_variants);
  const auto& [garbage_name, garbage_entry] = entries.at("gather/identity");
  const auto& [resigned_name, resigned_entry] = entries.at("gather/dynamic");
  const auto& [dynamic_name, dynamic_entry] = entries.at("writer/dynamic");
  const auto& identity_entry = entries.at("writer/identity").second;
  // Garbage; a valid value signed with another fleet's key; and the field failure: the
  // identity writer's bundle under the dynamic writer's key and facts, signed with this
  // fleet's key (a writer holding the key, but buggy).
  ASSERT_TRUE(m_server->command({"SET", garbage_name, "not a jitcache value"}));
  const std::string other_key(32, 'x');
  ASSERT_TRUE(m_server->command({"SET", resigned_name,
                                 remote::encode_signed_entry(resigned_name, other_key, resigned_entry.facts,
                                                             resigned_entry.bytes, resigned_entry.compile_ms)}));
  ASSERT_TRUE(m_server->command({"SET", dynamic_name,
                                 remote::encode_signed_entry(dynamic_name, fleet_key(), dynamic_entry.facts,
                                                             identity_entry.bytes, 1.0)}));
  // A lease of a node compiling now, and a name of another format version.
  const std::string lease = "jitcache:v1:lease:" + std::string(32, '0');
  ASSERT_TRUE(m_server->command({"SET", lease, "token", "PX", "600000"}));
  ASSERT_TRUE(m_server->command({"SET", "jitcache:v9:entry:0123", "from the future"}));

  const CliOutcome audit = jc("", {"audit", "--remote", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  EXPECT_EQ(report["entries"], k_variants);
  EXPECT_EQ(report["verified"], 1);
  EXPECT_EQ(report["leases"], 1);
  std::map<std::string, json> by_name;
  for (const json& f : report["findings"]) by_name[f["name"].get<std::string>()] = f;
  ASSERT_EQ(by_name.size(), 4u) << report.dump(2);
  EXPECT_EQ(by_name[garbage_name]["kind"], "rejected");
  EXPECT_EQ(by_name[garbage_name]["key"], garbage_name.substr(garbage_name.rfind(':') + 1));
  // Another key's signature, or another format: not provably this fleet's.
  EXPECT_EQ(by_name[resigned_name]["kind"], "foreign");
  EXPECT_EQ(by_name[resigned_name]["reason"], "bad signature");
  EXPECT_EQ(by_name[dynamic_name]["kind"], "stale-identity");
  EXPECT_EQ(by_name[dynamic_name]["kernel"], "writer");
  EXPECT_EQ(by_name["jitcache:v9:entry:0123"]["kind"], "foreign");
  EXPECT_EQ(by_name["jitcache:v9:entry:0123"]["reason"], "another format version");

  // The human report names each key.
  const CliOutcome text = jc("", {"audit", "--remote"});
  EXPECT_EQ(text.code, 1);
  for (const std::string& name : {garbage_name, resigned_name, dynamic_name})
    EXPECT_NE(text.out.find(name), std::string::npos) << text.out;

  // Dry run: listed, nothing removed; the foreign ones are kept.
  const CliOutcome dry = jc("", {"clear", "--remote", "--stale", "--dry-run", "--json"});
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_EQ(parse(dry)["removed"].size(), 2u);
  EXPECT_EQ(parse(dry)["kept"].size(), 2u);
  EXPECT_EQ(parse(jc("", {"audit", "--remote", "--json"}))["findings"].size(), 4u);

  const CliOutcome stale = jc("", {"clear", "--remote", "--stale"});
  ASSERT_EQ(stale.code, 0) << stale.err;
  EXPECT_NE(stale.out.find("removed 2 flagged name(s) of 4 remote entries"), std::string::npos) << stale.out;
  EXPECT_NE(stale.out.find("kept 2 foreign"), std::string::npos) << stale.out;
  const json after = parse(jc("", {"audit", "--remote", "--json"}));
  EXPECT_EQ(after["findings"].size(), 2u) << after.dump(2);
  EXPECT_EQ(after["verified"], 1);
  EXPECT_EQ(after["leases"], 1);  // leases are not stale

  // A node asking again compiles the removed variants and uploads them.
  const json b = warm("b");
  EXPECT_EQ(b["compiled"], 3);
  EXPECT_EQ(b["from_remote"], 1);

  // --all: entries and leases, the foreign ones only with --foreign; the local caches
  // stay as they are.
  const CliOutcome all_dry = jc("", {"clear", "--remote", "--all", "--dry-run"});
  ASSERT_EQ(all_dry.code, 0) << all_dry.err;
  EXPECT_NE(all_dry.out.find("would remove 4 name(s) under jitcache:"), std::string::npos) << all_dry.out;
  EXPECT_NE(all_dry.out.find("kept 2 foreign"), std::string::npos) << all_dry.out;
  const CliOutcome all = jc("", {"clear", "--remote", "--all", "--foreign", "--json"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(parse(all)["removed"].size(), 6u);
  auto left = m_server->command({"DBSIZE"});
  ASSERT_TRUE(left);
  EXPECT_EQ(left->integer, 0);
  EXPECT_EQ(stats("a")["entries"], k_variants);
  EXPECT_EQ(stats("b")["entries"], k_variants);
}

TEST_F(CliRemoteTest, RemoteAuditAndClearUsageErrors) {
  m_remote.clear();
  const CliOutcome none = jc("", {"audit", "--remote"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no remote cache configured"), std::string::npos) << none.err;
  const CliOutcome both = jc("", {"--remote", m_server->url(), "clear", "--remote", "--all", "--stale"});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("exactly one of --all or --stale"), std::string::npos) << both.err;
  const CliOutcome neither = jc("", {"--remote", m_server->url(), "clear", "--remote"});
  EXPECT_EQ(neither.code, 2);
  const CliOutcome checkpoint =
      jc("", {"--remote", m_server->url(), "audit", "--remote", "--checkpoint", k_checkpoint.string()});
  EXPECT_EQ(checkpoint.code, 2);
  m_server->kill();
  const CliOutcome down = jc("", {"--remote", "redis://127.0.0.1:1", "audit", "--remote"});
  EXPECT_EQ(down.code, 2) << down.out << down.err;
}

TEST_F(CliRemoteTest, HelpListsTheRemoteCommands) {
  const CliOutcome root = jc("", {"--help"});
  EXPECT_EQ(root.code, 0);
  EXPECT_NE(root.out.find("remote"), std::string::npos) << root.out;
  const CliOutcome remote = jc("", {"remote", "--help"});
  EXPECT_EQ(remote.code, 0);
  EXPECT_NE(remote.out.find("status"), std::string::npos) << remote.out;
  EXPECT_NE(remote.out.find("push"), std::string::npos) << remote.out;
  EXPECT_NE(jc("", {"audit", "--help"}).out.find("--remote"), std::string::npos);
  EXPECT_NE(jc("", {"clear", "--help"}).out.find("--remote"), std::string::npos);
}

}  // namespace
}  // namespace jitcache
