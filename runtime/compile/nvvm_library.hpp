// libNVVM (NVVM IR -> PTX), opened at its first use (toolkit_library.hpp says why and
// where it is looked for). The function types are declared here from nvvm.h's documented
// signatures, so no toolkit header is needed to build: a classic toolkit keeps nvvm.h in
// nvvm/include, outside the toolkit's include directory.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/toolkit_library.hpp"

namespace jitcache {

namespace nvvm {
using Result = int;  // nvvmResult; 0 is NVVM_SUCCESS
using Program = struct _nvvmProgram*;
inline constexpr Result k_success = 0;
// nvvmResult's names, for messages ("NVVM_ERROR_INVALID_IR (6)").
std::string result_name(Result result);
}  // namespace nvvm

struct NvvmLibrary {
  ToolkitLibrary library;
  int major = 0, minor = 0;                  // nvvmVersion
  int ir_major = 0, ir_minor = 0;            // nvvmIRVersion: the NVVM IR it reads
  int debug_major = 0, debug_minor = 0;      // ... and its debug metadata version

  nvvm::Result (*create_program)(nvvm::Program*) = nullptr;
  nvvm::Result (*destroy_program)(nvvm::Program*) = nullptr;
  nvvm::Result (*add_module)(nvvm::Program, const char*, std::size_t, const char*) = nullptr;
  nvvm::Result (*verify_program)(nvvm::Program, int, const char**) = nullptr;
  nvvm::Result (*compile_program)(nvvm::Program, int, const char**) = nullptr;
  nvvm::Result (*get_compiled_result_size)(nvvm::Program, std::size_t*) = nullptr;
  nvvm::Result (*get_compiled_result)(nvvm::Program, char*) = nullptr;
  nvvm::Result (*get_program_log_size)(nvvm::Program, std::size_t*) = nullptr;
  nvvm::Result (*get_program_log)(nvvm::Program, char*) = nullptr;

  // "2.0 (NVVM IR 2.0, debug 3.2)"
  std::string version() const;
  // Versions plus the build: its GNU build-id (the same in every copy, and another for
  // another build that reports the same 2.0, as CUDA 13.0's and 13.5's do), or for a file
  // without that note its path, size, times and inode. Readable, for facts.
  std::string identity;
};

// Opens and resolves one libNVVM from `candidates` (a test can point it elsewhere).
Result<NvvmLibrary> load_nvvm(const std::vector<ToolkitCandidate>& candidates);

// The process's libNVVM, loaded once (thread-safe) on the first call; a failure is
// remembered and returned to every later call.
Result<const NvvmLibrary*> nvvm_library();

// fingerprint_digest(identity) of the process's libNVVM: for cache keys.
Result<std::string> nvvm_fingerprint();

}  // namespace jitcache
