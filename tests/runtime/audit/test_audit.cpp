// The cache audit against fabricated caches: rows and blobs written directly (as an older
// jitcache, an import or a tamperer would leave them), each bad entry reported with the
// right finding, clear_flagged removing exactly those, a clean cache reporting nothing.
#include <sqlite3.h>
#include <sys/stat.h>

#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "orphan_blob.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/audit/audit.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

// Compiles each variant once for the whole suite (sm_100a, bf16 RoPE).
const CompiledArtifact& artifact(KernelKind kind, LatentScale mode) {
  static std::map<std::pair<KernelKind, LatentScale>, CompiledArtifact> compiled;
  auto it = compiled.find({kind, mode});
  if (it == compiled.end()) {
    auto a = make_nvrtc_compiler()->compile(generate({kind, mode, RecordFormat::b12x_432, Target{"sm_100a"}}));
    EXPECT_TRUE(a.has_value()) << a.error().to_string();
    it = compiled.emplace(std::make_pair(kind, mode), std::move(*a)).first;
  }
  return it->second;
}

class AuditTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_root = dir() / "cache";
    auto store = cache::Store::open(m_root);
    ASSERT_OK(store);
    m_store = std::move(*store);
  }

  // Publishes the real entry for a spec through the kernel cache (a healthy entry).
  std::string healthy(KernelKind kind, LatentScale mode) {
    KernelCache kernels(*m_store, *m_compiler);
    auto got = kernels.get({kind, mode, RecordFormat::b12x_432, Target{"sm_100a"}});
    EXPECT_TRUE(got.has_value()) << got.error().to_string();
    return got->key.to_hex();
  }

  // Writes a blob file and an index row directly, bypassing the store's rules.
  std::string fabricate(const std::string& key_hex, int key_schema, const std::string& facts_json,
                        std::span<const std::byte> blob) {
    const std::string digest = cache::BlobDigest::of(blob).to_hex();
    const auto path = m_root / "blobs" / digest.substr(0, 2) / digest;
    std::filesystem::create_directories(path.parent_path());
    ::chmod(path.parent_path().c_str(), 0700);
    {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
    }
    ::chmod(path.c_str(), 0600);
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((m_root / "index.db").c_str(), &db), SQLITE_OK);
    const std::string sql =
        "INSERT INTO entries (key, key_schema, digest, size, facts, created, last_used, hits, compile_ms) "
        "VALUES ('" + key_hex + "', " + std::to_string(key_schema) + ", '" + digest + "', " +
        std::to_string(blob.size()) + ", '" + facts_json + "', 1, 1, 0, 1.0)";
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
    return digest;
  }

  cache::Facts current_facts(KernelKind kind, LatentScale mode) {
    auto f = kernel_facts(generate({kind, mode, RecordFormat::b12x_432, Target{"sm_100a"}}), *m_compiler);
    EXPECT_TRUE(f.has_value());
    return *f;
  }

  AuditReport audit(bool with_checkpoint = false) {
    AuditOptions options;
    if (with_checkpoint) {
      options.checkpoint = k_checkpoint;
      options.target = "sm_100a";
    }
    auto report = audit_cache(*m_store, *m_compiler, options);
    EXPECT_TRUE(report.has_value()) << report.error().to_string();
    return *report;
  }

  static const Finding* find(const AuditReport& r, FindingKind kind) {
    for (const Finding& f : r.findings)
      if (f.kind == kind) return &f;
    return nullptr;
  }

  std::filesystem::path m_root;
  std::unique_ptr<cache::Store> m_store;
  std::unique_ptr<Compiler> m_compiler = make_nvrtc_compiler();
};

TEST_F(AuditTest, CleanCacheReportsNothing) {
  healthy(KernelKind::writer, LatentScale::dynamic);
  healthy(KernelKind::gather, LatentScale::identity);
  const AuditReport r = audit();
  EXPECT_EQ(r.entries, 2u);
  EXPECT_TRUE(r.findings.empty()) << r.findings.front().explanation;
  EXPECT_TRUE(r.clean());
}

