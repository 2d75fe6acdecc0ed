// Export files: a round trip into an empty store, and every way a file can be damaged or
// forged (each truncation length, each flipped byte, a manifest that lies, a stripped or
// foreign signature, an unknown version) refused whole, naming the problem, with nothing
// published.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "counting_compiler.hpp"
#include "shipping_fixture.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

using testing::CountingCompiler;
using namespace testing::shipping;  // the fleet keys and the variants

class CacheArchive : public jitcache::testing::TempDirTest {
 protected:
  // Two real variants, compiled once for the suite.
  static void SetUpTestSuite() {
    s_compiler = make_nvrtc_compiler().release();
    *s_entries = compile_entries(*s_compiler, {k_identity, k_dynamic});
  }

  static ArchiveInfo info() {
    return ArchiveInfo{"jitcache test", "2026-01-02T03:04:05.000Z", "glm5-mini", "bf16", {"sm_90"}};
  }
  static std::string archive(const std::optional<std::string>& key, std::span<const ExportEntry> entries) {
    return seal_archive(encode_archive_body(info(), entries), key);
  }
  static std::string archive(const std::optional<std::string>& key) { return archive(key, *s_entries); }

  std::unique_ptr<cache::Store> open_store() {
    auto store = cache::Store::open(dir() / "cache");
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    return store ? std::move(*store) : nullptr;
  }

  // What `jitcache import` does: verify the whole file, then publish. Returns the
  // refusal's message, or "" when the file was imported.
  static std::string import_into(cache::Store& store, std::string data, const std::optional<std::string>& key) {
    auto verified = verify_archive(std::move(data), "x.jcexport", key);
    if (!verified) {
      EXPECT_EQ(verified.error().code, ErrorCode::invalid_input) << verified.error().to_string();
      return verified.error().message;
    }
    auto imported = import_archive(store, *verified);
    EXPECT_TRUE(imported.has_value()) << imported.error().to_string();
    return "";
  }

  static std::size_t entries_in(cache::Store& store) {
    auto listed = store.list();
    EXPECT_TRUE(listed.has_value()) << listed.error().to_string();
    return listed ? listed->size() : 0;
  }

  // A manifest of the suite's entries as JSON, to be edited and sealed again.
  static nlohmann::json manifest_of(const std::string& data) {
    std::uint64_t len;
    std::memcpy(&len, data.data() + 16, sizeof len);
    return nlohmann::json::parse(data.substr(k_archive_header_bytes, len));
  }
  static std::string reseal(const nlohmann::json& manifest, std::span<const std::string_view> blobs,
                            const std::optional<std::string>& key) {
    return seal_archive(encode_archive_body(manifest.dump(), blobs), key);
  }
  static std::vector<std::string_view> blobs() {
    std::vector<std::string_view> out;
    for (const ExportEntry& e : *s_entries)
      out.emplace_back(reinterpret_cast<const char*>(e.bytes->data()), e.bytes->size());
    return out;
  }

  static inline Compiler* s_compiler = nullptr;
  static inline std::vector<ExportEntry>* s_entries = new std::vector<ExportEntry>();
};

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

TEST_F(CacheArchive, RoundTripIntoAnEmptyStore) {
  const fs::path file = dir() / "glm5.jcexport";
  auto size = write_archive(file, info(), *s_entries, k_key);
  ASSERT_OK(size);
  EXPECT_EQ(*size, fs::file_size(file));

  auto read = read_archive(file, k_key);
  ASSERT_OK(read);
  EXPECT_EQ(read->signature, ArchiveSignature::verified);
  EXPECT_EQ(read->version, k_archive_version);
  EXPECT_EQ(read->info.checkpoint, "glm5-mini");
  EXPECT_EQ(read->info.targets, std::vector<std::string>{"sm_90"});
  ASSERT_EQ(read->items.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const ExportEntry& e = (*s_entries)[i];
    const ArchiveItem& item = read->items[i];
    EXPECT_EQ(item.key, e.key);
    EXPECT_EQ(item.facts, e.facts);
    EXPECT_EQ(item.label, e.label);
    EXPECT_EQ(item.compile_ms, e.compile_ms);
    const auto blob = read->blob(item);
    EXPECT_TRUE(std::equal(blob.begin(), blob.end(), e.bytes->begin(), e.bytes->end()));
  }

  auto store = open_store();
  auto imported = import_archive(*store, *read);
  ASSERT_OK(imported);
  EXPECT_EQ(imported->added.size(), 2u);
  EXPECT_EQ(imported->present.size(), 0u);
  for (const ExportEntry& e : *s_entries) {
    auto hit = store->get(e.key);
    ASSERT_OK(hit);
    ASSERT_TRUE(hit->has_value());
    EXPECT_EQ(*(*hit)->bytes, *e.bytes);
  }
  // A second import adds nothing.
  auto again = import_archive(*store, *read);
  ASSERT_OK(again);
  EXPECT_EQ(again->added.size(), 0u);
  EXPECT_EQ(again->present.size(), 2u);
  EXPECT_EQ(entries_in(*store), 2u);
}

