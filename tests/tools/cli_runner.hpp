// Runs the built `jitcache` binary as a user would, for the CLI tests: stdout and stderr
// captured through files in a scratch directory, the exit status checked to be a normal
// exit (a signal, that is a crash, is never acceptable).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
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

// The child's environment is this process's, less every variable whose name starts with
// one of `drop_prefixes`, plus `extra_env` ("NAME=value").
inline CliOutcome run_cli(const std::filesystem::path& scratch, std::vector<std::string> args,
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
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "the CLI died of signal " << WTERMSIG(status);
  outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  outcome.out = read_text_file(out);
  outcome.err = read_text_file(err);
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::filesystem::remove(err, ec);
  return outcome;
}

}  // namespace jitcache::testing
