#include "runtime/compile/toolkit_trust.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "jitcache/log.hpp"
#include "runtime/compile/elf_build_id.hpp"
#include "support/file_mode.hpp"
#include "support/unique_fd.hpp"

namespace jitcache {
namespace {

// Why `st` (of `what`, a file or directory) may be replaced by another user, or nullopt.
std::optional<std::string> replaceable(const struct stat& st, const std::string& what,
                                       std::string_view replaced = "the library") {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return what + " is owned by uid " + std::to_string(st.st_uid) + " (mode " + mode_text(st.st_mode) +
           "), neither the caller (uid " + std::to_string(me) + ") nor root";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return what + " (owner uid " + std::to_string(st.st_uid) + ") has mode " + mode_text(st.st_mode) +
           ": group- or world-writable, so another user could replace " + std::string(replaced);
  return std::nullopt;
}

std::string stat_text(const struct stat& st) {
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + " size " + std::to_string(st.st_size) +
         " mtime " + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " ctime " +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

std::string hex128(const XXH128_hash_t& h) {
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

// XXH3-128 of an open regular file of `size` bytes, read (not mapped: a file cut short
// while it is hashed must be a failed read, not SIGBUS).
std::optional<std::string> digest_fd(int fd, std::size_t size) {
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return std::nullopt;
  XXH3_128bits_reset(state);
  std::string buffer(1 << 20, '\0');
  std::size_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      XXH3_freeState(state);
      return std::nullopt;
    }
    if (n == 0) break;
    XXH3_128bits_update(state, buffer.data(), static_cast<std::size_t>(n));
    total += static_cast<std::size_t>(n);
  }
  const std::string digest = hex128(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  if (total != size) return std::nullopt;
  return digest;
}

}  // namespace

std::optional<std::string> replaceable_by_another_user(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return replaceable(st, path.string(), "what it holds");
}

std::optional<std::string> library_refusal(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(file, ec);
  if (ec) return "cannot be resolved: " + ec.message();
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return std::string("cannot be stat'ed: ") + std::strerror(errno);
  if (auto why = replaceable(st, "the file " + real.string())) return why;
  struct stat dir {};
  const std::filesystem::path parent = real.parent_path();
  if (::stat(parent.c_str(), &dir) != 0) return "its directory cannot be stat'ed: " + std::string(std::strerror(errno));
  if (auto why = replaceable(dir, "its directory " + parent.string())) return why;
  if (auto problem = elf_library_problem(real)) return real.string() + " " + *problem;
  return std::nullopt;
}

bool usable_library(const std::filesystem::path& file, std::string_view origin) {
  const auto refusal = library_refusal(file);
  if (!refusal) return true;
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>();  // leaked: used until exit
  const std::lock_guard lock(mutex);
  if (warned->insert(file.string()).second)
    log_warning("not using the compiler library " + file.string() + " (" + std::string(origin) + "): " + *refusal +
                "; looking further");
  return false;
}

std::optional<std::string> file_stat_identity(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  return stat_text(st);
}

std::optional<std::string> file_content_digest(const std::filesystem::path& file) {
  const UniqueFd owned(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!owned) return std::nullopt;
  const int fd = owned.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const std::string identity = stat_text(st);
  static std::mutex mutex;
  static auto* known = new std::map<std::string, std::string>();  // leaked: used until exit
  {
    const std::lock_guard lock(mutex);
    if (const auto it = known->find(identity); it != known->end()) return it->second;
  }
  auto digest = digest_fd(fd, static_cast<std::size_t>(st.st_size));
  if (!digest) return std::nullopt;
  const std::lock_guard lock(mutex);
  known->emplace(identity, *digest);
  return digest;
}

}  // namespace jitcache