TEST_F(CacheArchive, UnsignedFilesWithoutAKeyAreAcceptedAsUnauthenticated) {
  auto unsigned_file = verify_archive(archive(k_no_key), "x", k_no_key);
  ASSERT_OK(unsigned_file);
  EXPECT_EQ(unsigned_file->signature, ArchiveSignature::absent);
  auto signed_file = verify_archive(archive(k_key), "x", k_no_key);
  ASSERT_OK(signed_file);
  EXPECT_EQ(signed_file->signature, ArchiveSignature::unchecked);
}

TEST_F(CacheArchive, EveryTruncationIsRefused) {
  const std::string data = archive(k_key);
  auto store = open_store();
  for (std::size_t n = 0; n < data.size(); ++n) {
    const std::string message = import_into(*store, data.substr(0, n), k_key);
    ASSERT_NE(message, "") << "a file cut to " << n << " of " << data.size() << " bytes was accepted";
    if (n >= k_archive_header_bytes) {
      ASSERT_TRUE(message.find("truncated") != std::string::npos || message.find("no trailer") != std::string::npos)
          << n << ": " << message;
    }
  }
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, EveryFlippedByteIsRefusedAndNamed) {
  const std::string data = archive(k_key);
  const std::size_t trailer = data.size() - k_archive_trailer_bytes;
  auto store = open_store();
  for (std::size_t at = 0; at < data.size(); ++at) {
    std::string damaged = data;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    const std::string message = import_into(*store, std::move(damaged), k_key);
    ASSERT_NE(message, "") << "a flip at offset " << at << " was accepted";
    if (at >= k_archive_header_bytes && at < trailer) {
      ASSERT_TRUE(message.find("checksum mismatch") != std::string::npos) << at << ": " << message;
    } else if (at >= trailer + 32) {
      ASSERT_TRUE(message.find("bad signature") != std::string::npos) << at << ": " << message;
    }
  }
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, AlteredBlobIsNamedByItsDigestWhenTheChecksumIsRedone) {
  // Whoever recomputes the checksum still needs the key to sign; without a key configured,
  // the blob's digest in the manifest catches the change and names the entry.
  std::string blob(blobs()[1]);
  blob[blob.size() / 2] ^= 0x01;
  const std::vector<std::string_view> altered{blobs()[0], blob};
  const std::string data = reseal(manifest_of(archive(k_no_key)), altered, k_no_key);
  auto store = open_store();
  const std::string message = import_into(*store, data, k_no_key);
  EXPECT_HAS(message, "entry 1 (" + k_dynamic.label());
  EXPECT_HAS(message, "digest mismatch");
  // Signed with another key: the signature is what fails.
  EXPECT_HAS(import_into(*store, reseal(manifest_of(archive(k_no_key)), altered, k_other_key), k_key),
             "bad signature");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, AnIdentityBundleUnderTheDynamicKeyIsRefused) {
  // The manifest is consistent (digest and size of the identity bundle) and resealed, but
  // the bundle's own facts say identity where the key says dynamic: the field failure.
  nlohmann::json manifest = manifest_of(archive(k_no_key));
  manifest["entries"][1]["digest"] = manifest["entries"][0]["digest"];
  manifest["entries"][1]["size"] = manifest["entries"][0]["size"];
  const std::vector<std::string_view> swapped{blobs()[0], blobs()[0]};
  auto store = open_store();
  const std::string message = import_into(*store, reseal(manifest, swapped, k_key), k_key);
  EXPECT_HAS(message, "entry 1");
  EXPECT_HAS(message, "latent_scale=identity");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, FactsThatAreNotTheKeysAreRefused) {
  nlohmann::json manifest = manifest_of(archive(k_no_key));
  manifest["entries"][1]["facts"]["latent_scale"] = "identity";
  auto store = open_store();
  const std::string message = import_into(*store, reseal(manifest, blobs(), k_key), k_key);
  EXPECT_HAS(message, "entry 1 (key " + (*s_entries)[1].key.to_hex() + "): facts: they hash to key");
  // The same key twice.
  manifest = manifest_of(archive(k_no_key));
  manifest["entries"][1] = manifest["entries"][0];
  const std::vector<std::string_view> twice{blobs()[0], blobs()[0]};
  EXPECT_HAS(import_into(*store, reseal(manifest, twice, k_key), k_key), "listed twice");
  EXPECT_EQ(entries_in(*store), 0u);
}

