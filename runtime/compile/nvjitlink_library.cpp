#include "runtime/compile/nvjitlink_library.hpp"

#include <array>

namespace jitcache {

std::string nvjitlink::result_name(nvjitlink::Result result) {
  static constexpr std::array<const char*, 19> k_names = {
      "NVJITLINK_SUCCESS",
      "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
      "NVJITLINK_ERROR_MISSING_ARCH",
      "NVJITLINK_ERROR_INVALID_INPUT",
      "NVJITLINK_ERROR_PTX_COMPILE",
      "NVJITLINK_ERROR_NVVM_COMPILE",
      "NVJITLINK_ERROR_INTERNAL",
      "NVJITLINK_ERROR_THREADPOOL",
      "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
      "NVJITLINK_ERROR_FINALIZE",
      "NVJITLINK_ERROR_NULL_INPUT",
      "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
      "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
      "NVJITLINK_ERROR_ARCH_MISMATCH",
      "NVJITLINK_ERROR_OUTDATED_LIBRARY",
      "NVJITLINK_ERROR_MISSING_FATBIN",
      "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
      "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
      "NVJITLINK_ERROR_LTO_NOT_ENABLED",
  };
  return jitcache::result_name(k_names, "NVJITLINK_ERROR_UNKNOWN", result);
}

std::string NvJitLinkLibrary::version() const { return std::to_string(major) + "." + std::to_string(minor); }

Result<NvJitLinkLibrary> load_nvjitlink(const std::vector<ToolkitCandidate>& candidates) {
  NvJitLinkLibrary jl;
  nvjitlink::Result (*version)(unsigned*, unsigned*) = nullptr;
  jl.library = JC_TRY(open_compiler_library(ToolkitTool::nvjitlink, candidates, {
      {"nvJitLinkVersion", &version},
      {"nvJitLinkCreate", &jl.create},
      {"nvJitLinkDestroy", &jl.destroy},
      {"nvJitLinkAddData", &jl.add_data},
      {"nvJitLinkComplete", &jl.complete},
      {"nvJitLinkGetLinkedCubinSize", &jl.get_linked_cubin_size},
      {"nvJitLinkGetLinkedCubin", &jl.get_linked_cubin},
      {"nvJitLinkGetErrorLogSize", &jl.get_error_log_size},
      {"nvJitLinkGetErrorLog", &jl.get_error_log},
      {"nvJitLinkGetInfoLogSize", &jl.get_info_log_size},
      {"nvJitLinkGetInfoLog", &jl.get_info_log},
  }));
  if (const nvjitlink::Result rc = version(&jl.major, &jl.minor); rc != nvjitlink::k_success)
    return make_error(ErrorCode::unavailable,
                      jl.library.file.string() + ": nvJitLinkVersion failed: " + nvjitlink::result_name(rc));
  jl.identity = content_identity("nvjitlink " + jl.version(), jl.library.file);
  return jl;
}

Result<const NvJitLinkLibrary*> nvjitlink_library() {
  return process_library<NvJitLinkLibrary, ToolkitTool::nvjitlink, &load_nvjitlink>();
}

Result<std::string> nvjitlink_fingerprint() {
  const NvJitLinkLibrary* jl = JC_TRY(nvjitlink_library());
  return fingerprint_digest(jl->identity);
}

}  // namespace jitcache
