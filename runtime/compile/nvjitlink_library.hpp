// nvJitLink (PTX -> cubin, with the ptxas it embeds), opened at its first use
// (toolkit_library.hpp says why and where). nvJitLink.h maps every call to a versioned
// symbol (__nvJitLinkCreate_13_0) through static inline wrappers; the library exports
// the plain names too, and those exist in 12.x and 13.x alike, so the plain names are
// resolved here, with function types declared from the documented signatures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/toolkit_library.hpp"

namespace jitcache {

namespace nvjitlink {
using Result = int;  // nvJitLinkResult; 0 is NVJITLINK_SUCCESS
using Handle = struct nvJitLink*;
inline constexpr Result k_success = 0;
inline constexpr int k_input_ptx = 2;  // NVJITLINK_INPUT_PTX
// nvJitLinkResult's names, for messages ("NVJITLINK_ERROR_PTX_COMPILE (4)").
std::string result_name(Result result);
}  // namespace nvjitlink

struct NvJitLinkLibrary {
  ToolkitLibrary library;
  unsigned major = 0, minor = 0;  // nvJitLinkVersion

  nvjitlink::Result (*create)(nvjitlink::Handle*, std::uint32_t, const char**) = nullptr;
  nvjitlink::Result (*destroy)(nvjitlink::Handle*) = nullptr;
  nvjitlink::Result (*add_data)(nvjitlink::Handle, int, const void*, std::size_t, const char*) = nullptr;
  nvjitlink::Result (*complete)(nvjitlink::Handle) = nullptr;
  nvjitlink::Result (*get_linked_cubin_size)(nvjitlink::Handle, std::size_t*) = nullptr;
  nvjitlink::Result (*get_linked_cubin)(nvjitlink::Handle, void*) = nullptr;
  nvjitlink::Result (*get_error_log_size)(nvjitlink::Handle, std::size_t*) = nullptr;
  nvjitlink::Result (*get_error_log)(nvjitlink::Handle, char*) = nullptr;
  nvjitlink::Result (*get_info_log_size)(nvjitlink::Handle, std::size_t*) = nullptr;
  nvjitlink::Result (*get_info_log)(nvjitlink::Handle, char*) = nullptr;

  // "13.0"
  std::string version() const;
  // Version plus the build (its GNU build-id, else the file's path and times). Readable.
  std::string identity;
};

// Opens and resolves one nvJitLink from `candidates` (a test can point it elsewhere).
Result<NvJitLinkLibrary> load_nvjitlink(const std::vector<ToolkitCandidate>& candidates);

// The process's nvJitLink, loaded once (thread-safe) on the first call; a failure is
// remembered and returned to every later call.
Result<const NvJitLinkLibrary*> nvjitlink_library();

// fingerprint_digest(identity) of the process's nvJitLink: for cache keys.
Result<std::string> nvjitlink_fingerprint();

}  // namespace jitcache