// A compile time the index would refuse or verify would call damaged refuses the file,
// naming the entry and the field (issue 24: 1e300 used to import and leave `verify`
// reporting the index damaged); nothing is published.
TEST_F(CacheArchive, ACompileTimeOutOfRangeIsRefusedNamingTheEntry) {
  const nlohmann::json truth = manifest_of(archive(k_no_key));
  auto store = open_store();
  const std::string entry1 = "entry 1 (key " + (*s_entries)[1].key.to_hex() + "): compile_ms: ";
  for (const std::string bad : {"-1", "-0.5", "1e300", "1000000001", "1e999", "-1e999", "\"12\"", "null"}) {
    nlohmann::json manifest = truth;
    manifest["entries"][1]["compile_ms"] = 424242.5;
    std::string text = manifest.dump();
    const auto at = text.find("424242.5");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 8, bad);
    const std::string message = import_into(*store, seal_archive(encode_archive_body(text, blobs()), k_key), k_key);
    // A number beyond a double's range is not JSON the reader takes: the manifest is refused.
    EXPECT_HAS(message, bad.ends_with("e999") ? std::string("manifest at offset 24: not a JSON object") : entry1)
        << bad;
  }
  EXPECT_EQ(entries_in(*store), 0u);
  for (double good : {0.0, 1e9}) {
    nlohmann::json manifest = truth;
    manifest["entries"][1]["compile_ms"] = good;
    EXPECT_EQ(import_into(*store, reseal(manifest, blobs(), k_key), k_key), "") << good;
  }
}

// Entries keyed for another NVRTC build (another compiler_fingerprint) import like any
// other, but no lookup here computes their keys: the import names and counts them.
TEST_F(CacheArchive, EntriesKeyedForAnotherNvrtcBuildAreCounted) {
  auto local = s_compiler->fingerprint();
  ASSERT_OK(local);
  class OtherBuild final : public Compiler {
   public:
    explicit OtherBuild(const Compiler& inner) : m_inner(inner) {}
    std::string name() const override { return m_inner.name(); }
    std::string version() const override { return m_inner.version(); }
    Result<std::string> fingerprint() const override { return std::string(32, 'e'); }
    std::vector<std::string> options(const KernelSpec& spec) const override { return m_inner.options(spec); }
    Result<CompiledArtifact> compile(const GeneratedSource& source) const override { return m_inner.compile(source); }

   private:
    const Compiler& m_inner;
  } other(*s_compiler);
  std::vector<ExportEntry> entries = *s_entries;
  auto foreign = kernel_facts(generate(k_dynamic), other);
  ASSERT_OK(foreign);
  entries[1].facts = *foreign;
  entries[1].key = foreign->key();
  auto verified = verify_archive(archive(k_key, entries), "x.jcexport", k_key);
  ASSERT_OK(verified);
  const auto counted = keyed_for_other_build(*verified, *local);
  ASSERT_EQ(counted.size(), 1u);
  EXPECT_EQ(counted[0]->key, entries[1].key);
  EXPECT_EQ(other_build_fingerprints(counted), std::vector<std::string>{std::string(32, 'e')});
  EXPECT_TRUE(keyed_for_other_build(*verified, std::string(32, 'e')).size() == 1u);
  EXPECT_TRUE(keyed_for_other_build(verify_archive(archive(k_key), "x", k_key).value(), *local).empty())
      << "this build's entries are not counted";
}

