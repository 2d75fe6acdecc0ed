// Kernels from outside, cached (runtime/compile/kernel_request.hpp, source_cache.hpp):
// the facts and keys of a request, spec schemas, verified reads and single compiles,
// shadow verification of an incomplete spec, lookup by spec alone. The compile step and
// the tools' fingerprints are fakes (fast, no toolkit needed); the bundle is the real one.
// The real tools: test_source_tools_cache.cpp.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/store.hpp"
#include "expect_error.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_cache.hpp"
#include "source_cache_fakes.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::fake_output;
using testing::fake_tools;


std::string scaled_source(const std::string& scale) {
  return "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " + scale + "f; }\n";
}

KernelRequest sample_request() {
  KernelRequest r;
  r.family = "scaler";
  r.spec = {{"dtype", "f32"}, {"block", "128"}};
  r.kind = SourceKind::cuda;
  r.text = scaled_source("1.0");
  r.headers = {{"common/defs.h", "#define X 1\n"}};
  r.entry = "scale";
  r.target = "sm_90";
  r.options = {"-O3", " --use_fast_math "};
  return r;
}

// A family whose source depends on a scale that is not one of its spec facts (the seed's
// latent scale).
SpecSchema forgetful_schema() { return SpecSchema{"forgetful", SourceKind::cuda, {{"dtype", FactDomain{{"f32"}}}}}; }

KernelRequest forgetful_request(const std::string& scale) {
  KernelRequest r;
  r.family = "forgetful";
  r.spec = {{"dtype", "f32"}};
  r.text = scaled_source(scale);
  r.entry = "scale";
  r.target = "sm_90";
  return r;
}

SpecSchema sample_schema() {
  return SpecSchema{"scaler", SourceKind::cuda, {{"dtype", FactDomain{{"f32", "bf16"}}}, {"block", FactDomain{}}}};
}

class SourceCacheTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(registry.add(sample_schema()));
    reopen();
  }
  void reopen() {
    cache.reset();
    store.reset();
    auto opened = cache::Store::open(dir() / "cache");
    ASSERT_TRUE(opened) << opened.error().to_string();
    store = std::move(*opened);
    SourceCacheOptions options;
    options.registry = &registry;
    options.compile = [this](const SourceInput& input) -> Result<SourceOutput> {
      ++compiles;
      return fake_output(input);
    };
    options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
    options.check_cubin = false;  // the fake cubin is no ELF image
    options.no_compile = no_compile;
    cache = std::make_unique<SourceCache>(*store, options);
  }

  NoCompile no_compile = NoCompile::no;
  SpecRegistry registry;
  std::atomic<int> compiles{0};
  std::unique_ptr<cache::Store> store;
  std::unique_ptr<SourceCache> cache;
};

// ---- facts and keys --------------------------------------------------------------------

TEST(KernelRequestFacts, KeyChangesWithEveryFact) {
  const KernelRequest base = sample_request();
  const ToolFacts tools = fake_tools(SourceKind::cuda);
  const auto base_facts = request_facts(base, tools);
  ASSERT_TRUE(base_facts) << base_facts.error().to_string();
  const auto key = base_facts->key();
  EXPECT_EQ(base_facts->get("family"), "scaler");
  EXPECT_EQ(base_facts->get("spec.dtype"), "f32");
  EXPECT_EQ(base_facts->get("options"), "-O3\n--use_fast_math");
  EXPECT_EQ(base_facts->get("tool.nvrtc.fingerprint"), "nvrtc-fp-1");
  EXPECT_TRUE(base_facts->get("header.common.defs.h"));
  EXPECT_TRUE(base_facts->get("source_xxh3"));

  auto changed = [&](auto mutate, ToolFacts t = {}) {
    KernelRequest r = base;
    mutate(r);
    auto f = request_facts(r, t.empty() ? tools : t);
    EXPECT_TRUE(f) << f.error().to_string();
    return f ? f->key() : key;
  };
  EXPECT_NE(changed([](KernelRequest& r) { r.family = "other"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.spec["dtype"] = "bf16"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.spec["block"] = "256"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.text += " "; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.headers[0].second = "#define X 2\n"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.headers.push_back({"more.h", ""}); }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.entry = "scale2"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.target = "sm_90a"; }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.options.push_back("-lineinfo"); }), key);
  EXPECT_NE(changed([](KernelRequest& r) { r.kind = SourceKind::ptx; }, fake_tools(SourceKind::ptx)), key);
  EXPECT_NE(changed([](KernelRequest&) {}, fake_tools(SourceKind::cuda, "fp-2")), key);
  // Normalisation: surrounding white space and empty options do not change the key.
  EXPECT_EQ(changed([](KernelRequest& r) { r.options = {"  -O3", "", "--use_fast_math"}; }), key);
}

