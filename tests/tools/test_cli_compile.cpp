// `jitcache compile`: every kernel variant of each target compiled with NVRTC and listed
// with its registers, spills and size; a smoke test of the toolchain that never touches
// the cache. Exit 0 when every variant compiled, 2 for a usage error or unknown target.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_fixture.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliOutcome;

// Every kernel × (record format, latent-scale mode it is written with), spelled out: a
// format or mode lost from the tables fails here, not only in a loop over them.
const std::set<std::string> k_variants{
    "writer/identity/b12x-432", "writer/dynamic/b12x-432",     "writer/identity/b12x-368",
    "writer/dynamic/b12x-368",  "writer/per-token/b12x-368",   "writer/per-token/b12x-304",
    "writer/identity/flashmla-352", "writer/dynamic/flashmla-352", "gather/identity/b12x-432",
    "gather/dynamic/b12x-432",  "gather/identity/b12x-368",    "gather/dynamic/b12x-368",
    "gather/per-token/b12x-368", "gather/per-token/b12x-304",  "gather/identity/flashmla-352",
    "gather/dynamic/flashmla-352", "writer/identity/flashinfer-glm-416", "writer/dynamic/flashinfer-glm-416",
    "gather/identity/flashinfer-glm-416", "gather/dynamic/flashinfer-glm-416", "writer/identity/flashinfer-dsv4-384",
    "gather/identity/flashinfer-dsv4-384", "writer/identity/flashmla-v41-288", "gather/identity/flashmla-v41-288"};

class CliCompileTest : public testing::CliCommandTest {};

TEST_F(CliCompileTest, JsonListsEveryVariantOfEachTarget) {
  const CliOutcome o = run({"compile", "--arch", "sm_90", "sm_120a", "--json"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json doc = parse(o);
  EXPECT_EQ(doc["compiler"], "nvrtc");
  EXPECT_FALSE(doc["version"].get<std::string>().empty()) << o.out;
  EXPECT_EQ(doc["failures"], 0);
  std::set<std::string> seen_90, seen_120a;
  for (const json& v : doc["variants"]) {
    const std::string target = v["target"];
    ASSERT_TRUE(target == "sm_90" || target == "sm_120a") << v.dump();
    (target == "sm_90" ? seen_90 : seen_120a).insert(v["variant"].get<std::string>());
    EXPECT_GT(v["compile_ms"].get<double>(), 0.0) << v.dump();
    EXPECT_GT(v["cubin_bytes"].get<int>(), 0) << v.dump();
    EXPECT_GT(v["registers"].get<int>(), 0) << v.dump();
    EXPECT_GE(v["spill_store_bytes"].get<int>(), 0) << v.dump();
    EXPECT_GE(v["spill_load_bytes"].get<int>(), 0) << v.dump();
  }
  EXPECT_EQ(doc["variants"].size(), 2 * k_variants.size());
  EXPECT_EQ(seen_90, k_variants);
  EXPECT_EQ(seen_120a, k_variants);
  EXPECT_FALSE(fs::exists(m_root)) << "compile does not touch the cache";
}

TEST_F(CliCompileTest, TextHasAHeaderAndOneRowPerVariant) {
  const CliOutcome o = run({"compile", "--arch", "sm_100a"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(o.out.rfind("Compiling with nvrtc ", 0), 0u) << o.out;
  // The variant column is as wide as the longest variant (at least 30).
  std::size_t width = 30;
  for (const std::string& variant : k_variants) width = std::max(width, variant.size());
  EXPECT_NE(o.out.find("variant" + std::string(width - 7, ' ') + " target   compile ms cubin bytes registers  spills"),
            std::string::npos)
      << o.out;
  std::size_t rows = 0;
  for (const std::string& variant : k_variants) {
    const std::string row = variant + std::string(width + 1 - variant.size(), ' ') + "sm_100a ";
    EXPECT_NE(o.out.find(row), std::string::npos) << row << "\n" << o.out;
    for (std::size_t at = 0; (at = o.out.find(row, at)) != std::string::npos; at += row.size()) ++rows;
  }
  EXPECT_EQ(rows, k_variants.size()) << o.out;
  // Nothing on stderr but the one line naming the NVRTC it loaded (at INFO).
  EXPECT_EQ(o.err.rfind("jitcache INFO: NVRTC ", 0), 0u) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

TEST_F(CliCompileTest, UsageErrorsExitTwo) {
  expect_usage_error({"compile", "--arch"}, "--arch");
  expect_usage_error({"compile", "--bogus"}, "--bogus");
  expect_usage_error({"compile", "stray", "--arch", "sm_90"}, "stray");
}

// An unknown target is refused before anything is compiled, naming it and the choices.
TEST_F(CliCompileTest, UnknownTargetExitsTwoNamingIt) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"compile", "--arch", "sm_12"},
                                               {"compile", "--arch", "sm_90", "sm_12", "--json"}}) {
    const CliOutcome o = run(args);
    EXPECT_EQ(o.code, 2) << o.out << o.err;
    EXPECT_NE(o.err.find("unknown target 'sm_12'"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("sm_120a"), std::string::npos) << "the supported targets are listed: " << o.err;
    EXPECT_EQ(o.out, "") << "nothing compiled before the error";
  }
}

}  // namespace
}  // namespace jitcache
