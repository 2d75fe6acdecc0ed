#include "runtime/compile/toolkit_library.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <xxhash.h>

#include <cstdio>

#include "jitcache/log.hpp"
#include "runtime/compile/toolkit_trust.hpp"

namespace jitcache {

std::optional<std::filesystem::path> nvrtc_library_dir() {
  const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
  if (!located) return std::nullopt;
  return std::filesystem::path(located->path).parent_path();
}

int nvrtc_major_version() { return toolkit_major(); }

Result<ToolkitLibrary> open_toolkit_library(const std::string& what, const std::vector<std::string>& candidates) {
  std::string tried, last_complaint;
  for (const std::string& candidate : candidates) {
    // A path that does not exist is skipped quietly: the loader's complaint about the
    // soname search is the informative one.
    const bool is_path = candidate.find('/') != std::string::npos;
    std::error_code ec;
    tried += (tried.empty() ? "" : ", ") + candidate;
    if (is_path && !std::filesystem::exists(candidate, ec)) continue;
    // Checked before the loader sees it (a truncated file maps and then dies with SIGBUS),
    // and opened by its real path, the file that was checked.
    std::string opened = candidate;
    if (is_path) {
      if (!usable_library(candidate, what)) {
        last_complaint = candidate + ": " + library_refusal(candidate).value_or("refused");
        continue;
      }
      if (auto canonical = std::filesystem::canonical(candidate, ec); !ec) opened = canonical.string();
    }
    // RTLD_LOCAL: the libraries' symbols stay out of the global namespace, where they
    // could bind another copy of the toolkit that an engine's Python wheels load.
    void* handle = ::dlopen(opened.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* complaint = ::dlerror();
      last_complaint = complaint != nullptr ? complaint : "unknown dlopen error";
      continue;
    }
    ToolkitLibrary library{handle, opened, candidate, {}};
    // The file the loader actually mapped: for a soname, where its search found it.
    char origin[4096] = {};
    if (!is_path && ::dlinfo(handle, RTLD_DI_ORIGIN, origin) == 0) {
      const std::string base = std::filesystem::path(candidate).filename().string();
      library.file = std::filesystem::path(origin) / base;
    }
    if (auto canonical = std::filesystem::canonical(library.file, ec); !ec) library.file = canonical;
    // The loader's own search can be told only once it has mapped a file: one that another
    // user could replace is not used (and is not given a key).
    if (!is_path && !usable_library(library.file, what + " found by the loader's search")) {
      last_complaint = library.file.string() + ": " + library_refusal(library.file).value_or("refused");
      ::dlclose(handle);
      continue;
    }
    return library;
  }
  return make_error(ErrorCode::unavailable,
                    what + " is not available: no candidate loaded (looked for " + tried + ")",
                    last_complaint.empty() ? std::string() : "last dlopen error: " + last_complaint);
}

Result<ToolkitLibrary> open_compiler_library(ToolkitTool tool, const std::vector<ToolkitCandidate>& candidates,
                                             std::initializer_list<LibrarySymbol> symbols) {
  std::vector<std::string> paths;
  for (const auto& c : candidates) paths.push_back(c.path);
  auto opened = open_toolkit_library(tool_display_name(tool), paths);
  if (!opened) return make_error(ErrorCode::unavailable, not_found_message(tool, candidates), opened.error().detail);
  for (const auto& c : candidates)
    if (c.path == opened->opened_as) opened->origin = c.origin;
  if (const char* missing = bind_symbols(opened->handle, symbols))
    return make_error(ErrorCode::unavailable, opened->file.string() + " has no symbol " + missing +
                                                  " (too old, or not the library it is named after)");
  return opened;
}

std::string result_name(std::span<const char* const> names, const char* unknown, int result) {
  const char* name = result >= 0 && static_cast<std::size_t>(result) < names.size() ? names[result] : unknown;
  return std::string(name) + " (" + std::to_string(result) + ")";
}

std::string content_identity(const std::string& name_and_version, const std::filesystem::path& file) {
  const auto digest = file_content_digest(file);
  return name_and_version + "; " +
         (digest ? "content xxh3-128 " + *digest : describe_file(file).value_or(file.string() + " (not stat-able)"));
}

void log_loaded(ToolkitTool tool, const std::string& version, const ToolkitLibrary& library) {
  log_info(std::string(tool_display_name(tool)) + " " + version + ": " + library.file.string() +
           (library.origin.empty() ? std::string() : " (" + library.origin + ")"));
}

std::optional<std::string> describe_file(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  // ctime as well as mtime: restoring a file's mtime (cp -p, tar) still changes its ctime.
  return path.string() + " size " + std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) +
         "." + std::to_string(st.st_mtim.tv_nsec) + " ctime " + std::to_string(st.st_ctim.tv_sec) + "." +
         std::to_string(st.st_ctim.tv_nsec) + " inode " + std::to_string(st.st_dev) + ":" +
         std::to_string(st.st_ino);
}

std::string fingerprint_digest(const std::string& text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(hex);
}

}  // namespace jitcache