TEST_F(CacheArchive, AManifestLyingAboutSizesIsRefused) {
  auto store = open_store();
  const nlohmann::json truth = manifest_of(archive(k_no_key));
  const std::uint64_t size0 = truth["entries"][0]["size"];
  for (std::uint64_t lie : {size0 + 1, size0 - 1, std::uint64_t{1} << 62, std::uint64_t{0}}) {
    nlohmann::json manifest = truth;
    manifest["entries"][0]["size"] = lie;
    const std::string message = import_into(*store, reseal(manifest, blobs(), k_key), k_key);
    ASSERT_NE(message, "") << lie;
    EXPECT_TRUE(message.find("entry 0") != std::string::npos || message.find("entry 1") != std::string::npos ||
                message.find("belong to no entry") != std::string::npos)
        << lie << ": " << message;
  }
  // An entry left out of the manifest leaves bytes no entry owns.
  nlohmann::json fewer = truth;
  fewer["entries"].erase(1);
  EXPECT_HAS(import_into(*store, reseal(fewer, blobs(), k_key), k_key), "belong to no entry");
  // A negative or fractional size is not a size.
  nlohmann::json negative = truth;
  negative["entries"][0]["size"] = -1;
  EXPECT_HAS(import_into(*store, reseal(negative, blobs(), k_key), k_key), "entry 0");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, AnUnsignedOrStrippedFileIsRefusedWhereAKeyIsConfigured) {
  auto store = open_store();
  EXPECT_HAS(import_into(*store, archive(k_no_key), k_key), "not signed");
  // Stripping a signed file's signature (flag 0, zero MAC, checksum redone) is the same.
  const std::string data = archive(k_key);
  const std::string body = data.substr(0, data.size() - k_archive_trailer_bytes);
  EXPECT_HAS(import_into(*store, seal_archive(body, k_no_key), k_key), "not signed");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, AnotherKeysSignatureIsRefused) {
  auto store = open_store();
  EXPECT_HAS(import_into(*store, archive(k_other_key), k_key), "bad signature");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, AnUnknownVersionIsRefused) {
  std::string data = archive(k_key);
  const std::uint32_t next = k_archive_version + 1;
  std::memcpy(data.data() + 8, &next, sizeof next);
  // Sealed again, so only the version is wrong.
  const std::string body = data.substr(0, data.size() - k_archive_trailer_bytes);
  auto store = open_store();
  const std::string message = import_into(*store, seal_archive(body, k_key), k_key);
  EXPECT_HAS(message, "offset 8: unknown format version 2");
  nlohmann::json manifest = manifest_of(archive(k_no_key));
  manifest["format"] = "jitcache-export-v9";
  EXPECT_HAS(import_into(*store, reseal(manifest, blobs(), k_key), k_key), "manifest: format");
  EXPECT_EQ(entries_in(*store), 0u);
}

TEST_F(CacheArchive, HostileLengthsAreBoundedBeforeAllocating) {
  std::string data = archive(k_key);
  const std::uint64_t huge = std::uint64_t{1} << 40;
  std::memcpy(data.data() + 16, &huge, sizeof huge);
  auto refused = verify_archive(data, "x", k_key);
  ASSERT_FALSE(refused);
  EXPECT_HAS(refused.error().message, "offset 16: manifest length 1099511627776 exceeds the limit");

  // A file larger than the limit is refused from its size, before it is read.
  const fs::path big = dir() / "big.jcexport";
  {
    const int fd = ::open(big.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(k_max_archive_bytes + 1)), 0);  // sparse
    ::close(fd);
  }
  auto too_big = read_archive(big, k_key);
  ASSERT_FALSE(too_big);
  EXPECT_HAS(too_big.error().message, "exceed the export file limit");
}

