// Tool isolation (runtime/compile/tool_worker.hpp): a worker that exits, aborts, is killed,
// hangs, prints garbage or breaks the protocol fails one compile with ErrorCode::compile
// naming the tool, the stage and how the worker ended, and this process lives on. Fake
// workers are shell scripts set through JITCACHE_TOOL_WORKER; the real one meets a
// corrupted NVVM bitcode on which libNVVM calls exit(1).
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "build_id_copy.hpp"
#include "runtime/compile/nvrtc_library.hpp"
#include "runtime/compile/nvvm_library.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "runtime/compile/tool_protocol.hpp"
#include "runtime/compile/tool_worker.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using testing::ScopedEnv;

std::string golden(const std::string& name) {
  std::ifstream in(testing::source_dir() / "tests" / "runtime" / "compile" / "golden" / name, std::ios::binary);
  EXPECT_TRUE(in) << "missing golden file " << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A source for sm_90 of `kind` whose kernel is `entry`, named `name` in messages.
SourceInput sm_90_input(SourceKind kind, std::string text, std::string entry, std::string name = {}) {
  SourceInput in;
  in.kind = kind;
  in.text = std::move(text);
  in.entry = std::move(entry);
  in.target = "sm_90";
  in.name = std::move(name);
  return in;
}

SourceInput ptx_input() {
  return sm_90_input(SourceKind::ptx, ".version 8.0\n.target sm_90\n.address_size 64\n", "axpy", "fake.ptx");
}

class ToolWorker : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    drop_idle_tool_workers();
  }
  void TearDown() override {
    drop_idle_tool_workers();
    TempDirTest::TearDown();
  }
  // A fake worker: a shell script with `body`, set as JITCACHE_TOOL_WORKER. Unless `tool` is
  // empty it first says, as the real worker does, that it calls `tool`: what fails after
  // that is the tool's failure (a worker that never spoke is no worker at all).
  void fake(const std::string& body, const std::string& tool = "nvJitLink") {
    const auto path = dir() / "fake-worker";
    const auto stage = dir() / "stage-frame";
    tool_protocol::Bytes frame;
    tool_protocol::append_frame(frame, tool_protocol::encode_stage(tool, "its first call"));
    std::ofstream(stage, std::ios::binary).write(reinterpret_cast<const char*>(frame.data()),
                                                 static_cast<std::streamsize>(frame.size()));
    std::ofstream(path) << "#!/bin/sh\n"
                        << (tool.empty() ? "" : "cat '" + stage.string() + "' >&3\n") << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    m_env.set("JITCACHE_TOOL_WORKER", path.string());
  }
  Error failed(const SourceInput& in = ptx_input()) {
    auto r = compile_source(in);
    EXPECT_FALSE(r) << "compiled with a broken worker";
    if (r) return {};
    EXPECT_EQ(r.error().code, ErrorCode::compile) << r.error().to_string();
    return r.error();
  }
  // Each of `values` in `variable` makes a compile invalid input naming the variable.
  void expect_each_value_refused(const char* variable, std::initializer_list<const char*> values) {
    for (const char* value : values) {
      m_env.set(variable, value);
      auto r = compile_source(ptx_input());
      ASSERT_FALSE(r) << value;
      EXPECT_EQ(r.error().code, ErrorCode::invalid_input) << value;
      EXPECT_TRUE(r.error().message.find(variable) != std::string::npos) << r.error().to_string();
    }
  }
  ScopedEnv m_env;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Expects the error's message (or detail) to hold each of `parts`; a missing one is named
// with the whole error.
void expect_message_has(const Error& e, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_TRUE(has(e.message, part)) << "'" << part << "' in " << e.to_string();
}
void expect_detail_has(const Error& e, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_TRUE(has(e.detail, part)) << "'" << part << "' in " << e.to_string();
}

TEST_F(ToolWorker, AWorkerThatExitsSilentlyIsACompileErrorNamingTheToolAndStatus) {
  fake("exit 1");
  const Error e = failed();
  expect_message_has(e, {"nvJitLink", "exited with status 1", "fake.ptx for sm_90"});
}

TEST_F(ToolWorker, AnAbortIsNamedBySignal) {
  fake("kill -ABRT $$");
  EXPECT_TRUE(has(failed().message, "SIGABRT")) << failed().to_string();
}

