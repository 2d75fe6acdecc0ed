// Opening the CUDA toolkit's optional compiler libraries (libNVVM, nvJitLink) at run time.
// NVRTC is linked; these two are dlopen'ed at their first use, because loading them
// costs 60-870 ms and most processes never compile outside kernels, and because a toolkit
// that lacks one of them must still run everything else. They are looked for beside the
// libnvrtc this process loaded first (the same toolkit), then by soname.
#pragma once

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

// The directory of the libnvrtc this process runs (canonical), if it can be told.
std::optional<std::filesystem::path> nvrtc_library_dir();
// libnvrtc's major version (13 for CUDA 13.x): nvJitLink's soname carries the same.
int nvrtc_major_version();

// A dlopen'ed library, kept for the life of the process: its function pointers are
// cached by the callers, so it is never closed.
struct ToolkitLibrary {
  void* handle = nullptr;
  std::filesystem::path file;  // canonical path of the file the loader mapped
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