TEST_F(CacheArchive, ImportRefusesAStoreItCannotWrite) {
  auto read = verify_archive(archive(k_key), "x", k_key);
  ASSERT_OK(read);
  auto memory = cache::Store::open_memory_only();
  auto imported = import_archive(*memory, *read);
  ASSERT_FALSE(imported);
  EXPECT_HAS(imported.error().message, "memory-only");
}

// The layout is pinned by a golden file: a change to the header, the manifest's fields or
// the trailer must bump k_archive_version (and a new golden file), or old files would be
// misread. The golden file's one blob is not a bundle, so a reader takes it through every
// check but the last.
TEST(CacheArchiveFormat, GoldenFile) {
  ExportEntry e;
  e.label = "writer/dynamic/bf16/sm_90";
  e.facts = cache::Facts{{"kernel", "writer"}, {"latent_scale", "dynamic"}, {"target", "sm_90"}};
  e.key = e.facts.key();
  const std::string blob = "not a bundle, but bytes";
  e.bytes = std::make_shared<const cache::Bytes>(reinterpret_cast<const std::byte*>(blob.data()),
                                                 reinterpret_cast<const std::byte*>(blob.data()) + blob.size());
  e.compile_ms = 12.5;
  const ArchiveInfo info{"jitcache test", "2026-01-02T03:04:05.000Z", "glm5-mini", "bf16", {"sm_90", "sm_120a"}};
  const std::optional<std::string> key = std::string(32, 'g');
  const std::string now = seal_archive(encode_archive_body(info, std::span(&e, 1)), key);

  const fs::path golden_path =
      jitcache::testing::source_dir() / "tests" / "runtime" / "compile" / "golden" / "export_v1.jcexport";
  std::ifstream in(golden_path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << golden_path;
  const std::string golden((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(now, golden) << "the export format changed: bump k_archive_version in "
                            "runtime/compile/cache_archive.hpp, update docs/export-format.md, and write a new "
                            "golden file; files already exported must not be misread";

  auto read = verify_archive(golden, golden_path.string(), key);
  ASSERT_FALSE(read);
  EXPECT_HAS(read.error().message, "entry 0 (writer/dynamic/bf16/sm_90, key " + e.key.to_hex() +
                                       "): the bundle does not match its key");
}

TEST_F(CacheArchive, GatherTakesCachedVariantsAndCompilesOnlyTheMisses) {
  auto store = open_store();
  for (const ExportEntry& e : *s_entries) ASSERT_OK(store->put(e.key, e.facts, *e.bytes, e.compile_ms));
  CountingCompiler compiler(*s_compiler);
  KernelCache kernels(*store, compiler);
  const KernelSpec gather{KernelKind::gather, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}};
  const std::vector<KernelSpec> specs{k_identity, k_dynamic, gather};
  std::vector<std::string> seen;
  auto entries = gather_export_entries(kernels, compiler, specs, 2,
                                       [&](const GatherProgress& p) { seen.push_back(p.label); });
  ASSERT_OK(entries);
  EXPECT_EQ(compiler.compiles, 1);
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ(seen.size(), 3u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE((*entries)[i].compiled_now);
    EXPECT_EQ(*(*entries)[i].bytes, *(*s_entries)[i].bytes);
    EXPECT_EQ((*entries)[i].facts, (*s_entries)[i].facts);
  }
  const ExportEntry& compiled = (*entries)[2];
  EXPECT_TRUE(compiled.compiled_now);
  EXPECT_EQ(compiled.label, gather.label());
  EXPECT_EQ(compiled.facts.key(), compiled.key);
  EXPECT_OK(check_bundle_facts(compiled.facts, *compiled.bytes));
  // The compile was stored: the next export finds everything.
  auto again = gather_export_entries(kernels, compiler, specs, 2);
  ASSERT_OK(again);
  EXPECT_EQ(compiler.compiles, 1);
  EXPECT_EQ(*(*again)[2].bytes, *compiled.bytes);
}

}  // namespace
}  // namespace jitcache
