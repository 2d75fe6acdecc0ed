// Cache providers: a provider written by write_provider serves its kernels to a store that
// misses them (verified, copied into the local cache, never written to), and every way a
// provider can be damaged, forged or planted is refused: the whole provider or the one
// entry, with a warning naming the provider and the entry, and the kernel compiled instead.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/source_cache.hpp"
#include "shipping_fixture.hpp"
#include "support/sha256.hpp"
#include "counting_compiler.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using jitcache::testing::LogCapture;
using jitcache::testing::ScopedEnv;

using testing::CountingCompiler;
using namespace testing::shipping;  // the fleet keys and the variants

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

class CacheProvider : public jitcache::testing::TempDirTest {
 protected:
  // Two real variants, compiled once for the suite.
  static void SetUpTestSuite() {
    s_compiler = make_nvrtc_compiler().release();
    *s_entries = compile_entries(*s_compiler, {k_identity, k_dynamic});
  }

  static ProviderInfo info() {
    return ProviderInfo{"jitcache test", "2026-12-06T00:00:00.000Z", "jitcache_cache_test", "glm5-mini",
                        "b12x-432", {"sm_90"}};
  }

  fs::path provider_dir() const { return dir() / "provider"; }
  fs::path bundle_of(std::size_t i) const {
    return provider_dir() / "bundles" / ((*s_entries)[i].key.to_hex() + ".bundle");
  }

  void write(const std::optional<std::string>& key) {
    auto written = write_provider(provider_dir(), info(), *s_entries, key);
    ASSERT_TRUE(written.has_value()) << written.error().to_string();
  }

  // A store over dir()/cache with the provider below its disk, and a kernel cache over it.
  struct Node {
    std::shared_ptr<ProviderTier> provider;
    std::unique_ptr<cache::Store> store;
    std::unique_ptr<CountingCompiler> compiler;
    std::unique_ptr<KernelCache> kernels;
  };
  Node open_node(const std::optional<std::string>& key, const std::string& cache = "cache") {
    Node node;
    node.provider = std::make_shared<ProviderTier>(provider_dir(), key, check_stored_content);
    cache::StoreOptions options;
    options.extra_tiers.push_back(node.provider);
    auto store = cache::Store::open(dir() / cache, options);
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    node.store = std::move(*store);
    node.compiler = std::make_unique<CountingCompiler>(*s_compiler);
    node.kernels = std::make_unique<KernelCache>(*node.store, *node.compiler);
    return node;
  }

  // The source of `spec`'s fetch on `node`, failing the test on an error.
  static cache::Source fetch(Node& node, const KernelSpec& spec) {
    auto got = node.kernels->get(spec, BundleText::skip);
    EXPECT_TRUE(got.has_value()) << got.error().to_string();
    return got ? got->source : cache::Source::produced;
  }

  // Edits the manifest with `edit`, then writes it back (signed with `key` when given).
  void edit_manifest(const std::function<void(nlohmann::json&)>& edit, const std::optional<std::string>& key = {}) {
    nlohmann::json manifest = nlohmann::json::parse(read_file(provider_dir() / "manifest.json"));
    edit(manifest);
    const std::string text = manifest.dump(1);
    write_file(provider_dir() / "manifest.json", text);
    if (key) write_file(provider_dir() / "manifest.json.hmac", sign_provider_manifest(text, *key));
  }

  static inline Compiler* s_compiler = nullptr;
  static inline std::vector<ExportEntry>* s_entries = new std::vector<ExportEntry>();
};

TEST_F(CacheProvider, AMissOfTheLocalCacheIsServedByTheProviderVerifiedAndCopiedIntoIt) {
  write(k_no_key);
  {
    Node node = open_node(k_no_key);
    EXPECT_EQ(fetch(node, k_identity), cache::Source::provider);
    EXPECT_EQ(fetch(node, k_dynamic), cache::Source::provider);
    EXPECT_EQ(node.compiler->compiles, 0);
    const cache::Counters counters = node.store->session_counters();
    EXPECT_EQ(counters.provider_hits, 2u);
    EXPECT_EQ(counters.provider_rejects, 0u);
    EXPECT_EQ(counters.misses, 0u);
    for (const ExportEntry& e : *s_entries) EXPECT_TRUE(node.store->contains(e.key).value_or(false)) << e.label;
  }
  // The next process finds them on its own disk: the provider is not asked.
  Node again = open_node(k_no_key);
  EXPECT_EQ(fetch(again, k_identity), cache::Source::disk);
  EXPECT_EQ(again.store->session_counters().provider_hits, 0u);
}