// The field failure: a legacy schema whose key had no latent_scale fact; the identity
// kernel sits under the key a dynamic layer asks for.
TEST_F(AuditTest, FindsTheStaleIdentityKernelOfALegacyCache) {
  const cache::Facts dynamic = current_facts(KernelKind::writer, LatentScale::dynamic);
  cache::Facts legacy = dynamic;
  auto fields = legacy.fields();
  fields.erase("latent_scale");
  fields.erase("facts_schema");
  cache::Facts old;
  for (const auto& [k, v] : fields) old.set(k, v);
  const auto bytes = serialize_bundle(artifact(KernelKind::writer, LatentScale::identity));
  fabricate(dynamic.key().to_hex(), 0, old.to_json(), bytes);

  const AuditReport r = audit(/*with_checkpoint=*/true);
  const Finding* f = find(r, FindingKind::stale_identity);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, dynamic.key().to_hex());
  EXPECT_EQ(f->kernel, "writer");
  EXPECT_EQ(f->target, "sm_100a");
  EXPECT_NE(f->explanation.find("identity kernel"), std::string::npos) << f->explanation;
  EXPECT_FALSE(r.clean());
  ASSERT_TRUE(r.checkpoint);
  EXPECT_EQ(r.checkpoint->layers.size(), 79u);
  EXPECT_EQ(r.checkpoint->dynamic_layers, 78u);
  EXPECT_EQ(r.checkpoint->identity_layers, 1u);
  EXPECT_TRUE(r.checkpoint->layers[0].bound_to_identity);
  EXPECT_FALSE(r.checkpoint->layers[0].writer_cached);
  EXPECT_FALSE(r.checkpoint->layers[78].bound_to_identity);

  // And the runtime never serves it: the kernel cache recompiles the dynamic kernel.
  KernelCache kernels(*m_store, *m_compiler);
  auto got = kernels.get({KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_100a"}});
  ASSERT_OK(got);
  EXPECT_EQ(got->artifact->facts.at("latent_scale"), "dynamic");
}

TEST_F(AuditTest, PtxEvidenceConvictsAnIdentityKernelWithoutFacts) {
  // An old writer stored bare PTX with no embedded facts at all.
  std::string ptx = artifact(KernelKind::gather, LatentScale::identity).ptx;
  const auto at = ptx.find("jc_artifact_facts");
  ASSERT_NE(at, std::string::npos);
  ptx.replace(at, 17, "jc_something_else");
  fabricate(std::string(32, 'a'), 0, R"({"kernel":"gather","target":"sm_100a"})",
            std::as_bytes(std::span(ptx.data(), ptx.size())));
  const AuditReport r = audit();
  const Finding* f = find(r, FindingKind::stale_identity);
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->explanation.find("PTX"), std::string::npos) << f->explanation;
}

