// `jitcache inspect | stats | clear | verify | gc` run as a user runs them, on a cache
// filled through the library: exit codes (0 ok, 1 findings or invalid input, 2 usage or
// environment), one JSON document on stdout with --json, errors on stderr naming the file.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/metrics.hpp"
#include "cache/store.hpp"
#include "cache/store_fixture.hpp"
#include "cli_runner.hpp"
#include "test_support.hpp"


namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Outcome = testing::CliOutcome;

cache::Facts entry_facts(const std::string& kernel, const std::string& target, const std::string& scale,
                         const std::string& rope) {
  return cache::Facts{{"kernel", kernel},         {"target", target},   {"latent_scale", scale},
                      {"rope", rope},             {"nvrtc_version", "12.8"}, {"generator_version", "1"}};
}

// A cache at root() holding four entries.
class CliCacheTest : public cache::testing::StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    auto store = open_store();
    ASSERT_TRUE(store);
    m_entries = {entry_facts("kv_write", "sm_120a", "identity", "bf16"),
                 entry_facts("kv_write", "sm_120a", "dynamic", "bf16"),
                 entry_facts("kv_gather", "sm_120a", "dynamic", "fp8"),
                 entry_facts("kv_write", "sm_100a", "dynamic", "fp8")};
    for (std::size_t i = 0; i < m_entries.size(); ++i) {
      cache::Bytes bytes(1000 * (i + 1), static_cast<std::byte>(i + 1));
      ASSERT_OK(store->put(m_entries[i].key(), m_entries[i], bytes, 100.0 * (i + 1)));
    }
  }

  Outcome jitcache(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
    return testing::run_cli(dir(), std::move(args), extra_env, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  }

  Outcome run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", root().string()});
    return jitcache(std::move(args));
  }

  static json parse(const Outcome& o) {
    json doc = json::parse(o.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << o.out;
    return doc;
  }

  fs::path blob_of(std::size_t i) const {
    const cache::Bytes bytes(1000 * (i + 1), static_cast<std::byte>(i + 1));
    const std::string hex = cache::BlobDigest::of(bytes).to_hex();
    return root() / "blobs" / hex.substr(0, 2) / hex;
  }

  // index.db overwritten with garbage, its WAL and shared memory gone.
  void garble_index() const {
    {
      std::ofstream garbage(root() / "index.db", std::ios::binary | std::ios::trunc);
      garbage << std::string(8192, 'G');
    }
    fs::remove(root() / "index.db-wal");
    fs::remove(root() / "index.db-shm");
  }

  std::vector<cache::Facts> m_entries;
};

