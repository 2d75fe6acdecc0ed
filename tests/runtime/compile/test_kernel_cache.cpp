// The kernel cache: keys that record every fact that changes the binary (identity vs
// dynamic first), and fetches that count each tier and never hand back a wrong artifact.
#include <atomic>
#include <cstdlib>
#include <optional>

#include "counting_compiler.hpp"
#include "kernel_store_fixture.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::FakeCompiler;

const KernelSpec k_base{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_120a"}};

cache::CacheKey key_of(const KernelSpec& spec, const Compiler& compiler) {
  auto facts = kernel_facts(generate(spec), compiler);
  EXPECT_TRUE(facts.has_value()) << facts.error().to_string();
  return facts->key();
}

TEST(KernelFacts, EveryFactChangesTheKey) {
  FakeCompiler compiler;
  const cache::CacheKey base = key_of(k_base, compiler);

  // The field failure first: identity and dynamic must never share a key.
  KernelSpec s = k_base;
  s.latent_scale = LatentScale::dynamic;
  EXPECT_NE(key_of(s, compiler), base) << "latent_scale";
  s = k_base;
  s.format = RecordFormat::b12x_368;
  EXPECT_NE(key_of(s, compiler), base) << "format";
  s.format = RecordFormat::flashmla_352;
  EXPECT_NE(key_of(s, compiler), base) << "format";
  s = k_base;
  s.kernel = KernelKind::gather;
  EXPECT_NE(key_of(s, compiler), base) << "kernel";
  for (const char* other : {"sm_120", "sm_120f", "sm_121a", "sm_100a", "sm_100f", "sm_90"}) {
    s = k_base;
    s.target = Target{other};
    EXPECT_NE(key_of(s, compiler), base) << other;
  }

  FakeCompiler other_version;
  other_version.m_version = "1.1";
  EXPECT_NE(key_of(k_base, other_version), base) << "compiler_version";
  FakeCompiler other_build;
  other_build.m_fingerprint = "beef";
  EXPECT_NE(key_of(k_base, other_build), base) << "compiler_fingerprint";
  FakeCompiler other_options;
  other_options.m_extra_option = "--fmad=true";
  EXPECT_NE(key_of(k_base, other_options), base) << "options";

  // Source and header bytes.
  GeneratedSource g = generate(k_base);
  auto f0 = kernel_facts(g, compiler);
  ASSERT_OK(f0);
  EXPECT_EQ(f0->key(), base);
  GeneratedSource edited = g;
  edited.source += "\n// a comment changes the source hash";
  EXPECT_NE(kernel_facts(edited, compiler)->key(), base) << "source_xxh3";
  ASSERT_FALSE(g.headers.empty());
  static const std::string patched_header = std::string(g.headers[0].text) + "\n";
  GeneratedSource header_edit = g;
  header_edit.headers[0].text = patched_header;
  EXPECT_NE(kernel_facts(header_edit, compiler)->key(), base) << "header hash";
  for (const auto& [name, value] : g.facts) {
    GeneratedSource fact_edit = g;
    fact_edit.facts[name] = value + "x";
    EXPECT_NE(kernel_facts(fact_edit, compiler)->key(), base) << "generator fact " << name;
  }
}

TEST(KernelFacts, AreReadableAndComplete) {
  FakeCompiler compiler;
  auto facts = kernel_facts(generate(k_base), compiler);
  ASSERT_OK(facts);
  for (const char* name : {"facts_schema", "kernel_family", "kernel", "generator_version", "latent_scale",
                           "rope", "record_bytes", "latent_dim", "quant_block", "threads_per_cta", "target",
                           "source_xxh3", "header.jitcache.nvfp4_mla.cuh", "compiler", "compiler_version",
                           "compiler_fingerprint", "options", "bundle_format"})
    EXPECT_TRUE(facts->get(name).has_value()) << "missing fact " << name;
  EXPECT_EQ(facts->get("latent_scale"), "identity");
  EXPECT_EQ(facts->get("target"), "sm_120a");
  const std::string json = facts->to_json();
  EXPECT_NE(json.find("\"latent_scale\":\"identity\""), std::string::npos) << json;
}

TEST(KernelFacts, CompileAffectingEnvironmentIsRecorded) {
  FakeCompiler compiler;
  jitcache::testing::ScopedEnv env("JITCACHE_LINEINFO", nullptr);
  const cache::CacheKey unset = key_of(k_base, compiler);
  env.set("JITCACHE_LINEINFO", "0");
  EXPECT_EQ(key_of(k_base, compiler), unset) << "unset and the default value must hash the same";
  env.set("JITCACHE_LINEINFO", "  ");
  EXPECT_EQ(key_of(k_base, compiler), unset) << "whitespace reads as unset";
  env.set("JITCACHE_LINEINFO", "1");
  EXPECT_NE(key_of(k_base, compiler), unset);
}

TEST(KernelFacts, RealCompilerFingerprintIsStable) {
  const auto nvrtc = make_nvrtc_compiler();
  auto a = nvrtc->fingerprint();
  ASSERT_OK(a);
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(*make_nvrtc_compiler()->fingerprint(), *a);
}

class KernelCacheTest : public jitcache::testing::KernelStoreTest {};

TEST_F(KernelCacheTest, CompilesOnceThenServesFromMemoryThenDisk) {
  FakeCompiler compiler;
  {
    auto store = open_store();
    KernelCache kernels(*store, compiler);
    auto first = kernels.get(k_base);
    ASSERT_OK(first);
    EXPECT_EQ(first->source, cache::Source::produced);
    EXPECT_EQ(compiler.compiles, 1);
    auto second = kernels.get(k_base);
    ASSERT_OK(second);
    EXPECT_EQ(second->source, cache::Source::memory);
    EXPECT_EQ(second->artifact, first->artifact);
    EXPECT_EQ(compiler.compiles, 1);
    EXPECT_EQ(store->session_counters().produces, 1u);
  }
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto third = kernels.get(k_base);
  ASSERT_OK(third);
  EXPECT_EQ(third->source, cache::Source::disk);
  EXPECT_EQ(compiler.compiles, 1);
  EXPECT_EQ(third->artifact->spec, k_base);
  EXPECT_EQ(store->session_counters().disk_hits, 1u);
}

TEST_F(KernelCacheTest, FindNeverCompilesAndSkippedTextIsReloadedOnDemand) {
  FakeCompiler compiler;
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto absent = kernels.find(k_base);
  ASSERT_OK(absent);
  EXPECT_FALSE(absent->has_value());
  EXPECT_EQ(compiler.compiles, 0);
  ASSERT_OK(kernels.get(k_base));
  {
    auto other_process = open_store();
    KernelCache fresh(*other_process, compiler);
    auto lean = fresh.find(k_base, BundleText::skip);
    ASSERT_OK(lean);
    ASSERT_TRUE(lean->has_value());
    EXPECT_EQ((*lean)->source, cache::Source::disk);
    EXPECT_TRUE((*lean)->artifact->ptx.empty());
    EXPECT_FALSE((*lean)->artifact->cubin.empty());
    // A caller that needs the PTX gets it, although a lean copy is cached.
    auto full = fresh.get(k_base);
    ASSERT_OK(full);
    EXPECT_EQ(full->artifact->ptx, "// " + k_base.label());
    EXPECT_EQ(full->artifact->cubin, (*lean)->artifact->cubin);
  }
  EXPECT_EQ(compiler.compiles, 1);
}

// Issue 10, item 9: a lookup that ends in a compile is one miss, not two (find, then get).
TEST_F(KernelCacheTest, FindThenCompileCountsOneMissPerVariant) {
  FakeCompiler compiler;
  const KernelSpec variants[] = {
      k_base,
      {KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_120a"}},
      {KernelKind::writer, LatentScale::identity, RecordFormat::b12x_368, Target{"sm_120a"}},
      {KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_120a"}},
  };
  {
    auto store = open_store();
    KernelCache kernels(*store, compiler);
    for (const KernelSpec& spec : variants) {  // what prepare() does: find, then get the misses
      auto found = kernels.find(spec, BundleText::skip);
      ASSERT_OK(found);
      ASSERT_FALSE(found->has_value());
      ASSERT_OK(kernels.get(spec, BundleText::skip));
    }
    const cache::Counters c = store->session_counters();
    EXPECT_EQ(c.misses, 4u);
    EXPECT_EQ(c.produces, 4u);
  }
  auto store = open_store();
  auto stats = store->stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->totals.misses, 4u);
  EXPECT_EQ(stats->totals.produces, 4u);
  KernelCache kernels(*store, compiler);
  for (const KernelSpec& spec : variants) {
    auto found = kernels.find(spec, BundleText::skip);
    ASSERT_OK(found);
    ASSERT_TRUE(found->has_value());
  }
  EXPECT_EQ(store->session_counters().misses, 0u);
  EXPECT_EQ(store->session_counters().disk_hits, 4u);
}

TEST_F(KernelCacheTest, IdentityAndDynamicAreSeparateEntries) {
  FakeCompiler compiler;
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  KernelSpec dynamic = k_base;
  dynamic.latent_scale = LatentScale::dynamic;
  auto a = kernels.get(k_base);
  auto b = kernels.get(dynamic);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_NE(a->key, b->key);
  EXPECT_EQ(compiler.compiles, 2);
  EXPECT_EQ(a->artifact->facts.at("latent_scale"), "identity");
  EXPECT_EQ(b->artifact->facts.at("latent_scale"), "dynamic");
}

// The field failure, planted: an identity artifact stored under the dynamic kernel's
// key (as a key without the latent-scale fact once allowed). The cache must not serve it.
TEST_F(KernelCacheTest, RefusesAnIdentityArtifactStoredUnderTheDynamicKey) {
  FakeCompiler compiler;
  KernelSpec dynamic = k_base;
  dynamic.latent_scale = LatentScale::dynamic;
  const auto facts = kernel_facts(generate(dynamic), compiler);
  ASSERT_OK(facts);
  {
    auto store = open_store();
    auto identity_artifact = compiler.compile(generate(k_base));
    ASSERT_OK(identity_artifact);
    const auto bytes = serialize_bundle(*identity_artifact);
    ASSERT_OK(store->put(facts->key(), *facts, bytes, 1.0));
  }
  compiler.compiles = 0;
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto got = kernels.get(dynamic);
  ASSERT_OK(got);
  EXPECT_EQ(got->source, cache::Source::produced) << "the planted entry must be dropped and recompiled";
  EXPECT_EQ(compiler.compiles, 1);
  EXPECT_EQ(got->artifact->facts.at("latent_scale"), "dynamic");
  EXPECT_EQ(got->artifact->spec.latent_scale, LatentScale::dynamic);
}

TEST_F(KernelCacheTest, AnUnparsableBundleIsRecompiled) {
  FakeCompiler compiler;
  const auto facts = kernel_facts(generate(k_base), compiler);
  ASSERT_OK(facts);
  {
    auto store = open_store();
    const std::string garbage = "not a bundle at all";
    ASSERT_OK(store->put(facts->key(), *facts, std::as_bytes(std::span(garbage)), 1.0));
  }
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto got = kernels.get(k_base);
  ASSERT_OK(got);
  EXPECT_EQ(got->source, cache::Source::produced);
  EXPECT_EQ(compiler.compiles, 1);
  auto again = kernels.get(k_base);
  ASSERT_OK(again);
  EXPECT_EQ(compiler.compiles, 1);
}

TEST_F(KernelCacheTest, CompileErrorsReachTheCallerAndStoreNothing) {
  class Failing final : public Compiler {
   public:
    std::string name() const override { return "failing"; }
    std::string version() const override { return "0"; }
    Result<std::string> fingerprint() const override { return std::string("0"); }
    std::vector<std::string> options(const KernelSpec&) const override { return {}; }
    Result<CompiledArtifact> compile(const GeneratedSource&) const override {
      return make_error(ErrorCode::compile, "synthetic failure", "options: none\nlog: boom");
    }
  } failing;
  auto store = open_store();
  KernelCache kernels(*store, failing);
  auto got = kernels.get(k_base);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::compile);
  EXPECT_NE(got.error().detail.find("boom"), std::string::npos);
  auto entries = store->list();
  ASSERT_OK(entries);
  EXPECT_TRUE(entries->empty());
}

// The kernel cache keeps no cache of its own: the store's memory tier holds the parsed
// artifact, and without that tier every hit is one verified read of the blob.
TEST_F(KernelCacheTest, WithoutAMemoryTierEachHitReadsTheBlobOnce) {
  FakeCompiler compiler;
  ASSERT_NO_FATAL_FAILURE(warm(k_base, compiler));
  cache::StoreOptions options;
  options.memory_max_bytes = 0;
  auto store = cache::Store::open(dir() / "cache", options);
  ASSERT_OK(store);
  KernelCache kernels(**store, compiler);
  for (int i = 0; i < 3; ++i) {
    auto got = kernels.get(k_base, BundleText::skip);
    ASSERT_OK(got);
    EXPECT_EQ(got->source, cache::Source::disk);
  }
  auto found = kernels.find(k_base);
  ASSERT_OK(found);
  ASSERT_TRUE(*found);
  EXPECT_EQ((*found)->artifact->ptx, "// " + k_base.label());
  const cache::Counters c = (*store)->session_counters();
  EXPECT_EQ(c.disk_hits, 4u) << "one read per lookup, none twice";
  EXPECT_EQ(c.memory_hits, 0u);
  EXPECT_EQ(compiler.compiles, 1);
}

TEST_F(KernelCacheTest, AMemoryHitServesTheParsedArtifactItWasGiven) {
  FakeCompiler compiler;
  ASSERT_NO_FATAL_FAILURE(warm(k_base, compiler));
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto lean = kernels.find(k_base, BundleText::skip);
  ASSERT_OK(lean);
  ASSERT_TRUE(*lean);
  EXPECT_EQ((*lean)->source, cache::Source::disk);
  auto lean_again = kernels.get(k_base, BundleText::skip);
  ASSERT_OK(lean_again);
  EXPECT_EQ(lean_again->source, cache::Source::memory);
  EXPECT_EQ(lean_again->artifact, (*lean)->artifact) << "a memory hit parses nothing";
  // A caller that needs the text gets a full parse once, which then serves everyone.
  auto full = kernels.get(k_base);
  ASSERT_OK(full);
  EXPECT_EQ(full->artifact->ptx, "// " + k_base.label());
  auto full_again = kernels.get(k_base, BundleText::skip);
  ASSERT_OK(full_again);
  EXPECT_EQ(full_again->artifact, full->artifact);
  // An entry removed from the store is not served from a parsed copy.
  ASSERT_OK(store->remove({}, cache::DryRun::no));
  auto recompiled = kernels.get(k_base);
  ASSERT_OK(recompiled);
  EXPECT_EQ(recompiled->source, cache::Source::produced);
  EXPECT_EQ(compiler.compiles, 2);
}

// NVRTC with the fingerprint a test gives it (the real compiler underneath, so the bundles
// are real, with facts embedded in their cubins). Counts compiles.
class RekeyedNvrtc final : public Compiler {
 public:
  explicit RekeyedNvrtc(std::string now) : m_now(std::move(now)) {}
  std::string name() const override { return m_real->name(); }
  std::string version() const override { return m_real->version(); }
  Result<std::string> fingerprint() const override { return m_now; }
  std::vector<std::string> options(const KernelSpec& spec) const override { return m_real->options(spec); }
  Result<CompiledArtifact> compile(const GeneratedSource& source) const override {
    ++compiles;
    return m_real->compile(source);
  }
  mutable std::atomic<int> compiles{0};

 private:
  std::unique_ptr<Compiler> m_real = make_nvrtc_compiler();
  std::string m_now;
};

const std::string k_then(32, 'a'), k_now(32, 'b');
const KernelSpec k_sm90{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_90"}};

// A kernel keyed with another compiler fingerprint (an earlier jitcache's derivation, or a
// library that claimed this build's id) is never served for this compiler, nor read: a
// lookup misses, find() reports the miss, get() compiles under its own key (once), and the
// other entry stays for the audit to report (superseded) and gc to remove.
TEST_F(KernelCacheTest, AKernelUnderAnotherFingerprintIsNeitherServedNorRead) {
  ASSERT_NO_FATAL_FAILURE(warm(k_sm90, RekeyedNvrtc(k_then)));
  auto store = open_store();
  RekeyedNvrtc today(k_now);
  KernelCache kernels(*store, today);
  auto found = kernels.find(k_sm90);
  ASSERT_OK(found);
  EXPECT_FALSE(found->has_value());
  auto got = kernels.get(k_sm90);
  ASSERT_OK(got);
  EXPECT_EQ(got->source, cache::Source::produced);
  EXPECT_EQ(today.compiles, 1);
  EXPECT_EQ(got->key, kernel_facts(generate(k_sm90), today)->key());
  EXPECT_EQ(store->session_counters().produces, 1u);
  // Nothing of the other entry was read: one miss probe, one miss counted, no hit.
  EXPECT_EQ(store->session_counters().disk_hits, 0u);
  EXPECT_TRUE(*store->contains(kernel_facts(generate(k_sm90), RekeyedNvrtc(k_then))->key()));
}

TEST_F(KernelCacheTest, RealNvrtcArtifactRoundTripsThroughTheStore) {
  const auto nvrtc = make_nvrtc_compiler();
  KernelSpec spec{KernelKind::gather, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_90"}};
  std::vector<std::uint8_t> cubin;
  {
    auto store = open_store();
    KernelCache kernels(*store, *nvrtc);
    auto got = kernels.get(spec);
    ASSERT_OK(got);
    EXPECT_EQ(got->source, cache::Source::produced);
    cubin = got->artifact->cubin;
  }
  auto store = open_store();
  KernelCache kernels(*store, *nvrtc);
  auto got = kernels.get(spec);
  ASSERT_OK(got);
  EXPECT_EQ(got->source, cache::Source::disk);
  EXPECT_EQ(got->artifact->cubin, cubin);
  EXPECT_EQ(got->artifact->usage.spill_store_bytes, 0);
}

}  // namespace
}  // namespace jitcache
