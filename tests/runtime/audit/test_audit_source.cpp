// The cache audit of source cache entries (kernels from outside, source_cache.hpp): entries
// built through SourceCache with a fake compile step, then damaged or paired the way an
// incomplete spec, a foreign writer or eviction leaves them. Each is reported with the
// right finding and severity, and never by the latent-scale rules of jitcache's own kernels.
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "runtime/audit/audit.hpp"
#include "runtime/audit/remote_audit.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_cache.hpp"
#include "source_cache_fakes.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::fake_output;
using testing::fake_tools;

KernelRequest request(const std::string& dtype, const std::string& scale) {
  KernelRequest r;
  r.family = "scaler";
  r.spec = {{"dtype", dtype}, {"block", "128"}};
  r.kind = SourceKind::cuda;
  r.text = "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " + scale + "f; }\n";
  r.headers = {{"defs.h", "#define X 1\n"}};
  r.entry = "scale";
  r.target = "sm_90";
  return r;
}

std::span<const std::byte> as_bytes(const std::string& text) { return std::as_bytes(std::span(text.data(), text.size())); }

class SourceAuditTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    SpecSchema schema;
    schema.family = "scaler";
    schema.facts = {{"dtype", FactDomain{{"f32", "bf16"}}}, {"block", FactDomain{}}};
    ASSERT_TRUE(m_registry.add(schema));
    auto store = cache::Store::open(dir() / "cache");
    ASSERT_TRUE(store) << store.error().to_string();
    m_store = std::move(*store);
    SourceCacheOptions options;
    options.registry = &m_registry;
    options.compile = [](const SourceInput& input) -> Result<SourceOutput> { return fake_output(input); };
    options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
    options.check_cubin = false;
    m_cache = std::make_unique<SourceCache>(*m_store, options);
  }

  cache::Facts facts_of(const KernelRequest& r) {
    auto f = request_facts(r, fake_tools(r.kind));
    EXPECT_TRUE(f) << f.error().to_string();
    return *f;
  }
  cache::Facts spec_of(const KernelRequest& r) {
    auto f = spec_facts(r, fake_tools(r.kind));
    EXPECT_TRUE(f) << f.error().to_string();
    return *f;
  }

  void compile(const KernelRequest& r) {
    auto got = m_cache->compile(r);
    ASSERT_TRUE(got) << got.error().to_string();
  }

  void remove(const cache::CacheKey& key) {
    cache::EntryFilter only;
    only.key_prefix = key.to_hex();
    auto removed = m_store->remove(only, cache::DryRun::no);
    ASSERT_TRUE(removed) << removed.error().to_string();
    ASSERT_EQ(removed->size(), 1u) << key.to_hex();
  }

  // Replaces what is stored under `facts`' key with `bytes`: a foreign writer's value,
  // verified against its digest like any other.
  void overwrite(const cache::Facts& facts, std::span<const std::byte> bytes) {
    remove(facts.key());
    ASSERT_TRUE(m_store->put(facts.key(), facts, bytes, 0));
  }

  cache::SharedBytes bytes_of(const cache::CacheKey& key) {
    auto hit = m_store->get(key);
    EXPECT_TRUE(hit && *hit);
    return (*hit)->bytes;
  }

  AuditReport audit(bool check_cubin = false) {
    AuditOptions options;
    options.check_cubin = check_cubin;
    auto report = audit_cache(*m_store, *m_compiler, options);
    EXPECT_TRUE(report) << report.error().to_string();
    return *report;
  }

  static std::string listed(const AuditReport& r) {
    std::string out;
    for (const Finding& f : r.findings) out += std::string(to_string(f.kind)) + " " + f.key + ": " + f.explanation + "\n";
    return out;
  }

  SpecRegistry m_registry;
  std::unique_ptr<cache::Store> m_store;
  std::unique_ptr<SourceCache> m_cache;
  std::unique_ptr<Compiler> m_compiler = make_nvrtc_compiler();
};

// Bundles and spec records of healthy compiles are not jitcache's own kernels: no
// legacy-key for their missing latent_scale fact, no stale-identity, nothing at all.
TEST_F(SourceAuditTest, HealthySourceEntriesHaveNoFindings) {
  compile(request("f32", "1.0"));
  compile(request("bf16", "1.0"));
  const AuditReport r = audit();
  EXPECT_EQ(r.entries, 4u);  // two bundles, two spec records
  EXPECT_TRUE(r.findings.empty()) << listed(r);
  EXPECT_TRUE(r.clean());
  // The same one-entry rules the remote audit applies to a value.
  const auto entries = m_store->list();
  ASSERT_TRUE(entries);
  for (const auto& e : *entries)
    EXPECT_FALSE(audit_artifact(e.key, e.key_schema, e.facts, *bytes_of(e.key), false)) << e.key.to_hex();
}

