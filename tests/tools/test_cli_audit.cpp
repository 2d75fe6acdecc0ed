// `jitcache audit` as an operator runs it. Its exit status is a contract (docs/cli.md, exit codes):
// 0 the cache is clean, 1 findings (each named with its kind and key), 2 the audit could
// not run (a usage error, a checkpoint or scales file it cannot use, an unusable cache
// directory). Entries are damaged the way a tamperer or an older jitcache would leave
// them: rows rewritten with sqlite3, blob files overwritten or removed.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/hash.hpp"
#include "cache/store.hpp"
#include "cli_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;

class CliAuditTest : public testing::CliCommandTest {
 protected:
  // Fills the cache with the four variants the example checkpoint needs on sm_90.
  void warm() {
    const CliOutcome o = run({"warm", "--checkpoint", testing::example_checkpoint().string(), "--arch",
                              "sm_90", "--jobs", "2", "--json"});
    ASSERT_EQ(o.code, 0) << o.err;
    m_warm = parse(o);
    ASSERT_EQ(m_warm["stored"], 4) << o.out;
  }

  std::string key_of(const std::string& kernel, const std::string& latent_scale) const {
    for (const json& v : m_warm["variants"])
      if (v["kernel"] == kernel && v["latent_scale"] == latent_scale) return v["key"];
    ADD_FAILURE() << "warm made no " << kernel << "/" << latent_scale << " entry: " << m_warm.dump();
    return "";
  }

  // Runs SQL on the index as an operator's sqlite3 shell would; the first column of each row.
  std::vector<std::string> sql(const std::string& statement) const {
    sqlite3* db = nullptr;
    std::vector<std::string> rows;
    EXPECT_EQ(sqlite3_open((m_root / "index.db").c_str(), &db), SQLITE_OK);
    auto collect = [](void* out, int, char** values, char**) {
      static_cast<std::vector<std::string>*>(out)->push_back(values[0] != nullptr ? values[0] : "");
      return 0;
    };
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, statement.c_str(), collect, &rows, &error), SQLITE_OK)
        << statement << ": " << (error != nullptr ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
    return rows;
  }

  fs::path blob_of(const std::string& key) const {
    const auto digest = sql("SELECT digest FROM entries WHERE key = '" + key + "'");
    EXPECT_EQ(digest.size(), 1u) << key;
    return digest.empty() ? fs::path() : m_root / "blobs" / digest[0].substr(0, 2) / digest[0];
  }

  // The field failure: the key a calibrated (dynamic) layer looks up holds the identity
  // kernel, which skips the restore multiply. Returns the dynamic writer's key.
  std::string plant_stale_identity() {
    const std::string dynamic = key_of("writer", "dynamic"), identity = key_of("writer", "identity");
    sql("UPDATE entries SET (digest, size) = (SELECT digest, size FROM entries WHERE key = '" + identity +
        "') WHERE key = '" + dynamic + "'");
    return dynamic;
  }

  CliOutcome audit_checkpoint(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{"audit", "--checkpoint", testing::example_checkpoint().string(), "--arch",
                                  "sm_90"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }

  // `audit --json` must exit 1 with exactly one finding, of `kind`, for the entry `key`;
  // returns it (null when it is not there).
  json only_finding(const std::string& kind, const std::string& key) const {
    const CliOutcome o = run({"audit", "--json"});
    EXPECT_EQ(o.code, 1) << o.out << o.err;
    const json doc = parse(o);
    EXPECT_EQ(doc["clean"], false);
    if (doc["findings"].size() != 1u) {
      ADD_FAILURE() << "expected one " << kind << " finding:\n" << o.out;
      return json();
    }
    const json& f = doc["findings"][0];
    EXPECT_EQ(f["kind"], kind) << o.out;
    EXPECT_EQ(f["key"], key) << o.out;
    EXPECT_FALSE(f["explanation"].get<std::string>().empty()) << o.out;
    return f;
  }

  json m_warm;
};

