// A cache directory written before the record-format dimension existed must be all hits
// for this build. tests/data/cache_before_formats/cache was filled by the CLI of an older
// commit (its README says which and how): the writer and gather kernels, identity and
// dynamic, for both RoPE layouts on sm_90, keyed `rope=bf16` / `rope=fp8`. Warming the same
// checkpoint here, by format name or by the old RoPE name, must find those eight keys and
// compile nothing; audit and verify must find nothing wrong with them.
//
// The keys hold the NVRTC build's fingerprint, so on a machine with another toolkit every
// lookup is rightly a miss: there the tests skip, naming both compilers, instead of failing.
// A compile by the recorded compiler is a failure: the keys changed.
//
// The fingerprint's derivation changed once since the data was made (a digest of a test
// compile's PTX then, of the build-id notes of libnvrtc and its builtins now), so with the
// same NVRTC version the recorded fingerprint is no longer this build's and every lookup
// misses once. What the data guards still holds and is still checked: each key the warm
// made is the key of the recorded entry's facts with only compiler_fingerprint replaced.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/facts.hpp"
#include "cli_runner.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Outcome = testing::CliOutcome;

fs::path data_dir() { return testing::source_dir() / "tests" / "data" / "cache_before_formats"; }

class CacheBeforeFormatsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_manifest = json::parse(testing::read_text_file(data_dir() / "manifest.json"), nullptr, false);
    ASSERT_FALSE(m_manifest.is_discarded()) << data_dir() / "manifest.json" << ": not JSON";
    // A private copy: warming records hits and usage in the index, and a checkout's modes
    // (0644, 0755) are not a cache's.
    m_root = dir() / "cache";
    fs::copy(data_dir() / "cache", m_root, fs::copy_options::recursive);
    fs::permissions(m_root, fs::perms::owner_all, fs::perm_options::replace);
  }

  // The CLI on the copy. Every JITCACHE_* variable of the caller is dropped: one of them
  // (JITCACHE_LINEINFO) is part of every key, others would add a remote tier.
  Outcome jitcache(std::vector<std::string> args) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return testing::run_cli(dir(), std::move(args), {}, {"JITCACHE_", "XDG_CACHE_HOME="});
  }

  static json parse(const Outcome& o) {
    json doc = json::parse(o.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << o.out << o.err;
    return doc;
  }

  // `warm --json` of the recorded checkpoint and target, the format given by `how`;
  // discarded when it printed no JSON.
  json warm(const std::vector<std::string>& how) const {
    std::vector<std::string> args{"warm", "--checkpoint",
                                  (testing::source_dir() / m_manifest["checkpoint"].get<std::string>()).string(),
                                  "--arch", m_manifest["target"].get<std::string>(), "--jobs", "2", "--json"};
    args.insert(args.end(), how.begin(), how.end());
    const Outcome o = jitcache(args);
    EXPECT_EQ(o.code, 0) << "warm " << how.back() << ":\n" << o.out << o.err;
    return parse(o);
  }

  // Why the keys cannot match here: the compiler of an entry this warm had to compile is
  // not the one the data was made with. Nothing when every compile was by that one (or
  // nothing was compiled).
  std::optional<std::string> other_compiler(const json& warmed) const {
    for (const json& v : warmed["variants"]) {
      if (!v.value("compiled", false)) continue;
      const std::string key = v["key"].get<std::string>();
      const Outcome o = jitcache({"inspect", key, "--json"});
      const json doc = parse(o);
      if (o.code != 0 || doc.is_discarded() || doc["entries"].size() != 1u) {
        ADD_FAILURE() << "inspect " << key << ":\n" << o.out << o.err;
        return std::nullopt;
      }
      const json& facts = doc["entries"][0]["facts"];
      const std::string version = facts.value("compiler_version", "");
      const std::string fingerprint = facts.value("compiler_fingerprint", "");
      if (version == m_manifest["compiler_version"] && fingerprint != m_manifest["compiler_fingerprint"])
        return "this machine's NVRTC is the recorded version " + version + ", under another fingerprint (" +
               fingerprint + ", the recorded " + m_manifest["compiler_fingerprint"].get<std::string>() +
               "): the fingerprint is derived otherwise since the data was made (see "
               "tests/data/cache_before_formats/README.md); the keys were checked against the recorded facts, "
               "the hits cannot be";
      if (version != m_manifest["compiler_version"] || fingerprint != m_manifest["compiler_fingerprint"])
        return "this machine's NVRTC is " + version + " (fingerprint " + fingerprint + "), the recorded cache's " +
               m_manifest["compiler_version"].get<std::string>() + " (fingerprint " +
               m_manifest["compiler_fingerprint"].get<std::string>() +
               "): its keys cannot match here; see tests/data/cache_before_formats/README.md to remake it";
    }
    return std::nullopt;
  }

  // The fingerprint of this machine's NVRTC when it is the recorded version, from an entry
  // this warm compiled; nothing otherwise.
  std::optional<std::string> same_version_fingerprint(const json& warmed) const {
    for (const json& v : warmed["variants"]) {
      if (!v.value("compiled", false)) continue;
      const json doc = parse(jitcache({"inspect", v["key"].get<std::string>(), "--json"}));
      if (doc.is_discarded() || doc["entries"].size() != 1u) return std::nullopt;
      const json& facts = doc["entries"][0]["facts"];
      if (facts.value("compiler_version", "") != m_manifest["compiler_version"]) return std::nullopt;
      return facts.value("compiler_fingerprint", "");
    }
    return std::nullopt;
  }

  // With the same NVRTC version under another fingerprint derivation: the keys `warmed` made
  // are the recorded entries' facts of `format` with this machine's fingerprint put in.
  void expect_recorded_facts_under_this_fingerprint(const json& warmed, const std::string& format) const {
    const auto fingerprint = same_version_fingerprint(warmed);
    if (!fingerprint) return;
    const json inspected = json::parse(testing::read_text_file(data_dir() / "inspect.json"), nullptr, false);
    ASSERT_FALSE(inspected.is_discarded()) << data_dir() / "inspect.json" << ": not JSON";
    std::set<std::string> recorded, expected, got;
    for (const auto& [variant, key] : m_manifest["formats"][format]["keys"].items()) recorded.insert(key);
    for (const json& entry : inspected["entries"]) {
      if (!recorded.contains(entry["key"].get<std::string>())) continue;
      auto facts = cache::Facts::from_json(entry["facts"].dump());
      ASSERT_TRUE(facts) << facts.error().to_string();
      facts->set("compiler_fingerprint", *fingerprint);
      expected.insert(facts->key().to_hex());
    }
    for (const json& v : warmed["variants"]) got.insert(v["key"].get<std::string>());
    EXPECT_EQ(expected.size(), recorded.size()) << format << ": inspect.json lacks a recorded entry";
    EXPECT_EQ(got, expected) << format << ": the keys changed by more than the compiler's fingerprint";
  }

  // Every variant `warmed` needed is one of the recorded keys of `format`, found, not compiled.
  void expect_all_recorded_hits(const json& warmed, const std::string& format) const {
    const json& recorded = m_manifest["formats"][format]["keys"];
    std::set<std::string> expected, got;
    for (const auto& [variant, key] : recorded.items()) expected.insert(key.get<std::string>());
    for (const json& v : warmed["variants"]) {
      got.insert(v["key"].get<std::string>());
      EXPECT_FALSE(v["compiled"].get<bool>()) << format << ": compiled " << v.dump();
      EXPECT_TRUE(v["stored"].get<bool>()) << format << ": " << v.dump();
    }
    EXPECT_EQ(got, expected) << format << ": the keys changed";
    EXPECT_EQ(warmed["variants_needed"], recorded.size()) << format;
    EXPECT_EQ(warmed["already_cached"], recorded.size()) << format;
    EXPECT_EQ(warmed["compiled"], 0) << format;
    EXPECT_EQ(warmed["stored"], recorded.size()) << format;
  }

  json m_manifest;
  fs::path m_root;
};

