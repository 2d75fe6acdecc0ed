// The NVRTC fingerprint memo (runtime/compile/compiler.hpp, NvrtcOptions::fingerprint_memo): a
// fresh process takes the version and fingerprint (a digest of the files' bytes) of the
// libnvrtc it would load from the memo, by the file's device, inode, size and times, instead
// of hashing NVRTC's ~100 MB again; anything wrong with the memo is a miss that computes and
// repairs it, and a file whose bytes change is another entry.
#include <sys/stat.h>

#include <fstream>
#include <vector>
#include <nlohmann/json.hpp>

#include "deviceless_runtime.hpp"
#include "jitcache/runtime.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/fingerprint_memo.hpp"
#include "runtime/compile/nvrtc_library.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::string& true_fingerprint() {
  static const std::string value = make_nvrtc_compiler()->fingerprint().value();
  return value;
}

std::string fingerprint_with_memo(const std::filesystem::path& memo) {
  auto fingerprint = make_nvrtc_compiler(NvrtcOptions{memo, {}})->fingerprint();
  EXPECT_TRUE(fingerprint.has_value()) << fingerprint.error().to_string();
  return fingerprint.value_or("");
}

nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in, nullptr, false);
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

class FingerprintMemoTest : public jitcache::testing::TempDirTest {
 protected:
  std::filesystem::path memo() const { return dir() / k_fingerprint_memo_name; }

  // The identity this process's libnvrtc is recorded under.
  std::string identity() {
    std::filesystem::remove(memo());
    fingerprint_with_memo(memo());
    const auto doc = read_json(memo());
    EXPECT_EQ(doc["entries"].size(), 1u) << doc.dump();
    return doc["entries"].begin().key();
  }
};

TEST_F(FingerprintMemoTest, RecordsTheLoadedLibraryAndItsFingerprint) {
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  struct stat st {};
  ASSERT_EQ(::lstat(memo().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const auto doc = read_json(memo());
  ASSERT_TRUE(doc.is_object()) << "not JSON";
  EXPECT_EQ(doc["format"], "jitcache_compiler_fingerprints_v1");
  ASSERT_EQ(doc["entries"].size(), 1u);
  const std::string key = doc["entries"].begin().key();
  // Under the stat identity of the file the search finds (and its builtins'), with the
  // version NVRTC reports.
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  ASSERT_TRUE(located);
  const auto stat_identity = file_stat_identity(located->path);
  ASSERT_TRUE(stat_identity);
  EXPECT_TRUE(key.starts_with("nvrtc content " + *stat_identity + "; builtins ")) << key;
  const auto nvrtc = nvrtc_library();
  ASSERT_TRUE(nvrtc) << nvrtc.error().to_string();
  EXPECT_EQ(doc["entries"].begin().value()["version"], (*nvrtc)->version());
  EXPECT_EQ(doc["entries"].begin().value()["fingerprint"], true_fingerprint());
  // No temporary file is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir())) EXPECT_EQ(e.path(), memo());
}

TEST_F(FingerprintMemoTest, AFreshCompilerTakesTheMemoInsteadOfLoadingNvrtc) {
  const std::string key = identity();
  // A fingerprint the files' bytes do not give: getting it back proves they were not hashed.
  const std::string version = read_json(memo())["entries"][key]["version"];
  const std::string planted = "0123456789abcdef0123456789abcdef";
  write_text(memo(), nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"},
                                    {"entries", {{key, {{"version", version}, {"fingerprint", planted}}}}}}.dump());
  const auto compiler = make_nvrtc_compiler(NvrtcOptions{memo(), {}});
  EXPECT_EQ(compiler->fingerprint().value_or(""), planted);
  EXPECT_EQ(compiler->version(), version);
  // An entry of a version the files do not tell is a miss.
  write_text(memo(), nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"},
                                    {"entries", {{key, {{"version", "99.9"}, {"fingerprint", planted}}}}}}.dump());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
}

