#include "runtime/compile/cache_dir.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "jitcache/log.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"

namespace jitcache::runtime {

const char* to_string(CacheDirSource source) {
  return enum_name(source, {"--cache-dir", "JITCACHE_DIR", "XDG_CACHE_HOME", "HOME"});
}

namespace {

std::filesystem::path make_absolute(const std::filesystem::path& path) {
  std::error_code ec;
  auto result = std::filesystem::absolute(path, ec);
  return (ec ? path : result).lexically_normal();
}

std::optional<std::filesystem::path> home_from_passwd() {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<std::size_t>(size) : 16384);
  passwd entry;
  passwd* found = nullptr;
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr ||
      found->pw_dir == nullptr || found->pw_dir[0] != '/')
    return std::nullopt;
  return std::filesystem::path(found->pw_dir);
}

}  // namespace

Result<CacheDir> resolve_cache_dir(const std::optional<std::filesystem::path>& explicit_dir) {
  if (explicit_dir && explicit_dir->empty())
    return make_error(ErrorCode::invalid_argument,
                      "the cache directory given (--cache-dir, cache_dir) is an empty path; leave it out for the "
                      "default (JITCACHE_DIR, $XDG_CACHE_HOME/jitcache, ~/.cache/jitcache)");
  if (explicit_dir) return CacheDir{make_absolute(*explicit_dir), CacheDirSource::argument};
  if (auto dir = env::get(env::jitcache_dir))
    return CacheDir{make_absolute(*dir), CacheDirSource::jitcache_dir};
  if (std::getenv(std::string(env::jitcache_dir.name).c_str()) != nullptr)
    return make_error(ErrorCode::invalid_argument,
                      std::string(env::jitcache_dir.name) +
                          " is set to an empty value; unset it for the default ($XDG_CACHE_HOME/jitcache, "
                          "~/.cache/jitcache)");
  if (auto xdg = env::get(env::xdg_cache_home)) {
    if (std::filesystem::path(*xdg).is_absolute())
      return CacheDir{std::filesystem::path(*xdg).lexically_normal() / "jitcache", CacheDirSource::xdg_cache_home};
    log_warning("XDG_CACHE_HOME=" + *xdg + " is not an absolute path; ignored (XDG base directory rule)");
  }
  std::optional<std::filesystem::path> home;
  if (auto value = env::get(env::home); value && std::filesystem::path(*value).is_absolute())
    home = std::filesystem::path(*value);
  else
    home = home_from_passwd();
  if (home) return CacheDir{home->lexically_normal() / ".cache" / "jitcache", CacheDirSource::home};
  return make_error(ErrorCode::unavailable,
                    "cannot determine the cache directory: HOME is unset and the user has no home "
                    "directory; pass --cache-dir or set JITCACHE_DIR");
}

}  // namespace jitcache::runtime