TEST(KernelRequestFacts, ToolsOfEachKind) {
  KernelRequest r = sample_request();
  r.kind = SourceKind::nvvm;
  const auto facts = request_facts(r, fake_tools(SourceKind::nvvm));
  ASSERT_TRUE(facts);
  EXPECT_TRUE(facts->get("tool.libnvvm.fingerprint"));
  EXPECT_TRUE(facts->get("tool.nvjitlink.fingerprint"));
  EXPECT_FALSE(facts->get("tool.nvrtc.version"));
  // A missing tool is refused rather than keyed without it.
  EXPECT_FALSE(request_facts(r, fake_tools(SourceKind::ptx)));
}

TEST(KernelRequestFacts, SpecKeyIgnoresTheSource) {
  const ToolFacts tools = fake_tools(SourceKind::cuda);
  KernelRequest a = sample_request();
  KernelRequest b = a;
  b.text = scaled_source("0.5");
  b.headers[0].second = "changed";
  const auto sa = spec_facts(a, tools);
  const auto sb = spec_facts(b, tools);
  ASSERT_TRUE(sa && sb);
  EXPECT_EQ(sa->key(), sb->key());
  EXPECT_FALSE(sa->get("source_xxh3"));
  EXPECT_NE(request_facts(a, tools)->key(), request_facts(b, tools)->key());
  EXPECT_NE(sa->key(), request_facts(a, tools)->key());
  // What the spec does not name is for the record to hold, not for the spec key.
  b.entry = "scale_v2";
  b.options = {"-lineinfo"};
  EXPECT_EQ(spec_facts(b, tools)->key(), sa->key());
  EXPECT_FALSE(sa->get("entry"));
  EXPECT_FALSE(sa->get("options"));
  KernelRequest c = a;
  c.spec["dtype"] = "bf16";
  EXPECT_NE(spec_facts(c, tools)->key(), sa->key());
  c = a;
  c.target = "sm_100a";
  EXPECT_NE(spec_facts(c, tools)->key(), sa->key());
  c = a;
  c.kind = SourceKind::ptx;
  EXPECT_NE(spec_facts(c, fake_tools(SourceKind::ptx))->key(), sa->key());
  // From a stored bundle's facts, the same spec key; other facts are refused.
  const auto from_bundle = spec_facts_of(*request_facts(b, tools));
  ASSERT_TRUE(from_bundle) << from_bundle.error().to_string();
  EXPECT_EQ(from_bundle->key(), sa->key());
  EXPECT_FALSE(spec_facts_of(*sa));
}

// ---- schemas ----------------------------------------------------------------------------