// A file whose bytes change is another entry, with another fingerprint: a copy of libnvrtc
// (named by JITCACHE_NVRTC, its builtins beside it) is fingerprinted, patched in place (one
// byte of its last page, its build-id note untouched), and fingerprinted again.
TEST_F(FingerprintMemoTest, ChangingTheFilesBytesChangesItsEntryAndItsFingerprint) {
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  ASSERT_TRUE(located);
  const auto version = nvrtc_version_from_files(located->path);
  if (!version) GTEST_SKIP() << "the NVRTC found has no single builtins file beside it";
  const std::filesystem::path lib_dir = dir() / "lib";
  std::filesystem::create_directory(lib_dir);
  const std::filesystem::path copy = lib_dir / "libnvrtc.so.13";
  std::filesystem::copy_file(located->path, copy);
  std::filesystem::copy_file(nvrtc_builtins_file(located->path, *version), nvrtc_builtins_file(copy, *version));
  jitcache::testing::ScopedEnv chosen("JITCACHE_NVRTC", copy.string());
  const std::string first = fingerprint_with_memo(memo());
  EXPECT_EQ(first, true_fingerprint());  // the same bytes elsewhere: the same compiler
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  const std::string second = fingerprint_with_memo(memo());
  EXPECT_NE(second, first);
  EXPECT_EQ(second, *nvrtc_file_fingerprint(copy, *version));
  EXPECT_EQ(read_json(memo())["entries"].size(), 2u) << read_json(memo()).dump(2);
}

TEST_F(FingerprintMemoTest, AnotherLibrarysEntryIsAMiss) {
  write_text(memo(), nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"},
                                    {"entries", {{"nvrtc 12.8; /elsewhere/libnvrtc.so.12 size 1",
                                                  "0123456789abcdef0123456789abcdef"}}}}.dump());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  const auto doc = read_json(memo());
  EXPECT_EQ(doc["entries"].size(), 2u) << doc.dump();  // the other entry is kept
}

TEST_F(FingerprintMemoTest, EveryMalformedMemoIsAMissAndIsRepaired) {
  const std::string key = identity();
  auto doc_with = [&](const nlohmann::json& value) {
    return nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"}, {"entries", {{key, value}}}}.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"not JSON", "not json at all {"},
      {"truncated", doc_with("0123456789abcdef0123456789abcdef").substr(0, 40)},
      {"array", "[1, 2]"},
      {"no format", nlohmann::json{{"entries", {{key, "0123456789abcdef0123456789abcdef"}}}}.dump()},
      {"other format",
       nlohmann::json{{"format", "v0"}, {"entries", {{key, "0123456789abcdef0123456789abcdef"}}}}.dump()},
      {"format not a string", nlohmann::json{{"format", 1}, {"entries", nlohmann::json::object()}}.dump()},
      {"entries an array", nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"}, {"entries", {1}}}.dump()},
      {"value a number", doc_with(12345)},
      {"value too short", doc_with("0123456789abcdef")},
      {"value upper case", doc_with("0123456789ABCDEF0123456789ABCDEF")},
      {"value not hex", doc_with("0123456789abcdef0123456789abcdeg")},
      {"oversized", doc_with("0123456789abcdef0123456789abcdef") + std::string(70 * 1024, ' ')},
  };
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    write_text(memo(), text);
    EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
    const auto repaired = read_json(memo());
    ASSERT_TRUE(repaired.is_object()) << "not repaired";
    EXPECT_EQ(repaired["entries"][key]["fingerprint"], true_fingerprint());
  }
}

TEST_F(FingerprintMemoTest, ASymlinkIsNeitherReadNorFollowed) {
  const std::string key = identity();
  const auto elsewhere = dir() / "elsewhere.json";
  const std::string planted = nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"},
                                             {"entries", {{key, "0123456789abcdef0123456789abcdef"}}}}.dump();
  write_text(elsewhere, planted);
  std::filesystem::remove(memo());
  std::filesystem::create_symlink(elsewhere, memo());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  EXPECT_FALSE(std::filesystem::is_symlink(memo()));  // replaced by a file of our own
  std::ifstream in(elsewhere);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), planted);  // untouched
}

