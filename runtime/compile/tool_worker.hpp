// Tool isolation: libNVVM, nvJitLink and NVRTC compiling a source from outside run in a
// child process, `jitcache-tool-worker`, so that a tool that calls exit(), aborts, takes a
// signal or hangs ends that child, never the caller. The caller gets ErrorCode::compile
// naming the tool, the stage it was in, how the worker ended (exit status or signal name)
// and whatever the worker wrote to stdout and stderr. A worker that fails before its first
// message never reached a tool: that is ErrorCode::unavailable (JITCACHE_TOOL_WORKER names
// another program, a broken install), the environment's problem, not the source's.
//
// The worker is spawned with posix_spawn (safe in a multithreaded host) and talks over an
// AF_UNIX socketpair; its stdout and stderr go to a separate pipe, so a tool's printing can
// never corrupt the protocol. The worker inherits no other descriptor of the caller. Idle
// workers are kept in a small per-process pool: libNVVM and nvJitLink load once per
// worker, and a steady compile pays only the message exchange. At most
// JITCACHE_TOOL_WORKERS workers live at once (default: the CPUs this process may use);
// further requests wait for one. A worker that failed in any way is killed, reaped and
// never reused.
//
// The protocol: frames of a 4-byte little-endian length and a CBOR document. The caller
// sends one request (a SourceInput); the worker answers with any number of stage frames
// ({"tool", "stage"}, sent before each tool call) and one final frame, the SourceOutput or
// the Error of compile_source_in_process.
//
// Where the worker is (the first that exists): $JITCACHE_TOOL_WORKER; beside the module
// that holds this code (the program, or libjitcache.so), then ../libexec/jitcache/ from
// there; beside /proc/self/exe, then ../libexec/jitcache/ from there.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/source_compiler.hpp"

namespace jitcache {

inline constexpr const char* k_tool_worker_name = "jitcache-tool-worker";
// The worker's one argument, given by a spawner that could not close the caller's
// inheritable descriptors itself (glibc before 2.34): the worker closes them first.
inline constexpr char k_tool_worker_close_inherited[] = "--close-inherited";

// The tool that reads a source of `kind` first: "NVRTC", "libNVVM", "nvJitLink"
// (defined in source_compiler.cpp).
const char* source_tool_name(SourceKind kind);

// The worker's main(): serves requests on file descriptor 3 until the caller closes it.
int tool_worker_main(int argc, char** argv);

// The worker executable: the first place of the search above that holds one, or
// ErrorCode::unavailable naming every place searched and JITCACHE_TOOL_WORKER.
Result<std::filesystem::path> find_tool_worker();

// How long one request may take in the worker (JITCACHE_TOOL_TIMEOUT_MS, default 300 s);
// an invalid value is an ErrorCode::invalid_input naming the variable.
Result<std::chrono::milliseconds> tool_timeout();

// The most workers that live at once (JITCACHE_TOOL_WORKERS, default the CPUs this process
// may run on); 0 or a value that is not a number is an ErrorCode::invalid_input naming the
// variable.
Result<std::size_t> tool_worker_cap();

// compile_source_in_process(input), run in a worker from the pool.
Result<SourceOutput> compile_in_worker(const SourceInput& input);

// Kills and reaps every idle worker of this process (tests, and benchmarks that measure a
// first spawn).
void drop_idle_tool_workers();

}  // namespace jitcache
