// The C ABI of kernels from outside (jitcache.h, "Kernels from outside"): declaring a
// family from JSON, jitcache_compile with every field checked, lookups by spec, the
// kernel handle's cubin and description. The answers must be the C++ runtime's.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi_test_support.hpp"
#include "jitcache/jitcache.h"
#include "support/regular_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

std::string last_error() { return jitcache_last_error(); }

const char* k_axpy_family = R"({"family": "axpy", "kind": "cuda", "facts": {"dtype": ["f32", "f64"], "tile": []}})";

class CApiCompileTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    auto text = read_regular_file(jitcache::testing::source_dir() / "tests" / "runtime" / "compile" / "golden" /
                                      "axpy.cu",
                                  1 << 20);
    ASSERT_TRUE(text);
    m_source = *text;
    m_runtime = open(-1.0);
    ASSERT_NE(m_runtime, nullptr);
    ASSERT_EQ(jitcache_declare_family(m_runtime, k_axpy_family), JITCACHE_OK) << last_error();
    jitcache_compile_request_init(&m_request);
    m_request.family = "axpy";
    m_request.spec = m_spec;
    m_request.num_spec = 2;
    m_request.kind = JITCACHE_KIND_CUDA;
    m_request.text = m_source.data();
    m_request.text_size = m_source.size();
    m_request.entry = "axpy";
    m_request.target = "sm_120a";
    m_request.options = m_options;
    m_request.num_options = 1;
  }
  void TearDown() override {
    for (auto* k : m_kernels) jitcache_kernel_release(k);
    for (auto* r : m_runtimes) jitcache_runtime_close(r);
    TempDirTest::TearDown();
  }

  jitcache_runtime* open(double verify) {
    m_cache_dir = (dir() / "cache").string();
    auto options = jitcache::testing::deviceless_runtime_options(m_cache_dir.c_str());
    EXPECT_EQ(options.verify_spec, -1.0);
    options.verify_spec = verify;
    jitcache_runtime* runtime = nullptr;
    EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_OK) << last_error();
    if (runtime != nullptr) m_runtimes.push_back(runtime);
    return runtime;
  }

  jitcache_kernel* keep(jitcache_kernel* k) {
    m_kernels.push_back(k);
    return k;
  }

  nlohmann::json describe(const jitcache_kernel* k) {
    char* text = nullptr;
    EXPECT_EQ(jitcache_kernel_describe(k, &text), JITCACHE_OK) << last_error();
    auto doc = nlohmann::json::parse(text ? text : "null");
    jitcache_string_free(text);
    return doc;
  }

  std::string m_source;
  std::string m_cache_dir;
  const jitcache_fact m_spec[2] = {{"dtype", "f32"}, {"tile", "256"}};
  const char* m_options[1] = {"--use_fast_math"};
  jitcache_compile_request m_request{};
  jitcache_runtime* m_runtime = nullptr;
  std::vector<jitcache_runtime*> m_runtimes;
  std::vector<jitcache_kernel*> m_kernels;
};

TEST_F(CApiCompileTest, CompileThenHitThenLookUpBySpec) {
  jitcache_kernel* first = nullptr;
  ASSERT_EQ(jitcache_compile(m_runtime, &m_request, &first), JITCACHE_OK) << last_error();
  keep(first);
  const uint8_t* data = nullptr;
  size_t size = 0;
  ASSERT_EQ(jitcache_kernel_cubin(first, &data, &size), JITCACHE_OK);
  ASSERT_GT(size, 64u);
  EXPECT_EQ(std::memcmp(data, "\x7f" "ELF", 4), 0);
  const std::vector<uint8_t> cubin(data, data + size);
  const auto doc = describe(first);
  EXPECT_EQ(doc["family"], "axpy");
  EXPECT_EQ(doc["kind"], "cuda");
  EXPECT_EQ(doc["entry"], "axpy");
  EXPECT_EQ(doc["target"], "sm_120a");
  EXPECT_EQ(doc["from_cache"], false);
  EXPECT_EQ(doc["verified"], false);
  EXPECT_EQ(doc["cubin_bytes"], size);
  EXPECT_GT(doc["resources"]["registers"].get<int>(), 0);
  EXPECT_EQ(doc["key"].get<std::string>().size(), 32u);
  EXPECT_NE(doc["log"].get<std::string>().find("NVRTC"), std::string::npos);

  jitcache_kernel* second = nullptr;
  ASSERT_EQ(jitcache_compile(m_runtime, &m_request, &second), JITCACHE_OK) << last_error();
  keep(second);
  EXPECT_EQ(describe(second)["from_cache"], true);
  EXPECT_EQ(describe(second)["verified"], true);

  // A fresh runtime over the same directory, by spec alone.
  jitcache_runtime* fresh = open(0.0);
  ASSERT_EQ(jitcache_declare_family(fresh, k_axpy_family), JITCACHE_OK) << last_error();
  jitcache_lookup_outcome outcome = JITCACHE_LOOKUP_MISS;
  jitcache_kernel* found = nullptr;
  ASSERT_EQ(jitcache_lookup(fresh, "axpy", m_spec, 2, "sm_120a", &outcome, &found), JITCACHE_OK) << last_error();
  keep(found);
  ASSERT_EQ(outcome, JITCACHE_LOOKUP_HIT);
  ASSERT_NE(found, nullptr);
  ASSERT_EQ(jitcache_kernel_cubin(found, &data, &size), JITCACHE_OK);
  EXPECT_EQ(std::vector<uint8_t>(data, data + size), cubin);
  EXPECT_EQ(describe(found)["key"], doc["key"]);

  // Another target: a miss, and *out stays NULL.
  found = reinterpret_cast<jitcache_kernel*>(0x1);
  ASSERT_EQ(jitcache_lookup(fresh, "axpy", m_spec, 2, "sm_90", &outcome, &found), JITCACHE_OK) << last_error();
  EXPECT_EQ(outcome, JITCACHE_LOOKUP_MISS);
  EXPECT_EQ(found, nullptr);

  // Verification on: the hit becomes "verify", with no kernel.
  jitcache_runtime* verifying = open(1.0);
  ASSERT_EQ(jitcache_declare_family(verifying, k_axpy_family), JITCACHE_OK) << last_error();
  ASSERT_EQ(jitcache_lookup(verifying, "axpy", m_spec, 2, "sm_120a", &outcome, &found), JITCACHE_OK);
  EXPECT_EQ(outcome, JITCACHE_LOOKUP_VERIFY);
  EXPECT_EQ(found, nullptr);
}

