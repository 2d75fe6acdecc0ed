// A cache directory written before the record-format dimension existed, by an older jitcache
// (tests/data/cache_before_formats, its README says which and how): the writer and gather
// kernels, identity and dynamic, for both RoPE layouts on sm_90, keyed `rope=bf16` /
// `rope=fp8` and with the compiler fingerprint of then (a digest of a test compile's PTX).
//
// A compiler is now what its bytes are: nothing vouches that the recorded entries were built
// by this machine's NVRTC, so warming the same checkpoint misses them once and compiles
// under keys that differ from the recorded ones by the compiler's fingerprint alone (the
// format dimension changed no key); the audit then reports every recorded entry as
// superseded by its recompiled twin, and gc removes them first.
#include <gtest/gtest.h>

#include <map>
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

  // Why nothing can be compiled here, or nothing when it can.
  static std::optional<std::string> no_compiler() {
    const auto now = make_nvrtc_compiler()->fingerprint();
    if (!now) return "no NVRTC here: " + now.error().message;
    return std::nullopt;
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

  // Every variant `warmed` needed was compiled (the recorded entries are not served) under
  // the recorded keys with only the compiler's fingerprint replaced by this machine's.
  void expect_compiled_under_current_keys(const json& warmed, const std::string& format) const {
    const std::size_t recorded = m_manifest["formats"][format]["keys"].size();
    std::set<std::string> got;
    for (const json& v : warmed["variants"]) {
      got.insert(v["key"].get<std::string>());
      EXPECT_TRUE(v["compiled"].get<bool>()) << format << ": served without a compile " << v.dump();
    }
    EXPECT_EQ(got, current_keys(format)) << format << ": the keys changed by more than the compiler's fingerprint";
    EXPECT_EQ(warmed["variants_needed"], recorded) << format;
    EXPECT_EQ(warmed["already_cached"], 0) << format;
    EXPECT_EQ(warmed["compiled"], recorded) << format;
  }

  std::set<std::string> recorded_keys() const {
    std::set<std::string> keys;
    for (const auto& [format, row] : m_manifest["formats"].items())
      for (const auto& [variant, key] : row["keys"].items()) keys.insert(key.get<std::string>());
    return keys;
  }

  json m_manifest;
  fs::path m_root;
};

// Before any warm: every recorded entry is keyed with a compiler nothing here vouches for.
TEST_F(CacheBeforeFormatsTest, TheRecordedEntriesAreReportedAsKeyedWithAnUnknownCompiler) {
  const Outcome audit = jitcache({"audit", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  std::set<std::string> flagged;
  for (const json& f : report["findings"]) {
    EXPECT_EQ(f["kind"], "unknown-compiler") << f.dump();
    EXPECT_NE(f["explanation"].get<std::string>().find(m_manifest["compiler_fingerprint"].get<std::string>()),
              std::string::npos)
        << f.dump();
    flagged.insert(f["key"].get<std::string>());
  }
  EXPECT_EQ(flagged, recorded_keys()) << audit.out;
}

// Warming compiles every variant once under the keys of now (hits after that); the audit
// then reports each recorded entry as superseded by its twin, and gc removes exactly those,
// whatever the size cap, leaving a clean cache of the new entries.
TEST_F(CacheBeforeFormatsTest, WarmingCompilesOnceThenTheRecordedEntriesAreSupersededAndGcRemovesThem) {
  if (const auto why = no_compiler()) GTEST_SKIP() << *why;
  std::size_t recorded = 0;
  std::map<std::string, std::string> twin;  // recorded key -> its key of now
  for (const auto& [format, row] : m_manifest["formats"].items()) {
    const json warmed = warm({"--format", format});
    ASSERT_FALSE(warmed.is_discarded());
    expect_compiled_under_current_keys(warmed, format);
    recorded += row["keys"].size();
    const std::string alias = row["rope_alias"].get<std::string>();
    const json again = warm({"--rope", alias});  // the old spelling names the same records
    ASSERT_FALSE(again.is_discarded());
    EXPECT_EQ(again["compiled"], 0) << again.dump();
    EXPECT_EQ(again["already_cached"], row["keys"].size()) << again.dump();
  }
  const Outcome audit = jitcache({"audit", "--json"});
  EXPECT_EQ(audit.code, 1) << audit.out << audit.err;
  const json report = parse(audit);
  EXPECT_EQ(report["entries"], 2 * recorded);
  std::set<std::string> superseded, replacements;
  for (const json& f : report["findings"]) {
    EXPECT_EQ(f["kind"], "superseded") << f.dump();
    superseded.insert(f["key"].get<std::string>());
    replacements.insert(f["superseded_by"].get<std::string>());
  }
  EXPECT_EQ(superseded, recorded_keys()) << audit.out;
  std::set<std::string> now;
  for (const auto& [format, row] : m_manifest["formats"].items())
    for (const std::string& key : current_keys(format)) now.insert(key);
  EXPECT_EQ(replacements, now) << audit.out;

  const Outcome gc = jitcache({"gc"});
  EXPECT_EQ(gc.code, 0) << gc.out << gc.err;
  for (const std::string& key : recorded_keys()) EXPECT_NE(gc.out.find(key), std::string::npos) << gc.out;
  const Outcome after = jitcache({"audit", "--json"});
  EXPECT_EQ(after.code, 0) << after.out << after.err;
  EXPECT_EQ(parse(after)["entries"], recorded);
  const Outcome verify = jitcache({"verify"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
}
}  // namespace
}  // namespace jitcache
