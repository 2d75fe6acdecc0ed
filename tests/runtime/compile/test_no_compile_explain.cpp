// No-compile mode of the kernel cache (a miss is an error naming the variant and every
// tier, and the compiler is never called) and the explanation of a lookup (its key and
// facts, the tier holding it, and for a miss the nearest entries with what differs).
#include <atomic>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "counting_compiler.hpp"
#include "kernel_store_fixture.hpp"
#include "runtime/compile/explain.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::FakeCompiler;

const KernelSpec k_identity{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_100a"}};
const KernelSpec k_dynamic{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_100a"}};
const KernelSpec k_gather{KernelKind::gather, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_100a"}};

class NoCompileTest : public jitcache::testing::KernelStoreTest {};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(NoCompileTest, AMissIsAnErrorNamingTheVariantAndEveryTierAndNothingCompiles) {
  auto store = open_store();
  FakeCompiler compiler;
  KernelCache kernels(*store, compiler, NoCompile::yes);
  EXPECT_TRUE(kernels.no_compile());
  auto got = kernels.get(k_dynamic);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::unavailable);
  const std::string& message = got.error().message;
  const std::string key = kernels.facts_of(k_dynamic)->key().to_hex();
  for (const std::string& part :
       {std::string("no-compile mode (JITCACHE_NO_COMPILE"), std::string("writer/dynamic/b12x-432/sm_100a"),
        std::string("kernel writer"), std::string("format b12x-432"), std::string("latent_scale dynamic"),
        std::string("target sm_100a"), "key " + key, "looked up in memory, disk (" + store->root().string() + ")",
        std::string("nothing was compiled")})
    EXPECT_TRUE(contains(message, part)) << part << " in: " << message;
  EXPECT_EQ(compiler.compiles.load(), 0);
  EXPECT_EQ(store->session_counters().produces, 0u);
}

TEST_F(NoCompileTest, FetchEachNamesEveryMissingVariantAndServesWhatIsCached) {
  auto store = open_store();
  FakeCompiler compiler;
  {
    KernelCache compiling(*store, compiler);
    ASSERT_OK(compiling.get(k_identity));
  }
  ASSERT_EQ(compiler.compiles.load(), 1);
  KernelCache kernels(*store, compiler, NoCompile::yes);
  auto served = kernels.get(k_identity);
  ASSERT_OK(served);
  EXPECT_NE(served->source, cache::Source::produced);

  const KernelSpec specs[] = {k_identity, k_dynamic, k_gather};
  std::atomic<int> fetched{0};
  const Status all = fetch_each(kernels, specs, 4, BundleText::skip,
                                [&](std::size_t, const KernelFetch&, std::chrono::steady_clock::time_point) -> Status {
                                  ++fetched;
                                  return {};
                                });
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::unavailable);
  const std::string& message = all.error().message;
  EXPECT_TRUE(contains(message, "2 kernels are missing")) << message;
  EXPECT_TRUE(contains(message, "writer/dynamic/b12x-432/sm_100a")) << message;
  EXPECT_TRUE(contains(message, "gather/dynamic/b12x-432/sm_100a")) << message;
  EXPECT_FALSE(contains(message, "writer/identity")) << "the cached one is not missing: " << message;
  EXPECT_EQ(fetched.load(), 1);
  EXPECT_EQ(compiler.compiles.load(), 1) << "nothing more was compiled";
}

TEST(ExplainWords, EachFactDifferenceIsSaidInWords) {
  EXPECT_EQ(describe_difference("compiler_fingerprint", "aa", "bb", "layer 3 needs"),
            "compiler build differs: cache has aa, this node has bb");
  EXPECT_EQ(describe_difference("latent_scale", "identity", "dynamic", "layer 78 needs"),
            "latent_scale: cache has identity, layer 78 needs dynamic");
  EXPECT_EQ(describe_difference("target", "sm_90", "sm_100a", "layer 1 needs"),
            "target: cache has sm_90, layer 1 needs sm_100a");
  EXPECT_EQ(describe_difference("env.JITCACHE_LINEINFO", "1", "0", "x"),
            "environment variable JITCACHE_LINEINFO: cache has 1, this process has 0");
  EXPECT_EQ(describe_difference("tool.nvjitlink.fingerprint", "p", "q", "x"),
            "nvjitlink build differs: cache has p, this node has q");
  EXPECT_EQ(describe_difference("spec.dtype", "f32", std::nullopt, "this lookup needs"),
            "spec fact dtype: cache has f32, this lookup needs (none)");
  EXPECT_TRUE(contains(describe_difference("source", "s1", "s2", "x"), "kernel source differs (another jitcache version"));
}

TEST(ExplainWords, SourceAndFormatFactsAreOneDifferenceEach) {
  cache::Facts cached{{"kernel_family", "nvfp4_mla"}, {"kernel", "writer"}, {"source_xxh3", "a"},
                      {"header.jitcache.x.cuh", "h1"}, {"rope", "bf16"}, {"record_bytes", "432"}};
  cache::Facts wanted{{"kernel_family", "nvfp4_mla"}, {"kernel", "writer"}, {"source_xxh3", "b"},
                      {"header.jitcache.x.cuh", "h2"}, {"format", "b12x-304"}, {"record_bytes", "304"}};
  // Another format generates another source: the format is the difference to name.
  auto differences = fact_differences(cached, wanted, "layer 0 needs");
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0].fact, "format");
  EXPECT_EQ(differences[0].text, "record format: cache has rope=bf16, layer 0 needs format=b12x-304");

  // The same variant from another source: another jitcache, one difference for all its facts.
  cached.set("format", "b12x-304").set("record_bytes", "304");
  cache::Facts same_variant;
  for (const auto& [name, value] : cached.fields())
    if (name != "rope") same_variant.set(name, value);
  differences = fact_differences(same_variant, wanted, "layer 0 needs");
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0].fact, "source");
  EXPECT_EQ(differences[0].cached, "a");
  EXPECT_EQ(differences[0].wanted, "b");
  EXPECT_TRUE(contains(differences[0].text, "another jitcache version")) << differences[0].text;
}

