#include "runtime/compile/nvvm_library.hpp"

#include <array>

#include "jitcache/log.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/toolkit_search.hpp"

namespace jitcache {

std::string nvvm::result_name(nvvm::Result result) {
  static constexpr std::array<const char*, 11> k_names = {
      "NVVM_SUCCESS",
      "NVVM_ERROR_OUT_OF_MEMORY",
      "NVVM_ERROR_PROGRAM_CREATION_FAILURE",
      "NVVM_ERROR_IR_VERSION_MISMATCH",
      "NVVM_ERROR_INVALID_INPUT",
      "NVVM_ERROR_INVALID_PROGRAM",
      "NVVM_ERROR_INVALID_IR",
      "NVVM_ERROR_INVALID_OPTION",
      "NVVM_ERROR_NO_MODULE_IN_PROGRAM",
      "NVVM_ERROR_COMPILATION",
      "NVVM_ERROR_CANCELLED",
  };
  const char* name = result >= 0 && static_cast<std::size_t>(result) < k_names.size() ? k_names[result]
                                                                                     : "NVVM_ERROR_UNKNOWN";
  return std::string(name) + " (" + std::to_string(result) + ")";
}

std::string NvvmLibrary::version() const {
  return std::to_string(major) + "." + std::to_string(minor) + " (NVVM IR " + std::to_string(ir_major) + "." +
         std::to_string(ir_minor) + ", debug " + std::to_string(debug_major) + "." + std::to_string(debug_minor) +
         ")";
}

std::vector<std::string> nvvm_candidates() {
  std::vector<std::string> paths;
  for (const auto& c : toolkit_candidates(ToolkitTool::nvvm)) paths.push_back(c.path);
  return paths;
}

Result<NvvmLibrary> load_nvvm(const std::vector<std::string>& candidates) {
  NvvmLibrary nvvm;
  nvvm.library = JC_TRY(open_toolkit_library("libNVVM", candidates));
  const ToolkitLibrary& lib = nvvm.library;
  using Fn = nvvm::Result;
  const auto version = JC_TRY(resolve_symbol<Fn (*)(int*, int*)>(lib, "nvvmVersion"));
  const auto ir_version = JC_TRY(resolve_symbol<Fn (*)(int*, int*, int*, int*)>(lib, "nvvmIRVersion"));
  nvvm.create_program = JC_TRY(resolve_symbol<decltype(nvvm.create_program)>(lib, "nvvmCreateProgram"));
  nvvm.destroy_program = JC_TRY(resolve_symbol<decltype(nvvm.destroy_program)>(lib, "nvvmDestroyProgram"));
  nvvm.add_module = JC_TRY(resolve_symbol<decltype(nvvm.add_module)>(lib, "nvvmAddModuleToProgram"));
  nvvm.verify_program = JC_TRY(resolve_symbol<decltype(nvvm.verify_program)>(lib, "nvvmVerifyProgram"));
  nvvm.compile_program = JC_TRY(resolve_symbol<decltype(nvvm.compile_program)>(lib, "nvvmCompileProgram"));
  nvvm.get_compiled_result_size =
      JC_TRY(resolve_symbol<decltype(nvvm.get_compiled_result_size)>(lib, "nvvmGetCompiledResultSize"));
  nvvm.get_compiled_result = JC_TRY(resolve_symbol<decltype(nvvm.get_compiled_result)>(lib, "nvvmGetCompiledResult"));
  nvvm.get_program_log_size =
      JC_TRY(resolve_symbol<decltype(nvvm.get_program_log_size)>(lib, "nvvmGetProgramLogSize"));
  nvvm.get_program_log = JC_TRY(resolve_symbol<decltype(nvvm.get_program_log)>(lib, "nvvmGetProgramLog"));
  if (const Fn rc = version(&nvvm.major, &nvvm.minor); rc != nvvm::k_success)
    return make_error(ErrorCode::unavailable, lib.file.string() + ": nvvmVersion failed: " + nvvm::result_name(rc));
  if (const Fn rc = ir_version(&nvvm.ir_major, &nvvm.ir_minor, &nvvm.debug_major, &nvvm.debug_minor);
      rc != nvvm::k_success)
    return make_error(ErrorCode::unavailable, lib.file.string() + ": nvvmIRVersion failed: " + nvvm::result_name(rc));
  // What its bytes are, wherever it was found (toolkit_trust.hpp).
  const auto digest = file_content_digest(lib.file);
  nvvm.identity = "libnvvm " + nvvm.version() + "; " +
                  (digest ? "content xxh3-128 " + *digest
                            : describe_file(lib.file).value_or(lib.file.string() + " (not stat-able)"));
  return nvvm;
}

namespace {
Result<NvvmLibrary> load_toolkit_nvvm() {
  const auto candidates = toolkit_candidates(ToolkitTool::nvvm);
  auto loaded = load_nvvm(nvvm_candidates());
  if (!loaded && loaded.error().message.find(" is not available: ") != std::string::npos)
    return make_error(ErrorCode::unavailable, not_found_message(ToolkitTool::nvvm, candidates), loaded.error().detail);
  if (loaded) log_info("libNVVM " + loaded->version() + ": " + loaded->library.file.string());
  return loaded;
}
}  // namespace

Result<const NvvmLibrary*> nvvm_library() { return load_once<NvvmLibrary, &load_toolkit_nvvm>(); }

Result<std::string> nvvm_fingerprint() {
  const NvvmLibrary* nvvm = JC_TRY(nvvm_library());
  return fingerprint_digest(nvvm->identity);
}

}  // namespace jitcache