TEST(SpecSchemaTest, ViolationsNameFamilyFactAndAllowedValues) {
  const SpecSchema schema = sample_schema();
  EXPECT_TRUE(validate_spec(schema, {{"dtype", "f32"}, {"block", "64"}}));

  auto missing = validate_spec(schema, {{"dtype", "f32"}});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(missing.error().message.find("scaler"), std::string::npos);
  EXPECT_NE(missing.error().message.find("missing fact block"), std::string::npos);
  EXPECT_NE(missing.error().message.find("any non-empty string"), std::string::npos);

  auto unknown = validate_spec(schema, {{"dtype", "f32"}, {"block", "64"}, {"scale", "1"}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown fact scale"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("scaler"), std::string::npos);

  auto range = validate_spec(schema, {{"dtype", "f16"}, {"block", "64"}});
  ASSERT_FALSE(range);
  EXPECT_NE(range.error().message.find("dtype='f16'"), std::string::npos);
  EXPECT_NE(range.error().message.find("one of {f32, bf16}"), std::string::npos);

  EXPECT_FALSE(validate_spec(schema, {{"dtype", "f32"}, {"block", ""}}));
}

TEST(SpecSchemaTest, RegistryRefusesAConflictingReRegistration) {
  SpecRegistry registry;
  ASSERT_TRUE(registry.add(sample_schema()));
  EXPECT_TRUE(registry.add(sample_schema()));  // identical: fine
  SpecSchema other = sample_schema();
  other.facts["dtype"].allowed.push_back("f16");
  auto conflict = registry.add(other);
  ASSERT_FALSE(conflict);
  EXPECT_NE(conflict.error().message.find("scaler"), std::string::npos);
  EXPECT_FALSE(registry.add(SpecSchema{"bad name", SourceKind::cuda, {}}));
  EXPECT_FALSE(registry.add(SpecSchema{"f", SourceKind::cuda, {{"x", FactDomain{{"a", "a"}}}}}));
  ASSERT_TRUE(registry.find("scaler"));
  EXPECT_EQ(*registry.find("scaler"), sample_schema());

  KernelRequest r = sample_request();
  r.family = "unregistered";
  auto none = registry.validate(r);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::not_found);
}

TEST(SpecSchemaTest, RegistryIsThreadSafe) {
  SpecRegistry registry;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        SpecSchema s{"fam" + std::to_string(i % 10), SourceKind::cuda, {{"v", FactDomain{{"a"}}}}};
        if (!registry.add(s)) ++failures;
        if (i >= 10 && !registry.find("fam" + std::to_string((i + t) % 10))) ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// ---- the cache --------------------------------------------------------------------------

TEST_F(SourceCacheTest, CompilesOnceThenServesFromCacheAndAFreshStore) {
  const KernelRequest r = sample_request();
  auto first = cache->compile(r);
  ASSERT_TRUE(first) << first.error().to_string();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(compiles.load(), 1);
  EXPECT_EQ(first->cubin, fake_output(SourceInput{r.kind, r.text, {}, r.entry, r.target, {}, {}}).cubin);
  EXPECT_EQ(first->usage.registers, 32);

  auto second = cache->compile(r);
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->source, cache::Source::memory);
  auto third_memory = cache->compile(r);  // served from the decoded result attached to the memory entry
  ASSERT_TRUE(third_memory);
  EXPECT_EQ(third_memory->source, cache::Source::memory);
  EXPECT_EQ(third_memory->cubin, first->cubin);
  EXPECT_EQ(third_memory->log, first->log);
  EXPECT_EQ(second->key, first->key);
  EXPECT_EQ(second->cubin, first->cubin);
  EXPECT_EQ(compiles.load(), 1);

  reopen();
  auto third = cache->compile(r);
  ASSERT_TRUE(third) << third.error().to_string();
  EXPECT_TRUE(third->from_cache);
  EXPECT_EQ(third->source, cache::Source::disk);
  EXPECT_EQ(third->cubin, first->cubin);
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, NoCompileModeFailsOnAMissNamingTheRequestAndEveryTier) {
  no_compile = NoCompile::yes;
  reopen();
  const KernelRequest r = sample_request();
  auto missed = cache->compile(r);
  ASSERT_FALSE(missed);
  EXPECT_EQ(missed.error().code, ErrorCode::unavailable);
  const std::string& message = missed.error().message;
  for (const char* part : {"no-compile mode", "JITCACHE_NO_COMPILE", "family scaler", "dtype=f32", "block=128",
                           "kind cuda", "target sm_90", "looked up in memory, disk (", "nothing was compiled"})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  EXPECT_EQ(compiles.load(), 0) << "no-compile mode never calls the compile step";
  EXPECT_EQ(store->session_counters().produces, 0u);
  EXPECT_EQ(store->session_counters().misses, 1u) << "the miss is a miss";

  // Compiled by a node that may compile, it is served here from the disk.
  no_compile = NoCompile::no;
  reopen();
  ASSERT_TRUE(cache->compile(r));
  EXPECT_EQ(compiles.load(), 1);
  no_compile = NoCompile::yes;
  reopen();
  auto served = cache->compile(r);
  ASSERT_TRUE(served) << served.error().to_string();
  EXPECT_EQ(served->source, cache::Source::disk);
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, EightThreadsOneCompile) {
  SourceCacheOptions options;
  options.registry = &registry;
  options.compile = [this](const SourceInput& input) -> Result<SourceOutput> {
    ++compiles;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return fake_output(input);
  };
  options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
  options.check_cubin = false;
  SourceCache shared(*store, options);
  const KernelRequest r = sample_request();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      if (auto got = shared.compile(r); got && !got->cubin.empty()) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, SchemaViolationIsRefusedBeforeCompiling) {
  KernelRequest r = sample_request();
  r.spec["dtype"] = "f64";
  auto refused = cache->compile(r);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(refused.error().message.find("dtype"), std::string::npos);
  r.family = "nobody";
  EXPECT_EQ(cache->compile(r).error().code, ErrorCode::not_found);
  EXPECT_EQ(compiles.load(), 0);
}

TEST_F(SourceCacheTest, CorruptedBlobIsRefusedAndRecompiled) {
  const KernelRequest r = sample_request();
  auto first = cache->compile(r);
  ASSERT_TRUE(first) << first.error().to_string();
  auto entries = store->list();
  ASSERT_TRUE(entries);
  bool corrupted = false;
  for (const auto& e : *entries) {
    if (e.key != first->key) continue;
    const auto path = store->blob_path(e.digest);
    std::filesystem::permissions(path, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f);
    f.seekp(static_cast<std::streamoff>(e.size / 2));
    f.put('\x5a');
    f.put('\xa5');
    corrupted = true;
  }
  ASSERT_TRUE(corrupted);
  reopen();  // no memory tier left to serve the good copy
  auto again = cache->compile(r);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->cubin, first->cubin);
  EXPECT_EQ(compiles.load(), 2);
}

