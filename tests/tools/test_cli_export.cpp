// `jitcache export` / `import` as an air-gapped deploy uses them: the example checkpoint
// exported for two targets with a fleet key, imported into an empty cache, after which a
// warm compiles nothing; a tampered or truncated file refused with nothing imported;
// --verify-only imports nothing; the key rules (an unsigned file where a key is
// configured is refused; without a key, accepted with a warning).
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "redis_server.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Outcome = testing::CliOutcome;

const std::vector<std::string> k_dropped{"JITCACHE_DIR=", "XDG_CACHE_HOME=", "JITCACHE_REMOTE"};

class CliExportTest : public testing::CliCommandTest {
 protected:
  // One export for the suite: compiling the 8 variants of two targets is the slow part.
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "jitcache-export-suite-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    s_suite = new fs::path(pattern);
    *s_key = testing::write_fleet_key(*s_suite).string();
    const fs::path exporter = *s_suite / "exporter-cache";
    for (const bool signed_file : {true, false}) {
      const fs::path out = *s_suite / (signed_file ? "glm5.jcexport" : "glm5-unsigned.jcexport");
      std::vector<std::string> env;
      if (signed_file) env.push_back("JITCACHE_REMOTE_KEY_FILE=" + *s_key);
      const Outcome o = testing::run_cli(*s_suite,
                                         {"--cache-dir", exporter.string(), "export", "--checkpoint",
                                          testing::example_checkpoint().string(), "--arch", "sm_90", "--arch",
                                          "sm_120a", "--jobs", "2", "--out", out.string(), "--json"},
                                         env, k_dropped);
      ASSERT_EQ(o.code, 0) << o.out << o.err;
      *(signed_file ? s_export : s_unsigned_export) = json::parse(o.out);
      if (!signed_file) {
        ASSERT_NE(o.err.find("not signed"), std::string::npos) << o.err;
      }
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (s_suite) fs::remove_all(*s_suite, ec);
  }

  static fs::path signed_file() { return *s_suite / "glm5.jcexport"; }
  static fs::path unsigned_file() { return *s_suite / "glm5-unsigned.jcexport"; }

  // The CLI on this test's cache, with the fleet key configured (or not).
  Outcome jitcache(std::vector<std::string> args, bool with_key = true) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    std::vector<std::string> env;
    if (with_key) env.push_back("JITCACHE_REMOTE_KEY_FILE=" + *s_key);
    return testing::run_cli(dir(), std::move(args), env, k_dropped);
  }

  std::size_t entries_in_cache() const {
    if (!fs::exists(m_root)) return 0;
    const Outcome o = jitcache({"inspect", "--json"});
    EXPECT_EQ(o.code, 0) << o.err;
    return parse(o)["entries"].size();
  }

  // A copy of the signed file in this test's directory, changed by `edit`.
  template <class Edit>
  fs::path altered(const std::string& name, Edit edit) const {
    std::string data = testing::read_text_file(signed_file());
    edit(data);
    const fs::path path = dir() / name;
    std::ofstream(path, std::ios::binary) << data;
    return path;
  }

  void expect_refused_and_nothing_imported(const fs::path& file, const std::string& named) const {
    const Outcome o = jitcache({"import", file.string()});
    EXPECT_EQ(o.code, 1) << o.out << o.err;
    EXPECT_NE(o.err.find(named), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("nothing was imported"), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(entries_in_cache(), 0u);
  }

  static inline fs::path* s_suite = nullptr;
  static inline std::string* s_key = new std::string();
  static inline json* s_export = new json();
  static inline json* s_unsigned_export = new json();
};