// Opening a FIFO for reading waits for a writer: the memo is opened without blocking, so
// a FIFO planted in the cache root is a miss, and is replaced by the repaired memo.
TEST_F(FingerprintMemoTest, AFifoIsAMissNotAHang) {
  std::filesystem::remove(memo());
  ASSERT_EQ(::mkfifo(memo().c_str(), 0600), 0);
  const jitcache::testing::HangGuard guard(120);
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  struct stat st {};
  ASSERT_EQ(::lstat(memo().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(read_json(memo())["entries"].size(), 1u);
}

TEST_F(FingerprintMemoTest, EntriesAreBounded) {
  nlohmann::json entries = nlohmann::json::object();
  for (int i = 0; i < 64; ++i) entries["other library " + std::to_string(i)] = "0123456789abcdef0123456789abcdef";
  write_text(memo(), nlohmann::json{{"format", "jitcache_compiler_fingerprints_v1"}, {"entries", entries}}.dump());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  const auto doc = read_json(memo());
  EXPECT_LE(doc["entries"].size(), 64u);
  bool ours = false;
  for (const auto& [k, v] : doc["entries"].items())
    ours |= !k.starts_with("other library") && v.is_object() && v["fingerprint"] == true_fingerprint();
  EXPECT_TRUE(ours) << doc.dump();
}

TEST_F(FingerprintMemoTest, AnUnwritableMemoStillGivesTheFingerprint) {
  EXPECT_EQ(fingerprint_with_memo(dir() / "no" / "such" / "dir" / "memo.json"), true_fingerprint());
  EXPECT_FALSE(std::filesystem::exists(dir() / "no"));
}

TEST_F(FingerprintMemoTest, TheRuntimeKeepsItsMemoInTheCacheRoot) {
  auto rt = jitcache::testing::open_deviceless_runtime(dir() / "cache");
  ASSERT_OK(rt);
  ASSERT_OK((*rt)->prepare(
      jitcache::testing::sm_90_model(jitcache::testing::source_dir() / "examples" / "glm5-mini", RecordFormat::b12x_432)));
  const auto doc = read_json(dir() / "cache" / k_fingerprint_memo_name);
  ASSERT_TRUE(doc.is_object());
  // The build's one entry, by the file's stat identity; nothing else (a prepare compiles
  // with the build it keys with, and no earlier fingerprint is asked for).
  ASSERT_EQ(doc["entries"].size(), 1u) << doc.dump(2);
  EXPECT_TRUE(doc["entries"].begin().key().starts_with("nvrtc content ")) << doc.dump(2);
  EXPECT_EQ(doc["entries"].begin().value()["fingerprint"], true_fingerprint()) << doc.dump(2);
}

// Only entries keyed by a file's bytes, or recorded by an import, vouch for a build.
TEST_F(FingerprintMemoTest, OnlyContentAndImportedEntriesVouchForABuild) {
  const std::string key = identity();
  ASSERT_TRUE(write_memo(memo(), "nvrtc build-id 00ff", MemoValue{"13.0", std::string(32, 'a')}));
  ASSERT_TRUE(write_memo(memo(), "nvrtc earlier of " + true_fingerprint(), MemoValue{"13.0", std::string(32, 'b')}));
  ASSERT_TRUE(write_imported_builds(memo(), {{"libnvvm", MemoValue{"2.0", std::string(32, 'c')}}}, {}));
  const auto contents = read_memo_contents(memo());
  const auto nvrtc = known_builds(contents, "nvrtc");
  EXPECT_EQ(nvrtc, (std::set<std::string>{true_fingerprint()}));
  EXPECT_EQ(known_builds(contents, "libnvvm"), (std::set<std::string>{std::string(32, 'c')}));
  EXPECT_TRUE(known_builds(contents, "nvjitlink").empty());
  EXPECT_FALSE(write_imported_builds(memo(), {{"nvcc", MemoValue{"13.0", std::string(32, 'd')}}}, {}));
}

// The memo keeps the build this cache was last keyed with (for a process that finds no
// NVRTC at all): written with the entry, and again only when it changes, so a warm start
// that takes the memo writes nothing.
TEST_F(FingerprintMemoTest, TheBuildLastKeyedWithIsKeptAndAWarmStartWritesNothing) {
  const std::string key = identity();
  auto doc = read_json(memo());
  ASSERT_TRUE(doc.contains("last_keyed")) << doc.dump();
  EXPECT_EQ(doc["last_keyed"]["nvrtc"]["fingerprint"], true_fingerprint());
  EXPECT_EQ(doc["last_keyed"]["nvrtc"]["version"], doc["entries"][key]["version"]);
  const auto contents = read_memo_contents(memo());
  ASSERT_EQ(contents.last_keyed.count("nvrtc"), 1u);
  EXPECT_EQ(contents.last_keyed.at("nvrtc").fingerprint, true_fingerprint());

  struct stat before {};
  ASSERT_EQ(::stat(memo().c_str(), &before), 0);
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  struct stat after {};
  ASSERT_EQ(::stat(memo().c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "a warm start replaced the memo";

  // A memo written before "last_keyed" existed is a hit, and gains it once.
  doc.erase("last_keyed");
  write_text(memo(), doc.dump());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  EXPECT_EQ(read_json(memo())["last_keyed"]["nvrtc"]["fingerprint"], true_fingerprint());
  // Another build last keyed with is replaced by this one.
  doc = read_json(memo());
  doc["last_keyed"]["nvrtc"] = {{"version", "99.9"}, {"fingerprint", std::string(32, 'b')}};
  write_text(memo(), doc.dump());
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  EXPECT_EQ(read_json(memo())["last_keyed"]["nvrtc"]["fingerprint"], true_fingerprint());
}

// Every "last_keyed" value of another shape is ignored, the rest of the memo still read,
// and replaced by a valid one.
TEST_F(FingerprintMemoTest, AMalformedLastKeyedIsIgnoredAndRepaired) {
  const std::string key = identity();
  const std::vector<nlohmann::json> bad = {
      7,
      nlohmann::json::array({1}),
      {{"nvrtc", "0123456789abcdef0123456789abcdef"}},
      {{"nvrtc", {{"version", ""}, {"fingerprint", std::string(32, 'a')}}}},
      {{"nvrtc", {{"version", "13.0"}, {"fingerprint", "short"}}}},
      {{"nvrtc", {{"version", "13.0"}, {"fingerprint", std::string(32, 'a')}, {"extra", 1}}}},
      {{"nvcc", {{"version", "13.0"}, {"fingerprint", std::string(32, 'a')}}}},
  };
  for (const auto& value : bad) {
    SCOPED_TRACE(value.dump());
    auto doc = read_json(memo());
    doc["last_keyed"] = value;
    write_text(memo(), doc.dump());
    const auto contents = read_memo_contents(memo());
    EXPECT_TRUE(contents.last_keyed.empty());
    EXPECT_EQ(contents.entries.count(key), 1u);
    EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
    const auto repaired = read_json(memo());
    EXPECT_EQ(repaired["last_keyed"].size(), 1u) << repaired.dump();
    EXPECT_EQ(repaired["last_keyed"]["nvrtc"]["fingerprint"], true_fingerprint());
  }
  // Only a tool's versioned build is recorded.
  EXPECT_FALSE(write_last_keyed(memo(), "nvcc", MemoValue{"13.0", std::string(32, 'a')}));
  EXPECT_FALSE(write_last_keyed(memo(), "nvrtc", MemoValue{"", std::string(32, 'a')}));
  EXPECT_FALSE(write_last_keyed(memo(), "nvrtc", MemoValue{"13.0", "short"}));
  ASSERT_TRUE(write_last_keyed(memo(), "libnvvm", MemoValue{"2.0", std::string(32, 'c')}));
  const auto contents = read_memo_contents(memo());
  EXPECT_EQ(contents.last_keyed.at("libnvvm"), (MemoValue{"2.0", std::string(32, 'c')}));
  EXPECT_EQ(contents.last_keyed.at("nvrtc").fingerprint, true_fingerprint());  // kept
  EXPECT_EQ(contents.entries.count(key), 1u);
}

// The toolkit libraries' entries (libNVVM, nvJitLink) share the memo: an entry has the
// library's version and fingerprint, under the identity of the file a fresh process would
// load; NVRTC's entries and theirs never stand in for each other.
TEST_F(FingerprintMemoTest, ToolkitLibraryEntriesRoundTripBesideNvrtcs) {
  const std::string nvrtc_identity = identity();
  ASSERT_TRUE(write_memo(memo(), "libnvvm content X", MemoValue{"2.0 (NVVM IR 2.0, debug 3.2)", std::string(32, 'a')}));
  const auto tool = read_memo(memo(), "libnvvm content X");
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->version, "2.0 (NVVM IR 2.0, debug 3.2)");
  EXPECT_EQ(tool->fingerprint, std::string(32, 'a'));
  const auto nvrtc = read_memo(memo(), nvrtc_identity);
  ASSERT_TRUE(nvrtc);
  EXPECT_FALSE(nvrtc->version.empty());
  EXPECT_EQ(nvrtc->fingerprint, true_fingerprint());
  // NVRTC still takes its own entry, and only that one.
  EXPECT_EQ(fingerprint_with_memo(memo()), true_fingerprint());
  EXPECT_FALSE(read_memo(memo(), "libnvvm content Y"));
  // Entries of a wrong shape are misses.
  auto doc = read_json(memo());
  doc["entries"]["a"] = {{"version", ""}, {"fingerprint", std::string(32, 'a')}};
  doc["entries"]["b"] = {{"version", "1"}, {"fingerprint", "short"}};
  doc["entries"]["c"] = {{"version", "1"}, {"fingerprint", std::string(32, 'a')}, {"extra", 1}};
  doc["entries"]["d"] = 7;
  write_text(memo(), doc.dump());
  for (const char* name : {"a", "b", "c", "d"}) EXPECT_FALSE(read_memo(memo(), name)) << name;
  EXPECT_TRUE(read_memo(memo(), "libnvvm content X"));
}

// A runtime remembers libNVVM and nvJitLink in its memo after loading them, under the
// identity of the files it found (the next process then loads neither; the CLI test
// AHitInAFreshProcessLoadsNeitherLibnvvmNorNvJitLink watches the loader).
TEST_F(FingerprintMemoTest, TheRuntimeRemembersTheToolkitLibrariesItLoads) {
  auto runtime = jitcache::testing::open_deviceless_runtime(dir() / "cache");
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  ASSERT_TRUE((*runtime)->declare_family(SpecSchema{"memo.ptx", SourceKind::ptx, {}}));
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
  auto compiled = (*runtime)->compile(KernelRequest{"memo.ptx", {}, SourceKind::ptx, ptx, {}, "k", "sm_90", {}});
  if (!compiled && compiled.error().code == ErrorCode::unavailable) GTEST_SKIP() << compiled.error().to_string();
  ASSERT_TRUE(compiled) << compiled.error().to_string();
  const auto doc = read_json(dir() / "cache" / k_fingerprint_memo_name);
  ASSERT_TRUE(doc.is_object());
  bool found = false;
  for (const auto& [identity, value] : doc["entries"].items())
    if (identity.starts_with("nvjitlink content ")) {
      found = true;
      EXPECT_TRUE(value.is_object()) << value.dump();
      EXPECT_FALSE(value["version"].get<std::string>().empty());
    }
  EXPECT_TRUE(found) << doc.dump(2);
  // As the build this cache was last keyed with, for a process that finds none.
  ASSERT_TRUE(doc.contains("last_keyed")) << doc.dump(2);
  EXPECT_FALSE(doc["last_keyed"]["nvjitlink"]["version"].get<std::string>().empty()) << doc.dump(2);
}

}  // namespace
}  // namespace jitcache
