// A Redis shared with others, through the CLI: two fleets under nested prefixes or under
// one prefix with different keys never remove each other's entries; a compile lease with
// no expiry does not stall a cold node and is found and removed; a value of another Redis
// type is a finding, not an error; one poisoned value is reported once per warm; and
// `remote status` tries what a node needs before it calls a remote usable.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli_json_checks.hpp"
#include "cli_remote_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace testing;  // the fleet fixture (cli_remote_fixture.hpp) and the CLI runner

class CliRemoteFleetsTest : public CliRemoteTest {
 protected:
  // The Redis keys matching `pattern` (KEYS: a test server holds a few).
  std::set<std::string> keys(const std::string& pattern) {
    std::set<std::string> out;
    auto reply = m_server->command({"KEYS", pattern});
    EXPECT_TRUE(reply) << reply.error().to_string();
    if (reply)
      for (const remote::Reply& name : reply->elements) out.insert(name.str);
    return out;
  }

  // Runs `body` as the other fleet: prefix `prefix` and, when given, its own key file.
  template <class F>
  auto as_fleet(const std::string& prefix, const fs::path& key_file, F body) {
    const auto saved_env = m_env;
    const fs::path saved_key = m_key_file;
    m_env.push_back("JITCACHE_REMOTE_PREFIX=" + prefix);
    if (!key_file.empty()) m_key_file = key_file;
    auto result = body();
    m_env = saved_env;
    m_key_file = saved_key;
    return result;
  }

  static std::map<std::string, json> findings_by_name(const json& report) {
    std::map<std::string, json> out;
    for (const json& f : report["findings"]) out[f["name"].get<std::string>()] = f;
    return out;
  }
};

// ---- item: fleets under nested prefixes ----------------------------------------------------