TEST_F(ToolWorker, AKilledWorkerIsNamedBySignal) {
  fake("kill -KILL $$");
  EXPECT_TRUE(has(failed().message, "SIGKILL"));
}

TEST_F(ToolWorker, AHangIsKilledAfterTheTimeout) {
  fake("exec sleep 30");
  m_env.set("JITCACHE_TOOL_TIMEOUT_MS", "300");
  const auto started = std::chrono::steady_clock::now();
  const Error e = failed();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  expect_message_has(e, {"did not answer within 300 ms (JITCACHE_TOOL_TIMEOUT_MS)", "SIGKILL"});
}

TEST_F(ToolWorker, WhatTheWorkerPrintsIsInTheErrorNotTheProtocol) {
  fake("echo 'garbage on stdout'; echo 'oops on stderr' >&2; exit 3");
  const Error e = failed();
  EXPECT_TRUE(has(e.message, "exited with status 3")) << e.to_string();
  expect_detail_has(e, {"garbage on stdout", "oops on stderr"});
}

TEST_F(ToolWorker, ALongOutputKeepsOnlyItsTail) {
  fake("i=0; while [ $i -lt 3000 ]; do echo \"line $i of a long and noisy tool output\"; i=$((i+1)); done; exit 1");
  const Error e = failed();
  EXPECT_TRUE(has(e.detail, "line 2999 of")) << e.detail.substr(e.detail.size() - 200);
  EXPECT_FALSE(has(e.detail, "line 0 of")) << "the whole output was kept";
  EXPECT_LT(e.detail.size(), 70u * 1024);
}

TEST_F(ToolWorker, ATruncatedReplyIsAnError) {
  fake("printf '\\144\\000\\000\\000abc' >&3; exit 0");
  const Error e = failed();
  EXPECT_TRUE(has(e.message, "exited with status 0")) << e.to_string();
}

TEST_F(ToolWorker, AGarbledReplyKillsTheWorker) {
  fake("printf '\\003\\000\\000\\000\\377\\377\\377' >&3; exec sleep 30");
  const Error e = failed();
  expect_message_has(e, {"garbled reply", "SIGKILL"});
}

TEST_F(ToolWorker, AnAbsurdFrameLengthKillsTheWorker) {
  fake("printf '\\377\\377\\377\\377' >&3; exec sleep 30");
  EXPECT_TRUE(has(failed().message, "garbled"));
}

TEST_F(ToolWorker, AHostThatIgnoresSigchldStillGetsAnError) {
  fake("exit 1");
  struct sigaction ignore {}, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGCHLD, &ignore, &old);
  const Error e = failed();
  ::sigaction(SIGCHLD, &old, nullptr);
  EXPECT_TRUE(has(e.message, "nvJitLink")) << e.to_string();
}

// A program that is not the worker (it ends, or answers garbage, before its first word)
// never reached a tool: unavailable, naming the variable, not a compile error of the source.
TEST_F(ToolWorker, AProgramThatIsNotTheWorkerIsUnavailableNotACompileError) {
  for (const std::string body : {"exit 0", "exit 1", "printf '\\003\\000\\000\\000\\377\\377\\377' >&3; exec sleep 30",
                                 "exec cat <&3 >&3"}) {
    fake(body, "");
    auto r = compile_source(ptx_input());
    ASSERT_FALSE(r) << body;
    EXPECT_EQ(r.error().code, ErrorCode::unavailable) << body << ": " << r.error().to_string();
    expect_message_has(r.error(), {"JITCACHE_TOOL_WORKER", "not a working jitcache-tool-worker"});
    drop_idle_tool_workers();
  }
  m_env.set("JITCACHE_TOOL_WORKER", "/bin/true");
  auto r = compile_source(ptx_input());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable) << r.error().to_string();
}

TEST_F(ToolWorker, AMissingWorkerIsUnavailableNamingTheVariable) {
  m_env.set("JITCACHE_TOOL_WORKER", (dir() / "no-such-worker").string());
  auto r = compile_source(ptx_input());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable);
  EXPECT_TRUE(has(r.error().message, "JITCACHE_TOOL_WORKER")) << r.error().to_string();
}

