// Where the CUDA compiler libraries (NVRTC, nvJitLink, libNVVM) are looked for. None of
// them is linked: each is opened at its first use (nvrtc_library.hpp, nvjitlink_library.hpp,
// nvvm_library.hpp), so a process that only hits its cache maps none of them, and a
// machine without a CUDA toolkit runs with the compilers NVIDIA ships as pip packages.
//
// The search, in order, the first file that exists wins:
//   1. the tool's own variable (JITCACHE_NVRTC, JITCACHE_NVJITLINK, JITCACHE_NVVM): a file
//      path; when it is set, it is the only candidate, so a mistyped path is an error
//      naming it rather than a silent fallback to another build;
//   2. the NVIDIA pip packages of the running Python environment. The library cannot ask
//      the interpreter, so it tries every prefix a Python process can tell from outside:
//      VIRTUAL_ENV, CONDA_PREFIX, the virtual environment of the program as it was started
//      (the directory above argv[0] holding pyvenv.cfg: `.venv/bin/python` without an
//      activated environment, or the jitcache CLI installed into one; a bare argv[0] such
//      as `python` is the first of that name on PATH, as the shell found it), the installation
//      of the program's real file (/proc/self/exe), and PYTHONHOME; in each,
//      lib/python3.*/site-packages/ (and dist-packages/) with the package layout of this
//      build's CUDA major version: nvidia/cu13/lib (nvvm also nvidia/cu13/nvvm/lib64) for
//      CUDA 13, nvidia/cuda_nvrtc/lib, nvidia/nvjitlink/lib, nvidia/cuda_nvcc/nvvm/lib64
//      for CUDA 12;
//   3. the directory of a copy already loaded into the process (an engine's own, found
//      with dl_iterate_phdr);
//   4. the toolkit: CUDA_HOME, CUDA_PATH, /usr/local/cuda, /usr/local/cuda-<major>.* (the
//      newest first), in lib64/ and lib/ (libNVVM also nvvm/lib64/);
//   5. the soname's own search: the directories of LD_LIBRARY_PATH as files (so that they
//      can be told without loading), then the bare soname for the loader (ld.so.cache).
// A file is passed over, with one warning naming it and why, when it is not a whole shared
// library of this machine (cut short by an interrupted install: loading it would kill the
// process with SIGBUS) or when a user other than the caller and root could replace it or
// its directory (toolkit_trust.hpp); the search goes on to the next candidate. The tool's
// own variable is held to the same rule.
// Finding a file costs a few stat calls and a read of its ELF headers, and loads nothing.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace jitcache {

enum class ToolkitTool { nvrtc, nvjitlink, nvvm };

// One place looked at: a file path, or for the last one the bare soname.
struct ToolkitCandidate {
  std::string path;
  std::string origin;  // how it was found, for the log and for messages: "JITCACHE_NVRTC", ...
};

// The CUDA major version this jitcache was built against (13 for CUDA 13.x): the sonames
// and package layouts searched carry it.
int toolkit_major();

const char* tool_display_name(ToolkitTool tool);   // "NVRTC", "nvJitLink", "libNVVM"
std::string tool_soname(ToolkitTool tool);         // "libnvrtc.so.13", ...
std::string tool_pip_package(ToolkitTool tool);    // "nvidia-cuda-nvrtc", ...
const char* tool_env_name(ToolkitTool tool);       // "JITCACHE_NVRTC", ...

// Every candidate, in the order above, without duplicates.
std::vector<ToolkitCandidate> toolkit_candidates(ToolkitTool tool);

// The first candidate that is an existing file fit to be used (canonical path), as the
// loader would take it; std::nullopt when only the soname is left (which cannot be told
// without loading).
std::optional<ToolkitCandidate> locate_toolkit_file(ToolkitTool tool);

// "NVRTC is not available: looked in ... ; install it with `pip install ...`", for the
// error of a search that found nothing that loads.
std::string not_found_message(ToolkitTool tool, const std::vector<ToolkitCandidate>& candidates);
// Its first sentence, without the places: for a one-line warning.
std::string not_found_summary(ToolkitTool tool);

// The warning of a process that found no `tool` at all and keys its lookups with the build
// of `version` and `fingerprint` its cache was last keyed with (fingerprint_memo.hpp).
std::string stand_in_warning(ToolkitTool tool, const std::string& version, const std::string& fingerprint);

// The site-packages directories of the Python prefixes above (exposed for tests).
std::vector<std::filesystem::path> python_site_directories();

}  // namespace jitcache