TEST_F(CliAuditTest, CleanCacheExitsZero) {
  warm();
  const CliOutcome text = run({"audit"});
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("audited 4 entries: no findings"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("finding("), std::string::npos) << text.out;

  const CliOutcome o = run({"audit", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], true);
  EXPECT_EQ(doc["entries"], 4);
  EXPECT_TRUE(doc["findings"].empty()) << o.out;
  EXPECT_FALSE(doc.contains("checkpoint")) << "no --checkpoint, no per-layer report";
}

// A directory that does not exist yet is made, like every cache command makes it: an
// empty cache has nothing to report.
TEST_F(CliAuditTest, MissingCacheDirectoryIsAnEmptyCleanCache) {
  ASSERT_FALSE(fs::exists(m_root));
  const CliOutcome o = run({"audit", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], true);
  EXPECT_EQ(doc["entries"], 0);
}

TEST_F(CliAuditTest, CheckpointReportOnAWarmCacheFindsEveryVariant) {
  warm();
  const CliOutcome o = audit_checkpoint({"--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], true);
  const json& c = doc["checkpoint"];
  EXPECT_EQ(c["target"], "sm_90");
  EXPECT_EQ(c["format"], "b12x-432");
  EXPECT_EQ(c["dynamic_layers"], 78);
  EXPECT_EQ(c["identity_layers"], 1);
  EXPECT_EQ(c["scales_file"], "nvfp4_ds_mla_outer_scales.json");
  ASSERT_EQ(c["layers"].size(), 79u);
  for (const json& layer : c["layers"]) {
    EXPECT_FALSE(layer["bound_to_identity"].get<bool>()) << layer.dump();
    EXPECT_TRUE(layer["writer_cached"].get<bool>()) << layer.dump();
    EXPECT_TRUE(layer["gather_cached"].get<bool>()) << layer.dump();
  }
  ASSERT_EQ(c["variants"].size(), 4u);
  std::size_t layers_needing = 0;
  for (const json& v : c["variants"]) {
    EXPECT_TRUE(v["cached"].get<bool>()) << v.dump();
    layers_needing += v["layers"].get<std::size_t>();
  }
  EXPECT_EQ(layers_needing, 2u * 79u) << "each layer needs a writer and a gather";

  const CliOutcome text = audit_checkpoint();
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("sm_90, b12x-432: 79 layers (78 dynamic, 1 identity)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("writer/dynamic/b12x-432/sm_90"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("no (warm"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("identity kernel"), std::string::npos) << text.out;
}

// What a checkpoint needs but the cache lacks is compiled on first use: not a finding.
TEST_F(CliAuditTest, CheckpointReportOnAnEmptyCacheSaysWhatWouldBeCompiled) {
  const CliOutcome o = audit_checkpoint({"--rope", "fp8", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["checkpoint"]["format"], "b12x-368");
  for (const json& v : doc["checkpoint"]["variants"]) {
    EXPECT_FALSE(v["cached"].get<bool>()) << v.dump();
    EXPECT_NE(v["variant"].get<std::string>().find("/b12x-368/sm_90"), std::string::npos) << v.dump();
  }
  const CliOutcome text = audit_checkpoint();
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("no (warm or prepare compiles it)"), std::string::npos) << text.out;
}

TEST_F(CliAuditTest, StaleIdentityEntryIsAFindingExitOne) {
  warm();
  const std::string key = plant_stale_identity();
  const json f = only_finding("stale-identity", key);
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f["kernel"], "writer");
  EXPECT_EQ(f["target"], "sm_90");
  const std::string why = f["explanation"];
  EXPECT_NE(why.find("identity kernel"), std::string::npos) << why;
  EXPECT_NE(why.find("latent_scale=dynamic"), std::string::npos) << why;

  const CliOutcome text = run({"audit"});
  EXPECT_EQ(text.code, 1) << text.err;
  EXPECT_NE(text.out.find("audited 4 entries: 1 finding(s)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("stale-identity"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(key.substr(0, 12)), std::string::npos) << text.out;
}

// With the checkpoint, every calibrated layer is reported as bound to the identity kernel.
TEST_F(CliAuditTest, StaleIdentityEntryNamesTheCalibratedLayersItWouldServe) {
  warm();
  const std::string key = plant_stale_identity();
  const CliOutcome o = audit_checkpoint({"--json"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  const json doc = parse(o);
  std::size_t bound = 0;
  for (const json& layer : doc["checkpoint"]["layers"])
    if (layer["bound_to_identity"].get<bool>()) {
      ++bound;
      EXPECT_EQ(layer["writer_key"], key) << layer.dump();
      EXPECT_EQ(layer["mode"], "dynamic") << layer.dump();
    }
  EXPECT_EQ(bound, 78u);
  const CliOutcome text = audit_checkpoint();
  EXPECT_EQ(text.code, 1) << text.err;
  EXPECT_NE(text.out.find("layers whose key holds an identity kernel:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  layer 0 (scale "), std::string::npos) << text.out;
}

// The finding is fixed by `clear --stale`; the audit is then clean again.
TEST_F(CliAuditTest, ClearStaleRemovesTheFindingAndTheAuditIsCleanAgain) {
  warm();
  const std::string key = plant_stale_identity();
  ASSERT_EQ(run({"audit"}).code, 1);
  const CliOutcome clear = run({"clear", "--stale"});
  ASSERT_EQ(clear.code, 0) << clear.out << clear.err;
  EXPECT_NE(clear.out.find(key.substr(0, 12)), std::string::npos) << clear.out;
  const CliOutcome o = run({"audit", "--json"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(parse(o)["entries"], 3);
}

TEST_F(CliAuditTest, CorruptBlobIsAFindingNamingTheEntry) {
  warm();
  const std::string key = key_of("gather", "dynamic");
  const fs::path blob = blob_of(key);
  const auto size = fs::file_size(blob);
  {
    // Same size, other bytes: only the digest can tell.
    std::ofstream out(blob, std::ios::binary | std::ios::trunc);
    out << std::string(size, 'X');
  }
  const json f = only_finding("corrupt", key);
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f["digest"], blob.filename().string());
}

// A blob that verifies (its digest and size agree with the row) but holds no kernel.
TEST_F(CliAuditTest, BlobThatIsNotAKernelIsCorrupt) {
  warm();
  const std::string key = key_of("writer", "identity");
  const std::string text = "a text file, not a kernel artifact";
  cache::Bytes bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  const std::string digest = cache::BlobDigest::of(bytes).to_hex();
  const fs::path blob = m_root / "blobs" / digest.substr(0, 2) / digest;
  fs::create_directories(blob.parent_path());
  std::ofstream(blob, std::ios::binary) << text;
  ::chmod(blob.parent_path().c_str(), 0700);
  ::chmod(blob.c_str(), 0600);
  sql("UPDATE entries SET digest = '" + digest + "', size = " + std::to_string(text.size()) +
      " WHERE key = '" + key + "'");
  const json f = only_finding("corrupt", key);
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f["digest"], digest);
  EXPECT_NE(f["explanation"].get<std::string>().find("not a kernel artifact"), std::string::npos) << f.dump();
}

TEST_F(CliAuditTest, MissingBlobIsAFinding) {
  warm();
  const std::string key = key_of("writer", "identity");
  ASSERT_TRUE(fs::remove(blob_of(key)));
  EXPECT_FALSE(only_finding("missing-blob", key).is_null());
  const CliOutcome text = run({"audit"});
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.out.find("missing-blob"), std::string::npos) << text.out;
}

TEST_F(CliAuditTest, UsageErrorsExitTwo) {
  const std::string checkpoint = testing::example_checkpoint().string();
  expect_usage_error({"audit", "--checkpoint", checkpoint}, "needs --arch");
  expect_usage_error({"audit", "--checkpoint", checkpoint, "--scales", "x.json"}, "needs --arch");
  expect_usage_error({"audit", "--rope", "fp16"}, "--rope");
  expect_usage_error({"audit", "--bogus"}, "--bogus");
  expect_usage_error({"audit", "stray"}, "stray");
  expect_usage_error({"audit", "--checkpoint"}, "--checkpoint");
  expect_usage_error({"audit", "--arch"}, "--arch");
}

// The per-layer report cannot be made: the audit did not run, whatever the cause (2).
TEST_F(CliAuditTest, CheckpointOrScalesItCannotUseExitTwoNamingTheFile) {
  const fs::path absent = dir() / "absent";
  const fs::path broken = dir() / "broken";
  fs::create_directories(broken);
  std::ofstream(broken / "config.json") << "{\"num_hidden_layers\": ";
  const fs::path bad_scales = dir() / "bad_scales.json";
  std::ofstream(bad_scales) << "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": \"many\"}";
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;
  };
  const std::string checkpoint = testing::example_checkpoint().string();
  const std::vector<Case> cases{
      {{"--checkpoint", absent.string(), "--arch", "sm_90"}, {absent.string(), "does not exist"}},
      {{"--checkpoint", broken.string(), "--arch", "sm_90"},
       {(broken / "config.json").string(), "not valid JSON"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_90", "--scales", (dir() / "none.json").string()},
       {(dir() / "none.json").string()}},
      {{"--checkpoint", checkpoint, "--arch", "sm_90", "--scales", bad_scales.string()},
       {bad_scales.string(), "num_layers"}},
      {{"--checkpoint", checkpoint, "--arch", "sm_12"}, {"unknown target 'sm_12'"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"audit"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.push_back("--json");
    expect_refused(args, 2, c.named);
  }
}

TEST_F(CliAuditTest, UnusableCacheDirectoryExitsTwoNamingIt) {
  expect_unusable_cache_dirs_refused({"audit"});
  expect_unusable_cache_dirs_refused({"audit", "--json"});
}

// A garbage index is moved to quarantine (with a warning naming it) and the audit runs on
// the fresh, empty one; `verify` is the command that reports the quarantine as a finding
// (CliCacheTest.VerifyReportsAQuarantinedIndexAndExitsOne).
TEST_F(CliAuditTest, GarbageIndexIsQuarantinedWithAWarningNamingIt) {
  fs::create_directory(m_root);
  fs::permissions(m_root, fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(m_root / "index.db", std::ios::binary) << std::string(8192, 'G');
  const CliOutcome o = run({"audit", "--json"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(parse(o)["entries"], 0);
  EXPECT_NE(o.err.find((m_root / "index.db").string() + ": not a usable index; moved to"), std::string::npos)
      << o.err;
}

// --device-cc holds the checkpoint's plan to NVIDIA's rule of which cubins run where
// (docs/targets.md): an sm_120a cubin bound to a 12.1 device is a wrong-device finding for
// every variant the checkpoint needs, cached or not; an sm_120f one is not.
TEST_F(CliAuditTest, ACubinPlannedForADeviceItCannotRunOnIsAWrongDeviceFinding) {
  const CliOutcome warmed = run({"warm", "--checkpoint", testing::example_checkpoint().string(), "--arch",
                                 "sm_120a", "--jobs", "2"});
  ASSERT_EQ(warmed.code, 0) << warmed.err;
  const std::vector<std::string> plan{"audit", "--checkpoint", testing::example_checkpoint().string()};
  auto audit = [&](const std::string& arch, const std::string& cc, bool json) {
    std::vector<std::string> args = plan;
    args.insert(args.end(), {"--arch", arch, "--device-cc", cc});
    if (json) args.push_back("--json");
    return run(args);
  };

  const CliOutcome o = audit("sm_120a", "12.1", true);
  ASSERT_EQ(o.code, 1) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], false);
  EXPECT_EQ(doc["checkpoint"]["device_cc"], "12.1");
  const json& variants = doc["checkpoint"]["variants"];
  ASSERT_EQ(variants.size(), 4u);
  ASSERT_EQ(doc["findings"].size(), 4u) << o.out;
  for (std::size_t i = 0; i < 4; ++i) {
    const json& f = doc["findings"][i];
    EXPECT_EQ(f["kind"], "wrong-device") << f.dump();
    EXPECT_EQ(f["severity"], "error") << f.dump();
    EXPECT_EQ(f["target"], "sm_120a") << f.dump();
    EXPECT_EQ(f["key"], variants[i]["key"]) << "one finding per needed variant, in the plan's order";
    EXPECT_TRUE(variants[i]["cached"].get<bool>()) << "the entry itself is sound: " << variants[i].dump();
    const std::string why = f["explanation"];
    EXPECT_NE(why.find(variants[i]["variant"].get<std::string>()), std::string::npos) << why;
    EXPECT_NE(why.find("an sm_120a cubin cannot run on a device of compute capability 12.1: it runs on 12.0 "
                       "only; the targets that run there: sm_121a, sm_120f, sm_120"),
              std::string::npos)
        << why;
  }
  const CliOutcome text = audit("sm_120a", "12.1", false);
  EXPECT_EQ(text.code, 1) << text.err;
  EXPECT_NE(text.out.find("4 finding(s)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("wrong-device"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("sm_120a for a 12.1 device, b12x-432"), std::string::npos) << text.out;

  // Where the target's cubins run, nothing is found; the family-specific target serves
  // both members of its family.
  for (const auto& [arch, cc] : std::vector<std::pair<std::string, std::string>>{
           {"sm_120a", "12.0"}, {"sm_120f", "12.1"}, {"sm_120f", "12.0"}, {"sm_120", "12.1"}, {"sm_121a", "12.1"}}) {
    const CliOutcome clean = audit(arch, cc, true);
    EXPECT_EQ(clean.code, 0) << arch << " on " << cc << ": " << clean.out << clean.err;
    EXPECT_TRUE(parse(clean)["findings"].empty()) << arch << " on " << cc;
  }
  // Nor across families, either way.
  EXPECT_EQ(audit("sm_100f", "12.0", false).code, 1);
  EXPECT_EQ(audit("sm_120f", "10.3", false).code, 1);
  EXPECT_EQ(audit("sm_100f", "10.3", false).code, 0);
  EXPECT_EQ(audit("sm_100a", "10.3", false).code, 1);

  // The entries are sound: clearing what the audit flags keeps them, and without a device
  // the cache is clean.
  const CliOutcome clear = run({"clear", "--stale"});
  ASSERT_EQ(clear.code, 0) << clear.err;
  const CliOutcome after = run({"audit", "--json"});
  EXPECT_EQ(after.code, 0) << after.out;
  EXPECT_EQ(parse(after)["entries"], 4);
}

TEST_F(CliAuditTest, DeviceCapabilityUsageErrorsExitTwo) {
  const std::string checkpoint = testing::example_checkpoint().string();
  expect_usage_error({"audit", "--device-cc", "12.1"}, "needs --checkpoint");
  expect_usage_error({"audit", "--checkpoint", checkpoint, "--device-cc", "12.1"}, "needs --arch");
  for (const char* bad : {"12", "12.", ".1", "twelve", "12.1.0", "123.0", "1 2.1"})
    expect_usage_error({"audit", "--checkpoint", checkpoint, "--arch", "sm_120a", "--device-cc", bad},
                       std::string("'") + bad + "' is not a compute capability");
  expect_usage_error({"audit", "--remote", "--device-cc", "12.1"}, "--device-cc");
  // 'device' is this machine's GPU: with none visible, the audit cannot run.
  const CliOutcome none =
      testing::run_cli(dir(), {"--cache-dir", m_root.string(), "audit", "--checkpoint", checkpoint, "--arch",
                               "sm_120a", "--device-cc", "device"},
                       {"CUDA_VISIBLE_DEVICES="}, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  EXPECT_EQ(none.code, 2) << none.out << none.err;
  EXPECT_NE(none.err.find("--device-cc: 'device': no device here"), std::string::npos) << none.err;
  EXPECT_EQ(none.out, "");
}

}  // namespace
}  // namespace jitcache