TEST_F(CacheProvider, AProviderIsNeverWrittenTo) {
  write(k_no_key);
  auto listing = [&] {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(provider_dir()))
      files.push_back(e.path().string() + " " + std::to_string(e.is_regular_file() ? e.file_size() : 0));
    std::sort(files.begin(), files.end());
    return files;
  };
  const auto before = listing();
  Node node = open_node(k_no_key);
  const KernelSpec gather{KernelKind::gather, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}};
  EXPECT_EQ(fetch(node, gather), cache::Source::produced);  // not in the provider: compiled
  EXPECT_EQ(node.compiler->compiles, 1);
  cache::EntryFilter all;
  ASSERT_TRUE(node.store->remove(all, cache::DryRun::no).has_value());
  EXPECT_EQ(fetch(node, k_identity), cache::Source::provider);
  EXPECT_EQ(listing(), before);
  EXPECT_FALSE(node.provider->writable());
  EXPECT_FALSE(node.provider->put((*s_entries)[0].key, cache::TierEntry{(*s_entries)[0].facts, nullptr}).has_value());
}

TEST_F(CacheProvider, ItsEntriesAreListedWithTheirFacts) {
  write(k_no_key);
  Node node = open_node(k_no_key);
  auto listed = node.provider->list_entries();
  ASSERT_TRUE(listed.has_value() && listed->has_value());
  ASSERT_EQ((*listed)->size(), 2u);
  EXPECT_EQ((**listed)[0].key, (*s_entries)[0].key);
  EXPECT_EQ((**listed)[0].facts, (*s_entries)[0].facts);
  EXPECT_EQ(node.provider->name(), "provider " + provider_dir().string());
}

// Each way one bundle can be damaged: that entry is skipped with one warning naming the
// provider and the entry, its kernel is compiled, and the other entry is still served.
TEST_F(CacheProvider, ADamagedBundleIsSkippedNamingTheProviderAndTheEntry) {
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> damage;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"one byte flipped",
       [](const fs::path& p) {
         std::string b = read_file(p);
         b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x20);
         write_file(p, b);
       },
       "XXH3-128"},
      {"cut short",
       [](const fs::path& p) {
         std::string b = read_file(p);
         write_file(p, b.substr(0, b.size() - 7));
       },
       "the manifest says"},
      {"missing", [](const fs::path& p) { fs::remove(p); }, "bundle"},
      {"a symbolic link to a copy",
       [](const fs::path& p) {
         fs::copy_file(p, p.string() + ".copy");
         fs::remove(p);
         fs::create_symlink(p.string() + ".copy", p);
       },
       "symbolic link"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir() / "cache");
    fs::remove_all(provider_dir());
    write(k_no_key);
    c.damage(bundle_of(0));
    LogCapture log;
    Node node = open_node(k_no_key);
    EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
    EXPECT_EQ(fetch(node, k_dynamic), cache::Source::provider);
    EXPECT_EQ(node.compiler->compiles, 1);
    EXPECT_EQ(node.store->session_counters().provider_rejects, 1u);
    EXPECT_EQ(log.count_containing("cache provider " + provider_dir().string() + ": skipping entry " +
                                   (*s_entries)[0].label),
              1u)
        << log.all();
    EXPECT_EQ(log.count_containing(c.says), 1u) << log.all();
    // Refused once: a second lookup neither reads it again nor warns again.
    cache::EntryFilter all;
    ASSERT_TRUE(node.store->remove(all, cache::DryRun::no).has_value());
    EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
    EXPECT_EQ(node.store->session_counters().provider_rejects, 1u);
  }
}

// A bundle of another variant under an entry's key, with digests that agree with it: the
// digests pass, the content check (the bundle's own facts against the key) refuses it.
TEST_F(CacheProvider, AnotherVariantsBundleUnderAKeyIsRefusedByItsFacts) {
  write(k_no_key);
  const std::string other = read_file(bundle_of(1));
  write_file(bundle_of(0), other);
  edit_manifest([&](nlohmann::json& m) {
    m["entries"][0]["digest"] = cache::BlobDigest::of(other).to_hex();
    m["entries"][0]["sha256"] = sha256_hex(other);
    m["entries"][0]["size"] = other.size();
  });
  LogCapture log;
  Node node = open_node(k_no_key);
  EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
  EXPECT_EQ(log.count_containing("skipping entry " + (*s_entries)[0].label), 1u) << log.all();
  EXPECT_EQ(log.count_containing("latent_scale"), 1u) << log.all();
}