TEST_F(CliCacheTest, InspectListsEveryEntryWithItsFacts) {
  const Outcome o = run({"inspect"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  for (const char* column : {"KEY", "KERNEL", "TARGET", "LATENT_SCALE", "FORMAT", "SIZE", "CREATED", "LAST USED", "HITS"})
    EXPECT_NE(o.out.find(column), std::string::npos) << column;
  for (const auto& facts : m_entries) EXPECT_NE(o.out.find(facts.key().to_hex().substr(0, 16)), std::string::npos);
  EXPECT_NE(o.out.find("kv_gather"), std::string::npos);
  EXPECT_NE(o.out.find("sm_100a"), std::string::npos);
}

TEST_F(CliCacheTest, InspectJsonIsOneDocument) {
  const Outcome o = run({"inspect", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const json doc = parse(o);
  ASSERT_EQ(doc["entries"].size(), 4u);
  EXPECT_EQ(doc["cache_dir"], root().string());
  for (const auto& e : doc["entries"]) {
    for (const char* field : {"key", "digest", "size", "key_schema", "created", "last_used", "hits", "compile_ms", "facts"})
      EXPECT_TRUE(e.contains(field)) << field;
    cache::Facts facts;
    for (const auto& [name, value] : e["facts"].items()) facts.set(name, value.get<std::string>());
    EXPECT_EQ(facts.key().to_hex(), e["key"]) << "the printed facts are the facts of the key";
  }
}

// Keys spell b12x-432 and b12x-368 as rope=bf16|fp8 and the other formats as
// format=<name>; --format takes either name and --rope stays the older alias.
TEST_F(CliCacheTest, InspectAndClearFilterByFormatUnderEitherSpelling) {
  {
    auto store = cache::Store::open(root());
    ASSERT_OK(store);
    const cache::Facts flashmla{{"kernel", "kv_write"}, {"target", "sm_100a"}, {"latent_scale", "dynamic"},
                                {"format", "flashmla-352"}, {"nvrtc_version", "12.8"}, {"generator_version", "1"}};
    const cache::Facts glm{{"kernel", "kv_gather"}, {"target", "sm_120a"}, {"latent_scale", "per-token"},
                           {"format", "b12x-304"}, {"nvrtc_version", "12.8"}, {"generator_version", "1"}};
    ASSERT_OK((*store)->put(flashmla.key(), flashmla, cache::Bytes(64, std::byte{7}), 1.0));
    ASSERT_OK((*store)->put(glm.key(), glm, cache::Bytes(64, std::byte{8}), 1.0));
  }
  const auto count = [&](std::vector<std::string> filter) {
    filter.insert(filter.begin(), {"inspect", "--json"});
    const Outcome o = run(filter);
    EXPECT_EQ(o.code, 0) << o.err;
    return parse(o)["entries"].size();
  };
  EXPECT_EQ(count({"--format", "b12x-432"}), 2u);
  EXPECT_EQ(count({"--format", "bf16"}), 2u);
  EXPECT_EQ(count({"--rope", "bf16"}), 2u);
  EXPECT_EQ(count({"--format", "b12x-368"}), 2u);
  EXPECT_EQ(count({"--rope", "fp8", "--arch", "sm_100a"}), 1u);
  EXPECT_EQ(count({"--format", "flashmla-352"}), 1u);
  EXPECT_EQ(count({"--format", "b12x-304", "--latent-scale", "per-token"}), 1u);
  EXPECT_EQ(count({"--format", "b12x-304", "--latent-scale", "dynamic"}), 0u);
  EXPECT_EQ(count({}), 6u);
  // The table names every entry's format, whichever spelling its key has.
  const Outcome table = run({"inspect"});
  ASSERT_EQ(table.code, 0) << table.err;
  for (const char* name : {"b12x-432", "b12x-368", "flashmla-352", "b12x-304"})
    EXPECT_NE(table.out.find(name), std::string::npos) << name << "\n" << table.out;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"inspect", "--format", "b12x-999"}, {"inspect", "--rope", "b12x-432"},
        {"inspect", "--format", "b12x-432", "--rope", "bf16"}}) {
    const Outcome o = run(bad);
    EXPECT_EQ(o.code, 2) << bad[1] << " " << bad[2] << "\n" << o.err;
  }
  const Outcome dry = run({"clear", "--format", "flashmla-352", "--dry-run"});
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("would remove 1 entries"), std::string::npos) << dry.out;
  const Outcome cleared = run({"clear", "--rope", "fp8"});
  ASSERT_EQ(cleared.code, 0) << cleared.err;
  EXPECT_EQ(count({}), 4u);
  EXPECT_EQ(count({"--format", "b12x-368"}), 0u);
}

TEST_F(CliCacheTest, InspectFiltersByLatentScaleArchAndKernel) {
  Outcome o = run({"inspect", "--json", "--latent-scale", "identity"});
  ASSERT_EQ(o.code, 0) << o.err;
  json doc = parse(o);
  ASSERT_EQ(doc["entries"].size(), 1u);
  EXPECT_EQ(doc["entries"][0]["key"], m_entries[0].key().to_hex());

  o = run({"inspect", "--json", "--arch", "sm_120a", "--kernel", "kv_write"});
  doc = parse(o);
  EXPECT_EQ(doc["entries"].size(), 2u);

  o = run({"inspect", "--json", "--arch", "sm_120"});
  ASSERT_EQ(o.code, 0);
  EXPECT_EQ(parse(o)["entries"].size(), 0u) << "targets match exactly: sm_120 is not sm_120a";
}

