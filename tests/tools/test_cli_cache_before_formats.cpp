// A cache directory written before the record-format dimension existed must be all hits
// for this build. tests/data/cache_before_formats/cache was filled by the CLI of an older
// commit (its README says which and how): the writer and gather kernels, identity and
// dynamic, for both RoPE layouts on sm_90, keyed `rope=bf16` / `rope=fp8`. Warming the same
// checkpoint here, by format name or by the old RoPE name, must find those eight entries and
// compile nothing; audit and verify must find nothing wrong with them.
//
// The keys hold the NVRTC build's fingerprint. Its derivation changed once since the data
// was made (a digest of a test compile's PTX then, of the build-id notes of libnvrtc and its
// builtins now): this build looks a missing kernel up under the key of then as well and
// carries the entry over to the key of now (KernelCache::carry_over), so the eight entries
// are found, each under its recorded facts with only compiler_fingerprint replaced. On a
// machine with another NVRTC build every lookup is rightly a miss: there the tests skip,
// naming both compilers, instead of failing.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/facts.hpp"
#include "cli_runner.hpp"
#include "runtime/compile/compiler.hpp"
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

  // Why the recorded entries cannot be found here, or nothing when they can: this
  // machine's NVRTC must be the recorded version with, under the derivation of then
  // (Compiler::earlier_fingerprint), the recorded fingerprint.
  std::optional<std::string> other_build() const {
    const auto nvrtc = make_nvrtc_compiler();
    const auto now = nvrtc->fingerprint();
    if (!now) return "no NVRTC here: " + now.error().message;
    const std::string then = nvrtc->earlier_fingerprint().value_or(*now);
    if (nvrtc->version() == m_manifest["compiler_version"] && then == m_manifest["compiler_fingerprint"])
      return std::nullopt;
    return "this machine's NVRTC is " + nvrtc->version() + " (fingerprint " + then +
           " as the data's keys derive it), the recorded cache's " +
           m_manifest["compiler_version"].get<std::string>() + " (fingerprint " +
           m_manifest["compiler_fingerprint"].get<std::string>() +
           "): its keys cannot match here; see tests/data/cache_before_formats/README.md to remake it";
  }

  // The recorded entries' keys of `format` with this machine's fingerprint put in: the keys
  // this build files them under.
  std::set<std::string> current_keys(const std::string& format) const {
    const auto fingerprint = make_nvrtc_compiler()->fingerprint();
    EXPECT_TRUE(fingerprint) << fingerprint.error().to_string();
    const json inspected = json::parse(testing::read_text_file(data_dir() / "inspect.json"), nullptr, false);
    EXPECT_FALSE(inspected.is_discarded()) << data_dir() / "inspect.json" << ": not JSON";
    std::set<std::string> recorded, keys;
    for (const auto& [variant, key] : m_manifest["formats"][format]["keys"].items()) recorded.insert(key);
    for (const json& entry : inspected["entries"]) {
      if (!recorded.contains(entry["key"].get<std::string>())) continue;
      auto facts = cache::Facts::from_json(entry["facts"].dump());
      EXPECT_TRUE(facts) << facts.error().to_string();
      if (!facts || !fingerprint) continue;
      facts->set("compiler_fingerprint", *fingerprint);
      keys.insert(facts->key().to_hex());
    }
    EXPECT_EQ(keys.size(), recorded.size()) << format << ": inspect.json lacks a recorded entry";
    return keys;
  }

  // Every variant `warmed` needed was found (carried over from a recorded entry, or its
  // carried copy), none compiled: the keys changed by nothing but the compiler's fingerprint.
  void expect_all_found(const json& warmed, const std::string& format) const {
    const std::size_t recorded = m_manifest["formats"][format]["keys"].size();
    std::set<std::string> got;
    for (const json& v : warmed["variants"]) {
      got.insert(v["key"].get<std::string>());
      EXPECT_FALSE(v["compiled"].get<bool>()) << format << ": compiled " << v.dump();
      EXPECT_TRUE(v["stored"].get<bool>()) << format << ": " << v.dump();
    }
    EXPECT_EQ(got, current_keys(format)) << format << ": the keys changed by more than the compiler's fingerprint";
    EXPECT_EQ(warmed["variants_needed"], recorded) << format;
    EXPECT_EQ(warmed["already_cached"], recorded) << format;
    EXPECT_EQ(warmed["compiled"], 0) << format;
    EXPECT_EQ(warmed["stored"], recorded) << format;
  }

  json m_manifest;
  fs::path m_root;
};

TEST_F(CacheBeforeFormatsTest, RopeBf16KeysAreAllHitsAsB12x432) {
  if (const auto why = other_build()) GTEST_SKIP() << *why;
  for (int round = 0; round < 2; ++round) {  // carried over, then hits under the current keys
    SCOPED_TRACE(round);
    const json warmed = warm({"--format", "b12x-432"});
    ASSERT_FALSE(warmed.is_discarded());
    expect_all_found(warmed, "b12x-432");
  }
}

TEST_F(CacheBeforeFormatsTest, RopeFp8KeysAreAllHitsAsB12x368) {
  if (const auto why = other_build()) GTEST_SKIP() << *why;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const json warmed = warm({"--format", "b12x-368"});
    ASSERT_FALSE(warmed.is_discarded());
    expect_all_found(warmed, "b12x-368");
  }
}

// The old spelling still names the same records.
TEST_F(CacheBeforeFormatsTest, RopeAliasesHitTheSameKeys) {
  if (const auto why = other_build()) GTEST_SKIP() << *why;
  for (const std::string format : {"b12x-432", "b12x-368"}) {
    const std::string alias = m_manifest["formats"][format]["rope_alias"].get<std::string>();
    const json warmed = warm({"--rope", alias});
    ASSERT_FALSE(warmed.is_discarded());
    expect_all_found(warmed, format);
  }
}

// After warming every recorded format: each recorded entry carried over once (a copy under
// its current key), no compile counted, and audit and verify find nothing wrong with the
// old entries or their copies.
TEST_F(CacheBeforeFormatsTest, AuditAndVerifyAreCleanAfterWarming) {
  if (const auto why = other_build()) GTEST_SKIP() << *why;
  std::size_t recorded = 0;
  for (const auto& [format, row] : m_manifest["formats"].items()) {
    const json warmed = warm({"--format", format});
    ASSERT_FALSE(warmed.is_discarded());
    expect_all_found(warmed, format);
    recorded += row["keys"].size();
  }
  const Outcome stats = jitcache({"stats", "--json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  const json counts = parse(stats);
  EXPECT_EQ(counts["entries"], 2 * recorded);
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
  EXPECT_EQ(report["entries"], 2 * recorded);

  const Outcome verify = jitcache({"verify"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("checked " + std::to_string(2 * recorded) + " entries: 0 bad"), std::string::npos)
      << verify.out;
}

}  // namespace
}  // namespace jitcache