TEST_F(CacheProvider, AManifestEntryThatBreaksItsRulesIsSkippedAndTheOthersServed) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"facts that hash to another key", [](nlohmann::json& e) { e["facts"]["latent_scale"] = "dynamic"; },
       "not to the entry's key"},
      {"no key", [](nlohmann::json& e) { e.erase("key"); }, "key: missing"},
      {"a short sha256", [](nlohmann::json& e) { e["sha256"] = "abc"; }, "sha256"},
      {"a negative size", [](nlohmann::json& e) { e["size"] = -1; }, "size"},
      {"a NaN-like compile time", [](nlohmann::json& e) { e["compile_ms"] = 1e300; }, "compile_ms"},
      {"not an object", [](nlohmann::json& e) { e = "entry"; }, "not an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir() / "cache");
    fs::remove_all(provider_dir());
    write(k_no_key);
    edit_manifest([&](nlohmann::json& m) { c.edit(m["entries"][0]); });
    LogCapture log;
    Node node = open_node(k_no_key);
    EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
    EXPECT_EQ(fetch(node, k_dynamic), cache::Source::provider);
    EXPECT_EQ(log.count_containing("skipping entry 0"), 1u) << log.all();
    EXPECT_EQ(log.count_containing(c.says), 1u) << log.all();
  }
}

// A provider refused whole: one warning naming it and why; every kernel compiled; nothing read.
TEST_F(CacheProvider, AProviderThatCannotBeTrustedIsRefusedWhole) {
  struct Case {
    const char* what;
    std::optional<std::string> written_with;  // the key it is signed with (none: unsigned)
    std::optional<std::string> node_key;      // the key configured on the node
    std::function<void(const fs::path&)> damage;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"malformed JSON", k_no_key, k_no_key, [](const fs::path& d) { write_file(d / "manifest.json", "{\"format\": "); },
       "not a JSON object"},
      {"another format", k_no_key, k_no_key,
       [](const fs::path& d) {
         auto m = nlohmann::json::parse(read_file(d / "manifest.json"));
         m["format"] = "jitcache-export";
         write_file(d / "manifest.json", m.dump());
       },
       "is not \"jitcache-provider\""},
      {"a newer version", k_no_key, k_no_key,
       [](const fs::path& d) {
         auto m = nlohmann::json::parse(read_file(d / "manifest.json"));
         m["version"] = 2;
         write_file(d / "manifest.json", m.dump());
       },
       "version 2"},
      {"no manifest", k_no_key, k_no_key, [](const fs::path& d) { fs::remove(d / "manifest.json"); }, "manifest.json"},
      {"unsigned where a key is configured", k_no_key, k_key, [](const fs::path&) {}, "only signed providers"},
      {"signed with another key", k_other_key, k_key, [](const fs::path&) {}, "bad signature"},
      {"altered after signing", k_key, k_key,
       [](const fs::path& d) {
         std::string m = read_file(d / "manifest.json");
         m.insert(m.size() - 2, " ");
         write_file(d / "manifest.json", m);
       },
       "bad signature"},
      {"world-writable", k_no_key, k_no_key, [](const fs::path& d) { ::chmod(d.c_str(), 0777); },
       "world-writable"},
      {"group-writable bundles", k_no_key, k_no_key, [](const fs::path& d) { ::chmod((d / "bundles").c_str(), 0775); },
       "group- or world-writable"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir() / "cache");
    fs::remove_all(provider_dir());
    write(c.written_with);
    c.damage(provider_dir());
    LogCapture log;
    Node node = open_node(c.node_key);
    EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
    EXPECT_EQ(fetch(node, k_dynamic), cache::Source::produced);
    EXPECT_EQ(node.compiler->compiles, 2);
    EXPECT_EQ(log.count_containing("cache provider " + provider_dir().string() + " not used"), 1u) << log.all();
    EXPECT_EQ(log.count_containing(c.says), 1u) << log.all();
    EXPECT_EQ(node.store->session_counters().provider_rejects, 1u);
    ::chmod(provider_dir().c_str(), 0755);
  }
}

TEST_F(CacheProvider, TheFleetKeysRulesAreTheExportFiles) {
  struct Case {
    std::optional<std::string> written_with;
    std::optional<std::string> node_key;
    ProviderSignature signature;
  };
  for (const Case& c : {Case{k_key, k_key, ProviderSignature::verified},
                        Case{k_key, k_no_key, ProviderSignature::unchecked},
                        Case{k_no_key, k_no_key, ProviderSignature::absent}}) {
    SCOPED_TRACE(to_string(c.signature));
    fs::remove_all(dir() / "cache");
    fs::remove_all(provider_dir());
    write(c.written_with);
    Node node = open_node(c.node_key);
    ASSERT_NE(node.provider->manifest(), nullptr);
    EXPECT_EQ(node.provider->manifest()->signature, c.signature);
    EXPECT_EQ(fetch(node, k_identity), cache::Source::provider);
  }
}

