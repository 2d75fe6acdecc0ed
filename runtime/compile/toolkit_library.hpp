// Opening the CUDA compiler libraries (NVRTC, libNVVM, nvJitLink) at run time. None is
// linked; each is dlopen'ed at its first use, because loading them costs 6-870 ms and a
// process that hits its cache never compiles, and because a machine that lacks one of
// them must still run everything else. toolkit_search.hpp says where they are looked for.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "support/library_symbols.hpp"

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
  std::string origin;          // how the search found it (toolkit_search.hpp); may be empty
};

// Opens the first candidate that loads (a path, or a bare soname for the loader's own
// search). None loads: ErrorCode::unavailable naming `what`, every candidate and
// the loader's last complaint.
Result<ToolkitLibrary> open_toolkit_library(const std::string& what, const std::vector<std::string>& candidates);

// Opens the first of `candidates` that loads (open_toolkit_library) and binds every one of
// `symbols`. None loads: ErrorCode::unavailable naming every place searched and the pip
// package (not_found_message), with the loader's last complaint as its detail; a symbol
// absent: ErrorCode::unavailable naming the library file and the symbol.
Result<ToolkitLibrary> open_compiler_library(ToolkitTool tool, const std::vector<ToolkitCandidate>& candidates,
                                             std::initializer_list<LibrarySymbol> symbols);

// `result` by its name in `names` (a library's result codes, from 0, in order) and its
// number, for messages: "NVVM_ERROR_INVALID_IR (6)"; `unknown` for a code past the table.
std::string result_name(std::span<const char* const> names, const char* unknown, int result);

// "<name and version>; content xxh3-128 <digest>": what the library's bytes are, wherever
// it was found (toolkit_trust.hpp); for a file that cannot be read whole, its path, size,
// times and inode (describe_file). Readable, for facts; fingerprint_digest of it keys.
std::string content_identity(const std::string& name_and_version, const std::filesystem::path& file);

// The INFO line of a process's library once loaded: "<tool> <version>: <file> (<origin>)".
void log_loaded(ToolkitTool tool, const std::string& version, const ToolkitLibrary& library);

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

namespace detail {
template <class Library, ToolkitTool tool, Result<Library> (*load)(const std::vector<ToolkitCandidate>&)>
Result<Library> load_and_log() {
  auto loaded = load(toolkit_candidates(tool));
  if (loaded) log_loaded(tool, loaded->version(), loaded->library);
  return loaded;
}
}  // namespace detail

// The process's `Library`: `load` over the search's candidates for `tool`
// (toolkit_candidates), once (load_once), logged at INFO when it loads.
template <class Library, ToolkitTool tool, Result<Library> (*load)(const std::vector<ToolkitCandidate>&)>
Result<const Library*> process_library() {
  return load_once<Library, &detail::load_and_log<Library, tool, load>>();
}

// "PATH size N mtime S.NS ctime S.NS inode DEV:INO": what tells two builds of a library
// apart when their version numbers agree. std::nullopt when the file cannot be stat'ed.
std::optional<std::string> describe_file(const std::filesystem::path& path);

// 32 hex digits (XXH3-128) of `text`: the form of every compiler fingerprint.
std::string fingerprint_digest(const std::string& text);

}  // namespace jitcache