TEST_F(CliExportTest, ExportHoldsEveryVariantOfBothTargets) {
  const json& e = *s_export;
  EXPECT_EQ(e["targets"], json({"sm_90", "sm_120a"}));
  EXPECT_EQ(e["entries"], 8);  // writer and gather, identity and dynamic, per target
  EXPECT_EQ(e["compiled"], 8);
  EXPECT_EQ(e["signed"], true);
  EXPECT_EQ(e["bytes"].get<std::uint64_t>(), fs::file_size(signed_file()));
  EXPECT_EQ(e["checkpoint"], "glm5-mini");
  // The second export found everything in the exporter's cache.
  EXPECT_EQ((*s_unsigned_export)["compiled"], 0);
  EXPECT_EQ((*s_unsigned_export)["signed"], false);
  std::printf("export of glm5-mini for sm_90 + sm_120a: %llu bytes, %.0f ms (8 compiles)\n",
              static_cast<unsigned long long>(e["bytes"].get<std::uint64_t>()), e["wall_ms"].get<double>());
}

TEST_F(CliExportTest, ImportIntoAnEmptyCacheThenWarmCompilesNothing) {
  const Outcome imported = jitcache({"import", signed_file().string(), "--json"});
  ASSERT_EQ(imported.code, 0) << imported.out << imported.err;
  const json r = parse(imported);
  EXPECT_EQ(r["signature"], "verified");
  EXPECT_EQ(r["entries"], 8);
  EXPECT_EQ(r["added"], 8);
  EXPECT_EQ(r["already_present"], 0);
  EXPECT_EQ(entries_in_cache(), 8u);
  std::printf("import of 8 entries: %.0f ms\n", r["wall_ms"].get<double>());

  for (const char* arch : {"sm_90", "sm_120a"}) {
    const Outcome warm = jitcache({"warm", "--checkpoint", testing::example_checkpoint().string(), "--arch", arch,
                                   "--json"});
    ASSERT_EQ(warm.code, 0) << warm.err;
    const json w = parse(warm);
    EXPECT_EQ(w["compiled"], 0) << arch;
    EXPECT_EQ(w["already_cached"], 4) << arch;
  }

  // Importing again adds nothing and says so.
  const Outcome again = jitcache({"import", signed_file().string()});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("added 0, already present 8"), std::string::npos) << again.out;
}

