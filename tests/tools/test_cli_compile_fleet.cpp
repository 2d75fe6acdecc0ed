// Kernels from outside across a fleet: two nodes (cache directories of their own) share a
// real redis-server with a fleet key. What one node compiles, the other takes from the
// remote tier, verified, without compiling; the spec record travels too, so a lookup by
// spec works on a node that never compiled, and a node whose generator makes another
// source for the same spec is caught by the record its peer uploaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_remote_fixture.hpp"
#include "compile_golden.hpp"
#include "cli_runner.hpp"
#include "redis_server.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace testing;  // the fleet fixture (cli_remote_fixture.hpp) and the CLI runner

class CliCompileFleetTest : public testing::RedisFleetTest {
 protected:

  CliOutcome jc(const std::string& node, std::vector<std::string> args) const {
    args.insert(args.begin(), {"--cache-dir", (dir() / node).string()});
    const std::vector<std::string> env{"JITCACHE_REMOTE=" + m_remote,
                                       "JITCACHE_REMOTE_KEY_FILE=" + m_key_file.string(),
                                       "JITCACHE_REMOTE_CONNECT_TIMEOUT_MS=500", "JITCACHE_REMOTE_TIMEOUT_MS=1000"};
    return testing::run_cli(dir(), std::move(args), env, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  }

  static std::vector<std::string> compile_args(const fs::path& source) {
    return {"compile", "--source", source.string(), "--entry", "axpy", "--arch", "sm_120a",
            "--family", "blas", "--fact", "dtype=f32", "--json"};
  }
};

TEST_F(CliCompileFleetTest, APeerCompilesOnceAndTheRecordTravels) {
  const fs::path ir = k_golden / "axpy_nvvm.ll";
  const CliOutcome a = jc("node-a", compile_args(ir));
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  const json first = json::parse(a.out);
  EXPECT_EQ(first["from_cache"], false);

  // Node b has an empty cache of its own: the entry comes from the fleet, verified.
  const CliOutcome b = jc("node-b", compile_args(ir));
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  const json second = json::parse(b.out);
  EXPECT_EQ(second["from_cache"], true) << b.out;
  EXPECT_EQ(second["from_remote"], true) << b.out;
  EXPECT_EQ(second["verified"], true) << "node b checked its source against the record node a uploaded";
  EXPECT_EQ(second["key"], first["key"]);
  EXPECT_EQ(second["cubin_bytes"], first["cubin_bytes"]);

  // Node c's generator makes another source for the same spec (a fact it forgot): the record
  // node a uploaded catches it before anything is compiled or served.
  std::string changed;
  {
    std::ifstream in(ir);
    changed.assign(std::istreambuf_iterator<char>(in), {});
  }
  changed.replace(changed.find("%ax = fmul float %a, %vx"), 24, "%ax = fmul float %vx, %a");
  const fs::path other = dir() / "axpy_v2.ll";
  std::ofstream(other) << changed;
  const CliOutcome c = jc("node-c", compile_args(other));
  EXPECT_EQ(c.code, 1) << c.out << c.err;
  EXPECT_NE(c.err.find("spec of kernel family blas is incomplete"), std::string::npos) << c.err;
  EXPECT_EQ(c.out, "");

  // Node b's local cache now holds both entries (backfilled): its audit is clean.
  const CliOutcome audit = jc("node-b", {"audit", "--json"});
  EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
}

}  // namespace
}  // namespace jitcache