TEST_F(SourceCacheTest, ABundleWithOtherFactsIsNotServed) {
  // A writer that stored another bundle under this key (a bug, a foreign writer): the
  // blob verifies against its digest, but its facts are not the request's.
  const KernelRequest r = sample_request();
  const auto facts = request_facts(r, fake_tools(r.kind));
  ASSERT_TRUE(facts);
  CompiledArtifact wrong;
  wrong.entry = r.entry;
  wrong.cubin = {1, 2, 3};
  wrong.facts = {{"family", "someone_else"}};
  ASSERT_TRUE(store->put(facts->key(), *facts, serialize_bundle(wrong), 1.0));
  auto result = cache->compile(r);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_FALSE(result->from_cache);
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, AnUnusableSpecRecordIsDroppedAndWrittenAgain) {
  const KernelRequest r = sample_request();
  const auto spec = spec_facts(r, fake_tools(r.kind));
  ASSERT_TRUE(spec);
  const std::string junk = "{\"format\": \"1\", \"key\": 7}";
  ASSERT_TRUE(store->put(spec->key(), *spec, std::as_bytes(std::span(junk.data(), junk.size())), 0));
  auto missing = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(missing) << missing.error().to_string();
  EXPECT_FALSE(*missing);
  ASSERT_TRUE(store->put(spec->key(), *spec, std::as_bytes(std::span(junk.data(), junk.size())), 0));
  auto compiled = cache->compile(r);
  ASSERT_TRUE(compiled) << compiled.error().to_string();
  const std::string not_json = "\x01not json";
  EXPECT_FALSE(check_source_content(*spec, std::as_bytes(std::span(not_json.data(), not_json.size()))));
  auto found = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->key, compiled->key);
}