TEST_F(ToolWorker, ABadTimeoutIsRefusedNamingTheVariable) {
  expect_each_value_refused("JITCACHE_TOOL_TIMEOUT_MS", {"0", "soon", "-5"});
}

TEST_F(ToolWorker, TrustedInputCompilesInThisProcess) {
  fake("exit 1", "NVRTC");  // would fail any compile that went to a worker
  SourceInput in = sm_90_input(SourceKind::cuda, golden("axpy.cu"), "axpy");
  in.trusted = true;
  ASSERT_OK(compile_source(in));
  in.trusted = false;
  EXPECT_TRUE(has(failed(in).message, "NVRTC")) << failed(in).to_string();
}

TEST_F(ToolWorker, TheRealWorkerIsReusedAndSurvivesItsCallersBadInput) {
  auto first = compile_source(ptx_input());  // bad PTX: nvJitLink's own error
  ASSERT_FALSE(first);
  EXPECT_TRUE(has(first.error().message, "of fake.ptx for sm_90")) << first.error().to_string();
  auto second = compile_source(ptx_input());
  ASSERT_FALSE(second);
  EXPECT_EQ(first.error().message, second.error().message);
}

// This process's children that are alive now, from /proc.
std::vector<pid_t> live_children() {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after its last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    pid_t ppid = -1;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == ::getpid() && state != 'Z') found.push_back(std::stoi(name));
  }
  return found;
}

// posix_spawn closes only close-on-exec descriptors. A pipe of the caller's without it must
// not be held open by the pooled worker: its reader would never see the end.
TEST_F(ToolWorker, TheWorkerHoldsNoneOfTheCallersDescriptors) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // inheritable on purpose
  const int read_end = fds[0];
  ASSERT_FALSE(compile_source(ptx_input()));  // nvJitLink refuses it; the worker stays idle
  const auto workers = live_children();
  ASSERT_EQ(workers.size(), 1u);
  struct stat pipe_stat {};
  ASSERT_EQ(::fstat(read_end, &pipe_stat), 0);
  const std::string pipe_link = "pipe:[" + std::to_string(pipe_stat.st_ino) + "]";
  std::vector<std::string> held;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(workers[0]) + "/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    const int fd = std::stoi(entry.path().filename().string());
    if (fd > 3 || target == pipe_link) held.push_back(std::to_string(fd) + " -> " + target.string());
  }
  ::close(fds[1]);
  EXPECT_TRUE(held.empty()) << "the worker holds: " << ::testing::PrintToString(held);
  ASSERT_EQ(::fcntl(read_end, F_SETFL, O_NONBLOCK), 0);
  char byte;
  EXPECT_EQ(::read(read_end, &byte, 1), 0) << "no end of the pipe while the worker lives";
  EXPECT_EQ(live_children().size(), 1u) << "the worker ended";
  ::close(read_end);
}

