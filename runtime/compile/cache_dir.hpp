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

// An empty `explicit_dir` counts as absent. Fails only when no rule gives a directory.
Result<CacheDir> resolve_cache_dir(const std::optional<std::filesystem::path>& explicit_dir = std::nullopt);

}  // namespace jitcache::runtime