TEST_F(SourceCacheTest, ForgettingFamilyIsCaughtByShadowVerification) {
  // The family's source depends on a latent scale that is not one of its spec facts.
  ASSERT_TRUE(registry.add(forgetful_schema()));
  const KernelRequest one = forgetful_request("1.0");
  ASSERT_TRUE(cache->compile(one));
  EXPECT_TRUE(cache->verify_spec(one));

  const KernelRequest half = forgetful_request("0.5");
  const ToolFacts tools = fake_tools(SourceKind::cuda);
  const std::string d1(*request_facts(one, tools)->get("source_xxh3"));
  const std::string d2(*request_facts(half, tools)->get("source_xxh3"));
  auto compiled = cache->compile(half);
  ASSERT_FALSE(compiled);
  const std::vector<Status> caught_all = {cache->verify_spec(half), std::unexpected(compiled.error())};
  for (const auto& caught : caught_all) {
    ASSERT_FALSE(caught);
    jitcache::testing::expect_error_naming(caught.error(), ErrorCode::invalid_input,
                                           {"incomplete", "forgetful", "dtype=f32", d1, d2});
  }
  EXPECT_EQ(compiles.load(), 1);  // the 0.5 source was never compiled nor served
  // The same in a fresh process over the same directory.
  reopen();
  EXPECT_FALSE(cache->compile(half));
  EXPECT_TRUE(cache->compile(one));
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, AnotherEntryOrOptionsForOneSpecIsAnIncompleteSpec) {
  const KernelRequest r = sample_request();
  ASSERT_TRUE(cache->compile(r));
  KernelRequest renamed = r;
  renamed.entry = "scale_v2";
  auto caught = cache->compile(renamed);
  ASSERT_FALSE(caught);
  EXPECT_EQ(caught.error().code, ErrorCode::invalid_input);
  EXPECT_NE(caught.error().message.find("entry scale was cached, this request has scale_v2"), std::string::npos)
      << caught.error().message;
  KernelRequest debug = r;
  debug.options.push_back("-lineinfo");
  caught = cache->compile(debug);
  ASSERT_FALSE(caught);
  EXPECT_NE(caught.error().message.find("options [-O3, --use_fast_math] was cached, this request has "
                                        "[-O3, --use_fast_math, -lineinfo]"),
            std::string::npos)
      << caught.error().message;
  KernelRequest header = r;
  header.headers.push_back({"extra.h", "#define Y 2\n"});
  caught = cache->compile(header);
  ASSERT_FALSE(caught);
  EXPECT_NE(caught.error().message.find("header.extra.h (absent) was cached"), std::string::npos)
      << caught.error().message;
  EXPECT_EQ(compiles.load(), 1);
  // A verified request says so.
  auto again = cache->compile(r);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->verified);
}

TEST_F(SourceCacheTest, AKindOtherThanTheFamilysIsRefused) {
  KernelRequest r = sample_request();
  r.kind = SourceKind::ptx;
  r.headers.clear();
  auto refused = cache->compile(r);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(refused.error().message.find("declared with cuda sources; this request is ptx"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(compiles.load(), 0);
}

TEST_F(SourceCacheTest, ARecordNamingAnotherKeyIsAMissAndIsRewritten) {
  const KernelRequest r = sample_request();
  auto compiled = cache->compile(r);
  ASSERT_TRUE(compiled);
  EXPECT_FALSE(compiled->verified);  // no record before this compile
  const auto spec = spec_facts(r, fake_tools(r.kind));
  ASSERT_TRUE(spec);
  auto stored = store->get(spec->key());
  ASSERT_TRUE(stored && *stored);
  std::string text(reinterpret_cast<const char*>((*stored)->bytes->data()), (*stored)->bytes->size());
  const std::string real = compiled->key.to_hex();
  text.replace(text.find(real), real.size(), std::string(32, '0'));
  ASSERT_TRUE(store->put(spec->key(), *spec, std::as_bytes(std::span(text.data(), text.size())), 0));
  reopen();
  auto miss = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(miss) << miss.error().to_string();
  EXPECT_FALSE(*miss);
  auto again = cache->compile(r);  // everything else agrees: served, and the record is rewritten
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_TRUE(again->from_cache);
  auto found = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->key, compiled->key);
  EXPECT_EQ((*found)->entry, "scale");
}

// Two processes compile one spec from two sources at once on a cold cache: neither finds a
// record before compiling. The one that finishes second finds the other's record when it
// is about to write its own, and reports the incomplete spec instead of serving.
TEST_F(SourceCacheTest, AConcurrentFirstCompileOfAnotherSourceIsCaught) {
  ASSERT_TRUE(registry.add(forgetful_schema()));
  const KernelRequest one = forgetful_request("1.0");
  const KernelRequest half = forgetful_request("0.5");

  auto other_store = cache::Store::open(dir() / "cache");  // the other process's view
  ASSERT_TRUE(other_store) << other_store.error().to_string();
  SourceCacheOptions other_options;
  other_options.registry = &registry;
  other_options.compile = [](const SourceInput& input) -> Result<SourceOutput> { return fake_output(input); };
  other_options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
  other_options.check_cubin = false;
  SourceCache other(**other_store, other_options);

  bool raced = false;
  SourceCacheOptions options = other_options;
  options.compile = [&](const SourceInput& input) -> Result<SourceOutput> {
    if (!raced) {
      raced = true;  // while this compile runs, the other process compiles and records `half`
      auto theirs = other.compile(half);
      EXPECT_TRUE(theirs) << theirs.error().to_string();
    }
    return fake_output(input);
  };
  SourceCache mine(*store, options);
  auto caught = mine.compile(one);
  ASSERT_TRUE(raced);
  ASSERT_FALSE(caught);
  EXPECT_EQ(caught.error().code, ErrorCode::invalid_input);
  EXPECT_NE(caught.error().message.find("spec of kernel family forgetful is incomplete"), std::string::npos)
      << caught.error().message;
  // The record still names the source that was recorded first.
  auto found = other.lookup("forgetful", one.spec, "sm_90");
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->cubin, fake_output(source_input(half)).cubin);
}

