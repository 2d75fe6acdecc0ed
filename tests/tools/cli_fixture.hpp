// A fixture for the CLI tests of one command: a fresh scratch directory with a private
// cache root in it, the CLI run against that root (never the user's: JITCACHE_DIR and
// XDG_CACHE_HOME are dropped from the child's environment), and the checks every command
// shares (one JSON document on stdout; a usage error exits 2 with a message and no output).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "test_support.hpp"

namespace jitcache::testing {

class CliCommandTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_root = dir() / "cache";
  }

  // The CLI with `--cache-dir <root>` first, as a user with a cache of their own runs it.
  CliOutcome run(std::vector<std::string> args) const {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return run_bare(std::move(args));
  }

  // The CLI exactly as given (for tests of the global options).
  CliOutcome run_bare(std::vector<std::string> args) const {
    return run_cli(dir(), std::move(args), {}, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  }

  // stdout must be exactly one JSON document.
  static nlohmann::json parse(const CliOutcome& o) {
    nlohmann::json doc = nlohmann::json::parse(o.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << o.out << o.err;
    return doc;
  }

  // `args` must be refused with exit `code`, a message on stderr naming every one of
  // `named` (the file, the field), and nothing on stdout.
  void expect_refused(const std::vector<std::string>& args, int code,
                      const std::vector<std::string>& named) const {
    std::string shown;
    for (const std::string& a : args) shown += a + " ";
    const CliOutcome o = run(args);
    EXPECT_EQ(o.code, code) << shown << "\n" << o.out << o.err;
    for (const std::string& needle : named)
      EXPECT_NE(o.err.find(needle), std::string::npos) << shown << ": stderr should name " << needle << ":\n"
                                                       << o.err;
    EXPECT_EQ(o.out, "") << shown;
  }

  void expect_usage_error(const std::vector<std::string>& args, const std::string& named) const {
    expect_refused(args, 2, {named});
  }

  // A command whose job is the cache never falls back to memory-only: a root that is a
  // regular file, or a directory others could write, exits 2 naming it, with no output.
  void expect_unusable_cache_dirs_refused(const std::vector<std::string>& args) {
    const std::filesystem::path file = dir() / "a-file";
    { std::ofstream(file) << "not a cache"; }
    m_root = file;
    expect_refused(args, 2, {file.string() + ": not a directory"});

    m_root = dir() / "shared";
    std::filesystem::create_directory(m_root);
    std::filesystem::permissions(m_root, std::filesystem::perms::all, std::filesystem::perm_options::replace);
    expect_refused(args, 2, {m_root.string(), "world-writable"});
    std::filesystem::permissions(m_root, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
  }

  std::filesystem::path m_root;
};

// The bundled example checkpoint: 78 calibrated layers and one draft layer.
inline std::filesystem::path example_checkpoint() { return source_dir() / "examples" / "glm5-mini"; }

}  // namespace jitcache::testing
