// The keys of the variants that existed before the record-format dimension, computed by
// this build, equal the keys an older jitcache wrote (tests/data/cache_before_formats,
// written by the commit its README names). Unlike the CLI test on the same data
// (tests/tools/test_cli_cache_before_formats.cpp), which warms the old cache and needs this
// machine's NVRTC to be the recorded one, this one stands in the recorded compiler's name,
// version, fingerprint and options, so it holds on any machine and with any later
// fingerprint scheme: every byte of the key that the format dimension could have changed
// (facts, spelling, generated source, headers) is checked here.
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kernel_templates/generator.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

// The compiler an entry was built with, as its facts recorded it.
class RecordedCompiler final : public Compiler {
 public:
  explicit RecordedCompiler(const nlohmann::json& facts) : m_facts(facts) {}
  std::string name() const override { return m_facts.at("compiler"); }
  std::string version() const override { return m_facts.at("compiler_version"); }
  Result<std::string> fingerprint() const override { return m_facts.at("compiler_fingerprint").get<std::string>(); }
  std::vector<std::string> options(const KernelSpec&) const override {
    std::vector<std::string> out;
    const std::string all = m_facts.at("options");
    for (std::size_t at = 0; at < all.size();) {
      const std::size_t end = all.find(' ', at);
      out.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
      at = end == std::string::npos ? all.size() : end + 1;
    }
    return out;
  }
  Result<CompiledArtifact> compile(const GeneratedSource&) const override {
    return make_error(ErrorCode::internal, "not a compiler");
  }

 private:
  nlohmann::json m_facts;
};

TEST(KeysBeforeFormats, EveryOldEntrysKeyIsTheKeyThisBuildComputes) {
  const auto file = testing::source_dir() / "tests/data/cache_before_formats/inspect.json";
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::set<std::string> labels;
  for (const nlohmann::json& entry : doc.at("entries")) {
    nlohmann::json recorded = entry.at("facts");
    FactMap facts;
    for (const auto& [name, value] : recorded.items()) facts[name] = value.get<std::string>();
    const auto spec = KernelSpec::from_facts(facts);
    ASSERT_OK(spec);
    labels.insert(spec->label());
    // The recorded JITCACHE_LINEINFO is the one in effect for the key.
    testing::ScopedEnv lineinfo("JITCACHE_LINEINFO", std::optional<std::string>(recorded.at("env.JITCACHE_LINEINFO").get<std::string>()));
    const RecordedCompiler compiler(recorded);
    const auto now = kernel_facts(generate(*spec), compiler);
    ASSERT_OK(now);
    for (const auto& [name, value] : facts) {
      const auto mine = now->get(name);
      EXPECT_TRUE(mine && *mine == value) << spec->label() << ": " << name << " was " << value << ", now "
                                          << (mine ? std::string(*mine) : "(absent)");
    }
    EXPECT_EQ(now->key().to_hex(), entry.at("key").get<std::string>()) << spec->label();
  }
  // All eight: writer and gather, identity and dynamic, b12x-432 and b12x-368.
  EXPECT_EQ(labels.size(), 8u);
  EXPECT_TRUE(labels.contains("writer/dynamic/b12x-368/sm_90"));
  EXPECT_TRUE(labels.contains("gather/identity/b12x-432/sm_90"));
}

}  // namespace
}  // namespace jitcache
