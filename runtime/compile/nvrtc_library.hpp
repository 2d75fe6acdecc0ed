// NVRTC, opened at its first use (toolkit_search.hpp says where it is looked for) instead
// of linked: a process that only hits its cache never maps its 100 MB, and the library
// runs on a machine whose only NVRTC is NVIDIA's pip package. nvrtc.h is still used, for
// the types; every function jitcache calls is resolved here by its exported name.
//
// Its fingerprint (the compiler_fingerprint fact of every kernel key) is what its bytes
// are, not the place it was found nor what it claims: a digest of the version and of the
// whole contents of libnvrtc and of the libnvrtc-builtins it loads (which shapes its
// output), toolkit_trust.hpp. The same build in a toolkit and in a pip package gives one
// key; another build, or a copy patched under an intact GNU build-id note, another key.
// Hashing ~100 MB takes tens of milliseconds once per machine: the cache root's memo keeps
// the result by the files' device, inode, size and times (nvrtc_compiler.cpp).
#pragma once

#include <nvrtc.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "runtime/compile/toolkit_search.hpp"

namespace jitcache {

struct NvrtcLibrary {
  ToolkitLibrary library;
  int major = 0, minor = 0;  // nvrtcVersion

  decltype(&::nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetPTXSize) get_ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) get_ptx = nullptr;
  decltype(&::nvrtcGetCUBINSize) get_cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) get_cubin = nullptr;
  decltype(&::nvrtcGetProgramLogSize) get_program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) get_program_log = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) get_num_supported_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) get_supported_archs = nullptr;

  // "13.0"
  std::string version() const;
};

// Opens and resolves one NVRTC from `candidates` (a test can point it elsewhere). None
// loads: ErrorCode::unavailable naming every place searched and the pip package.
Result<NvrtcLibrary> load_nvrtc(const std::vector<ToolkitCandidate>& candidates);

// The process's NVRTC, loaded once (thread-safe) on the first call and logged at INFO
// with its path; a failure is remembered and returned to every later call.
Result<const NvrtcLibrary*> nvrtc_library();

// The libnvrtc-builtins file that the NVRTC `library` of `version` ("13.0") loads: beside it.
std::filesystem::path nvrtc_builtins_file(const std::filesystem::path& library, const std::string& version);

// NVRTC's version told by the files beside `library`, without loading it: NVRTC loads
// libnvrtc-builtins.so.<major>.<minor> of its own version from its directory, so the one
// such file there names it. std::nullopt when there is none, or several versions.
std::optional<std::string> nvrtc_version_from_files(const std::filesystem::path& library);

// The fingerprint of an NVRTC of `version` whose file's contents digest to `nvrtc_digest`,
// loading builtins whose contents digest to `builtins_digest` (std::nullopt: that file is
// absent, which is part of what is hashed).
std::string nvrtc_content_fingerprint(const std::string& version, const std::string& nvrtc_digest,
                                      const std::optional<std::string>& builtins_digest);

// The fingerprint of the NVRTC file `library` of `version`, from the files' bytes;
// std::nullopt when libnvrtc cannot be read whole.
std::optional<std::string> nvrtc_file_fingerprint(const std::filesystem::path& library, const std::string& version);

}  // namespace jitcache