TEST_F(CApiCompileTest, AnIncompleteSpecIsInvalidInput) {
  jitcache_kernel* k = nullptr;
  ASSERT_EQ(jitcache_compile(m_runtime, &m_request, &k), JITCACHE_OK) << last_error();
  keep(k);
  std::string other = m_source + "// a change the spec does not name\n";
  m_request.text = other.data();
  m_request.text_size = other.size();
  k = nullptr;
  EXPECT_EQ(jitcache_compile(m_runtime, &m_request, &k), JITCACHE_ERROR_INVALID_INPUT);
  EXPECT_EQ(k, nullptr);
  EXPECT_NE(last_error().find("spec of kernel family axpy is incomplete"), std::string::npos) << last_error();
}

TEST_F(CApiCompileTest, BadSchemasAreRefusedNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"not json", "not a JSON object"},
      {R"({"family": "f", "kind": "cuda"})", "field 'facts'"},
      {R"({"family": "f", "kind": "rust", "facts": {}})", "field 'kind'"},
      {R"({"kind": "cuda", "facts": {}})", "field 'family'"},
      {R"({"family": "f", "kind": "cuda", "facts": {"x": "a"}})", "field 'facts.x'"},
      {R"({"family": "f", "kind": "cuda", "facts": {"x": [1]}})", "field 'facts.x'"},
      {R"({"family": "f", "kind": "cuda", "facts": {}, "version": 2})", "unknown field 'version'"},
      {R"({"family": "bad name", "kind": "cuda", "facts": {}})", "family name 'bad name'"},
      {R"({"family": "axpy", "kind": "ptx", "facts": {"dtype": ["f32", "f64"], "tile": []}})",
       "already registered with different facts"},
  };
  for (const auto& [schema, expected] : cases) {
    EXPECT_EQ(jitcache_declare_family(m_runtime, schema), JITCACHE_ERROR_INVALID_ARGUMENT) << schema;
    EXPECT_NE(last_error().find(expected), std::string::npos) << schema << ": " << last_error();
  }
  EXPECT_EQ(jitcache_declare_family(nullptr, k_axpy_family), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_declare_family(m_runtime, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
}

// Issue 24 item 16: a key given twice was taken silently, the last one winning (another
// parser keeps the first): the family's meaning depended on the reader.
TEST_F(CApiCompileTest, AKeyGivenTwiceInASchemaIsRefusedNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"family": "twice", "family": "axpy2", "kind": "cuda", "facts": {}})", "key 'family' is given twice"},
      {R"({"family": "twice", "kind": "ptx", "kind": "cuda", "facts": {}})", "key 'kind' is given twice"},
      {R"({"family": "twice", "kind": "cuda", "facts": {"tile": ["8"], "dtype": [], "tile": []}})",
       "key 'facts.tile' is given twice"},
      {R"({"family": "twice", "kind": "cuda", "facts": {"a": []}, "facts": {"b": []}})",
       "key 'facts' is given twice"},
  };
  for (const auto& [schema, expected] : cases) {
    EXPECT_EQ(jitcache_declare_family(m_runtime, schema), JITCACHE_ERROR_INVALID_ARGUMENT) << schema;
    EXPECT_NE(last_error().find(expected), std::string::npos) << schema << ": " << last_error();
  }
  // The same names in different objects are no duplicates.
  EXPECT_EQ(jitcache_declare_family(m_runtime, R"({"family": "twice", "kind": "cuda", "facts": {"kind": [], "family": []}})"),
            JITCACHE_OK)
      << last_error();
}