// glibc before 2.34 (the wheel's floor is 2.28) has no posix_spawn action that closes
// descriptors: the spawner then starts the worker with --close-inherited, and the worker
// closes every descriptor above its socket itself before it reads a request. Started so
// here, by hand, with an inheritable pipe and one more descriptor beside its socket.
TEST(ToolWorkerStart, AWorkerToldSoClosesTheCallersDescriptorsItself) {
  const auto worker = find_tool_worker();
  ASSERT_TRUE(worker) << worker.error().to_string();
  int sock[2], fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock), 0);
  ASSERT_EQ(::pipe(fds), 0);  // inheritable on purpose
  const int extra = ::fcntl(fds[1], F_DUPFD, 20);  // inheritable too, far above the socket
  ASSERT_GE(extra, 20);
  const std::string program = worker->string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // only async-signal-safe calls until exec
    if (::dup2(sock[1], 3) != 3) ::_exit(126);
    ::execl(program.c_str(), program.c_str(), k_tool_worker_close_inherited, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sock[1]);
  ::close(fds[1]);
  ::close(extra);
  // The worker closes them before it waits for its first request: poll its table a while.
  std::vector<std::string> held;
  for (int i = 0; i < 500; ++i) {
    held.clear();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      const int fd = std::stoi(entry.path().filename().string());
      if (fd > 3) held.push_back(std::to_string(fd) + " -> " + std::filesystem::read_symlink(entry.path(), ec).string());
    }
    if (held.empty() && !ec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(held.empty()) << "the worker holds: " << ::testing::PrintToString(held);
  ASSERT_EQ(::fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  char byte;
  EXPECT_EQ(::read(fds[0], &byte, 1), 0) << "no end of the pipe while the worker lives";
  ::close(sock[0]);  // the caller is gone: the worker ends, with status 0
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  ::close(fds[0]);
}

// More concurrent compiles than JITCACHE_TOOL_WORKERS: the others wait, and every one is
// answered.
TEST_F(ToolWorker, NoMoreWorkersLiveThanTheCap) {
  fake("sleep 0.3; exit 1");  // each compile: one worker for 0.3 s, then a compile error
  m_env.set("JITCACHE_TOOL_WORKERS", "2");
  std::atomic<bool> done{false};
  std::size_t peak = 0;
  std::thread watcher([&] {
    while (!done) {
      peak = std::max(peak, live_children().size());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> callers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 6; ++i)
    callers.emplace_back([&] {
      auto r = compile_source(ptx_input());
      if (!r && r.error().code == ErrorCode::compile && has(r.error().message, "exited with status 1")) ++failed;
    });
  for (auto& t : callers) t.join();
  done = true;
  watcher.join();
  EXPECT_EQ(failed, 6);
  EXPECT_EQ(peak, 2u);
}

TEST_F(ToolWorker, ABadWorkerCapIsRefusedNamingTheVariable) {
  expect_each_value_refused("JITCACHE_TOOL_WORKERS", {"0", "many", "-1", "100000000000000000000"});
}

// The worker is another program: its own search (which tells the Python environment by the
// program's path) could find other compilers than this process. It is handed the files
// this process found, in the variables that pick them; a variable of the caller's own
// with another value is replaced.
TEST_F(ToolWorker, TheWorkerIsHandedTheCompilersThisProcessFound) {
  const auto real = find_tool_worker();
  ASSERT_TRUE(real) << real.error().to_string();
  if (!locate_toolkit_file(ToolkitTool::nvrtc)) GTEST_SKIP() << "NVRTC is found by its soname only here";
  const auto seen = dir() / "worker-env";
  fake("env > '" + seen.string() + "'; exec '" + real->string() + "'");
  m_env.set("JITCACHE_NVVM", "");  // blank: unset for the search, replaced for the worker
  ASSERT_OK(compile_source(
      sm_90_input(SourceKind::cuda, "extern \"C\" __global__ void k(float* x) { x[0] = 2.0f; }\n", "k", "k.cu")));
  std::ifstream file(seen);
  const std::string env = "\n" + std::string((std::istreambuf_iterator<char>(file)), {});
  for (const ToolkitTool tool : {ToolkitTool::nvrtc, ToolkitTool::nvjitlink, ToolkitTool::nvvm}) {
    const auto located = locate_toolkit_file(tool);
    if (!located) continue;
    EXPECT_TRUE(has(env, "\n" + std::string(tool_env_name(tool)) + "=" + located->path + "\n")) << env;
  }
  EXPECT_FALSE(has(env, "\nJITCACHE_NVVM=\n")) << env;
}

// The worker finds its own tools. It may run the NVRTC this process keys its requests
// with from another directory (the same build: the keys do not tell places apart either),
// but one that runs another build compiles and nothing of it is served: the request's key
// would name a compiler that did not make the binary. "Another build" is a copy whose
// build-id note differs by one byte (build_id_copy.hpp), which loads and compiles as well.
class WorkerCompilerBuild : public ToolWorker {
 protected:
  // A worker that runs a copy of this process's NVRTC (and builtins) in `where`; the copy's
  // path. Empty when the NVRTC's directory cannot be told.
  std::filesystem::path run_copy(const std::string& where, testing::Build build) {
    const auto real = find_tool_worker();
    EXPECT_TRUE(real) << real.error().to_string();
    const auto nvrtc = nvrtc_library();
    EXPECT_TRUE(nvrtc) << nvrtc.error().to_string();
    if (!real || !nvrtc) return {};
    m_real_worker = *real;
    const std::filesystem::path file = (*nvrtc)->library.file;
    const std::filesystem::path copy = dir() / where / file.filename();
    testing::copy_library(file, copy, build);
    testing::copy_library(nvrtc_builtins_file(file, (*nvrtc)->version()),
                          nvrtc_builtins_file(copy, (*nvrtc)->version()), testing::Build::same);
    fake("JITCACHE_NVRTC='" + copy.string() + "' exec '" + real->string() + "'");
    return copy;
  }

  static SourceInput kernel() {
    return sm_90_input(SourceKind::cuda, "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n", "k", "k.cu");
  }

  std::filesystem::path m_real_worker;  // found before the fake one was set
};

TEST_F(WorkerCompilerBuild, TheSameBuildInAnotherDirectoryIsAccepted) {
  const auto copy = run_copy("same-build", testing::Build::same);
  ASSERT_FALSE(copy.empty());
  auto r = compile_source(kernel());
  ASSERT_TRUE(r) << r.error().to_string();
  // The worker did run the copy, and said so.
  EXPECT_TRUE(has(r->tool_files.at("nvrtc"), std::filesystem::canonical(copy).string())) << r->tool_files.at("nvrtc");
  const auto nvrtc = nvrtc_library();
  ASSERT_TRUE(nvrtc);
  EXPECT_EQ(r->tool_builds.at("nvrtc"), tool_build("nvrtc", (*nvrtc)->library.file, (*nvrtc)->version()));
}

TEST_F(WorkerCompilerBuild, AnotherBuildIsRefused) {
  const auto copy = run_copy("other-build", testing::Build::other);
  ASSERT_FALSE(copy.empty());
  auto r = compile_source(kernel());
  ASSERT_FALSE(r) << "a binary of another compiler build was served";
  EXPECT_EQ(r.error().code, ErrorCode::unavailable) << r.error().to_string();
  expect_message_has(r.error(), {"another nvrtc", std::filesystem::canonical(copy).string(), "nothing was stored"});
  // The same worker with the toolkit this process runs compiles.
  ASSERT_FALSE(m_real_worker.empty());
  m_env.set("JITCACHE_TOOL_WORKER", m_real_worker.string());
  drop_idle_tool_workers();
  auto ok = compile_source(kernel());
  EXPECT_TRUE(ok) << ok.error().to_string();
}

// Two builds of a library are told apart by their bytes wherever they lie (a copy patched
// under the same build-id note too); a file that is not a library by its bytes as well.
TEST_F(WorkerCompilerBuild, ABuildIsItsBytesNotItsPlaceNorItsNote) {
  const auto nvrtc = nvrtc_library();
  ASSERT_TRUE(nvrtc) << nvrtc.error().to_string();
  const std::filesystem::path file = (*nvrtc)->library.file;
  const std::string version = (*nvrtc)->version();
  const auto copy = [&](const std::string& where, testing::Build build) {
    const std::filesystem::path to = dir() / where / file.filename();
    testing::copy_library(file, to, build);
    testing::copy_library(nvrtc_builtins_file(file, version), nvrtc_builtins_file(to, version), testing::Build::same);
    return to;
  };
  const auto same = tool_build("nvrtc", copy("same", testing::Build::same), version);
  const auto other = tool_build("nvrtc", copy("other", testing::Build::other), version);
  ASSERT_TRUE(same && other);
  EXPECT_EQ(*same, tool_build("nvrtc", file, version));
  EXPECT_NE(*other, *same);
  EXPECT_TRUE(same->starts_with("nvrtc " + version + " build ")) << *same;
  const auto patched = tool_build("nvrtc", copy("patched", testing::Build::patched), version);
  ASSERT_TRUE(patched);
  EXPECT_NE(*patched, *same);
  // Any file is its bytes: two equal files are one build, a changed byte another.
  const std::filesystem::path bare_a = dir() / "bare-a.so", bare_b = dir() / "bare-b.so";
  std::ofstream(bare_a) << "not an ELF file";
  std::ofstream(bare_b) << "not an ELF file!";
  const auto a = tool_build("nvjitlink", bare_a, "13.0"), b = tool_build("nvjitlink", bare_b, "13.0");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(a->starts_with("nvjitlink content xxh3-128 ")) << *a;
  EXPECT_FALSE(tool_build("nvjitlink", dir() / "absent.so", "13.0"));
}

// The builds travel with the answer; an answer without them (a worker of an older
// jitcache) decodes with none, and is then held to the same files.
TEST(ToolProtocol, ToolBuildsRoundTripAndMayBeAbsent) {
  SourceOutput out;
  out.cubin = {0x7f, 'E', 'L', 'F'};
  out.tools["nvrtc"] = "13.0";
  out.tool_files["nvrtc"] = "/x/libnvrtc.so.13 size 1";
  out.tool_builds["nvrtc"] = "nvrtc 13.0 build 0123456789abcdef0123456789abcdef";
  const auto frame = tool_protocol::encode_result(out);
  const auto reply = tool_protocol::decode_reply(frame);
  ASSERT_TRUE(reply) << reply.error().to_string();
  ASSERT_TRUE(reply->result) << reply->result.error().to_string();
  EXPECT_EQ(reply->result->tool_builds, out.tool_builds);
  EXPECT_EQ(reply->result->tool_files, out.tool_files);

  SourceOutput older = out;
  older.tool_builds.clear();
  auto doc = nlohmann::json::from_cbor(tool_protocol::encode_result(older));
  doc["output"].erase("tool_builds");
  const auto bytes = nlohmann::json::to_cbor(doc);
  const auto old_reply = tool_protocol::decode_reply(tool_protocol::Bytes(bytes.begin(), bytes.end()));
  ASSERT_TRUE(old_reply) << old_reply.error().to_string();
  ASSERT_TRUE(old_reply->result);
  EXPECT_TRUE(old_reply->result->tool_builds.empty());
  EXPECT_EQ(old_reply->result->tool_files, out.tool_files);
}

// On main, libNVVM called exit(1) in this process for this input: the test program ended.
TEST_F(ToolWorker, CorruptedBitcodeThatMakesLibNvvmExitIsACompileError) {
  if (!nvvm_library()) GTEST_SKIP() << "no libNVVM";
  std::string bitcode = golden("axpy_nvvm.bc");
  ASSERT_GT(bitcode.size(), 44u);
  bitcode[44] = static_cast<char>(bitcode[44] ^ 0xff);
  const Error e = failed(sm_90_input(SourceKind::nvvm, bitcode, "axpy", "corrupted.bc"));
  expect_message_has(e, {
      "libNVVM",
      "exited with status 1",
      "nvvm",  // the stage: an nvvm* call
      "corrupted.bc for sm_90",
  });
}

// A fixed, deterministic subset of the single-byte corruptions of the golden bitcode and
// of the axpy's PTX (bench_tool_fuzz sweeps every byte): each gives a cubin or an error,
// never the end of this process. Bounded to well under a minute on two cores.
TEST_F(ToolWorker, SingleByteCorruptionsOfNvvmAndPtxAlwaysAnswer) {
  if (!nvvm_library()) GTEST_SKIP() << "no libNVVM";
  SourceInput cu;
  cu.kind = SourceKind::cuda;
  cu.text = golden("axpy.cu");
  cu.entry = "axpy";
  cu.target = "sm_90";
  cu.trusted = true;
  auto ptx = compile_source(cu);
  ASSERT_OK(ptx);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int answered = 0, worker_ends = 0;
  for (const auto& [kind, text, count] :
       {std::tuple{SourceKind::nvvm, golden("axpy_nvvm.bc"), 60}, std::tuple{SourceKind::ptx, ptx->ptx, 40}}) {
    const std::uint8_t patterns[] = {0xff, 0x01, 0x80, 0x20};
    for (int i = 0; i < count; ++i) {
      // Spread over the whole input, the header densely (most of libNVVM's exits are there).
      const std::size_t at = i < count / 3 ? static_cast<std::size_t>(36 + i) : (text.size() * i) / count;
      SourceInput in = sm_90_input(kind, text, "axpy");
      in.text[at] = static_cast<char>(in.text[at] ^ patterns[i % 4]);
      auto r = compile_source(in);
      ++answered;
      if (!r) {
        EXPECT_TRUE(r.error().code == ErrorCode::compile) << "byte " << at << ": " << r.error().to_string();
        worker_ends += has(r.error().message, k_tool_worker_name) ? 1 : 0;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the corruption run is too slow";
    }
  }
  EXPECT_EQ(answered, 100);
  EXPECT_GT(worker_ends, 0) << "no corruption made a tool end its worker: the subset misses the known exits";
}

}  // namespace
}  // namespace jitcache
