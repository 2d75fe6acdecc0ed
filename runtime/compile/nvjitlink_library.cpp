#include "runtime/compile/nvjitlink_library.hpp"

#include <array>

#include "jitcache/log.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/toolkit_search.hpp"

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
  const char* name = result >= 0 && static_cast<std::size_t>(result) < k_names.size() ? k_names[result]
                                                                                     : "NVJITLINK_ERROR_UNKNOWN";
  return std::string(name) + " (" + std::to_string(result) + ")";
}

std::string NvJitLinkLibrary::version() const { return std::to_string(major) + "." + std::to_string(minor); }

std::vector<std::string> nvjitlink_candidates() {
  std::vector<std::string> paths;
  for (const auto& c : toolkit_candidates(ToolkitTool::nvjitlink)) paths.push_back(c.path);
  return paths;
}

Result<NvJitLinkLibrary> load_nvjitlink(const std::vector<std::string>& candidates) {
  NvJitLinkLibrary jl;
  jl.library = JC_TRY(open_toolkit_library("nvJitLink", candidates));
  const ToolkitLibrary& lib = jl.library;
  const auto version = JC_TRY(resolve_symbol<nvjitlink::Result (*)(unsigned*, unsigned*)>(lib, "nvJitLinkVersion"));
  jl.create = JC_TRY(resolve_symbol<decltype(jl.create)>(lib, "nvJitLinkCreate"));
  jl.destroy = JC_TRY(resolve_symbol<decltype(jl.destroy)>(lib, "nvJitLinkDestroy"));
  jl.add_data = JC_TRY(resolve_symbol<decltype(jl.add_data)>(lib, "nvJitLinkAddData"));
  jl.complete = JC_TRY(resolve_symbol<decltype(jl.complete)>(lib, "nvJitLinkComplete"));
  jl.get_linked_cubin_size = JC_TRY(resolve_symbol<decltype(jl.get_linked_cubin_size)>(lib, "nvJitLinkGetLinkedCubinSize"));
  jl.get_linked_cubin = JC_TRY(resolve_symbol<decltype(jl.get_linked_cubin)>(lib, "nvJitLinkGetLinkedCubin"));
  jl.get_error_log_size = JC_TRY(resolve_symbol<decltype(jl.get_error_log_size)>(lib, "nvJitLinkGetErrorLogSize"));
  jl.get_error_log = JC_TRY(resolve_symbol<decltype(jl.get_error_log)>(lib, "nvJitLinkGetErrorLog"));
  jl.get_info_log_size = JC_TRY(resolve_symbol<decltype(jl.get_info_log_size)>(lib, "nvJitLinkGetInfoLogSize"));
  jl.get_info_log = JC_TRY(resolve_symbol<decltype(jl.get_info_log)>(lib, "nvJitLinkGetInfoLog"));
  if (const nvjitlink::Result rc = version(&jl.major, &jl.minor); rc != nvjitlink::k_success)
    return make_error(ErrorCode::unavailable,
                      lib.file.string() + ": nvJitLinkVersion failed: " + nvjitlink::result_name(rc));
  // What its bytes are, wherever it was found (toolkit_trust.hpp).
  const auto digest = file_content_digest(lib.file);
  jl.identity = "nvjitlink " + jl.version() + "; " +
                (digest ? "content xxh3-128 " + *digest
                          : describe_file(lib.file).value_or(lib.file.string() + " (not stat-able)"));
  return jl;
}

namespace {
Result<NvJitLinkLibrary> load_toolkit_nvjitlink() {
  const auto candidates = toolkit_candidates(ToolkitTool::nvjitlink);
  auto loaded = load_nvjitlink(nvjitlink_candidates());
  if (!loaded && loaded.error().message.find(" is not available: ") != std::string::npos)
    return make_error(ErrorCode::unavailable, not_found_message(ToolkitTool::nvjitlink, candidates),
                      loaded.error().detail);
  if (loaded) log_info("nvJitLink " + loaded->version() + ": " + loaded->library.file.string());
  return loaded;
}
}  // namespace

Result<const NvJitLinkLibrary*> nvjitlink_library() {
  return load_once<NvJitLinkLibrary, &load_toolkit_nvjitlink>();
}

Result<std::string> nvjitlink_fingerprint() {
  const NvJitLinkLibrary* jl = JC_TRY(nvjitlink_library());
  return fingerprint_digest(jl->identity);
}

}  // namespace jitcache