TEST_F(NoCompileTest, ExplainsAMissByTheNearestEntriesOfEachTier) {
  auto store = open_store();
  FakeCompiler old_build("0ld");
  {
    KernelCache kernels(*store, old_build);
    ASSERT_OK(kernels.get(k_identity));  // what an older compiler build left
    ASSERT_OK(kernels.get(k_gather));    // another kernel: never the nearest of a writer
  }
  FakeCompiler this_build("n3w");
  KernelCache kernels(*store, this_build, NoCompile::yes);
  const cache::Facts wanted = *kernels.facts_of(k_dynamic);
  const cache::Counters before = store->session_counters();
  ExplainOptions options;
  options.subject = "layer 78 needs";
  auto explained = explain_key(*store, wanted, k_dynamic.label(), options);
  ASSERT_OK(explained);
  EXPECT_EQ(explained->key, wanted.key().to_hex());
  EXPECT_EQ(explained->facts.size(), wanted.fields().size());
  EXPECT_FALSE(explained->found);
  ASSERT_EQ(explained->tiers.size(), 1u) << "memory is this process's; the disk lists its entries";
  const TierNearest& local = explained->tiers[0];
  EXPECT_EQ(local.tier, "local");
  EXPECT_EQ(local.name, "disk");
  EXPECT_TRUE(local.listable);
  EXPECT_EQ(local.candidates, 1u) << "only the writer is of the same kernel";
  ASSERT_EQ(local.nearest.size(), 1u);
  std::vector<std::string> texts;
  for (const FactDifference& d : local.nearest[0].differences) texts.push_back(d.text);
  ASSERT_EQ(texts.size(), 2u) << ::testing::PrintToString(texts);
  EXPECT_EQ(texts[0], "compiler build differs: cache has 0ld, this node has n3w");
  EXPECT_EQ(texts[1], "latent_scale: cache has identity, layer 78 needs dynamic");
  const std::string text = to_text(*explained);
  EXPECT_TRUE(contains(text, "in no tier")) << text;
  EXPECT_TRUE(contains(text, "latent_scale: cache has identity, layer 78 needs dynamic")) << text;
  const auto json = to_json(*explained).dump();
  EXPECT_TRUE(contains(json, "\"tier\":null")) << json;

  const cache::Counters after = store->session_counters();
  EXPECT_EQ(after.memory_hits, before.memory_hits);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(this_build.compiles.load(), 0);
}

TEST_F(NoCompileTest, ExplainsAHitByItsTier) {
  FakeCompiler compiler;
  ASSERT_NO_FATAL_FAILURE(warm(k_dynamic, compiler));
  auto store = open_store();
  KernelCache kernels(*store, compiler);
  auto explained = explain_key(*store, *kernels.facts_of(k_dynamic), k_dynamic.label());
  ASSERT_OK(explained);
  ASSERT_TRUE(explained->found);
  EXPECT_EQ(explained->found->kind, cache::Tier::disk);
  EXPECT_TRUE(explained->tiers.empty());
  EXPECT_TRUE(contains(to_text(*explained), "found in tier local (disk)"));
}

}  // namespace
}  // namespace jitcache
