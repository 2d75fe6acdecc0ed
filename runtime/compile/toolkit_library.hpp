// Opening the CUDA compiler libraries (NVRTC, libNVVM, nvJitLink) at run time. None is
// linked; each is dlopen'ed at its first use, because loading them costs 6-870 ms and a
// process that hits its cache never compiles, and because a machine that lacks one of
// them must still run everything else. toolkit_search.hpp says where they are looked for.
#pragma once

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

// The directory of the libnvrtc this process runs or would run (canonical), if a path
// candidate tells it; nothing is loaded to find it.
std::optional<std::filesystem::path> nvrtc_library_dir();
// The CUDA major version of this build (13 for CUDA 13.x): NVRTC's and nvJitLink's sonames
// carry it.
int nvrtc_major_version();

// A dlopen'ed library, kept for the life of the process: its function pointers are
// cached by the callers, so it is never closed.
struct ToolkitLibrary {
  void* handle = nullptr;
  std::filesystem::path file;  // canonical path of the file the loader mapped
  std::string opened_as;       // the candidate that loaded (a path or a soname)
};

// Opens the first candidate that loads (a path, or a bare soname for the loader's own
// search). None loads: ErrorCode::unavailable naming `what`, every candidate and
// the loader's last complaint.
Result<ToolkitLibrary> open_toolkit_library(const std::string& what, const std::vector<std::string>& candidates);

// A function pointer by its plain exported name; absent: ErrorCode::unavailable naming
// the library file and the symbol.
template <class Fn>
Result<Fn> resolve_symbol(const ToolkitLibrary& library, const char* name) {
  ::dlerror();
  void* symbol = ::dlsym(library.handle, name);
  if (symbol == nullptr)
    return make_error(ErrorCode::unavailable,
                      library.file.string() + " has no symbol " + name + " (too old, or not the library it is named after)");
  return reinterpret_cast<Fn>(symbol);
}

// The process's one load of a library: `load` runs once, on the first call from any
// thread, and its result (the library or the error) is kept for the life of the process.
// Leaked on purpose: compiles may still run on other threads while statics are destroyed.
// Each instantiation (one per library type and loader) has its own once.
template <class Library, auto load>
Result<const Library*> load_once() {
  static std::once_flag once;
  static Result<Library>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<Library>(load()); });
  if (!*loaded) return std::unexpected(loaded->error());
  return &**loaded;
}

// "PATH size N mtime S.NS ctime S.NS inode DEV:INO": what tells two builds of a library
// apart when their version numbers agree. std::nullopt when the file cannot be stat'ed.
std::optional<std::string> describe_file(const std::filesystem::path& path);

// 32 hex digits (XXH3-128) of `text`: the form of every compiler fingerprint.
std::string fingerprint_digest(const std::string& text);

}  // namespace jitcache