// Entries keyed for another NVRTC build (issue 24: "added 8" said nothing of it): the
// file is this one with every entry's compiler_fingerprint changed (keys recomputed,
// signed again with the fleet key), as another machine's export would be. The import
// adds them and says they will not be hit here, counted in text and JSON; this build's
// file says nothing of the kind.
TEST_F(CliExportTest, ImportSaysWhichEntriesAreKeyedForAnotherNvrtcBuild) {
  const std::string data = testing::read_text_file(signed_file());
  std::uint64_t manifest_len = 0;
  std::memcpy(&manifest_len, data.data() + 16, sizeof manifest_len);
  json manifest = json::parse(data.substr(k_archive_header_bytes, manifest_len));
  const std::string theirs(32, 'e');
  std::vector<std::string_view> blobs;
  std::uint64_t offset = k_archive_header_bytes + manifest_len;
  for (json& e : manifest["entries"]) {
    e["facts"]["compiler_fingerprint"] = theirs;
    auto facts = cache::Facts::from_json(e["facts"].dump());
    ASSERT_TRUE(facts.has_value()) << facts.error().to_string();
    e["key"] = facts->key().to_hex();
    blobs.emplace_back(data.data() + offset, e["size"].get<std::uint64_t>());
    offset += e["size"].get<std::uint64_t>();
  }
  const fs::path other = dir() / "other-build.jcexport";
  std::ofstream(other, std::ios::binary)
      << seal_archive(encode_archive_body(manifest.dump(), blobs), testing::read_text_file(*s_key));

  const Outcome text = jitcache({"import", other.string()});
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("added 8, already present 0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("8 of them are keyed for another NVRTC build (fingerprint " + theirs +
                          "; this machine's is "),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("will not be hit here"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(another NVRTC build)"), std::string::npos) << text.out;

  const Outcome again = jitcache({"import", other.string(), "--json"});
  ASSERT_EQ(again.code, 0) << again.err;
  const json r = parse(again);
  EXPECT_EQ(r["other_build"], 8);
  EXPECT_EQ(r["other_build_fingerprints"], json::array({theirs}));
  EXPECT_NE(r["local_fingerprint"], theirs);
  for (const json& item : r["items"]) EXPECT_EQ(item["other_build"], true);
  const Outcome verify_only = jitcache({"import", other.string(), "--verify-only"});
  EXPECT_NE(verify_only.out.find("8 of them are keyed for another NVRTC build"), std::string::npos)
      << verify_only.out;

  // This machine's own export: nothing of the kind.
  const Outcome own = jitcache({"import", signed_file().string(), "--json"});
  ASSERT_EQ(own.code, 0) << own.err;
  EXPECT_EQ(parse(own)["other_build"], 0);
  const Outcome own_text = jitcache({"import", signed_file().string()});
  EXPECT_EQ(own_text.out.find("another NVRTC build"), std::string::npos) << own_text.out;
}

TEST_F(CliExportTest, VerifyOnlyImportsNothing) {
  const Outcome o = jitcache({"import", signed_file().string(), "--verify-only", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const json r = parse(o);
  EXPECT_EQ(r["verify_only"], true);
  EXPECT_EQ(r["signature"], "verified");
  EXPECT_EQ(r["entries"], 8);
  EXPECT_EQ(r["added"], 0);
  for (const json& item : r["items"]) EXPECT_EQ(item["status"], "verified");
  EXPECT_EQ(entries_in_cache(), 0u);
}

TEST_F(CliExportTest, TamperedAndTruncatedFilesAreRefusedWhole) {
  // A byte in the last blob: the first problem is the checksum.
  expect_refused_and_nothing_imported(
      altered("flipped.jcexport", [](std::string& d) { d[d.size() - 200] ^= 0x01; }), "checksum mismatch");
  // Cut short.
  expect_refused_and_nothing_imported(
      altered("truncated.jcexport", [](std::string& d) { d.resize(d.size() / 2); }), "no trailer");
  expect_refused_and_nothing_imported(altered("tiny.jcexport", [](std::string& d) { d.resize(10); }),
                                      "truncated");
  // Not an export file at all.
  expect_refused_and_nothing_imported(
      altered("other.jcexport", [](std::string& d) { d = R"({"not": "an export file"})"; }),
      "not a jitcache export file");
}

TEST_F(CliExportTest, KeyRules) {
  // A key configured: an unsigned file is refused, whatever else is right about it.
  expect_refused_and_nothing_imported(unsigned_file(), "not signed");
  // Another fleet's key.
  const fs::path other = testing::write_fleet_key(dir(), "other.key");
  Outcome o = testing::run_cli(dir(),
                               {"--cache-dir", m_root.string(), "import", signed_file().string()},
                               {"JITCACHE_REMOTE_KEY_FILE=" + other.string()}, k_dropped);
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_NE(o.err.find("bad signature"), std::string::npos) << o.err;
  EXPECT_EQ(entries_in_cache(), 0u);

  // No key configured: an unsigned file is accepted, with a warning that it is unauthenticated.
  o = jitcache({"import", unsigned_file().string()}, false);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("is not signed"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("signature: unsigned"), std::string::npos) << o.out;
  EXPECT_EQ(entries_in_cache(), 8u);
}

TEST_F(CliExportTest, UsageAndInputErrors) {
  expect_usage_error({"export", "--checkpoint", testing::example_checkpoint().string(), "--arch", "sm_90"}, "--out");
  expect_usage_error({"import"}, "FILE");
  const Outcome missing = jitcache({"import", (dir() / "absent.jcexport").string()});
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("absent.jcexport"), std::string::npos) << missing.err;
  // The output may not be one of the inputs.
  const fs::path config = testing::example_checkpoint() / "config.json";
  const Outcome same = jitcache({"export", "--checkpoint", testing::example_checkpoint().string(), "--arch",
                                 "sm_90", "--out", config.string()});
  EXPECT_EQ(same.code, 1) << same.err;
  EXPECT_EQ(same.out, "");
}

}  // namespace
}  // namespace jitcache
