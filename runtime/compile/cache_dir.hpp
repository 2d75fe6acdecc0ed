// Where the kernel cache lives. Precedence, highest first:
//   1. an explicit directory (the --cache-dir option, or the host's API argument)
//   2. JITCACHE_DIR
//   3. $XDG_CACHE_HOME/jitcache   (XDG_CACHE_HOME must be absolute, as the XDG spec says)
//   4. ~/.cache/jitcache          ($HOME, else the user's home from the password database)
// Never a shared directory such as /tmp: another user could plant code there.
// Relative explicit paths are made absolute against the working directory.
#pragma once

#include <filesystem>
#include <optional>

#include "jitcache/error.hpp"

namespace jitcache::runtime {

enum class CacheDirSource { argument, jitcache_dir, xdg_cache_home, home };
const char* to_string(CacheDirSource source);

struct CacheDir {
  std::filesystem::path path;
  CacheDirSource source;
};

// Absent `explicit_dir` (std::nullopt): the rules after it. An empty one given, or
// JITCACHE_DIR set to nothing but blanks, is ErrorCode::invalid_argument naming it (a
// script's unset variable must not pick the default cache); otherwise fails only when no
// rule gives a directory (ErrorCode::unavailable). XDG_CACHE_HOME empty is unset, as the
// XDG spec says.
Result<CacheDir> resolve_cache_dir(const std::optional<std::filesystem::path>& explicit_dir = std::nullopt);

}  // namespace jitcache::runtime