// One spec built from two sources (the record of the first removed, as eviction or a
// clear would, so shadow verification did not stop the second): one incomplete-spec
// finding naming the family, spec, target and both entries with their digests.
TEST_F(SourceAuditTest, TwoSourcesOfOneSpecAreOneIncompleteSpecFinding) {
  const KernelRequest a = request("f32", "1.0"), b = request("f32", "2.0");
  compile(a);
  remove(spec_of(a).key());
  compile(b);
  compile(request("bf16", "1.0"));  // another spec, healthy

  const AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.kind, FindingKind::incomplete_spec);
  EXPECT_EQ(f.severity(), Severity::error);
  EXPECT_EQ(f.key, spec_of(a).key().to_hex());
  EXPECT_EQ(f.kernel, "scaler");
  EXPECT_EQ(f.target, "sm_90");
  EXPECT_EQ(f.spec, (std::map<std::string, std::string>{{"spec.block", "128"}, {"spec.dtype", "f32"}}));
  std::map<std::string, std::string> entries;
  for (const SourceEntryRef& e : f.entries) entries[e.key] = e.source_xxh3;
  const cache::Facts fa = facts_of(a), fb = facts_of(b);
  EXPECT_EQ(entries, (std::map<std::string, std::string>{
                         {fa.key().to_hex(), std::string(*fa.get("source_xxh3"))},
                         {fb.key().to_hex(), std::string(*fb.get("source_xxh3"))}}));
  for (const std::string& needle : {std::string("scaler"), std::string("dtype=f32"), std::string("source_xxh3"),
                                    fa.key().to_hex(), fb.key().to_hex(), std::string(*fa.get("source_xxh3"))})
    EXPECT_NE(f.explanation.find(needle), std::string::npos) << needle << " not in: " << f.explanation;
  EXPECT_FALSE(r.clean());

  // Clearing removes the spec's record and both bundles, and nothing of the other spec.
  auto cleared = clear_flagged(*m_store, r, cache::DryRun::no);
  ASSERT_TRUE(cleared) << cleared.error().to_string();
  EXPECT_EQ(cleared->size(), 3u);
  const AuditReport after = audit();
  EXPECT_EQ(after.entries, 2u);
  EXPECT_TRUE(after.findings.empty()) << listed(after);
}

// Headers count as the source: the same text with another header is the same finding.
TEST_F(SourceAuditTest, AHeaderDifferenceIsAnIncompleteSpecToo) {
  const KernelRequest a = request("f32", "1.0");
  KernelRequest b = a;
  b.headers = {{"defs.h", "#define X 2\n"}};
  compile(a);
  remove(spec_of(a).key());
  compile(b);
  const AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::incomplete_spec);
  EXPECT_NE(r.findings[0].explanation.find("header.defs.h"), std::string::npos) << r.findings[0].explanation;
  EXPECT_EQ(r.findings[0].explanation.find("differing in source_xxh3"), std::string::npos)
      << r.findings[0].explanation;
}

// A bundle whose bytes verify against their digest but are not its key's bundle (another
// request's, or no bundle at all): bad-source-entry, reported once (its record, which
// names it, is not reported again).
TEST_F(SourceAuditTest, ABundleThatIsNotItsKeysIsABadSourceEntry) {
  const KernelRequest a = request("f32", "1.0"), other = request("bf16", "3.0");
  compile(a);
  compile(other);
  const cache::Facts fa = facts_of(a);
  const cache::SharedBytes foreign = bytes_of(facts_of(other).key());
  overwrite(fa, *foreign);
  AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::bad_source_entry);
  EXPECT_EQ(r.findings[0].key, fa.key().to_hex());
  EXPECT_EQ(r.findings[0].kernel, "scaler");
  EXPECT_FALSE(r.findings[0].digest.empty());
  EXPECT_NE(r.findings[0].explanation.find("source bundle"), std::string::npos) << r.findings[0].explanation;
  EXPECT_FALSE(r.clean());

  overwrite(fa, as_bytes("not a bundle"));
  r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::bad_source_entry);

  auto cleared = clear_flagged(*m_store, r, cache::DryRun::no);
  ASSERT_TRUE(cleared);
  EXPECT_EQ(cleared->size(), 1u);
  // The spec record now names a bundle that is gone: a warning only.
  r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::dangling_spec_record);
}

// With the cubin check on (the CLI's default), a cubin that is no ELF image holding the
// entry is flagged; the fake compile step's cubins are such.
TEST_F(SourceAuditTest, TheCubinCheckFlagsACubinWithoutItsEntry) {
  compile(request("f32", "1.0"));
  const AuditReport r = audit(/*check_cubin=*/true);
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::bad_source_entry);
  EXPECT_EQ(r.findings[0].key, facts_of(request("f32", "1.0")).key().to_hex());
  EXPECT_NE(r.findings[0].explanation.find("cubin"), std::string::npos) << r.findings[0].explanation;
}