TEST_F(CliCacheTest, InspectKeyPrefixShowsAllFacts) {
  const std::string key = m_entries[2].key().to_hex();
  const Outcome o = run({"inspect", key.substr(0, 10)});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find(key), std::string::npos);
  for (const auto& [name, value] : m_entries[2].fields()) {
    EXPECT_NE(o.out.find(name), std::string::npos) << name;
    EXPECT_NE(o.out.find(value), std::string::npos) << value;
  }
  const Outcome j = run({"inspect", key, "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(parse(j)["entries"][0]["facts"]["generator_version"], "1");
}

TEST_F(CliCacheTest, InspectUnknownKeyIsAFinding) {
  std::string key = m_entries[0].key().to_hex();
  key[0] = key[0] == '0' ? '1' : '0';
  const Outcome o = run({"inspect", key});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find("index.db"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("no entry matches"), std::string::npos) << o.err;
}

TEST_F(CliCacheTest, InspectAmbiguousPrefixIsAFinding) {
  // With four keys, some one-digit prefix may be shared; the empty-ish prefix of a
  // single hex digit that matches two entries is found by trying all sixteen.
  for (char digit : std::string("0123456789abcdef")) {
    int matches = 0;
    for (const auto& f : m_entries) matches += f.key().to_hex()[0] == digit;
    if (matches < 2) continue;
    const Outcome o = run({"inspect", std::string(1, digit)});
    EXPECT_EQ(o.code, 1);
    EXPECT_NE(o.err.find("entries match"), std::string::npos) << o.err;
    return;
  }
  GTEST_SKIP() << "no two keys share a first digit in this data set";
}

TEST_F(CliCacheTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", "not-hex"}, {"inspect", "--latent-scale", "half"},
        {"inspect", "0123456789abcdef0123456789abcdef0"}, {"clear"}, {"clear", "--all", "--kernel", "kv_write"},
        {"gc", "--max-size", "lots"}, {"gc", "--max-size", "-5G"}, {"stats", "--bogus"}}) {
    const Outcome o = run(args);
    EXPECT_EQ(o.code, 2) << args[0] << " " << (args.size() > 1 ? args[1] : "") << ": " << o.err;
    EXPECT_NE(o.err, "");
  }
}

TEST_F(CliCacheTest, StatsJson) {
  const Outcome o = run({"stats", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["entries"], 4);
  EXPECT_EQ(doc["bytes"], 10000);
  EXPECT_EQ(doc["max_bytes"], 2147483648ull);
  for (const char* field : {"hits", "misses", "compiles", "compile_ms", "quarantined", "evicted", "coalesced"})
    EXPECT_TRUE(doc.contains(field)) << field;
  const Outcome text = run({"stats"});
  ASSERT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("entries          4"), std::string::npos) << text.out;
}

// The sample lines of a Prometheus text exposition: "name{labels}" -> value. Checks the
// lines' shape on the way: every family typed once before its samples.
std::map<std::string, double> prometheus_samples(const std::string& text) {
  std::map<std::string, double> samples;
  std::set<std::string> typed;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("# HELP ")) continue;
    if (line.starts_with("# TYPE ")) {
      const std::string rest = line.substr(7);
      const std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(typed.insert(name).second) << "typed twice: " << line;
      EXPECT_TRUE(rest.ends_with(" counter") || rest.ends_with(" gauge")) << line;
      continue;
    }
    const std::size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    const std::string series = line.substr(0, space);
    const std::string name = series.substr(0, series.find('{'));
    EXPECT_TRUE(cache::valid_metric_name(name)) << line;
    EXPECT_TRUE(typed.contains(name)) << "a sample before its TYPE: " << line;
    EXPECT_TRUE(samples.emplace(series, std::stod(line.substr(space + 1))).second) << "twice: " << line;
  }
  return samples;
}

