// The remote tier against a careless operator and a buggy writer holding the fleet key,
// through the CLI (issue 24): the Redis password appears in no output of any command, a
// correctly signed value whose fields the index would refuse is rejected (counted, warned
// about, compiled here, reported by the audit), and a fleet key that cannot be used stops
// the commands whose job is the remote and nothing else.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_remote_fixture.hpp"
#include "remote/signed_entry.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace testing;  // the fleet fixture (cli_remote_fixture.hpp) and the CLI runner


// A password with every character a URL gives a meaning to, and pieces no output holds
// by chance: a leak of any piece is a leak.
const std::string k_secret = "Qz7sekret/Vx9part@Wm4tail:Kp2end";
const std::vector<std::string> k_secret_pieces = {"Qz7sekret", "Vx9part", "Wm4tail", "Kp2end"};

// m_remote: redis://:<secret>@127.0.0.1:<port>, unencoded.
class CliRemoteTrustTest : public testing::RedisFleetTest {
 protected:
  RedisServer::Options redis_options() const override { return {.password = k_secret}; }

  // Every line logged, short timeouts, this fleet's remote and key, and `extra`.
  std::vector<std::string> env(const std::vector<std::string>& extra = {}) const {
    std::map<std::string, std::string> vars{{"JITCACHE_LOG_LEVEL", "debug"},
                                            {"JITCACHE_REMOTE_CONNECT_TIMEOUT_MS", "200"},
                                            {"JITCACHE_REMOTE_TIMEOUT_MS", "300"},
                                            {"JITCACHE_REMOTE_WAIT_MS", "30000"},
                                            {"JITCACHE_REMOTE", m_remote},
                                            {"JITCACHE_REMOTE_KEY_FILE", m_key_file.string()}};
    for (const std::string& e : extra) vars[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
    std::vector<std::string> out;
    for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
    return out;
  }

  CliOutcome jc(const std::string& node, std::vector<std::string> args,
                const std::vector<std::string>& extra_env = {}) const {
    if (!node.empty()) args.insert(args.begin(), {"--cache-dir", (dir() / node).string()});
    return testing::run_cli(dir(), std::move(args), env(extra_env),
                            {"JITCACHE_DIR=", "XDG_CACHE_HOME=", "JITCACHE_REMOTE", "JITCACHE_LOG_LEVEL=",
                             "JITCACHE_REQUIRE_CACHE="});
  }

  static std::vector<std::string> warm_args() {
    return {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--jobs", "2", "--json"};
  }

  static json parse(const CliOutcome& o) { return testing::parse_cli_json(o); }

};

std::string leaked_pieces(const CliOutcome& o) {
  std::string found;
  for (const std::string& piece : k_secret_pieces)
    if (o.out.find(piece) != std::string::npos || o.err.find(piece) != std::string::npos) found += piece + " ";
  return found;
}

// ---- item 11: the password is shown nowhere ---------------------------------------------

TEST_F(CliRemoteTrustTest, NoCommandShowsThePasswordInAnyOutput) {
  const std::string port = std::to_string(m_server->port());
  std::deque<std::pair<std::string, CliOutcome>> runs;  // references into it stay valid
  auto run = [&](const std::string& node, const std::vector<std::string>& args,
                 const std::vector<std::string>& extra = {}) -> const CliOutcome& {
    std::string shown;
    for (const std::string& a : args) shown += a + " ";
    runs.emplace_back(shown, jc(node, args, extra));
    return runs.back().second;
  };
  const CliOutcome& warmed = run("a", warm_args());
  ASSERT_EQ(warmed.code, 0) << warmed.out << warmed.err;
  EXPECT_EQ(parse(warmed)["compiled"], k_variants);
  EXPECT_EQ(parse(run("b", warm_args()))["from_remote"], k_variants) << "the password was sent right";

  // The listing shows the URL with its password hidden, in text and JSON.
  const CliOutcome& listing = run("", {"env"});
  EXPECT_NE(listing.out.find("JITCACHE_REMOTE=redis://:***@127.0.0.1:" + port), std::string::npos) << listing.out;
  const json variables = parse(run("", {"env", "--json"}))["variables"];
  bool listed = false;
  for (const json& v : variables)
    if (v["name"] == "JITCACHE_REMOTE") {
      listed = true;
      EXPECT_EQ(v["value"], "redis://:***@127.0.0.1:" + port);
    }
  EXPECT_TRUE(listed);

  for (const auto& args : std::vector<std::vector<std::string>>{{"remote", "status"},
                                                                 {"remote", "status", "--json"},
                                                                 {"remote", "push"},
                                                                 {"audit", "--remote"},
                                                                 {"audit", "--remote", "--json"},
                                                                 {"clear", "--remote", "--stale", "--dry-run"},
                                                                 {"stats", "--json"}})
    run("a", args);

  // A user name, and malformed URLs around the password: from the environment and from
  // --remote, for a command that fails on them and for a warm that runs without them.
  const std::string with_user = "redis://default:" + k_secret + "@127.0.0.1:" + port;
  EXPECT_EQ(run("a", {"remote", "status"}, {"JITCACHE_REMOTE=" + with_user}).code, 0);
  run("", {"env", "--json"}, {"JITCACHE_REMOTE=" + with_user});
  for (const std::string& bad : {"redis://jc:" + k_secret + "@127.0.0.1:notaport",
                                 "redis://jc:" + k_secret + "@127.0.0.1:" + port + "/db",
                                 "rediss://jc:" + k_secret + "@127.0.0.1", "jc:" + k_secret + "@127.0.0.1:6379",
                                 "redis://jc:" + k_secret + "%zz@127.0.0.1"}) {
    EXPECT_EQ(run("", {"remote", "status"}, {"JITCACHE_REMOTE=" + bad}).code, 2) << bad;
    EXPECT_EQ(run("", {"--remote", bad, "audit", "--remote"}).code, 2) << bad;
    EXPECT_EQ(run("a", {"--remote", bad, "warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90"}).code, 0)
        << bad;
    run("", {"env"}, {"JITCACHE_REMOTE=" + bad});
    run("", {"env", "--json"}, {"JITCACHE_REMOTE=" + bad});
  }
  // A wrong password: the server's refusal is reported, the password sent is not.
  run("a", {"remote", "status"}, {"JITCACHE_REMOTE=redis://:" + k_secret + "x@127.0.0.1:" + port});

  for (const auto& [command, o] : runs) {
    EXPECT_NE(o.code, -1) << command;
    EXPECT_EQ(leaked_pieces(o), "") << command << " shows a piece of the password:\n" << o.out << o.err;
  }
}

// ---- item 12: a signed value's fields pass the index's rules ----------------------------

TEST_F(CliRemoteTrustTest, SignedValuesWithACompileTimeOutOfRangeAreRejectedAndReported) {
  ASSERT_EQ(parse(jc("a", warm_args()))["compiled"], k_variants);
  auto names = m_server->command({"KEYS", "jitcache:v1:entry:*"});
  ASSERT_TRUE(names) << names.error().to_string();
  ASSERT_EQ(names->elements.size(), k_variants);
  // A writer holding the fleet key, but buggy: each entry re-signed with a compile time
  // the index cannot hold (NaN: NOT NULL failed; the rest: verify called it damaged).
  const std::vector<double> bad = {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 1e300};
  std::map<std::string, double> poisoned;
  for (std::size_t i = 0; i < k_variants; ++i) {
    const std::string& name = names->elements[i].str;
    auto value = m_server->command({"GET", name});
    ASSERT_TRUE(value);
    auto key = cache::CacheKey::from_hex(name.substr(std::string("jitcache:v1:entry:").size()));
    ASSERT_TRUE(key.has_value());
    auto entry = remote::decode_signed_entry(name, fleet_key(), value->str, *key);
    ASSERT_TRUE(entry.has_value()) << entry.error().to_string();
    ASSERT_TRUE(m_server->command(
        {"SET", name, remote::encode_signed_entry(name, fleet_key(), entry->facts, entry->bytes, bad[i])}));
    poisoned[name] = bad[i];
  }

  for (const std::string node : {"b", "c"}) {
    const CliOutcome warm = jc(node, warm_args());
    ASSERT_EQ(warm.code, 0) << node << ": " << warm.out << warm.err;
    EXPECT_EQ(parse(warm)["compiled"], k_variants) << "every poisoned variant compiled here";
    EXPECT_EQ(parse(warm)["from_remote"], 0);
    for (const auto& [name, ms] : poisoned)
      EXPECT_NE(warm.err.find(name), std::string::npos) << "a warning names " << name << ":\n" << warm.err;
    EXPECT_NE(warm.err.find("compile_ms: "), std::string::npos) << warm.err;
    const json stats = parse(jc(node, {"stats", "--json"}));
    // At least one rejection per poisoned variant (how many per warm is counted is not
    // this test's business: a value may be read again while its lease is taken).
    EXPECT_GE(stats["remote"]["rejected"].get<std::size_t>(), k_variants) << stats.dump(2);
    const CliOutcome verify = jc(node, {"verify"});
    EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
    EXPECT_EQ(verify.out.find("DAMAGED"), std::string::npos) << verify.out;
    EXPECT_EQ(verify.err.find("DAMAGED"), std::string::npos) << verify.err;
  }

  const CliOutcome audit = jc("", {"audit", "--remote", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  std::map<std::string, json> by_name;
  for (const json& f : report["findings"]) by_name[f["name"].get<std::string>()] = f;
  EXPECT_EQ(report["verified"], 0);
  for (const auto& [name, ms] : poisoned) {
    ASSERT_TRUE(by_name.contains(name)) << name << " not reported:\n" << report.dump(2);
    EXPECT_EQ(by_name[name]["kind"], "rejected");
    EXPECT_EQ(by_name[name]["reason"], "field out of range");
    EXPECT_NE(by_name[name].dump().find("compile_ms"), std::string::npos) << by_name[name].dump();
  }
  // clear --remote --stale removes them; the next node fetches what b uploaded... nothing:
  // SET NX kept the poisoned values, so the cleanup is what lets the fleet share again.
  ASSERT_EQ(jc("", {"clear", "--remote", "--stale"}).code, 0);
  ASSERT_EQ(jc("b", {"remote", "push"}).code, 0);
  EXPECT_EQ(parse(jc("d", warm_args()))["from_remote"], k_variants);
}

// ---- item 13: the remote is never required for an engine --------------------------------

TEST_F(CliRemoteTrustTest, AnUnusableFleetKeyStopsOnlyTheRemoteCommands) {
  ASSERT_EQ(parse(jc("a", warm_args()))["compiled"], k_variants);
  const fs::path keys = dir() / "keys";
  fs::create_directory(keys);
  fs::permissions(keys, fs::perms::owner_all, fs::perm_options::replace);
  auto key_file = [&](const std::string& name, std::size_t bytes, fs::perms perms) {
    const fs::path path = keys / name;
    std::ofstream(path, std::ios::binary) << std::string(bytes, 'k');
    fs::permissions(path, perms, fs::perm_options::replace);
    return path.string();
  };
  const fs::path fifo = keys / "fifo.key";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::perms private_file = fs::perms::owner_read | fs::perms::owner_write;
  const std::map<std::string, std::string> cases = {
      {"mode 0644", key_file("shared.key", 32, private_file | fs::perms::group_read | fs::perms::others_read)},
      {"a FIFO", fifo.string()},
      {"31 bytes", key_file("short.key", 31, private_file)},
      {"missing", (keys / "missing.key").string()},
  };
  for (const auto& [what, path] : cases) {
    SCOPED_TRACE(what);
    m_key_file = path;
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"remote", "status"}, {"remote", "push"}, {"audit", "--remote"}, {"clear", "--remote", "--stale"}}) {
      const CliOutcome o = jc("a", args);
      EXPECT_EQ(o.code, 2) << args[0] << " " << args[1] << ":\n" << o.out << o.err;
      EXPECT_NE(o.err.find("jitcache: error: "), std::string::npos) << o.err;
      EXPECT_NE(o.err.find(path), std::string::npos) << "names the key file:\n" << o.err;
    }
    // An engine's work goes on with the local cache, whatever JITCACHE_REQUIRE_CACHE says.
    const CliOutcome warm = jc("a", warm_args(), {"JITCACHE_REQUIRE_CACHE=1"});
    ASSERT_EQ(warm.code, 0) << warm.out << warm.err;
    EXPECT_EQ(parse(warm)["already_cached"], k_variants);
    std::size_t warnings = 0;
    for (const char* mark : {"jitcache WARNING:", "jitcache: warning:"})
      for (std::size_t at = warm.err.find(mark); at != std::string::npos; at = warm.err.find(mark, at + 1))
        ++warnings;
    EXPECT_EQ(warnings, 1u) << "one warning:\n" << warm.err;
    EXPECT_NE(warm.err.find("remote cache not used"), std::string::npos) << warm.err;
    EXPECT_NE(warm.err.find("JITCACHE_REMOTE_KEY_FILE"), std::string::npos) << warm.err;
  }
}

}  // namespace
}  // namespace jitcache