TEST_F(SourceCacheTest, LookupBySpecAlone) {
  const KernelRequest r = sample_request();
  auto miss = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(miss) << miss.error().to_string();
  EXPECT_FALSE(*miss);
  auto compiled = cache->compile(r);
  ASSERT_TRUE(compiled);

  reopen();
  auto found = cache->lookup(r.family, r.spec, r.target);
  ASSERT_TRUE(found) << found.error().to_string();
  ASSERT_TRUE(*found);
  EXPECT_EQ((*found)->key, compiled->key);
  EXPECT_EQ((*found)->cubin, compiled->cubin);
  EXPECT_TRUE((*found)->from_cache);

  auto other_spec = cache->lookup(r.family, {{"dtype", "bf16"}, {"block", "128"}}, r.target);
  ASSERT_TRUE(other_spec);
  EXPECT_FALSE(*other_spec);
  auto other_target = cache->lookup(r.family, r.spec, "sm_100a");
  ASSERT_TRUE(other_target);
  EXPECT_FALSE(*other_target);
  auto bad_spec = cache->lookup(r.family, {{"dtype", "f16"}, {"block", "128"}}, r.target);
  EXPECT_FALSE(bad_spec);
  EXPECT_EQ(compiles.load(), 1);
}

TEST_F(SourceCacheTest, EightProcessesOneCompile) {
  const KernelRequest r = sample_request();
  const auto counter = dir() / "compiles.log";
  const auto root = dir() / "cold";
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 1;
      {
        auto opened = cache::Store::open(root);
        if (opened) {
          SourceCacheOptions options;
          options.registry = &registry;
          options.compile = [&](const SourceInput& input) -> Result<SourceOutput> {
            const int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (fd >= 0) {
              (void)!::write(fd, "c\n", 2);
              ::close(fd);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            return fake_output(input);
          };
          options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
          options.check_cubin = false;
          SourceCache child(**opened, options);
          auto got = child.compile(r);
          if (got && got->cubin == fake_output(SourceInput{r.kind, r.text, {}, r.entry, r.target, {}, {}}).cubin)
            rc = 0;
        }
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  std::ifstream in(counter);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 1);
}

TEST_F(SourceCacheTest, StoredEntriesPassTheContentCheckForeignTiersUse) {
  const KernelRequest r = sample_request();
  ASSERT_TRUE(cache->compile(r));
  auto entries = store->list();
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 2u);  // the bundle and the spec record
  for (const auto& e : *entries) {
    EXPECT_TRUE(is_request_facts(e.facts));
    auto hit = store->get(e.key);
    ASSERT_TRUE(hit && *hit);
    const auto& bytes = *(*hit)->bytes;
    auto checked = check_stored_content(e.facts, bytes);
    EXPECT_TRUE(checked) << checked.error().to_string();
    // Under other facts the same bytes are refused.
    cache::Facts other = e.facts;
    other.set(e.facts.get("record") == k_record_spec_index ? "record" : "entry", "other");
    EXPECT_FALSE(check_stored_content(other, bytes));
  }
  // Facts without a record fact go to the kernel bundle check, which refuses these.
  const auto facts = request_facts(r, fake_tools(r.kind));
  cache::Facts no_record;
  for (const auto& [name, value] : facts->fields())
    if (name != "record") no_record.set(name, value);
  auto hit = store->get(facts->key());
  ASSERT_TRUE(hit && *hit);
  EXPECT_FALSE(check_stored_content(no_record, *(*hit)->bytes));
}

}  // namespace
}  // namespace jitcache