// `stats --format prometheus`: the index's counters (scope "cache") and the size, each
// counter of `stats --json` under its metric name (cache/metrics.hpp), time in seconds.
TEST_F(CliCacheTest, StatsPrometheusHoldsEveryCounterOfStatsJson) {
  const fs::path fresh = dir() / "fresh";
  const std::vector<std::string> warm = {"--cache-dir", fresh.string(), "warm", "--checkpoint",
                                         (testing::source_dir() / "examples" / "glm5-mini").string(),
                                         "--arch", "sm_120a", "--rope", "fp8"};
  ASSERT_EQ(jitcache(warm).code, 0);
  ASSERT_EQ(jitcache(warm).code, 0);  // served by the disk
  const json doc = parse(jitcache({"--cache-dir", fresh.string(), "stats", "--json"}));
  const Outcome o = jitcache({"--cache-dir", fresh.string(), "stats", "--format", "prometheus"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  const std::map<std::string, double> samples = prometheus_samples(o.out);
  const std::string dir_label = "cache_dir=\"" + fresh.string() + "\"";
  std::size_t counters = 0;
  for (const cache::CounterField& field : cache::k_counter_fields) {
    SCOPED_TRACE(field.name);
    const cache::CounterMetric metric = cache::counter_metric(field);
    const std::string series = metric.family + "{" + dir_label + ",scope=\"cache\"" +
                               (metric.tier.empty() ? "" : ",tier=\"" + metric.tier + "\"") + "}";
    const json& value = doc[json::json_pointer("/" + std::string(field.json))];
    ASSERT_TRUE(samples.contains(series)) << series << " in\n" << o.out;
    EXPECT_DOUBLE_EQ(samples.at(series), value.get<double>() * metric.factor);
    ++counters;
  }
  EXPECT_EQ(samples.at("jitcache_compiles_total{" + dir_label + ",scope=\"cache\"}"), 4);
  EXPECT_EQ(samples.at("jitcache_hits_total{" + dir_label + ",scope=\"cache\",tier=\"disk\"}"), 4);
  EXPECT_GT(samples.at("jitcache_compile_seconds_spent_total{" + dir_label + ",scope=\"cache\"}"), 0.0);
  EXPECT_EQ(samples.at("jitcache_cache_entries{" + dir_label + "}"), doc["entries"].get<double>());
  EXPECT_EQ(samples.at("jitcache_cache_bytes{" + dir_label + "}"), doc["bytes"].get<double>());
  EXPECT_EQ(samples.at("jitcache_cache_max_bytes{" + dir_label + "}"), doc["max_bytes"].get<double>());
  EXPECT_EQ(samples.size(), counters + 3) << o.out;
}

TEST_F(CliCacheTest, StatsFormatChoosesTheOutputAndRefusesOthersNamingTheChoices) {
  const Outcome json_flag = run({"stats", "--json"});
  const Outcome json_format = run({"stats", "--format", "json"});
  ASSERT_EQ(json_format.code, 0) << json_format.err;
  EXPECT_EQ(json_format.out, json_flag.out);
  EXPECT_EQ(run({"stats", "--json", "--format", "json"}).out, json_flag.out);
  const Outcome text = run({"stats", "--format", "text"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out, run({"stats"}).out);
  for (const char* bad : {"xml", "Prometheus", ""}) {
    const Outcome o = run({"stats", "--format", bad});
    EXPECT_EQ(o.code, 2) << bad;
    EXPECT_NE(o.err.find("text, json or prometheus"), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "");
  }
  const Outcome both = run({"stats", "--json", "--format", "prometheus"});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--json"), std::string::npos) << both.err;
  EXPECT_EQ(both.out, "");
}

TEST_F(CliCacheTest, ClearDryRunRemovesNothing) {
  const Outcome o = run({"clear", "--latent-scale", "identity", "--dry-run"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("would remove 1 entries"), std::string::npos) << o.out;
  EXPECT_EQ(parse(run({"inspect", "--json"}))["entries"].size(), 4u);
}

TEST_F(CliCacheTest, ClearByFilterRemovesOnlyMatches) {
  const Outcome o = run({"clear", "--latent-scale", "identity"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("removed 1 entries"), std::string::npos) << o.out;
  const json doc = parse(run({"inspect", "--json"}));
  ASSERT_EQ(doc["entries"].size(), 3u);
  for (const auto& e : doc["entries"]) EXPECT_EQ(e["facts"]["latent_scale"], "dynamic");
  EXPECT_FALSE(fs::exists(blob_of(0)));
}

TEST_F(CliCacheTest, ClearAllEmptiesTheCache) {
  const Outcome o = run({"clear", "--all"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("removed 4 entries"), std::string::npos) << o.out;
  EXPECT_EQ(parse(run({"stats", "--json"}))["entries"], 0);
}

TEST_F(CliCacheTest, VerifyCleanExitsZero) {
  const Outcome o = run({"verify", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], true);
  EXPECT_EQ(doc["checked"], 4);
  EXPECT_EQ(doc["bad"].size(), 0u);
}

TEST_F(CliCacheTest, VerifyFindsDamageExitsOneThenQuarantined) {
  fs::resize_file(blob_of(1), 10);
  const Outcome o = run({"verify", "--json"});
  EXPECT_EQ(o.code, 1) << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], false);
  ASSERT_EQ(doc["bad"].size(), 1u);
  EXPECT_EQ(doc["bad"][0]["key"], m_entries[1].key().to_hex());
  EXPECT_NE(doc["bad"][0]["problem"].get<std::string>().find(blob_of(1).string()), std::string::npos);
  const Outcome text = run({"verify"});
  EXPECT_EQ(text.code, 0) << "the bad entry was quarantined by the first run: " << text.out;
  EXPECT_NE(text.out.find("checked 3 entries: 0 bad"), std::string::npos) << text.out;
}

// Issue 10, item 4: discarding a damaged index is a finding, never "clean".
TEST_F(CliCacheTest, VerifyReportsAQuarantinedIndexAndExitsOne) {
  garble_index();
  const Outcome o = run({"verify", "--json"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], false);
  ASSERT_EQ(doc["index_quarantined"].size(), 1u) << o.out;
  const json& q = doc["index_quarantined"][0];
  EXPECT_TRUE(q["entries"].is_null()) << "garbage holds no countable entries: " << o.out;
  EXPECT_NE(q["moved_to"].get<std::string>().find("quarantine"), std::string::npos) << o.out;
  EXPECT_TRUE(fs::exists(q["moved_to"].get<std::string>()));
  EXPECT_FALSE(q["problem"].get<std::string>().empty());
  EXPECT_NE(q["next"].get<std::string>().find("gc"), std::string::npos) << o.out;
}

TEST_F(CliCacheTest, VerifyTextSaysHowManyEntriesTheQuarantinedIndexHeld) {
  // Damage behind the header: the file still opens, so its entries can still be counted.
  fs::copy_file(root() / "index.db", dir() / "copy.db");
  ASSERT_EQ(::truncate((root() / "index.db").c_str(), 0), 0);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((root() / "index.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "PRAGMA journal_mode=WAL; CREATE TABLE schema_version (version INTEGER);"
                           "CREATE TABLE entries (key TEXT); INSERT INTO entries VALUES ('a'), ('b'), ('c');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const Outcome o = run({"verify"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("quarantine"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("3 entries"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("compiled again on use"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("index ok"), std::string::npos) << o.out;
  const Outcome again = run({"verify"});
  EXPECT_EQ(again.code, 0) << "the fresh index is clean: " << again.out;
}

// Issue 10, item 8: two junk usage_log rows.
TEST_F(CliCacheTest, JunkUsageRowsBrickNothing) {
  const std::string key = m_entries[0].key().to_hex();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((root() / "index.db").c_str(), &db), SQLITE_OK);
    const std::string sql = "INSERT INTO usage_log (key, hits, last_used) VALUES ('" + key +
                            "', 9223372036854775807, 1), ('" + key + "', 9223372036854775807, 2)";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  const Outcome verify = run({"verify"});
  EXPECT_EQ(verify.code, 1) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("usage_log.hits"), std::string::npos) << verify.out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect"}, {"audit"}, {"gc"}, {"stats"}}) {
    const Outcome o = run(args);
    EXPECT_EQ(o.err.find("overflow"), std::string::npos) << args[0] << ": " << o.err;
    EXPECT_NE(o.code, 2) << args[0] << ": " << o.err;
  }
  const Outcome clear = run({"clear", "--all"});
  EXPECT_EQ(clear.code, 0) << clear.err;
  EXPECT_NE(clear.out.find("removed 4 entries"), std::string::npos) << clear.out;
}

TEST_F(CliCacheTest, DroppedTableNamesTheRecoveryAndClearAllRecovers) {
  for (const char* table : {"entries", "usage_log", "counters"}) {
    SCOPED_TRACE(table);
    {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open((root() / "index.db").c_str(), &db), SQLITE_OK);
      const std::string sql = std::string("DROP TABLE ") + table;
      ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(db);
    }
    const Outcome stats = run({"stats"});
    EXPECT_EQ(stats.code, 2) << stats.out;
    EXPECT_NE(stats.err.find("jitcache clear --all"), std::string::npos) << stats.err;
    EXPECT_NE(stats.err.find(table), std::string::npos) << stats.err;
    const Outcome clear = run({"clear", "--all"});
    EXPECT_EQ(clear.code, 0) << clear.out << clear.err;
    EXPECT_NE(clear.out.find("quarantine"), std::string::npos) << clear.out;
    const Outcome after = run({"stats", "--json"});
    ASSERT_EQ(after.code, 0) << after.err;
    EXPECT_EQ(parse(after)["entries"], 0);
    EXPECT_EQ(run({"verify"}).code, 0);
    // Refill for the next table.
    auto store = cache::Store::open(root());
    ASSERT_OK(store);
    for (const auto& facts : m_entries)
      ASSERT_OK((*store)->put(facts.key(), facts, cache::Bytes(10, std::byte{1}), 1.0));
  }
}

TEST_F(CliCacheTest, ClearAllSucceedsOnAGarbageIndex) {
  garble_index();
  const Outcome o = run({"clear", "--all"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("quarantine"), std::string::npos) << o.out;
  std::size_t blobs = 0;
  for (const auto& e : fs::recursive_directory_iterator(root() / "blobs")) blobs += e.is_regular_file();
  EXPECT_EQ(blobs, 0u) << "clearing a cache whose index was lost removes the blobs it knew";
}

TEST_F(CliCacheTest, VerifyReportsValuesOutOfRange) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((root() / "index.db").c_str(), &db), SQLITE_OK);
    const std::string sql = "UPDATE entries SET size = -5 WHERE key = '" + m_entries[1].key().to_hex() +
                            "'; UPDATE entries SET facts = 'not json' WHERE key = '" +
                            m_entries[2].key().to_hex() +
                            "'; UPDATE counters SET value = -1 WHERE name = 'evicted'";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  const Outcome o = run({"verify", "--json"});
  EXPECT_EQ(o.code, 1) << o.err;
  const std::string integrity = parse(o)["integrity"].dump();
  EXPECT_NE(integrity.find("entries.size"), std::string::npos) << integrity;
  EXPECT_NE(integrity.find("entries.facts"), std::string::npos) << integrity;
  EXPECT_NE(integrity.find("counters"), std::string::npos) << integrity;
  EXPECT_NE(integrity.find("evicted"), std::string::npos) << integrity;
}

// Issue 10, item 9: warming 4 variants into an empty cache is 4 misses, not 8.
TEST_F(CliCacheTest, WarmCountsOneMissPerCompiledVariant) {
  const fs::path fresh = dir() / "fresh";
  const std::vector<std::string> warm = {"--cache-dir", fresh.string(), "warm", "--checkpoint",
                                         (testing::source_dir() / "examples" / "glm5-mini").string(),
                                         "--arch", "sm_120a", "--rope", "fp8"};
  const Outcome first = jitcache(warm);
  ASSERT_EQ(first.code, 0) << first.err;
  Outcome stats = jitcache({"--cache-dir", fresh.string(), "stats", "--json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  json doc = parse(stats);
  EXPECT_EQ(doc["entries"], 4);
  EXPECT_EQ(doc["compiles"], 4);
  EXPECT_EQ(doc["misses"], 4) << stats.out;
  const Outcome second = jitcache(warm);
  ASSERT_EQ(second.code, 0) << second.err;
  doc = parse(jitcache({"--cache-dir", fresh.string(), "stats", "--json"}));
  EXPECT_EQ(doc["misses"], 4) << "a warm cache adds no miss";
  EXPECT_EQ(doc["compiles"], 4);
  EXPECT_EQ(doc["hits"]["disk"], 4);
}

// A FIFO in place of a blob: every command that reads blobs finds a bad blob at once
// instead of waiting in open() for a writer that never comes. Each command runs under a
// limit, so a regression fails here rather than hanging the suite.
TEST_F(CliCacheTest, FifoInPlaceOfABlobNeverHangsACommand) {
  const fs::path checkpoint = testing::source_dir() / "examples" / "glm5-mini";
  const std::vector<std::string> warm = {"warm", "--checkpoint", checkpoint.string(), "--arch", "sm_120a"};
  const auto run_within = [&](std::chrono::seconds limit, std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", root().string()});
    return testing::run_cli_within(limit, dir(), std::move(args), {}, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  };
  // Warm compiles; the limit is for a loaded machine, not for a hang.
  const Outcome cold = run_within(std::chrono::seconds(240), warm);
  ASSERT_EQ(cold.code, 0) << cold.err;
  // The blobs of the warmed kernels: the synthetic entries' blobs are the fixture's own.
  std::vector<fs::path> synthetic;
  for (std::size_t i = 0; i < m_entries.size(); ++i) synthetic.push_back(blob_of(i));
  const auto kernel_blob = [&] {
    for (const auto& file : fs::recursive_directory_iterator(root() / "blobs"))
      if (file.is_regular_file() &&
          std::find(synthetic.begin(), synthetic.end(), file.path()) == synthetic.end())
        return file.path();
    return fs::path();
  };
  const auto plant_fifo = [&] {
    const fs::path blob = kernel_blob();
    if (blob.empty()) return fs::path();
    fs::remove(blob);
    return ::mkfifo(blob.c_str(), 0600) == 0 ? blob : fs::path();
  };
  const auto is_fifo = [](const fs::path& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  };
  struct Step {
    std::vector<std::string> args;
    int code;
    bool fifo_stays;  // audit only reports; the others quarantine or remove the blob
    const char* says;
  };
  const Step steps[] = {
      // quarantines the FIFO and compiles the variant again
      {warm, 0, false, "is a FIFO (not a regular file)"},
      {{"verify"}, 1, false, "is a FIFO"},               // finds it and drops the entry
      {{"audit"}, 1, true, "is a FIFO"},                 // reports it as corrupt
      {{"clear", "--stale"}, 0, false, "removed corrupt entry"},  // removes what audit flags
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.args[0]);
    const fs::path fifo = plant_fifo();
    ASSERT_FALSE(fifo.empty());
    const Outcome o = run_within(step.args[0] == "warm" ? std::chrono::seconds(240)
                                                        : std::chrono::seconds(60),
                                 step.args);
    EXPECT_EQ(o.code, step.code) << o.out << o.err;
    EXPECT_NE((o.out + o.err).find(step.says), std::string::npos) << o.out << o.err;
    EXPECT_EQ(is_fifo(fifo), step.fifo_stays);
    // Put the entry back for the next command (a warm heals what audit left).
    const Outcome rewarm = run_within(std::chrono::seconds(240), warm);
    ASSERT_EQ(rewarm.code, 0) << rewarm.err;
    EXPECT_FALSE(is_fifo(fifo));
  }
  // And the cache is whole again.
  const Outcome done = run_within(std::chrono::seconds(60), {"verify", "--json"});
  EXPECT_EQ(done.code, 0) << done.out << done.err;
}

TEST_F(CliCacheTest, GcShrinksToMaxSize) {
  const Outcome o = run({"gc", "--max-size", "5K"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("evicted"), std::string::npos);
  const json stats = parse(run({"stats", "--json"}));
  EXPECT_LE(stats["bytes"].get<std::uint64_t>(), 5120u);
  EXPECT_GT(stats["evicted"].get<std::uint64_t>(), 0u);
}

TEST_F(CliCacheTest, HostileCacheDirectoryIsAnEnvironmentError) {
  ::chmod(root().c_str(), 0777);
  const Outcome o = run({"stats"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find(root().string()), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("world-writable"), std::string::npos) << o.err;
  ::chmod(root().c_str(), 0700);
}

TEST_F(CliCacheTest, CacheDirectoryComesFromTheEnvironmentWithoutOption) {
  const Outcome o = jitcache({"stats", "--json"}, {"JITCACHE_DIR=" + root().string()});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(parse(o)["cache_dir"], root().string());
  EXPECT_EQ(parse(o)["entries"], 4);
  const Outcome xdg = jitcache({"stats", "--json"}, {"XDG_CACHE_HOME=" + (dir() / "xdg").string()});
  ASSERT_EQ(xdg.code, 0) << xdg.err;
  EXPECT_EQ(parse(xdg)["cache_dir"], (dir() / "xdg" / "jitcache").string());
  const Outcome both = jitcache({"--cache-dir", root().string(), "stats", "--json"},
                                {"JITCACHE_DIR=" + (dir() / "other").string()});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_EQ(parse(both)["cache_dir"], root().string()) << "--cache-dir wins over JITCACHE_DIR";
}

}  // namespace
}  // namespace jitcache
