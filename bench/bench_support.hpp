// Helpers shared by the bench programs: order statistics of samples, cache facts of the
// shape the kernel cache stores (so that a benchmark's keys and index rows are as large as
// real ones) without generating or compiling anything, the compile tests' golden kernels,
// scratch directories, the bundled checkpoint, and child processes run with their output
// captured.
#pragma once

#include <fcntl.h>
#include <time.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "cache/facts.hpp"

namespace jitcache::bench {

// A golden file of the compile tests (tests/runtime/compile/golden), so that a benchmark's
// figures are for exactly what the tests check; `source_dir` is the repository root.
// Exits when the file cannot be read: a figure of nothing would be meaningless.
inline std::string golden_kernel(const std::string& source_dir, const char* name) {
  const std::string path = source_dir + "/tests/runtime/compile/golden/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// The sample below which a fraction `p` of the samples lie (p in [0, 1]).
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Facts of a kernel-cache entry for `target` and `rope`, one distinct key per `id`.
inline cache::Facts sample_kernel_facts(const std::string& id, const std::string& target = "sm_120a",
                                        const std::string& rope = "fp8") {
  return cache::Facts{{"key_schema", "1"},
                      {"kernel_family", "nvfp4_mla"},
                      {"kernel", "kv_write"},
                      {"generator_version", "3"},
                      {"source_hash", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},
                      {"headers_hash", "00112233445566778899aabbccddeeff"},
                      {"latent_scale", "dynamic"},
                      {"rope", rope},
                      {"record_bytes", rope == "fp8" ? "368" : "432"},
                      {"latent_dim", "512"},
                      {"block_size", "64"},
                      {"target", target},
                      {"compiler", "nvrtc"},
                      {"nvrtc_version", "13.0"},
                      {"nvrtc_fingerprint", "a1b2c3d4e5f60718293a4b5c6d7e8f90"},
                      {"options", "--fmad=false -default-device -std=c++17"},
                      {"id", id}};
}

// Microseconds since `start`, on the steady clock.
inline double us_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// Microseconds of CPU time on `clock`: CLOCK_THREAD_CPUTIME_ID, the calling thread's;
// CLOCK_PROCESS_CPUTIME_ID, every thread's of the process. Unlike wall time, not inflated
// while other work on the machine preempts the process.
inline double cpu_us(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// A private directory (mode 700) below the system's temporary directory, named `prefix`
// and the process id, removed with everything in it when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix)
      : m_path(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
    std::filesystem::create_directories(m_path);
    std::filesystem::permissions(m_path, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

// A new private directory (mode 700) below `base`: "<name>-<n>", n counting up.
inline std::filesystem::path fresh_dir(const std::filesystem::path& base, const std::string& name) {
  static int counter = 0;
  const std::filesystem::path dir = base / (name + "-" + std::to_string(++counter));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  return dir;
}

// `relative` below `start` or below the nearest of its parents that has it; empty when none.
inline std::filesystem::path find_upwards(const std::filesystem::path& start, const std::filesystem::path& relative) {
  for (std::filesystem::path dir = start; !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / relative)) return dir / relative;
    if (dir == dir.parent_path()) break;
  }
  return {};
}

// The bundled checkpoint examples/glm5-mini, found above the working directory, else above
// the program `self`; empty when neither has it.
inline std::filesystem::path find_example_checkpoint(const std::filesystem::path& self) {
  const std::filesystem::path config = "examples/glm5-mini/config.json";
  std::filesystem::path found = find_upwards(std::filesystem::current_path(), config);
  if (found.empty()) found = find_upwards(self.parent_path(), config);
  return found.parent_path();
}

// A child process with its stdout captured through a pipe (finish_child reads it).
struct ChildProcess {
  pid_t pid = -1;
  int out_fd = -1;
  std::filesystem::path err;  // where its stderr goes
  std::chrono::steady_clock::time_point started;
};

struct ChildExit {
  int exit_code = -1;  // 128 + the signal that ended it
  std::string out;
  std::string err;  // the stderr file's text (empty for /dev/null)
  double wall_ms = 0.0;
};

// Starts `args` (args[0] a path) with `env` ("NAME=value"; nullptr: this process's
// environment) and stderr written to `err`; does not wait. Throws when it cannot start.
inline ChildProcess spawn_child(const std::vector<std::string>& args, const std::vector<std::string>* env = nullptr,
                                const std::filesystem::path& err = "/dev/null") {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (env != nullptr) {
    for (const auto& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  ChildProcess child;
  child.err = err;
  child.started = std::chrono::steady_clock::now();
  const int rc = ::posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(),
                               env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw std::runtime_error("cannot run " + args[0]);
  }
  child.out_fd = pipe_fds[0];
  return child;
}

// Reads the child's stdout to its end and waits for it.
inline ChildExit finish_child(const ChildProcess& child) {
  ChildExit r;
  char buffer[4096];
  for (ssize_t n; (n = ::read(child.out_fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    r.out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(child.out_fd);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.wall_ms = us_since(child.started) / 1e3;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (child.err != "/dev/null") {
    std::ifstream in(child.err, std::ios::binary);
    r.err.assign(std::istreambuf_iterator<char>(in), {});
  }
  return r;
}

}  // namespace jitcache::bench