TEST_F(AuditTest, FindsLegacyKeysFactMismatchesAndCorruption) {
  // legacy-key: a dynamic artifact under an old key schema.
  cache::Facts facts = current_facts(KernelKind::gather, LatentScale::dynamic);
  const auto dyn = serialize_bundle(artifact(KernelKind::gather, LatentScale::dynamic));
  fabricate(std::string(32, 'b'), 0, facts.to_json(), dyn);
  // fact-mismatch: current schema, index says identity, the artifact is dynamic.
  cache::Facts lying = current_facts(KernelKind::writer, LatentScale::identity);
  const auto writer_dyn = serialize_bundle(artifact(KernelKind::writer, LatentScale::dynamic));
  fabricate(lying.key().to_hex(), static_cast<int>(cache::k_key_schema_version), lying.to_json(), writer_dyn);
  // corrupt: the blob's bytes altered after publishing.
  const std::string key_c = healthy(KernelKind::gather, LatentScale::identity);
  auto entries = m_store->list();
  ASSERT_OK(entries);
  for (const auto& e : *entries)
    if (e.key.to_hex() == key_c) {
      std::fstream f(m_store->blob_path(e.digest), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f.put('\x42');
    }
  // missing-blob: a row whose blob file is gone.
  const std::string gone = fabricate(std::string(32, 'c'), static_cast<int>(cache::k_key_schema_version),
                                     R"({"kernel":"writer"})", std::as_bytes(std::span("x", 1)));
  std::filesystem::remove(m_root / "blobs" / gone.substr(0, 2) / gone);
  // orphan-blob: a blob no row refers to.
  const auto orphan = jitcache::testing::write_orphan_blob(m_root, "an orphan");
  // Older than the publish grace: not a publish in flight.
  std::filesystem::last_write_time(orphan, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  // And one healthy entry that must survive.
  const std::string keep = healthy(KernelKind::writer, LatentScale::dynamic);

  const AuditReport r = audit();
  ASSERT_NE(find(r, FindingKind::legacy_key), nullptr);
  EXPECT_EQ(find(r, FindingKind::legacy_key)->key, std::string(32, 'b'));
  ASSERT_NE(find(r, FindingKind::fact_mismatch), nullptr);
  EXPECT_NE(find(r, FindingKind::fact_mismatch)->explanation.find("latent_scale"), std::string::npos);
  ASSERT_NE(find(r, FindingKind::corrupt), nullptr);
  EXPECT_EQ(find(r, FindingKind::corrupt)->key, key_c);
  ASSERT_NE(find(r, FindingKind::missing_blob), nullptr);
  EXPECT_EQ(find(r, FindingKind::missing_blob)->key, std::string(32, 'c'));
  ASSERT_NE(find(r, FindingKind::orphan_blob), nullptr);
  EXPECT_EQ(find(r, FindingKind::orphan_blob)->digest, orphan.filename().string());  // a blob file is named by its digest
  EXPECT_EQ(r.findings.size(), 5u);

  // Dry run changes nothing; the real run removes exactly the flagged, keeps the healthy.
  auto dry = clear_flagged(*m_store, r, cache::DryRun::yes);
  ASSERT_OK(dry);
  EXPECT_EQ(dry->size(), 5u);
  EXPECT_EQ(audit().findings.size(), 5u);
  auto cleared = clear_flagged(*m_store, r, cache::DryRun::no);
  ASSERT_OK(cleared);
  const AuditReport after = audit();
  EXPECT_TRUE(after.findings.empty()) << after.findings.front().explanation;
  auto left = m_store->list();
  ASSERT_OK(left);
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->front().key.to_hex(), keep);
}

// Pauses a second store's publish between the blob's rename and its index row, where a
// concurrent audit sees a blob that no row refers to yet.
class PausedPublish {
 public:
  explicit PausedPublish(const std::filesystem::path& root) {
    cache::StoreOptions options;
    options.publish_hook = [this](cache::PublishStep step) {
      if (step != cache::PublishStep::renamed) return;
      std::unique_lock lock(m_mutex);
      m_renamed = true;
      m_changed.notify_all();
      m_changed.wait(lock, [this] { return m_go; });
    };
    auto store = cache::Store::open(root, options);
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    m_store = std::move(*store);
  }
  ~PausedPublish() {
    resume();
    if (m_thread.joinable()) m_thread.join();
  }
  void start(std::function<void(cache::Store&)> publish) {
    m_thread = std::thread([this, publish] { publish(*m_store); });
    std::unique_lock lock(m_mutex);
    ASSERT_TRUE(m_changed.wait_for(lock, std::chrono::seconds(60), [this] { return m_renamed; }))
        << "the publish never reached its rename";
  }
  void resume() {
    std::lock_guard lock(m_mutex);
    m_go = true;
    m_changed.notify_all();
  }
  void finish() {
    resume();
    if (m_thread.joinable()) m_thread.join();
  }

 private:
  std::unique_ptr<cache::Store> m_store;
  std::thread m_thread;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  bool m_renamed = false;
  bool m_go = false;
};

// Issue 10, item 3: an audit or clear --stale between a publish's rename and its row
// commit flagged the new blob as an orphan, and clearing deleted it (the row then
// pointed at nothing, and the next clear removed the entry too).
TEST_F(AuditTest, PublishInFlightIsNoOrphanAndClearingKeepsIt) {
  const KernelSpec spec{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_100a"}};
  PausedPublish writer(m_root);
  std::string key;
  writer.start([&](cache::Store& store) {
    KernelCache kernels(store, *m_compiler);
    auto got = kernels.get(spec);
    EXPECT_TRUE(got.has_value()) << got.error().to_string();
    if (got) key = got->key.to_hex();
  });
  const AuditReport during = audit();
  EXPECT_TRUE(during.findings.empty()) << during.findings.front().explanation;
  auto cleared = clear_flagged(*m_store, during, cache::DryRun::no);
  ASSERT_OK(cleared);
  EXPECT_TRUE(cleared->empty());
  writer.finish();

  const AuditReport after = audit();
  EXPECT_TRUE(after.findings.empty()) << after.findings.front().explanation;
  KernelCache kernels(*m_store, *m_compiler);
  auto found = kernels.find(spec);
  ASSERT_OK(found);
  ASSERT_TRUE(found->has_value()) << "the published entry was lost";
  EXPECT_EQ((*found)->key.to_hex(), key);
}

// An old orphan that a publish of the same content replaces while clear --stale runs:
// the fresh copy stays, and so does its entry.
TEST_F(AuditTest, OrphanRepublishedWhileClearingIsKept) {
  const cache::Bytes bytes = [] {
    cache::Bytes b(300);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::byte(i * 7);
    return b;
  }();
  const cache::BlobDigest digest = cache::BlobDigest::of(bytes);
  const auto path = m_store->blob_path(digest);
  std::filesystem::create_directories(path.parent_path());
  ::chmod(path.parent_path().c_str(), 0700);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ::chmod(path.c_str(), 0600);
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const AuditReport report = audit();
  ASSERT_NE(find(report, FindingKind::orphan_blob), nullptr);

  const cache::Facts facts{{"kernel", "republished"}};
  PausedPublish writer(m_root);
  writer.start([&](cache::Store& store) { EXPECT_OK(store.put(facts.key(), facts, bytes, 1.0)); });
  auto cleared = clear_flagged(*m_store, report, cache::DryRun::no);
  ASSERT_OK(cleared);
  ASSERT_EQ(cleared->size(), 1u);
  EXPECT_NE(cleared->front().find("kept orphan blob"), std::string::npos) << cleared->front();
  writer.finish();
  auto hit = m_store->get(facts.key());
  ASSERT_OK(hit);
  EXPECT_TRUE(hit->has_value()) << "the republished entry lost its blob";
}

// Orphans younger than the publish grace are not findings; older ones are.
TEST_F(AuditTest, OrphanBlobsAreFindingsOnlyPastTheGrace) {
  const auto path = jitcache::testing::write_orphan_blob(m_root, "young orphan");
  EXPECT_EQ(find(audit(), FindingKind::orphan_blob), nullptr);
  AuditOptions no_grace;
  no_grace.orphan_grace = std::chrono::milliseconds(0);
  auto report = audit_cache(*m_store, *m_compiler, no_grace);
  ASSERT_OK(report);
  ASSERT_NE(find(*report, FindingKind::orphan_blob), nullptr);
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() - std::chrono::minutes(16));
  EXPECT_NE(find(audit(), FindingKind::orphan_blob), nullptr);
}

TEST_F(AuditTest, CheckpointReportShowsWhatEachLayerNeeds) {
  healthy(KernelKind::writer, LatentScale::dynamic);
  healthy(KernelKind::gather, LatentScale::dynamic);
  const AuditReport r = audit(true);
  ASSERT_TRUE(r.checkpoint);
  EXPECT_EQ(r.checkpoint->variants.size(), 4u);
  int cached = 0;
  for (const auto& v : r.checkpoint->variants) cached += v.cached;
  EXPECT_EQ(cached, 2);
  EXPECT_TRUE(r.checkpoint->layers[5].writer_cached);
  EXPECT_TRUE(r.checkpoint->layers[5].gather_cached);
  EXPECT_FALSE(r.checkpoint->layers[78].writer_cached);  // identity variant not warmed
  EXPECT_TRUE(r.clean());
}

}  // namespace
}  // namespace jitcache
