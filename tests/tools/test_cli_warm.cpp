// `jitcache warm` as a deploy step runs it: it compiles what a checkpoint needs, says how
// many of the variants are in the cache afterwards, and exits non-zero when any is not
// (a full disk, a read-only directory); a read-only cache baked into an image still serves
// a fully cached warm and every command that only reads; and audit / clear --stale racing
// cold warms never flag or delete what a warm is publishing.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Outcome = testing::CliOutcome;

const fs::path k_checkpoint = testing::source_dir() / "examples" / "glm5-mini";

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class CliWarmTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_root = dir() / "cache";
  }

  Outcome jitcache(std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", m_root.string()});
    return testing::run_cli(dir(), std::move(args), {}, {"JITCACHE_DIR=", "XDG_CACHE_HOME="});
  }

  std::vector<std::string> warm_args(bool json_output = true) const {
    std::vector<std::string> args{"warm", "--checkpoint", k_checkpoint.string(), "--arch", "sm_90", "--jobs", "2"};
    if (json_output) args.push_back("--json");
    return args;
  }

  // `script` runs in a private mount namespace (so its mounts vanish with it) under
  // /bin/sh with JC set to the CLI; output is captured like run_cli's.
  Outcome in_mount_namespace(const std::string& script) {
    const fs::path out = dir() / ".ns-stdout", err = dir() / ".ns-stderr";
    const std::string command = "exec unshare -m /bin/sh -ec " + quoted(script) + " >" + quoted(out.string()) +
                                " 2>" + quoted(err.string());
    std::string env_cli = std::string("JC=") + JITCACHE_CLI_PATH;
    std::vector<std::string> env_strings{env_cli, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
    char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
    pid_t pid = 0;
    Outcome outcome;
    if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, envp.data()) != 0) {
      ADD_FAILURE() << "cannot start /bin/sh";
      return outcome;
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    outcome.out = testing::read_text_file(out);
    outcome.err = testing::read_text_file(err);
    return outcome;
  }

  // Read-only bind mounts need root (CI runs as root) and a kernel that lets us unshare.
  void require_mount_namespace() {
    if (::geteuid() != 0) GTEST_SKIP() << "read-only bind mounts need root";
    const Outcome probe = in_mount_namespace("mount -t tmpfs none " + quoted(dir().string()) + "; true");
    if (probe.code != 0) GTEST_SKIP() << "cannot make a mount namespace here: " << probe.err;
  }

  // Mounts `path` read-only onto itself, then runs `commands`.
  static std::string read_only(const fs::path& path, const std::string& commands) {
    return "mount --bind " + quoted(path.string()) + " " + quoted(path.string()) + "\nmount -o remount,ro,bind " +
           quoted(path.string()) + " " + quoted(path.string()) + "\n" + commands;
  }

  std::string cli(const std::string& args) const {
    return "\"$JC\" --cache-dir " + quoted(m_root.string()) + " " + args;
  }

  std::string warm_cli() const { return cli("warm --checkpoint " + quoted(k_checkpoint.string()) + " --arch sm_90"); }

  static json parse(const std::string& text) {
    json doc = json::parse(text, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << text;
    return doc;
  }

  fs::path m_root;
};

TEST_F(CliWarmTest, CompilesOnceThenFindsEverythingAndSaysSo) {
  const Outcome first = jitcache(warm_args());
  ASSERT_EQ(first.code, 0) << first.err;
  const json cold = parse(first.out);
  EXPECT_EQ(cold["variants_needed"], 4);
  EXPECT_EQ(cold["compiled"], 4);
  EXPECT_EQ(cold["stored"], 4);
  EXPECT_EQ(cold["cache_mode"], "read-write");
  for (const json& v : cold["variants"]) EXPECT_TRUE(v["stored"].get<bool>()) << v.dump();

  const Outcome second = jitcache(warm_args(false));
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("already cached 4, compiled 0, stored 4 of 4"), std::string::npos) << second.out;
}