// Fleet A under "jitcache:", fleet B under "jitcache:b:" on one Redis: B's names start with
// A's prefix, and A's audit and cleanups must still leave them alone (before: A's audit
// flagged B's four entries as foreign names, and A's clear --stale and --all deleted them).
TEST_F(CliRemoteFleetsTest, NestedPrefixesNeverTouchEachOther) {
  const json b_warm = as_fleet("jitcache:b:", {}, [&] { return warm("b"); });
  EXPECT_EQ(b_warm["compiled"], k_variants);
  ASSERT_EQ(keys("jitcache:b:v1:entry:*").size(), k_variants);
  warm("a");
  ASSERT_EQ(keys("jitcache:v1:entry:*").size(), k_variants);

  const CliOutcome audit = jc("", {"audit", "--remote", "--json"});
  EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
  const json report = parse(audit);
  expect_fields(report, {{"verified", k_variants}, {"names", k_variants}, {"other_names", k_variants}});
  EXPECT_TRUE(report["findings"].empty()) << report.dump(2);

  const CliOutcome stale = jc("", {"clear", "--remote", "--stale", "--json"});
  ASSERT_EQ(stale.code, 0) << stale.err;
  EXPECT_TRUE(parse(stale)["removed"].empty()) << stale.out;
  EXPECT_EQ(keys("jitcache:b:v1:entry:*").size(), k_variants) << "fleet A's clear --stale removed fleet B's entries";
  const CliOutcome all = jc("", {"clear", "--remote", "--all"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("removed 4 name(s) under jitcache:"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("left 4 name(s) of other prefixes or software alone"), std::string::npos) << all.out;
  EXPECT_TRUE(keys("jitcache:v1:*").empty());
  EXPECT_EQ(keys("jitcache:b:v1:entry:*").size(), k_variants) << "fleet A's cleanup removed fleet B's entries";

  // B still serves its nodes, and its own audit sees only its own names.
  const json b_audit = as_fleet("jitcache:b:", {}, [&] { return parse(jc("", {"audit", "--remote", "--json"})); });
  EXPECT_EQ(b_audit["verified"], k_variants);
  EXPECT_EQ(b_audit["other_names"], 0);
  const json b2 = as_fleet("jitcache:b:", {}, [&] { return warm("b2"); });
  EXPECT_EQ(b2["from_remote"], k_variants);
}

// ---- item: one prefix, two keys ------------------------------------------------------------

// Fleet B shares A's prefix but has its own key: A's values are well-formed jitcache values
// B cannot verify. B's audit reports them as foreign; B's cleanups keep them unless told
// --foreign (before: B's clear --stale deleted every valid entry of A's).
TEST_F(CliRemoteFleetsTest, AnotherKeysValuesAreForeignAndKept) {
  warm("a");
  const fs::path other_key = testing::write_fleet_key(dir(), "other.key");

  const CliOutcome audit = as_fleet("jitcache:", other_key, [&] { return jc("", {"audit", "--remote", "--json"}); });
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  ASSERT_EQ(report["findings"].size(), k_variants) << report.dump(2);
  for (const json& f : report["findings"]) {
    EXPECT_EQ(f["kind"], "foreign") << f.dump();
    EXPECT_EQ(f["reason"], "bad signature") << f.dump();
    EXPECT_NE(f["explanation"].get<std::string>().find("--foreign"), std::string::npos) << f.dump();
  }

  const CliOutcome stale = as_fleet("jitcache:", other_key, [&] { return jc("", {"clear", "--remote", "--stale"}); });
  ASSERT_EQ(stale.code, 0) << stale.err;
  EXPECT_NE(stale.out.find("removed 0 flagged name(s) of 4 remote entries"), std::string::npos) << stale.out;
  EXPECT_NE(stale.out.find("kept 4 foreign (--foreign removes them)"), std::string::npos) << stale.out;
  EXPECT_EQ(count_lines(stale.out, "kept foreign"), k_variants) << stale.out;
  const CliOutcome all =
      as_fleet("jitcache:", other_key, [&] { return jc("", {"clear", "--remote", "--all", "--json"}); });
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_TRUE(parse(all)["removed"].empty()) << all.out;
  EXPECT_EQ(parse(all)["kept"].size(), k_variants) << all.out;

  // Fleet A's entries are whole: its audit verifies them and a new node loads them.
  const json a_audit = parse(jc("", {"audit", "--remote", "--json"}));
  EXPECT_EQ(a_audit["verified"], k_variants) << a_audit.dump(2);
  EXPECT_EQ(warm("a2")["from_remote"], k_variants);

  // Asked for, --foreign removes them (a dry run first removes nothing).
  const CliOutcome dry = as_fleet("jitcache:", other_key, [&] {
    return jc("", {"clear", "--remote", "--stale", "--foreign", "--dry-run", "--json"});
  });
  EXPECT_EQ(parse(dry)["removed"].size(), k_variants) << dry.out;
  EXPECT_EQ(keys("jitcache:v1:entry:*").size(), k_variants);
  const CliOutcome foreign =
      as_fleet("jitcache:", other_key, [&] { return jc("", {"clear", "--remote", "--stale", "--foreign"}); });
  ASSERT_EQ(foreign.code, 0) << foreign.err;
  EXPECT_TRUE(keys("jitcache:v1:entry:*").empty());

  // --foreign belongs to clear --remote.
  const CliOutcome local = jc("a", {"clear", "--all", "--foreign"});
  EXPECT_EQ(local.code, 2);
  EXPECT_NE(local.err.find("--foreign is for clear --remote"), std::string::npos) << local.err;
}

// ---- item: a lease with no expiry ----------------------------------------------------------

// A lease set by hand (no TTL) on every variant: a cold node compiles at once instead of
// waiting JITCACHE_REMOTE_WAIT_MS per variant, warns once; the audit reports each lease and
// clear --stale removes them, leaving a live lease alone (before: every variant waited the
// whole wait, lease_waits 4, and the audit called the remote clean).
TEST_F(CliRemoteFleetsTest, LeaseWithoutExpiryIsIgnoredReportedAndRemoved) {
  warm("a");
  std::vector<std::string> leases;
  for (const auto& [label, named] : remote_entries()) {
    const std::string& entry = named.first;
    leases.push_back("jitcache:v1:lease:" + entry.substr(entry.rfind(':') + 1));
  }
  ASSERT_EQ(leases.size(), k_variants);
  ASSERT_EQ(jc("", {"clear", "--remote", "--all"}).code, 0);
  for (const std::string& lease : leases) ASSERT_TRUE(m_server->command({"SET", lease, "held-by-nobody"}));

  m_env = {"JITCACHE_REMOTE_WAIT_MS=10000"};
  const auto start = std::chrono::steady_clock::now();
  const CliOutcome cold = jc("b", warm_args());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_EQ(parse(cold)["compiled"], k_variants);
  const json b = stats("b");
  EXPECT_EQ(b["remote"]["lease_waits"], 0) << b.dump();
  EXPECT_EQ(count_lines(cold.err, "WARNING"), 1u) << cold.err;
  EXPECT_EQ(count_lines(cold.err, "has no expiry"), 1u) << cold.err;
  EXPECT_LT(seconds, 2 * 10.0) << "a cold warm waited for leases no node holds";
  std::printf("cold warm past 4 leases with no expiry: %.1f s (wait 10 s per variant)\n", seconds);

  // A live lease (with an expiry) is no finding.
  const std::string live = "jitcache:v1:lease:" + std::string(32, 'a');
  ASSERT_TRUE(m_server->command({"SET", live, "compiling-now", "PX", "60000"}));
  const CliOutcome audit = jc("", {"audit", "--remote", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  EXPECT_EQ(report["leases"], 1);
  const auto found = findings_by_name(report);
  ASSERT_EQ(found.size(), k_variants) << report.dump(2);
  for (const std::string& lease : leases) {
    ASSERT_TRUE(found.count(lease)) << lease << "\n" << report.dump(2);
    EXPECT_EQ(found.at(lease)["kind"], "broken-lease");
  }

  const CliOutcome stale = jc("", {"clear", "--remote", "--stale"});
  ASSERT_EQ(stale.code, 0) << stale.err;
  EXPECT_EQ(keys("jitcache:v1:lease:*"), std::set<std::string>{live});
  EXPECT_TRUE(parse(jc("", {"audit", "--remote", "--json"}))["findings"].empty());
}

// ---- item: values that are not strings -----------------------------------------------------

// A list and a hash where entries belong: the audit reports them (before: exit 2 on
// WRONGTYPE), push reports those entries as blocked rather than present, a warm rejects them
// like any bad value, and clear --stale removes them.
TEST_F(CliRemoteFleetsTest, ValuesOfOtherRedisTypesAreFindings) {
  warm("a");
  auto entries = remote_entries();
  ASSERT_EQ(entries.size(), k_variants);
  const std::string list_name = entries.at("writer/dynamic").first;
  const std::string hash_name = entries.at("gather/identity").first;
  ASSERT_TRUE(m_server->command({"DEL", list_name, hash_name}));
  ASSERT_TRUE(m_server->command({"RPUSH", list_name, "a", "b"}));
  ASSERT_TRUE(m_server->command({"HSET", hash_name, "field", "value"}));

  const CliOutcome audit = jc("", {"audit", "--remote", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const auto found = findings_by_name(parse(audit));
  ASSERT_EQ(found.size(), 2u) << audit.out;
  EXPECT_EQ(found.at(list_name)["kind"], "rejected");
  EXPECT_EQ(found.at(list_name)["reason"], "not a string value");
  EXPECT_NE(found.at(list_name)["explanation"].get<std::string>().find("list"), std::string::npos);
  EXPECT_NE(found.at(hash_name)["explanation"].get<std::string>().find("hash"), std::string::npos);

  const CliOutcome push = jc("a", {"remote", "push", "--json"});
  EXPECT_EQ(push.code, 1) << push.out << push.err;
  const json pushed = parse(push);
  EXPECT_EQ(pushed["already_present"], 2);
  EXPECT_EQ(pushed["blocked"].size(), 2u) << pushed.dump(2);

  const CliOutcome warm_c = jc("c", warm_args());
  ASSERT_EQ(warm_c.code, 0) << warm_c.err;
  EXPECT_EQ(parse(warm_c)["compiled"], 2);
  EXPECT_EQ(parse(warm_c)["from_remote"], 2);
  const json c = stats("c");
  EXPECT_EQ(c["remote"]["rejected"], 2) << c.dump();
  EXPECT_EQ(c["remote"]["errors"], 0) << c.dump();

  const CliOutcome stale = jc("", {"clear", "--remote", "--stale"});
  ASSERT_EQ(stale.code, 0) << stale.out << stale.err;
  EXPECT_NE(stale.out.find("removed 2 flagged name(s)"), std::string::npos) << stale.out;
  const json again = parse(jc("a", {"remote", "push", "--json"}));
  EXPECT_EQ(again["uploaded"], 2) << again.dump(2);
  EXPECT_TRUE(again["blocked"].empty());
}

// ---- item: one poisoned value, one report ---------------------------------------------------

// A warm looks a variant up (probe) and then fetches it: one poisoned value is one
// rejection and one warning (before: two of each).
TEST_F(CliRemoteFleetsTest, OnePoisonedValueIsReportedOncePerWarm) {
  warm("a");
  const std::string poisoned = remote_entries().at("gather/dynamic").first;
  ASSERT_TRUE(m_server->command({"SET", poisoned, "not a jitcache value"}));
  const CliOutcome b = jc("b", warm_args());
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(parse(b)["compiled"], 1);
  EXPECT_EQ(stats("b")["remote"]["rejected"], 1);
  EXPECT_EQ(count_lines(b.err, "rejected the value of"), 1u) << b.err;
  EXPECT_EQ(count_lines(b.err, "WARNING"), 1u) << b.err;
}

// ---- item: remote status tries read, write and delete --------------------------------------

TEST_F(CliRemoteFleetsTest, StatusProbesReadWriteAndDelete) {
  const CliOutcome ok = jc("", {"remote", "status", "--json"});
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  expect_fields(parse(ok), {{"can_read", true}, {"can_write", true}, {"can_delete", true}, {"usable", true}});
  EXPECT_TRUE(keys("*").empty()) << "the probe is deleted";
  const CliOutcome text = jc("", {"remote", "status"});
  EXPECT_NE(text.out.find("access     read yes, write yes, delete yes"), std::string::npos) << text.out;
}

// An ACL user that may list and write but not read entries (before: usable: true).
TEST_F(CliRemoteFleetsTest, StatusOfAUserWhoCannotReadIsAnError) {
  ASSERT_TRUE(m_server->command({"ACL", "SETUSER", "noread", "on", ">noread-pw", "~*", "&*", "+@all", "-getrange"}));
  m_remote = "redis://noread:noread-pw@127.0.0.1:" + std::to_string(m_server->port());
  const CliOutcome o = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  expect_fields(parse(o), {{"reachable", true}, {"can_read", false}, {"can_write", true}, {"usable", false}});
  EXPECT_NE(o.err.find("cannot read under jitcache:"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("NOPERM"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("noread-pw"), std::string::npos) << o.err;

  // And one with the read commands only: nothing can be written, so nothing is deleted.
  ASSERT_TRUE(m_server->command({"ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "&*", "+@read", "+ping",
                                 "+info"}));
  m_remote = "redis://reader:reader-pw@127.0.0.1:" + std::to_string(m_server->port());
  const CliOutcome r = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  expect_fields(parse(r), {{"can_read", true}, {"can_write", false}, {"can_delete", nullptr}, {"usable", false}});
  EXPECT_NE(r.err.find("cannot write under jitcache:"), std::string::npos) << r.err;
}

// A read-only replica answers PING, INFO and SCAN, and refuses every write (before:
// usable: true).
TEST_F(CliRemoteFleetsTest, StatusOfAReadOnlyReplicaIsAnError) {
  auto replica = RedisServer::start();
  ASSERT_TRUE(replica) << replica.error().to_string();
  ASSERT_TRUE((*replica)->command({"REPLICAOF", "127.0.0.1", std::to_string(m_server->port())}));
  m_remote = (*replica)->url();
  const CliOutcome o = jc("", {"remote", "status", "--json"});
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  expect_fields(parse(o), {{"can_read", true}, {"can_write", false}, {"usable", false}});
  EXPECT_NE(o.err.find("READONLY"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace jitcache
