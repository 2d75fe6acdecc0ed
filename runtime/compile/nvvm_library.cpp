#include "runtime/compile/nvvm_library.hpp"

#include <array>

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
  return jitcache::result_name(k_names, "NVVM_ERROR_UNKNOWN", result);
}

std::string NvvmLibrary::version() const {
  return std::to_string(major) + "." + std::to_string(minor) + " (NVVM IR " + std::to_string(ir_major) + "." +
         std::to_string(ir_minor) + ", debug " + std::to_string(debug_major) + "." + std::to_string(debug_minor) +
         ")";
}

Result<NvvmLibrary> load_nvvm(const std::vector<ToolkitCandidate>& candidates) {
  NvvmLibrary nvvm;
  nvvm::Result (*version)(int*, int*) = nullptr;
  nvvm::Result (*ir_version)(int*, int*, int*, int*) = nullptr;
  nvvm.library = JC_TRY(open_compiler_library(ToolkitTool::nvvm, candidates, {
      {"nvvmVersion", &version},
      {"nvvmIRVersion", &ir_version},
      {"nvvmCreateProgram", &nvvm.create_program},
      {"nvvmDestroyProgram", &nvvm.destroy_program},
      {"nvvmAddModuleToProgram", &nvvm.add_module},
      {"nvvmVerifyProgram", &nvvm.verify_program},
      {"nvvmCompileProgram", &nvvm.compile_program},
      {"nvvmGetCompiledResultSize", &nvvm.get_compiled_result_size},
      {"nvvmGetCompiledResult", &nvvm.get_compiled_result},
      {"nvvmGetProgramLogSize", &nvvm.get_program_log_size},
      {"nvvmGetProgramLog", &nvvm.get_program_log},
  }));
  const std::string file = nvvm.library.file.string();
  if (const nvvm::Result rc = version(&nvvm.major, &nvvm.minor); rc != nvvm::k_success)
    return make_error(ErrorCode::unavailable, file + ": nvvmVersion failed: " + nvvm::result_name(rc));
  if (const nvvm::Result rc = ir_version(&nvvm.ir_major, &nvvm.ir_minor, &nvvm.debug_major, &nvvm.debug_minor);
      rc != nvvm::k_success)
    return make_error(ErrorCode::unavailable, file + ": nvvmIRVersion failed: " + nvvm::result_name(rc));
  nvvm.identity = content_identity("libnvvm " + nvvm.version(), nvvm.library.file);
  return nvvm;
}

Result<const NvvmLibrary*> nvvm_library() { return process_library<NvvmLibrary, ToolkitTool::nvvm, &load_nvvm>(); }

Result<std::string> nvvm_fingerprint() {
  const NvvmLibrary* nvvm = JC_TRY(nvvm_library());
  return fingerprint_digest(nvvm->identity);
}

}  // namespace jitcache
