// `jitcache audit` over source cache entries (kernels from outside), as an operator runs it:
// entries built in-process through SourceCache with the real tools (NVRTC; tiny kernels, so
// the CLI's cubin check sees real ELF images), then one spec built from two sources, or a
// bundle gone from beside its spec record. Skipped where NVRTC is missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cache/store.hpp"
#include "cli_fixture.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_cache.hpp"

namespace jitcache {
namespace {

using nlohmann::json;
using testing::CliOutcome;

KernelRequest request(const std::string& dtype, const std::string& scale) {
  KernelRequest r;
  r.family = "scaler";
  r.spec = {{"dtype", dtype}};
  r.kind = SourceKind::cuda;
  r.text = "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " + scale + "f; }\n";
  r.entry = "scale";
  r.target = "sm_90";
  return r;
}

class CliAuditSourceTest : public testing::CliCommandTest {
 protected:
  void SetUp() override {
    CliCommandTest::SetUp();
    auto tools = probe_tools(SourceKind::cuda);
    if (!tools) GTEST_SKIP() << tools.error().to_string();
    m_tools = *tools;
    SpecSchema schema;
    schema.family = "scaler";
    schema.facts = {{"dtype", FactDomain{{"f32", "bf16"}}}};
    ASSERT_TRUE(m_registry.add(schema));
    auto store = cache::Store::open(m_root);
    ASSERT_TRUE(store) << store.error().to_string();
    m_store = std::move(*store);
    SourceCacheOptions options;
    options.registry = &m_registry;
    m_cache = std::make_unique<SourceCache>(*m_store, options);
  }

  void compile(const KernelRequest& r) {
    auto got = m_cache->compile(r);
    ASSERT_TRUE(got) << got.error().to_string();
  }
  std::string key_of(const KernelRequest& r) const { return request_facts(r, m_tools)->key().to_hex(); }
  std::string source_of(const KernelRequest& r) const {
    return std::string(*request_facts(r, m_tools)->get("source_xxh3"));
  }
  std::string spec_key_of(const KernelRequest& r) const { return spec_facts(r, m_tools)->key().to_hex(); }
  void remove(const std::string& key) {
    cache::EntryFilter only;
    only.key_prefix = key;
    auto removed = m_store->remove(only, cache::DryRun::no);
    ASSERT_TRUE(removed && removed->size() == 1u) << key;
  }

  ToolFacts m_tools;
  SpecRegistry m_registry;
  std::unique_ptr<cache::Store> m_store;
  std::unique_ptr<SourceCache> m_cache;
};

TEST_F(CliAuditSourceTest, OneSpecFromTwoSourcesIsAnIncompleteSpecFinding) {
  const KernelRequest a = request("f32", "1.0"), b = request("f32", "2.0"), c = request("bf16", "1.0");
  compile(a);
  remove(spec_key_of(a));  // as eviction would: the second compile is then not refused
  compile(b);
  compile(c);
  remove(key_of(c));  // c's record is left dangling: a warning beside the finding

  const CliOutcome o = run({"audit", "--json"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], false);
  EXPECT_EQ(doc["entries"], 4);  // a's and b's bundles, b's and c's records
  EXPECT_EQ(doc["warnings"], 1);
  ASSERT_EQ(doc["findings"].size(), 2u) << o.out;
  std::map<std::string, json> by_kind;
  for (const json& f : doc["findings"]) by_kind[f["kind"]] = f;

  ASSERT_TRUE(by_kind.contains("incomplete-spec")) << o.out;
  const json& f = by_kind["incomplete-spec"];
  EXPECT_EQ(f["severity"], "error");
  EXPECT_EQ(f["key"], spec_key_of(a));
  EXPECT_EQ(f["family"], "scaler");
  EXPECT_EQ(f["target"], "sm_90");
  EXPECT_EQ(f["spec"], json({{"spec.dtype", "f32"}}));
  std::set<std::pair<std::string, std::string>> entries;
  for (const json& e : f["entries"]) entries.emplace(e["key"].get<std::string>(), e["source_xxh3"].get<std::string>());
  EXPECT_EQ(entries, (std::set<std::pair<std::string, std::string>>{{key_of(a), source_of(a)},
                                                                    {key_of(b), source_of(b)}}))
      << o.out;

  ASSERT_TRUE(by_kind.contains("dangling-spec-record")) << o.out;
  EXPECT_EQ(by_kind["dangling-spec-record"]["severity"], "warning");
  EXPECT_EQ(by_kind["dangling-spec-record"]["key"], spec_key_of(c));

  const CliOutcome text = run({"audit"});
  EXPECT_EQ(text.code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("audited 4 entries: 1 finding(s), 1 warning(s)"), std::string::npos) << text.out;
  for (const std::string& needle : {std::string("incomplete-spec"), std::string("dangling-spec-record"),
                                    std::string("(warning)"), key_of(a), key_of(b), source_of(a), source_of(b)})
    EXPECT_NE(text.out.find(needle), std::string::npos) << needle << " not in:\n" << text.out;
}

// Healthy source entries are clean, a dangling record alone exits 0, and `clear --stale`
// (exactly what the audit flags as errors) leaves them all: they are not legacy keys of
// jitcache's own kernels.
TEST_F(CliAuditSourceTest, HealthyEntriesAndAWarningExitZero) {
  const KernelRequest a = request("f32", "1.0"), c = request("bf16", "1.0");
  compile(a);
  compile(c);
  CliOutcome o = run({"audit"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("audited 4 entries: no findings"), std::string::npos) << o.out;

  remove(key_of(c));
  o = run({"audit", "--json"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["clean"], true);
  EXPECT_EQ(doc["warnings"], 1);
  ASSERT_EQ(doc["findings"].size(), 1u) << o.out;
  EXPECT_EQ(doc["findings"][0]["kind"], "dangling-spec-record");

  o = run({"clear", "--stale"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("removed 0 flagged item(s) of 3 entries"), std::string::npos) << o.out;
  o = run({"audit"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("audited 3 entries: no findings, 1 warning(s)"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace jitcache