// An entry keyed for another compiler build (a provider packed elsewhere) is not refused:
// no lookup here computes its key, so it misses quietly and the kernel is compiled.
TEST_F(CacheProvider, AnEntryForAnotherCompilerBuildSimplyMisses) {
  std::vector<ExportEntry> entries = *s_entries;
  for (ExportEntry& e : entries) {
    e.facts.set("compiler_fingerprint", std::string(32, 'f'));
    e.key = e.facts.key();
  }
  ASSERT_TRUE(write_provider(provider_dir(), info(), entries, k_no_key).has_value());
  LogCapture log;
  Node node = open_node(k_no_key);
  EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
  EXPECT_EQ(node.store->session_counters().provider_rejects, 0u);
  EXPECT_EQ(log.warnings(), 0u) << log.all();
  ASSERT_NE(node.provider->manifest(), nullptr);
  EXPECT_EQ(node.provider->manifest()->compiler_builds.at(std::string(32, 'f')), 2u);
}

TEST_F(CacheProvider, AMissingProviderIsOneWarningNotAnError) {
  LogCapture log;
  Node node = open_node(k_no_key);  // provider_dir() was never written
  EXPECT_EQ(fetch(node, k_identity), cache::Source::produced);
  EXPECT_EQ(fetch(node, k_dynamic), cache::Source::produced);
  EXPECT_EQ(log.count_containing("not used"), 1u) << log.all();
}

TEST_F(CacheProvider, WritingRefusesADirectoryThatHoldsSomething) {
  fs::create_directories(provider_dir());
  write_file(provider_dir() / "other", "x");
  auto written = write_provider(provider_dir(), info(), *s_entries, k_no_key);
  ASSERT_FALSE(written.has_value());
  EXPECT_NE(written.error().message.find("not an empty directory"), std::string::npos) << written.error().message;
}

TEST_F(CacheProvider, TheDirectoriesComeFromTheEnvironmentThenTheCaller) {
  ScopedEnv env("JITCACHE_PROVIDERS", "/a::/b/:/a");
  const std::vector<fs::path> extra = {"/c", "/b"};
  EXPECT_EQ(provider_dirs(extra), (std::vector<fs::path>{"/a", "/b", "/c"}));
}

// The manifest's bytes for fixed inputs: a change to the layout fails here, and with it
// k_provider_version must change.
TEST(CacheProviderFormat, TheManifestIsPinned) {
  cache::Facts facts{{"kernel", "writer"}, {"compiler_fingerprint", "00ff"}};
  const ExportEntry entry{.label = "writer/identity/b12x-432/sm_90",
                          .key = facts.key(),
                          .facts = facts,
                          .bytes = std::make_shared<const cache::Bytes>(cache::Bytes{std::byte{'a'}, std::byte{'b'}}),
                          .compile_ms = 12.5};
  const ProviderInfo info{"jitcache 9.9.9", "2026-12-06T00:00:00.000Z", "jitcache_cache_x_sm90", "x",
                          "b12x-432", {"sm_90"}};
  const std::string manifest = encode_provider_manifest(info, std::span(&entry, 1));
  const auto parsed = nlohmann::ordered_json::parse(manifest);
  std::vector<std::string> keys;
  for (const auto& [k, v] : parsed.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "version", "producer", "created", "name", "checkpoint",
                                            "record_format", "targets", "compiler_builds", "entries"}));
  EXPECT_EQ(k_provider_version, 1);
  EXPECT_EQ(parsed["format"], "jitcache-provider");
  EXPECT_EQ(parsed["compiler_builds"], nlohmann::ordered_json({{"00ff", 1}}));
  const auto& e = parsed["entries"][0];
  EXPECT_EQ(e["key"], facts.key().to_hex());
  EXPECT_EQ(e["digest"], cache::BlobDigest::of(std::string_view("ab")).to_hex());
  EXPECT_EQ(e["sha256"], "fb8e20fc2e4c3f248c60c39bd652f3c1347298bb977b8b4d5903b85055620603");
  EXPECT_EQ(e["size"], 2);
  EXPECT_EQ(e["compile_ms"], 12.5);
  // The signature's domain: HMAC-SHA256(key, "jitcache.provider.v1\0" || manifest).
  EXPECT_EQ(sign_provider_manifest("{}", std::string(32, 'k')).size(), 65u);
  EXPECT_NE(sign_provider_manifest("{}", std::string(32, 'k')), sign_provider_manifest("{} ", std::string(32, 'k')));
}

}  // namespace
}  // namespace jitcache