TEST_F(CacheBeforeFormatsTest, RopeBf16KeysAreAllHitsAsB12x432) {
  const json warmed = warm({"--format", "b12x-432"});
  ASSERT_FALSE(warmed.is_discarded());
  if (const auto why = other_compiler(warmed)) {
    expect_recorded_facts_under_this_fingerprint(warmed, "b12x-432");
    GTEST_SKIP() << *why;
  }
  expect_all_recorded_hits(warmed, "b12x-432");
}

TEST_F(CacheBeforeFormatsTest, RopeFp8KeysAreAllHitsAsB12x368) {
  const json warmed = warm({"--format", "b12x-368"});
  ASSERT_FALSE(warmed.is_discarded());
  if (const auto why = other_compiler(warmed)) {
    expect_recorded_facts_under_this_fingerprint(warmed, "b12x-368");
    GTEST_SKIP() << *why;
  }
  expect_all_recorded_hits(warmed, "b12x-368");
}

// The old spelling still names the same records.
TEST_F(CacheBeforeFormatsTest, RopeAliasesHitTheSameKeys) {
  std::optional<std::string> skipped;
  for (const std::string format : {"b12x-432", "b12x-368"}) {
    const std::string alias = m_manifest["formats"][format]["rope_alias"].get<std::string>();
    const json warmed = warm({"--rope", alias});
    ASSERT_FALSE(warmed.is_discarded());
    if (const auto why = other_compiler(warmed)) {
      expect_recorded_facts_under_this_fingerprint(warmed, format);
      skipped = why;
      continue;
    }
    expect_all_recorded_hits(warmed, format);
  }
  if (skipped) GTEST_SKIP() << *skipped;
}

// After warming every recorded format: no new entry, no compile counted, and audit and
// verify find nothing wrong with the old entries.
TEST_F(CacheBeforeFormatsTest, AuditAndVerifyAreCleanAfterWarming) {
  std::size_t recorded = 0;
  for (const auto& [format, row] : m_manifest["formats"].items()) {
    const json warmed = warm({"--format", format});
    ASSERT_FALSE(warmed.is_discarded());
    if (const auto why = other_compiler(warmed)) GTEST_SKIP() << *why;
    recorded += row["keys"].size();
  }
  const Outcome stats = jitcache({"stats", "--json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  const json counts = parse(stats);
  EXPECT_EQ(counts["entries"], recorded);
  // The data's own counters say each entry was missed and compiled once; the warms above
  // added neither a miss nor a compile.
  EXPECT_EQ(counts["misses"], recorded) << stats.out;
  EXPECT_EQ(counts["compiles"], recorded) << stats.out;
  EXPECT_GE(counts["hits"]["disk"].get<std::size_t>(), recorded) << stats.out;

  const Outcome audit = jitcache({"audit", "--json"});
  EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
  const json report = parse(audit);
  EXPECT_EQ(report["clean"], true) << audit.out;
  EXPECT_EQ(report["findings"], json::array()) << audit.out;
  EXPECT_EQ(report["entries"], recorded);

  const Outcome verify = jitcache({"verify"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("checked " + std::to_string(recorded) + " entries: 0 bad"), std::string::npos)
      << verify.out;
}

}  // namespace
}  // namespace jitcache