// Issue 10, item 5: with publishing impossible, warm said "compiled 4" and exited 0.
TEST_F(CliWarmTest, NothingStoredIsAnErrorSayingStoredNOfM) {
  require_mount_namespace();
  // A usable index, but a temporary directory that cannot be written: every blob publish fails.
  ASSERT_EQ(jitcache({"stats"}).code, 0);
  const Outcome o = in_mount_namespace(read_only(m_root / "tmp", warm_cli() + " --json"));
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  const json doc = parse(o.out);
  EXPECT_EQ(doc["compiled"], 4);
  EXPECT_EQ(doc["stored"], 0);
  EXPECT_NE(o.err.find("could not store"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("stored 0 of 4"), std::string::npos) << o.err;
}

// Issue 10, read-only caches: a cache baked into a read-only image.
TEST_F(CliWarmTest, ReadOnlyCacheServesAFullyCachedWarmAndEveryReadingCommand) {
  require_mount_namespace();
  ASSERT_EQ(jitcache(warm_args()).code, 0);
  const std::string index_before = testing::read_text_file(m_root / "index.db");
  const Outcome o = in_mount_namespace(read_only(
      m_root, warm_cli() + " --json > " + quoted((dir() / "warm.json").string()) + "\n" +
                  cli("inspect --json") + " > " + quoted((dir() / "inspect.json").string()) + "\n" +
                  cli("stats --json") + " > " + quoted((dir() / "stats.json").string()) + "\n" + cli("verify") +
                  "\n" + cli("audit --checkpoint " + quoted(k_checkpoint.string()) + " --arch sm_90") +
                  "\nset +e\n" + cli("clear --all") + "\necho clear=$?\n" + cli("gc") + "\necho gc=$?\n"));
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const json warm = parse(testing::read_text_file(dir() / "warm.json"));
  EXPECT_EQ(warm["compiled"], 0);
  EXPECT_EQ(warm["stored"], 4);
  EXPECT_EQ(warm["cache_mode"], "read-only");
  EXPECT_EQ(parse(testing::read_text_file(dir() / "inspect.json"))["entries"].size(), 4u);
  EXPECT_EQ(parse(testing::read_text_file(dir() / "stats.json"))["entries"], 4);
  EXPECT_NE(o.out.find("clear=2"), std::string::npos) << o.out << o.err;
  EXPECT_NE(o.out.find("gc=2"), std::string::npos) << o.out << o.err;
  EXPECT_NE(o.err.find("read-only"), std::string::npos) << o.err;
  EXPECT_EQ(testing::read_text_file(m_root / "index.db"), index_before) << "a read-only cache was written";
}

TEST_F(CliWarmTest, ReadOnlyCacheMissIsCompiledButReportedNotStored) {
  require_mount_namespace();
  ASSERT_EQ(jitcache(warm_args()).code, 0);
  // fp8 RoPE needs four variants the cache does not hold.
  const Outcome o = in_mount_namespace(read_only(m_root, warm_cli() + " --rope fp8"));
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  EXPECT_NE(o.out.find("compiled 4, stored 0 of 4"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("read-only to this process"), std::string::npos) << o.err;
}

TEST_F(CliWarmTest, ReadOnlyDirectoryWithoutAnIndexIsAnEnvironmentError) {
  require_mount_namespace();
  fs::create_directory(m_root);
  fs::permissions(m_root, fs::perms::owner_all, fs::perm_options::replace);
  const Outcome o = in_mount_namespace(read_only(m_root, warm_cli()));
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  EXPECT_NE(o.err.find(m_root.string()), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("holds no index.db"), std::string::npos) << o.err;
  EXPECT_TRUE(fs::is_empty(m_root));
}

// A full disk: a cache on a small tmpfs, filled up after warming. A fully cached warm and
// the reading commands still work; a warm that must store exits non-zero.
TEST_F(CliWarmTest, FullDiskServesWhatIsCachedAndReportsWhatIsNot) {
  require_mount_namespace();
  const std::string fill = "dd if=/dev/zero of=" + quoted((dir() / "mnt" / "filler").string()) +
                           " bs=4096 2>/dev/null || true\n";
  fs::create_directory(dir() / "mnt");
  m_root = dir() / "mnt" / "cache";
  const Outcome o = in_mount_namespace(
      "mount -t tmpfs -o size=4m,mode=0700 none " + quoted((dir() / "mnt").string()) + "\n" + warm_cli() +
      " --json > " + quoted((dir() / "cold.json").string()) + "\n" + fill + warm_cli() + " --json > " +
      quoted((dir() / "warm.json").string()) + "\n" + cli("stats") + "\n" + cli("verify") + "\nset +e\n" +
      warm_cli() + " --rope fp8\necho fp8=$?\n");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(parse(testing::read_text_file(dir() / "cold.json"))["stored"], 4);
  const json warm = parse(testing::read_text_file(dir() / "warm.json"));
  EXPECT_EQ(warm["compiled"], 0);
  EXPECT_EQ(warm["stored"], 4);
  EXPECT_NE(o.out.find("fp8=2"), std::string::npos) << o.out << o.err;
  EXPECT_NE(o.out.find("stored 0 of 4"), std::string::npos) << o.out << o.err;
}

// A FIFO planted at index.db-wal or -shm made SQLite fail with "disk I/O error".
TEST_F(CliWarmTest, ForeignFilesBesideTheIndexAreReplaced) {
  ASSERT_EQ(jitcache(warm_args()).code, 0);
  for (const char* name : {"index.db-wal", "index.db-shm"}) {
    ASSERT_EQ(::mkfifo((m_root / name).c_str(), 0600), 0);
    const Outcome o = jitcache(warm_args());
    EXPECT_EQ(o.code, 0) << name << ": " << o.err;
    EXPECT_NE(o.err.find(std::string(name) + ": was a FIFO"), std::string::npos) << o.err;
    EXPECT_FALSE(fs::is_fifo(fs::symlink_status(m_root / name)));
  }
}

// Issue 10, item 3: audit and clear --stale against concurrent cold warms. Before the
// fix a blob between its rename and its row was an orphan finding, and clear --stale
// deleted it. Rounds: JCTEST_RACE_ROUNDS (default 100).
TEST_F(CliWarmTest, AuditAndClearStaleRacingColdWarmsFindAndLoseNothing) {
  const char* env_rounds = std::getenv("JCTEST_RACE_ROUNDS");
  const int rounds = env_rounds != nullptr ? std::atoi(env_rounds) : 100;
  int findings = 0, lost = 0, audits = 0;
  for (int round = 0; round < rounds; ++round) {
    m_root = dir() / ("cache" + std::to_string(round));
    // The warm runs in the background; audits and clears run until it has finished.
    const fs::path warm_out = dir() / "warm.out";
    std::vector<std::string> args{JITCACHE_CLI_PATH, "--cache-dir", m_root.string()};
    for (const std::string& a : warm_args()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, warm_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&files);
    int status = 0;
    bool done = false;
    while (!done) {
      const Outcome audit = jitcache({"audit", "--json"});
      ++audits;
      const json report = json::parse(audit.out, nullptr, false);
      if (audit.code != 0 || report.is_discarded() || !report["findings"].empty()) {
        ++findings;
        ADD_FAILURE() << "round " << round << ": audit exit " << audit.code << "\n" << audit.out << audit.err;
      }
      const Outcome clear = jitcache({"clear", "--stale"});
      if (clear.code != 0 || clear.out.find("removed 0 flagged") == std::string::npos) {
        ++findings;
        ADD_FAILURE() << "round " << round << ": clear --stale exit " << clear.code << "\n" << clear.out << clear.err;
      }
      done = ::waitpid(pid, &status, WNOHANG) == pid;
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "warm failed in round " << round;
    const Outcome inspect = jitcache({"inspect", "--json"});
    const json entries = json::parse(inspect.out, nullptr, false);
    if (entries.is_discarded() || entries["entries"].size() != 4u) {
      ++lost;
      ADD_FAILURE() << "round " << round << ": " << inspect.out << inspect.err;
    }
    const Outcome final_audit = jitcache({"audit"});
    EXPECT_EQ(final_audit.code, 0) << final_audit.out << final_audit.err;
    fs::remove_all(m_root);
    if (findings + lost > 3) break;  // enough to diagnose
  }
  std::printf("[race] %d rounds, %d audits during cold warms: %d findings, %d rounds with lost entries\n", rounds,
              audits, findings, lost);
  EXPECT_EQ(findings, 0);
  EXPECT_EQ(lost, 0);
}

}  // namespace
}  // namespace jitcache
