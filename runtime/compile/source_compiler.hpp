// Kernels from outside: one entry point that turns engine-supplied source into a cubin
// for an exact target, through one of three paths.
//
//   cuda  CUDA C++ (+ named headers) -> NVRTC -> PTX and cubin
//   nvvm  NVVM IR, text or bitcode   -> libNVVM (verify, then compile) -> PTX -> nvJitLink -> cubin
//   ptx   PTX                        -> nvJitLink -> cubin
//
// libNVVM and nvJitLink are opened at their first use (nvvm_library.hpp,
// nvjitlink_library.hpp): a process that only compiles CUDA C++ never loads them, and a
// toolkit without them fails only the requests that need them, with ErrorCode::unavailable.
//
// What every path guarantees:
// - The target is checked before any tool runs: one of supported_targets()
//   (kernel_templates/kernel_spec.hpp); an option that sets the architecture is refused,
//   the target owns it.
// - Neither libNVVM nor nvJitLink knows about entries, and LTO drops kernels silently, so
//   the linked cubin's ELF symbol table must hold `entry` as a function (cubin_elf.hpp);
//   else an error lists the functions that are there.
// - Every tool failure is ErrorCode::compile whose message names the tool, the stage (the
//   failing call) and the target, and whose detail holds the options and the tool's full
//   log (libNVVM's program log; nvJitLink's error and info logs). Tool handles are
//   destroyed on every path out.
// - Resources come from ptxas' report (NVRTC's --ptxas-options=-v, nvJitLink's -verbose),
//   parsed by parse_ptxas_usage.
//
// This is the compile step only: it knows no cache key, no family and no spec. A caller
// that caches the result keys it on the input (kind, text, headers, entry, target,
// options) and on the fingerprints of the tools in SourceOutput::tools:
// Compiler::fingerprint() for NVRTC, nvvm_fingerprint() and nvjitlink_fingerprint().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitcache/compile.hpp"  // SourceKind
#include "jitcache/error.hpp"
#include "runtime/compile/compiler.hpp"  // ResourceUsage

namespace jitcache {

struct SourceInput {
  SourceKind kind = SourceKind::cuda;
  // CUDA C++, NVVM IR (text, or bitcode bytes as they are), or PTX text.
  std::string text;
  // Named headers (include name, text) the CUDA source may #include; cuda only.
  std::vector<std::pair<std::string, std::string>> headers;
  // The kernel's symbol (extern "C" name, or the mangled one).
  std::string entry;
  // An exact target: "sm_90", "sm_100a", "sm_120a", ...
  std::string target;
  // Extra options for the tool that reads the source: NVRTC (cuda), libNVVM's verify and
  // compile (nvvm), nvJitLink (ptx). No architecture option. (For cuda, NVRTC gets the
  // architecture option, then --ptxas-options=-v unless these hold it already, then these.)
  std::vector<std::string> options;
  // For messages and the tools' logs; empty: "input.cu", "input.ll" or "input.ptx".
  std::string name;
  // jitcache's own generated kernels (the NVRTC back end): compiled in this process. Every
  // other input is compiled in the tool worker (tool_worker.hpp).
  bool trusted = false;
};

// The line that starts NVRTC's part of SourceOutput::log.
inline constexpr std::string_view k_nvrtc_log_heading = "== NVRTC ==\n";

struct SourceOutput {
  std::vector<std::uint8_t> cubin;
  std::string ptx;  // the PTX the cubin was assembled from (the input itself for ptx)
  ResourceUsage usage;
  // Every tool's log, in order, each under a "== tool ==" line.
  std::string log;
  double compile_ms = 0.0;
  // Each tool that touched the binary -> its version: "nvrtc", "libnvvm", "nvjitlink".
  std::map<std::string, std::string> tools;
  // The options each tool was given, in the order it ran, as "tool: option".
  std::vector<std::string> effective_options;
  // Each tool that ran -> the library file it ran from (describe_file: path, size, times,
  // inode), for messages.
  std::map<std::string, std::string> tool_files;
  // Each tool that ran -> the build it ran (tool_build). A worker loads its own copies of
  // the tools; compile_source checks that they are the builds this process keys its
  // requests with, wherever they lie. (A worker that does not send it is held to the same
  // files instead.)
  std::map<std::string, std::string> tool_builds;
};

// What tells one build of `tool` ("nvrtc", "libnvvm", "nvjitlink") of `version` in `file`
// from another, as the keys do: by what its bytes are, "nvrtc 13.0 build <fingerprint>"
// (nvrtc_file_fingerprint: its contents' and its builtins'), "<tool> content xxh3-128
// <digest>", or for a file that cannot be read whole the file itself (describe_file: path,
// size, times, inode). std::nullopt when the file cannot be stat'ed.
std::optional<std::string> tool_build(const std::string& tool, const std::filesystem::path& file,
                                      const std::string& version);

// Checks the input (source_rules.hpp for CUDA C++), then compiles it: in this process when
// it is trusted, else in the tool worker, so that a tool that exits, aborts, takes a signal
// or hangs fails this call with ErrorCode::compile instead of ending the caller.
Result<SourceOutput> compile_source(const SourceInput& input);

// The same checks and compile, always in this process: what the tool worker runs.
Result<SourceOutput> compile_source_in_process(const SourceInput& input);

// Called before each tool call with the tool ("libNVVM") and the call
// ("nvvmCompileProgram"); the tool worker reports them to its caller, so that a worker
// that dies names where. Null (the default): nothing is called. Process-wide.
using StageObserver = void (*)(const char* tool, const char* stage);
void set_stage_observer(StageObserver observer);
void note_stage(const char* tool, const char* stage);

}  // namespace jitcache