// Eviction removes a bundle apart from its record: a warning, the cache still clean, and
// clear_flagged keeps the record (it still verifies the spec).
TEST_F(SourceAuditTest, ASpecRecordWhoseBundleIsGoneIsAWarning) {
  const KernelRequest a = request("f32", "1.0");
  compile(a);
  remove(facts_of(a).key());
  const AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.kind, FindingKind::dangling_spec_record);
  EXPECT_EQ(f.severity(), Severity::warning);
  EXPECT_STREQ(to_string(f.kind), "dangling-spec-record");
  EXPECT_EQ(f.key, spec_of(a).key().to_hex());
  EXPECT_NE(f.explanation.find(facts_of(a).key().to_hex()), std::string::npos) << f.explanation;
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.count(Severity::warning), 1u);
  auto cleared = clear_flagged(*m_store, r, cache::DryRun::no);
  ASSERT_TRUE(cleared);
  EXPECT_TRUE(cleared->empty());
  EXPECT_EQ(audit().entries, 1u);
}

// A record that names its bundle but another source (a foreign or buggy writer): lookups
// by spec would refuse it, so it is an error.
TEST_F(SourceAuditTest, ASpecRecordDisagreeingWithItsBundleIsFlagged) {
  const KernelRequest a = request("f32", "1.0");
  compile(a);
  const cache::Facts spec = spec_of(a);
  auto json = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes_of(spec.key())->data()),
                                                bytes_of(spec.key())->size()));
  const std::string recorded = json["source_xxh3"];
  json["source_xxh3"] = std::string(recorded.size(), '0');
  overwrite(spec, as_bytes(json.dump()));
  AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::bad_source_entry);
  EXPECT_EQ(r.findings[0].key, spec.key().to_hex());
  EXPECT_NE(r.findings[0].explanation.find(recorded), std::string::npos) << r.findings[0].explanation;
  EXPECT_NE(r.findings[0].explanation.find(std::string(recorded.size(), '0')), std::string::npos);

  // A record that is not a spec record at all.
  overwrite(spec, as_bytes("{\"format\": \"one\"}"));
  r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::bad_source_entry);
  EXPECT_NE(r.findings[0].explanation.find("spec record"), std::string::npos) << r.findings[0].explanation;
}

// An entry of another request facts schema is never looked up: legacy-key, as for
// jitcache's own kernels.
TEST_F(SourceAuditTest, AnotherRequestFactsSchemaIsALegacyKey) {
  const KernelRequest a = request("f32", "1.0");
  compile(a);
  cache::Facts old = facts_of(a);
  old.set("facts_schema", "0");
  ASSERT_TRUE(m_store->put(old.key(), old, *bytes_of(facts_of(a).key()), 0));
  const AuditReport r = audit();
  ASSERT_EQ(r.findings.size(), 1u) << listed(r);
  EXPECT_EQ(r.findings[0].kind, FindingKind::legacy_key);
  EXPECT_EQ(r.findings[0].key, old.key().to_hex());
}

// With real cubins (NVRTC), the one-entry rules with the cubin check on, as the remote
// audit and `remote push` apply them: a healthy bundle and its record may go to the
// fleet (they are not legacy keys of jitcache's own kernels); an altered record may not.
TEST_F(SourceAuditTest, RealEntriesMayGoToTheFleet) {
  auto tools = probe_tools(SourceKind::cuda);
  if (!tools) GTEST_SKIP() << tools.error().to_string();
  SourceCacheOptions options;
  options.registry = &m_registry;
  SourceCache real(*m_store, options);
  KernelRequest r = request("f32", "1.0");
  r.headers.clear();
  auto got = real.compile(r);
  ASSERT_TRUE(got) << got.error().to_string();
  const AuditReport report = audit(/*check_cubin=*/true);
  EXPECT_TRUE(report.findings.empty()) << listed(report);
  const auto entries = m_store->list();
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 2u);
  for (const cache::EntryInfo& e : *entries) {
    auto ready = fleet_ready_bytes(*m_store, e);
    EXPECT_TRUE(ready) << e.key.to_hex() << ": " << ready.error();
  }
  const cache::Facts spec = *spec_facts(r, *tools);
  overwrite(spec, as_bytes("{}"));
  const auto altered = m_store->list();
  ASSERT_TRUE(altered);
  std::size_t checked = 0;
  for (const cache::EntryInfo& e : *altered)
    if (e.key == spec.key()) {
      ++checked;
      auto ready = fleet_ready_bytes(*m_store, e);
      ASSERT_FALSE(ready);
      EXPECT_NE(ready.error().find("bad-source-entry"), std::string::npos) << ready.error();
    }
  EXPECT_EQ(checked, 1u);
}

}  // namespace
}  // namespace jitcache
