// Runs the built `jitcache` binary as a user would, for the CLI tests: stdout and stderr
// captured through files in a scratch directory, the exit status checked to be a normal
// exit (a signal, that is a crash, is never acceptable).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace jitcache::testing {

struct CliOutcome {
  int code = -1;  // exit status; 128 + signal when killed
  std::string out;
  std::string err;
};

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Long enough for any command of the suite, short enough that a hung one fails the test
// instead of the whole run stalling until ctest's own timeout.
inline constexpr std::chrono::seconds k_cli_default_limit{240};

// The child's environment is this process's, less every variable whose name starts with
// one of `drop_prefixes`, plus `extra_env` ("NAME=value"). A child still running after
// `limit` is killed (SIGKILL) and the test fails.
inline CliOutcome run_cli_within(std::chrono::milliseconds limit,
                                 const std::filesystem::path& scratch, std::vector<std::string> args,
                                 const std::vector<std::string>& extra_env = {},
                                 const std::vector<std::string>& drop_prefixes = {}) {
  args.insert(args.begin(), JITCACHE_CLI_PATH);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool drop = false;
    for (const std::string& prefix : drop_prefixes) drop = drop || entry.starts_with(prefix);
    if (!drop) env.push_back(entry);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  const std::filesystem::path out = scratch / ".cli-stdout", err = scratch / ".cli-stderr";
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  CliOutcome outcome;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    return outcome;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool killed = false;
  for (auto pause = std::chrono::milliseconds(1);;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (!killed && std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << args[1] << " " << (args.size() > 2 ? args[2] : "") << ": still running after "
                    << std::chrono::duration<double>(limit).count() << " s; killed";
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(killed || WIFEXITED(status)) << "the CLI died of signal " << WTERMSIG(status);
  outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  outcome.out = read_text_file(out);
  outcome.err = read_text_file(err);
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::filesystem::remove(err, ec);
  return outcome;
}

inline CliOutcome run_cli(const std::filesystem::path& scratch, std::vector<std::string> args,
                          const std::vector<std::string>& extra_env = {},
                          const std::vector<std::string>& drop_prefixes = {}) {
  return run_cli_within(k_cli_default_limit, scratch, std::move(args), extra_env, drop_prefixes);
}

}  // namespace jitcache::testing
