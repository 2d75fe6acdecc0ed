// The fixture of the remote tier's CLI tests: a real redis-server (tests/redis_server.hpp)
// for the fleet's Redis, cache directories for its nodes, and the CLI run as a node runs it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "redis_server.hpp"
#include "remote/signed_entry.hpp"
#include "test_support.hpp"

namespace jitcache::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const fs::path k_checkpoint = source_dir() / "examples" / "glm5-mini";
inline constexpr std::size_t k_variants = 4;  // glm5-mini on one target: writer and gather, identity and dynamic

inline std::size_t count_lines(const std::string& text, const std::string& needle) {
  std::size_t n = 0, at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.substr(at, end - at).find(needle) != std::string::npos) ++n;
    at = end + 1;
  }
  return n;
}

// A command's stdout as its one JSON document (an empty object, and a failure, otherwise).
inline json parse_cli_json(const CliOutcome& o) {
  json doc = json::parse(o.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << o.out << o.err;
  return doc.is_discarded() ? json::object() : doc;
}

// The fleet key's bytes, as the tests sign and check values with it.
inline std::string read_fleet_key(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A private directory, a real redis-server for the fleet and the fleet key in a file of the
// directory: what every fleet test of the CLI starts from. `redis_options()` says how the
// server is started.
class RedisFleetTest : public TempDirTest {
 protected:
  virtual RedisServer::Options redis_options() const { return {}; }

  void SetUp() override {
    TempDirTest::SetUp();
    auto server = RedisServer::start(redis_options());
    ASSERT_TRUE(server) << server.error().to_string();
    m_server = std::move(*server);
    m_key_file = write_fleet_key(dir());
    m_remote = m_server->url();
  }

  std::string fleet_key() const { return read_fleet_key(m_key_file); }

  std::unique_ptr<RedisServer> m_server;
  fs::path m_key_file;
  std::string m_remote;  // the server's URL, with its password (unencoded) when it has one
};

class CliRemoteTest : public RedisFleetTest {
 protected:

  // The child's environment: this fleet's remote and key, and timeouts short enough that a
  // fault costs well under a second; `m_env` first (the first of two settings wins).
  std::vector<std::string> fleet_env() const {
    std::vector<std::string> env = m_env;
    env.insert(env.end(), {"JITCACHE_REMOTE_CONNECT_TIMEOUT_MS=200", "JITCACHE_REMOTE_TIMEOUT_MS=300",
                           "JITCACHE_REMOTE_LEASE_MS=3000", "JITCACHE_REMOTE_WAIT_MS=30000"});
    if (!m_remote.empty()) env.push_back("JITCACHE_REMOTE=" + m_remote);
    if (!m_key_file.empty()) env.push_back("JITCACHE_REMOTE_KEY_FILE=" + m_key_file.string());
    return env;
  }

  // The CLI on node `node` (a cache directory of its own), from `scratch` (one per
  // concurrent process: the runner captures output in files there).
  CliOutcome jc(const std::string& node, std::vector<std::string> args, const fs::path& scratch = {}) const {
    if (!node.empty()) args.insert(args.begin(), {"--cache-dir", (dir() / node).string()});
    const fs::path where = scratch.empty() ? dir() : scratch;
    fs::create_directories(where);
    return run_cli(where, std::move(args), fleet_env(), {"JITCACHE_DIR=", "XDG_CACHE_HOME=", "JITCACHE_REMOTE"});
  }

  static std::vector<std::string> warm_args() {
    return {"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--jobs", "2", "--json"};
  }

  // A warm that must succeed; its JSON.
  json warm(const std::string& node) const {
    const CliOutcome o = jc(node, warm_args());
    EXPECT_EQ(o.code, 0) << o.out << o.err;
    return parse(o);
  }

  json stats(const std::string& node) const {
    const CliOutcome o = jc(node, {"stats", "--json"});
    EXPECT_EQ(o.code, 0) << o.err;
    return parse(o);
  }

  static json parse(const CliOutcome& o) { return parse_cli_json(o); }

  // The entry names in the remote, by variant label ("writer/dynamic"), decoded with the
  // fleet key.
  std::map<std::string, std::pair<std::string, remote::SignedEntry>> remote_entries() {
    std::map<std::string, std::pair<std::string, remote::SignedEntry>> out;
    auto names = m_server->command({"KEYS", "jitcache:v1:entry:*"});
    EXPECT_TRUE(names) << names.error().to_string();
    if (!names) return out;
    for (const remote::Reply& name : names->elements) {
      auto value = m_server->command({"GET", name.str});
      EXPECT_TRUE(value) << value.error().to_string();
      auto key = cache::CacheKey::from_hex(name.str.substr(std::string("jitcache:v1:entry:").size()));
      EXPECT_TRUE(key.has_value());
      auto entry = remote::decode_signed_entry(name.str, fleet_key(), value->str, *key);
      EXPECT_TRUE(entry.has_value()) << name.str << ": " << entry.error().to_string();
      if (!entry) continue;
      const std::string label =
          std::string(*entry->facts.get("kernel")) + "/" + std::string(*entry->facts.get("latent_scale"));
      out[label] = {name.str, std::move(*entry)};
    }
    return out;
  }

  std::vector<std::string> m_env;  // "NAME=value", ahead of the fleet's settings
};

}  // namespace jitcache::testing
