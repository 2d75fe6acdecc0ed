#include "runtime/compile/nvrtc_library.hpp"

#include <dlfcn.h>

#include <set>

#include "jitcache/log.hpp"
#include "runtime/compile/toolkit_trust.hpp"

namespace jitcache {

std::string NvrtcLibrary::version() const { return std::to_string(major) + "." + std::to_string(minor); }

namespace {

// NVRTC opens libnvrtc-builtins by its soname at its first compile, through the loader's
// own search (libnvrtc has no RUNPATH): a machine whose only NVRTC is the pip package
// would not find it, and a machine with a toolkit in ld.so.cache would pair the package's
// libnvrtc with the toolkit's builtins. Loaded here first, by path, the builtins beside
// libnvrtc are the ones NVRTC's dlopen finds already loaded under that soname, and the
// ones its fingerprint hashes.
void preload_builtins(const NvrtcLibrary& nvrtc) {
  const std::filesystem::path builtins = nvrtc_builtins_file(nvrtc.library.file, nvrtc.version());
  std::error_code ec;
  if (!std::filesystem::exists(builtins, ec)) {
    log_warning("NVRTC " + nvrtc.library.file.string() + " has no " + builtins.filename().string() +
                " beside it; NVRTC will look for it through the loader's search");
    return;
  }
  if (!usable_library(builtins, "beside NVRTC " + nvrtc.library.file.string())) return;
  // Kept for the life of the process, like NVRTC itself.
  if (::dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = ::dlerror();
    log_warning("could not load " + builtins.string() + ": " + (why != nullptr ? why : "unknown dlopen error"));
    return;
  }
  // Another copy loaded earlier under the same soname (an engine's) is the one NVRTC gets.
  void* by_soname = ::dlopen(builtins.filename().c_str(), RTLD_NOW | RTLD_NOLOAD);
  char origin[4096] = {};
  if (by_soname != nullptr && ::dlinfo(by_soname, RTLD_DI_ORIGIN, origin) == 0) {
    const auto resolved = std::filesystem::canonical(std::filesystem::path(origin) / builtins.filename(), ec);
    const auto ours = std::filesystem::canonical(builtins, ec);
    if (resolved != ours)
      log_warning("NVRTC will use " + resolved.string() + ", loaded before, instead of " + ours.string());
  }
  if (by_soname != nullptr) ::dlclose(by_soname);  // drops only the reference NOLOAD took
}

}  // namespace

Result<NvrtcLibrary> load_nvrtc(const std::vector<ToolkitCandidate>& candidates) {
  NvrtcLibrary nvrtc;
  decltype(&::nvrtcVersion) version = nullptr;
  nvrtc.library = JC_TRY(open_compiler_library(ToolkitTool::nvrtc, candidates, {
      {"nvrtcVersion", &version},
      {"nvrtcGetErrorString", &nvrtc.get_error_string},
      {"nvrtcCreateProgram", &nvrtc.create_program},
      {"nvrtcDestroyProgram", &nvrtc.destroy_program},
      {"nvrtcCompileProgram", &nvrtc.compile_program},
      {"nvrtcGetPTXSize", &nvrtc.get_ptx_size},
      {"nvrtcGetPTX", &nvrtc.get_ptx},
      {"nvrtcGetCUBINSize", &nvrtc.get_cubin_size},
      {"nvrtcGetCUBIN", &nvrtc.get_cubin},
      {"nvrtcGetProgramLogSize", &nvrtc.get_program_log_size},
      {"nvrtcGetProgramLog", &nvrtc.get_program_log},
      {"nvrtcGetNumSupportedArchs", &nvrtc.get_num_supported_archs},
      {"nvrtcGetSupportedArchs", &nvrtc.get_supported_archs},
  }));
  if (const nvrtcResult rc = version(&nvrtc.major, &nvrtc.minor); rc != NVRTC_SUCCESS)
    return make_error(ErrorCode::unavailable,
                      nvrtc.library.file.string() + ": nvrtcVersion failed: " + nvrtc.get_error_string(rc));
  preload_builtins(nvrtc);
  return nvrtc;
}

Result<const NvrtcLibrary*> nvrtc_library() {
  return process_library<NvrtcLibrary, ToolkitTool::nvrtc, &load_nvrtc>();
}

std::filesystem::path nvrtc_builtins_file(const std::filesystem::path& library, const std::string& version) {
  return library.parent_path() / ("libnvrtc-builtins.so." + version);
}

std::optional<std::string> nvrtc_version_from_files(const std::filesystem::path& library) {
  const std::string prefix = "libnvrtc-builtins.so." + std::to_string(toolkit_major()) + ".";
  std::set<std::string> versions;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(library.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string minor = name.substr(prefix.size());
    // libnvrtc-builtins.so.13.0, not .so.13.0.88 (the toolkit's full name of the same file).
    if (minor.empty() || minor.size() > 3 || minor.find_first_not_of("0123456789") != std::string::npos) continue;
    versions.insert(std::to_string(toolkit_major()) + "." + minor);
  }
  if (ec || versions.size() != 1) return std::nullopt;
  return *versions.begin();
}

std::string nvrtc_content_fingerprint(const std::string& version, const std::string& nvrtc_digest,
                                      const std::optional<std::string>& builtins_digest) {
  return fingerprint_digest("nvrtc " + version + "; content xxh3-128 " + nvrtc_digest + "; builtins content xxh3-128 " +
                            builtins_digest.value_or("none"));
}

std::optional<std::string> nvrtc_file_fingerprint(const std::filesystem::path& library, const std::string& version) {
  const auto digest = file_content_digest(library);
  if (!digest) return std::nullopt;
  return nvrtc_content_fingerprint(version, *digest, file_content_digest(nvrtc_builtins_file(library, version)));
}

}  // namespace jitcache
