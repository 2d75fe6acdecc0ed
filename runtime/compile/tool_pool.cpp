// The caller's side of tool isolation (tool_worker.hpp): spawning workers, the pool of idle
// ones, one request's exchange under a deadline, and turning a worker's end into an error.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "runtime/compile/tool_protocol.hpp"
#include "runtime/compile/tool_worker.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "support/env.hpp"
#include "support/unique_fd.hpp"

extern char** environ;

namespace jitcache {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t k_output_tail_bytes = 64 * 1024;
constexpr std::size_t k_max_idle_workers = 4;

struct Worker {
  pid_t pid = -1;
  pid_t owner = -1;  // the process that spawned it: a forked child must not use it
  std::filesystem::path path;
  UniqueFd socket;
  UniqueFd output;       // the worker's stdout and stderr
  std::string output_tail;  // the last k_output_tail_bytes of it
};

std::string errno_text(int error) { return std::strerror(error); }

// The POSIX and Linux signals by name (glibc's sigabbrev_np is 2.32+; the wheel runs on 2.28).
std::string signal_name(int signal) {
  struct Named {
    int number;
    const char* name;
  };
  static constexpr Named k_signals[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
      {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
      {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
      {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"}};
  for (const Named& s : k_signals)
    if (s.number == signal) return s.name;
  return "signal " + std::to_string(signal);
}

// How the worker ended, from waitpid's status.
std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by " + signal_name(WTERMSIG(status)) + " (signal " + std::to_string(WTERMSIG(status)) + ")";
  return "ended (wait status " + std::to_string(status) + ")";
}

// Reaps the worker, waiting up to `grace` for it to end by itself, then killing it.
// ECHILD (a host that ignores SIGCHLD, or reaped it itself) leaves the status unknown.
std::string reap(pid_t pid, std::chrono::milliseconds grace) {
  const auto until = Clock::now() + grace;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return describe_status(status);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return "ended (its status is unknown: " + errno_text(errno) + ", the host reaps its own children)";
    if (Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return "was killed (its status is unknown: " + errno_text(errno) + ")";
  }
  return "did not end by itself and " + describe_status(status);
}

// Moves what the worker printed into its tail; false once the pipe is at its end.
bool drain_output(Worker& w) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(w.output.get(), chunk, sizeof chunk);
    if (n > 0) {
      w.output_tail.append(chunk, static_cast<std::size_t>(n));
      if (w.output_tail.size() > k_output_tail_bytes)
        w.output_tail.erase(0, w.output_tail.size() - k_output_tail_bytes);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// posix_spawn_file_actions_addclosefrom_np where the C library has it (glibc 2.34+).
using AddClosefrom = int (*)(posix_spawn_file_actions_t*, int);
AddClosefrom addclosefrom_action() {
  static const auto fn =
      reinterpret_cast<AddClosefrom>(::dlsym(RTLD_DEFAULT, "posix_spawn_file_actions_addclosefrom_np"));
  return fn;
}

Result<Worker> spawn_worker(const std::filesystem::path& path) {
  int pair[2], pipe_fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return make_error(ErrorCode::io, "socketpair for the tool worker: " + errno_text(errno));
  UniqueFd ours(pair[0]), theirs(pair[1]);
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return make_error(ErrorCode::io, "pipe for the tool worker: " + errno_text(errno));
  UniqueFd output(pipe_fds[0]), output_end(pipe_fds[1]);
  // dup2 onto the same number would keep close-on-exec: keep the worker's socket off 3.
  if (theirs.get() == 3) theirs.reset(::fcntl(3, F_DUPFD_CLOEXEC, 10));

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, output_end.get(), 2);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);
  // posix_spawn closes only close-on-exec descriptors: without this the worker would hold
  // every inheritable one of the host (a pipe's write end among them, which then never
  // reaches its end while the worker lives). glibc has the action from 2.34; the wheel runs
  // on 2.28 (scripts/wheel.sh), so it is looked up, and where it is missing the worker
  // closes them as its first step (tool_worker_main), before it reads a request.
  const auto closefrom = addclosefrom_action();
  if (closefrom) closefrom(&actions, 4);
  // The host's signal mask and ignored signals are not the worker's business.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string program = path.string();
  std::string close_inherited = k_tool_worker_close_inherited;
  char* argv[] = {const_cast<char*>(program.c_str()), closefrom ? nullptr : close_inherited.data(), nullptr};
  // The worker is another program, so its own search could find other compilers (the
  // Python environment is told by the program's path): it gets the files this process
  // found, named in the variables that pick them.
  std::vector<std::string> pinned;
  for (const ToolkitTool tool : {ToolkitTool::nvrtc, ToolkitTool::nvjitlink, ToolkitTool::nvvm})
    if (const auto located = locate_toolkit_file(tool))
      pinned.push_back(std::string(tool_env_name(tool)) + "=" + located->path);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(pinned.begin(), pinned.end(), [&](const std::string& p) {
      return entry.substr(0, entry.find('=') + 1) == std::string_view(p).substr(0, p.find('=') + 1);
    });
    if (!replaced) envp.push_back(*e);
  }
  for (std::string& p : pinned) envp.push_back(p.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return make_error(ErrorCode::unavailable, "could not start the tool worker " + program + ": " + errno_text(rc));
  ::fcntl(output.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(ours.get(), F_SETFL, O_NONBLOCK);
  Worker w;
  w.pid = pid;
  w.owner = ::getpid();
  w.path = path;
  w.socket = std::move(ours);
  w.output = std::move(output);
  return w;
}

// An idle worker has nothing to say: one whose socket is readable or hung up has died.
bool looks_alive(const Worker& w) {
  pollfd p{w.socket.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The number of CPUs this process may run on: the default cap of live workers.
unsigned usable_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

// Live workers (busy and idle together) are at most the cap; a request that finds none
// idle and the cap reached waits for one to come back or end.
class Pool {
 public:
  // fork() takes the pool's lock first, so a child never starts with it held by a thread it
  // does not have; the child then starts with a fresh lock and condition (a copied one may
  // count waiters that are not there, and its first notify could wait for them for ever).
  Pool() {
    ::pthread_atfork([] { pool_for_fork()->m_mutex.lock(); }, [] { pool_for_fork()->m_mutex.unlock(); },
                     [] {
                       Pool* p = pool_for_fork();
                       new (&p->m_mutex) std::mutex();
                       new (&p->m_returned) std::condition_variable();
                     });
  }
  // A worker for `path`: an idle one, or a new one once fewer than `cap` live.
  Result<Worker> acquire(const std::filesystem::path& path, std::size_t cap) {
    std::unique_lock lock(m_mutex);
    forget_parent();
    for (;;) {
      while (!m_idle.empty()) {
        Worker w = std::move(m_idle.back());
        m_idle.pop_back();
        if (w.path == path && looks_alive(w)) return w;
        --m_live;
        discard(std::move(w));
      }
      if (m_live < cap) break;
      m_returned.wait(lock);
    }
    ++m_live;
    lock.unlock();
    auto spawned = spawn_worker(path);
    if (!spawned) ended();
    return spawned;
  }
  // A worker that answered: kept idle while there is room, else ended.
  void give_back(Worker w) {
    {
      std::lock_guard lock(m_mutex);
      forget_parent();
      if (w.owner == ::getpid() && m_idle.size() < k_max_idle_workers) {
        w.output_tail.clear();
        m_idle.push_back(std::move(w));
        m_returned.notify_one();
        return;
      }
    }
    const bool ours = w.owner == ::getpid();
    discard(std::move(w));
    if (ours) ended();
  }
  // A worker that is gone (reaped) or was never spawned.
  void ended() {
    std::lock_guard lock(m_mutex);
    if (m_live > 0) --m_live;
    m_returned.notify_one();
  }
  void drop_all() {
    std::lock_guard lock(m_mutex);
    forget_parent();
    for (auto& w : m_idle) discard(std::move(w));
    m_live -= std::min(m_live, m_idle.size());
    m_idle.clear();
    m_returned.notify_all();
  }
  static void discard(Worker w) {
    if (w.owner != ::getpid()) return;
    w.socket.reset();  // the worker's end of input: it exits
    reap(w.pid, std::chrono::milliseconds(200));
  }

 private:
  // A forked child starts with its parent's pool: the workers are not its own (closing the
  // copies is all it may do) and neither are the parent's busy ones it counted.
  void forget_parent() {
    if (m_pid == ::getpid()) return;
    m_pid = ::getpid();
    m_idle.clear();
    m_live = 0;
  }

  static Pool* pool_for_fork();

  std::mutex m_mutex;
  std::condition_variable m_returned;
  std::vector<Worker> m_idle;
  std::size_t m_live = 0;  // spawned by this process and not yet ended, idle ones included
  pid_t m_pid = ::getpid();
};

// Never destroyed: at the process's end the workers see their socket close and exit.
Pool* g_pool = nullptr;
Pool* Pool::pool_for_fork() { return g_pool; }
Pool& pool() {
  static Pool* p = g_pool = new Pool;
  return *p;
}

struct Exchange {
  std::string tool, stage;  // the last stage note
  std::string what;         // "axpy.ll for sm_90"
  bool heard = false;       // a frame came from the worker
};

Error worker_failed(Worker& w, const Exchange& ex, const std::string& how) {
  while (drain_output(w)) {
    pollfd p{w.output.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) break;
  }
  // The worker says which stage it is in before it calls a tool: one that ended or spoke
  // garbage before its first word never reached a tool, and is no working worker (another
  // program named by JITCACHE_TOOL_WORKER, a broken install): the environment, not the source.
  if (!ex.heard)
    return Error{ErrorCode::unavailable,
                 "the tool worker " + w.path.string() + " (pid " + std::to_string(w.pid) + ") " + how +
                     " before its first message, compiling " + ex.what + ": it is not a working " +
                     k_tool_worker_name + " (" + std::string(env::jitcache_tool_worker.name) +
                     " names the worker; unset, the one beside the library is used)",
                 "what it wrote to stdout and stderr (last " + std::to_string(k_output_tail_bytes / 1024) +
                     " KiB):\n" + (w.output_tail.empty() ? std::string("(nothing)\n") : w.output_tail)};
  return Error{ErrorCode::compile,
               ex.tool + " (in " + k_tool_worker_name + ", pid " + std::to_string(w.pid) + ") " + how + " at " +
                   ex.stage + ", compiling " + ex.what,
               "worker: " + w.path.string() + "\nwhat it wrote to stdout and stderr (last " +
                   std::to_string(k_output_tail_bytes / 1024) + " KiB):\n" +
                   (w.output_tail.empty() ? std::string("(nothing)\n") : w.output_tail)};
}

// Kills and reaps a worker that broke the protocol or the deadline.
Error kill_worker(Worker& w, const Exchange& ex, const std::string& how) {
  ::kill(w.pid, SIGKILL);
  const std::string status = reap(w.pid, std::chrono::milliseconds(2000));
  Error e = worker_failed(w, ex, how);
  e.message += " (the worker was killed; it " + status + ")";
  return e;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Sends the request and reads the replies until the answer. An error with code compile and
// `dead` set means the worker is gone (reaped); the caller must not reuse it.
Result<SourceOutput> exchange(Worker& w, const SourceInput& input, std::chrono::milliseconds timeout, bool& dead) {
  Exchange ex{source_tool_name(input.kind), "its start (before the first tool call)",
              (input.name.empty() ? std::string("the ") + to_string(input.kind) + " source" : input.name) + " for " +
                  input.target};
  const auto deadline = Clock::now() + timeout;
  const std::string timeout_text = "did not answer within " + std::to_string(timeout.count()) + " ms (" +
                                   std::string(env::jitcache_tool_timeout_ms.name) + ")";
  tool_protocol::Bytes out;
  tool_protocol::append_frame(out, tool_protocol::encode_request(input));
  std::size_t sent = 0;
  tool_protocol::Bytes in;
  bool output_open = true;
  // The worker stopped reading the request (it died or closed its end). What it sent before
  // is still in this side's queue and is read first: its last stage names what failed.
  bool refused = false;
  dead = true;
  for (;;) {
    const bool sending = sent < out.size() && !refused;
    pollfd fds[2] = {{w.socket.get(), static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0},
                     {output_open ? w.output.get() : -1, POLLIN, 0}};
    const int ready = ::poll(fds, 2, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return std::unexpected(kill_worker(w, ex, "could not be waited for: " + errno_text(errno)));
    if (ready == 0) return std::unexpected(kill_worker(w, ex, timeout_text));
    if (fds[1].revents != 0) output_open = drain_output(w);
    if ((fds[0].revents & POLLOUT) != 0 && sending) {
      const ssize_t n = ::send(w.socket.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) refused = true;
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    std::uint8_t chunk[65536];
    const ssize_t n = ::recv(w.socket.get(), chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0)
      return std::unexpected(worker_failed(
          w, ex, reap(w.pid, std::chrono::milliseconds(2000)) + (refused ? " (it stopped reading the request)" : "")));
    in.insert(in.end(), chunk, chunk + n);
    for (;;) {
      auto frame = tool_protocol::take_frame(in);
      if (!frame) return std::unexpected(kill_worker(w, ex, "sent a garbled reply: " + frame.error().message));
      if (!*frame) break;
      auto reply = tool_protocol::decode_reply(**frame);
      if (!reply) return std::unexpected(kill_worker(w, ex, "sent a garbled reply: " + reply.error().message));
      ex.heard = true;
      if (reply->is_stage) {
        ex.tool = reply->tool;
        ex.stage = reply->stage;
        continue;
      }
      // An answer with bytes after it, or one before the whole request was read, is a
      // worker out of step with this protocol.
      if (!in.empty() || sent < out.size())
        return std::unexpected(kill_worker(w, ex, "sent a reply out of step with the protocol"));
      dead = false;
      return std::move(reply->result);
    }
  }
}

}  // namespace

Result<std::size_t> tool_worker_cap() {
  if (!env::get(env::jitcache_tool_workers)) return usable_cpus();
  const std::uint64_t n = JC_TRY(env::get_uint(env::jitcache_tool_workers));
  if (n == 0)
    return make_error(ErrorCode::invalid_input,
                      std::string(env::jitcache_tool_workers.name) + "=0: expected at least 1 worker");
  return static_cast<std::size_t>(n);
}

Result<SourceOutput> compile_in_worker(const SourceInput& input) {
  const auto path = JC_TRY(find_tool_worker());
  const auto timeout = JC_TRY(tool_timeout());
  const auto cap = JC_TRY(tool_worker_cap());
  Worker w = JC_TRY(pool().acquire(path, cap));
  bool dead = true;
  auto result = exchange(w, input, timeout, dead);
  if (dead) pool().ended();
  else pool().give_back(std::move(w));
  return result;
}

void drop_idle_tool_workers() { pool().drop_all(); }

}  // namespace jitcache