TEST_F(CApiCompileTest, BadRequestsAreRefusedNamingTheField) {
  const jitcache_fact twice[2] = {{"dtype", "f32"}, {"dtype", "f64"}};
  const jitcache_fact null_value[2] = {{"dtype", nullptr}, {"tile", "1"}};
  const char* null_option[1] = {nullptr};
  const jitcache_fact out_of_range[2] = {{"dtype", "f16"}, {"tile", "1"}};
  std::string broken = "extern \"C\" __global__ void axpy( {";
  // Each case: what is changed in a good request, the status and the words of the refusal.
  const struct {
    std::function<void(jitcache_compile_request&)> change;
    jitcache_status status;
    const char* expected;
  } cases[] = {
      {[](auto& r) { r.struct_size = 8; }, JITCACHE_ERROR_INVALID_ARGUMENT, "struct_size is 8"},
      {[](auto& r) { r.kind = static_cast<jitcache_source_kind>(7); }, JITCACHE_ERROR_INVALID_ARGUMENT, "kind is 7"},
      {[](auto& r) { r.text = nullptr; }, JITCACHE_ERROR_INVALID_ARGUMENT, "text is NULL"},
      {[](auto& r) { r.spec = nullptr; }, JITCACHE_ERROR_INVALID_ARGUMENT, "spec is NULL with num_spec 2"},
      {[](auto& r) { r.num_spec = 1u << 20; }, JITCACHE_ERROR_INVALID_ARGUMENT, "num_spec is 1048576"},
      {[&](auto& r) { r.spec = twice; }, JITCACHE_ERROR_INVALID_ARGUMENT, "fact dtype is given twice"},
      {[&](auto& r) { r.spec = null_value; }, JITCACHE_ERROR_INVALID_ARGUMENT, "spec[0]: name or value is NULL"},
      {[](auto& r) { r.entry = ""; }, JITCACHE_ERROR_INVALID_ARGUMENT, "entry is NULL or empty"},
      {[](auto& r) { r.target = "sm_75"; }, JITCACHE_ERROR_INVALID_ARGUMENT, "sm_75"},
      {[&](auto& r) { r.options = null_option; }, JITCACHE_ERROR_INVALID_ARGUMENT, "options[0] is NULL"},
      {[](auto& r) { r.family = "nobody"; }, JITCACHE_ERROR_NOT_FOUND, "'nobody' is not declared"},
      {[&](auto& r) { r.spec = out_of_range; }, JITCACHE_ERROR_INVALID_ARGUMENT, "dtype='f16' is out of range"},
      {[&](auto& r) {
         r.text = broken.data();
         r.text_size = broken.size();
       },
       JITCACHE_ERROR_COMPILE, "NVRTC"},
      {[](auto& r) { r.entry = "not_there"; }, JITCACHE_ERROR_COMPILE, "not_there"},
  };
  jitcache_kernel* k = nullptr;
  for (const auto& c : cases) {
    jitcache_compile_request r = m_request;
    c.change(r);
    k = nullptr;
    EXPECT_EQ(jitcache_compile(m_runtime, &r, &k), c.status) << c.expected << ": " << last_error();
    EXPECT_EQ(k, nullptr);
    EXPECT_NE(last_error().find(c.expected), std::string::npos) << last_error();
  }

  EXPECT_EQ(jitcache_compile(m_runtime, nullptr, &k), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_compile(m_runtime, &m_request, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  jitcache_lookup_outcome outcome;
  EXPECT_EQ(jitcache_lookup(m_runtime, "axpy", m_spec, 2, "sm_90", nullptr, &k), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_lookup(m_runtime, "axpy", nullptr, 2, "sm_90", &outcome, &k), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(jitcache_lookup(m_runtime, "axpy", m_spec, 1, "sm_90", &outcome, &k), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("missing fact tile"), std::string::npos) << last_error();
  EXPECT_EQ(jitcache_kernel_cubin(nullptr, nullptr, nullptr), JITCACHE_ERROR_INVALID_ARGUMENT);
  jitcache_kernel_release(nullptr);

  jitcache_runtime_options options;
  jitcache_runtime_options_init(&options);
  options.device = JITCACHE_DEVICE_NONE;
  options.cache_dir = m_cache_dir.c_str();
  options.verify_spec = 1.5;
  jitcache_runtime* runtime = nullptr;
  EXPECT_EQ(jitcache_runtime_open(&options, &runtime), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("verify_spec is 1.5"), std::string::npos) << last_error();
}

}  // namespace
}  // namespace jitcache
