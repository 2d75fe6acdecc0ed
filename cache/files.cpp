#include "cache/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "support/file_mode.hpp"
#include "support/regular_file.hpp"

namespace jitcache::cache {

Error errno_error(const std::string& what, int error_number) {
  return Error{ErrorCode::io, what + ": " + std::strerror(error_number), {}};
}

namespace {

// The checks shared by the root and its subdirectories, on an already opened descriptor,
// so nothing can change between the check and the use.
Status check_private(int fd, const std::filesystem::path& shown_path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::unexpected(errno_error(shown_path.string(), errno));
  if (!S_ISDIR(st.st_mode))
    return make_error(ErrorCode::unsafe, shown_path.string() + ": not a directory");
  if (st.st_uid != ::geteuid())
    return make_error(ErrorCode::unsafe,
                      shown_path.string() + ": owned by uid " + std::to_string(st.st_uid) +
                          ", not by the current user (uid " + std::to_string(::geteuid()) +
                          "); refusing to use another user's cache directory");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return make_error(ErrorCode::unsafe,
                      shown_path.string() + ": mode " + mode_text(st.st_mode) +
                          " is group- or world-writable; another user could plant a kernel "
                          "there (chmod 700 it, or choose another cache directory)");
  struct statfs fs;
  if (::fstatfs(fd, &fs) == 0 && is_network_filesystem(static_cast<std::int64_t>(fs.f_type)))
    return make_error(ErrorCode::unsafe,
                      shown_path.string() +
                          ": on a network filesystem, where SQLite's and flock's locking is "
                          "unreliable; put the cache on a local disk (--cache-dir or JITCACHE_DIR)");
  return {};
}

// Opens an existing directory entry without following a symlink, explaining a refusal.
Result<UniqueFd> open_dir_nofollow(int parent_fd, const char* name,
                                   const std::filesystem::path& shown_path) {
  struct stat st;
  if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return make_error(ErrorCode::unsafe,
                      shown_path.string() + ": is a symbolic link; a cache directory must be a "
                                            "real directory (a link could redirect it elsewhere)");
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP)
      return make_error(ErrorCode::unsafe, shown_path.string() + ": is a symbolic link");
    if (e == ENOTDIR)
      return make_error(ErrorCode::unsafe, shown_path.string() + ": not a directory");
    return std::unexpected(errno_error(shown_path.string(), e));
  }
  return UniqueFd(fd);
}

Result<UniqueFd> open_or_create(int parent_fd, const char* name,
                                const std::filesystem::path& shown_path) {
  bool created = false;
  if (::mkdirat(parent_fd, name, 0700) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    return std::unexpected(errno_error("creating " + shown_path.string(), errno));
  }
  UniqueFd fd = JC_TRY(open_dir_nofollow(parent_fd, name, shown_path));
  // mkdir's mode passes through the umask; only an explicit chmod gives exactly 0700.
  if (created && ::fchmod(fd.get(), 0700) != 0)
    return std::unexpected(errno_error("chmod 700 " + shown_path.string(), errno));
  JC_TRY(check_private(fd.get(), shown_path));
  return fd;
}

}  // namespace

bool is_network_filesystem(std::int64_t type) {
  switch (static_cast<std::uint32_t>(type)) {
    case 0x6969:      // NFS
    case 0x517B:      // SMB
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x564C:      // NCP
    case 0x01021997:  // 9p
    case 0x00C36400:  // Ceph
    case 0x0BD00BD0:  // Lustre
    case 0x47504653:  // GPFS
    case 0x013111A8:  // IBRIX
    case 0x5346414F:  // AFS
    case 0x6B414653:  // kAFS
      return true;
    default:
      return false;
  }
}

Result<std::filesystem::path> resolve_root_path(const std::filesystem::path& path) {
  if (path.empty()) return make_error(ErrorCode::invalid_argument, "cache directory: empty path");
  std::error_code ec;
  std::filesystem::path absolute = path.is_absolute() ? path : std::filesystem::absolute(path, ec);
  if (ec) return make_error(ErrorCode::io, path.string() + ": " + ec.message());
  // "dir/" names dir: drop trailing separators before taking the leaf.
  while (absolute.has_relative_path() && absolute.filename().empty()) absolute = absolute.parent_path();
  const std::string leaf = absolute.filename().string();
  if (leaf.empty() || leaf == "." || leaf == "..")
    return make_error(ErrorCode::invalid_argument,
                      absolute.string() + ": cache directory must name a directory entry");
  // Everything above the root is resolved the way the kernel would (symlinks followed,
  // ".." taken physically), as `realpath` and every other tool do: clusters link /home to
  // /data/home. The root itself is never resolved; it must be a real directory.
  const std::filesystem::path parent = std::filesystem::weakly_canonical(absolute.parent_path(), ec);
  if (ec) return make_error(ErrorCode::io, absolute.parent_path().string() + ": " + ec.message());
  std::filesystem::path existing = parent;
  struct stat st;
  while (::stat(existing.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      return std::unexpected(errno_error(existing.string() + " (above the cache directory)", errno));
    existing = existing.parent_path();
  }
  if (!S_ISDIR(st.st_mode))
    return make_error(ErrorCode::invalid_input,
                      existing.string() + ": not a directory, so the cache directory " + absolute.string() +
                          " cannot be below it");
  const std::filesystem::path root = parent / leaf;
  struct statfs fs;
  if (existing != root && ::statfs(existing.c_str(), &fs) == 0 &&
      is_network_filesystem(static_cast<std::int64_t>(fs.f_type)))
    return make_error(ErrorCode::unsafe,
                      root.string() + ": would be created on a network filesystem (" + existing.string() +
                          "), where SQLite's and flock's locking is unreliable; put the cache on a local "
                          "disk (--cache-dir or JITCACHE_DIR)");
  // The longest path SQLite will open is the index's write-ahead log; past its limit it
  // fails only after the directories exist, so refuse first.
  const std::size_t longest = (root / "index.db-wal").string().size();
  if (longest > k_max_index_path_bytes)
    return make_error(ErrorCode::invalid_input,
                      root.string() + ": path too long for the cache index (" + std::to_string(longest) +
                          " bytes with /index.db-wal; SQLite opens at most " +
                          std::to_string(k_max_index_path_bytes) + "); choose a shorter cache directory");
  return root;
}

Result<UniqueFd> open_private_dir(const std::filesystem::path& path, CreateParents parents) {
  const std::filesystem::path root = JC_TRY(resolve_root_path(path));
  const std::filesystem::path parent = root.parent_path();
  if (parents == CreateParents::yes) {
    // Missing parents get the same 0700 as the root (the XDG rule for ~/.cache). Created
    // only now that every check that can be made before the root exists has passed.
    std::filesystem::path walk;
    for (const auto& part : parent) {
      walk /= part;
      struct stat st;
      if (::lstat(walk.c_str(), &st) == 0) continue;
      if (::mkdir(walk.c_str(), 0700) != 0 && errno != EEXIST)
        return std::unexpected(errno_error("creating " + walk.string(), errno));
      ::chmod(walk.c_str(), 0700);
    }
  }
  const int parent_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) return std::unexpected(errno_error(parent.string(), errno));
  UniqueFd parent_owner(parent_fd);
  return open_or_create(parent_fd, root.filename().c_str(), root);
}

Result<UniqueFd> open_private_subdir(int parent_fd, const std::string& name,
                                     const std::filesystem::path& shown_path) {
  return open_or_create(parent_fd, name.c_str(), shown_path);
}

Result<std::optional<std::string>> remove_unless_regular(int dir_fd, const std::string& name,
                                                         const std::filesystem::path& shown, std::string_view role) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return std::unexpected(errno_error("stat " + shown.string(), errno));
  }
  if (S_ISREG(st.st_mode)) return std::optional<std::string>();
  std::string what(file_type_name(st.st_mode));
  if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
    return make_error(ErrorCode::unsafe, shown.string() + ": is " + what + ", not a regular " + std::string(role) +
                                             ", and cannot be removed: " + std::strerror(errno));
  return std::optional<std::string>(std::move(what));
}

Status write_all(int fd, std::span<const std::byte> data, const std::filesystem::path& shown_path) {
  if (const int e = write_fully(fd, data))
    return std::unexpected(errno_error("writing " + shown_path.string(), e));
  return {};
}

Status fsync_fd(int fd, const std::filesystem::path& shown_path) {
  if (const int e = fsync_retrying(fd))
    return std::unexpected(errno_error("fsync " + shown_path.string(), e));
  return {};
}

std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<FileId> file_id_of(const std::filesystem::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

Result<std::vector<DirEntry>> list_dir(int dir_fd, const std::filesystem::path& shown_path) {
  // fdopendir takes ownership, so give it its own descriptor.
  const int copy = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return std::unexpected(errno_error(shown_path.string(), errno));
  DIR* dir = ::fdopendir(copy);
  if (dir == nullptr) {
    const int e = errno;
    ::close(copy);
    return std::unexpected(errno_error(shown_path.string(), e));
  }
  std::vector<DirEntry> entries;
  while (const dirent* d = ::readdir(dir)) {
    const std::string name = d->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // raced away
    DirEntry entry;
    entry.name = name;
    entry.regular = S_ISREG(st.st_mode);
    entry.directory = S_ISDIR(st.st_mode);
    entry.size = static_cast<std::uint64_t>(st.st_size);
    entry.mtime_ms = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
    entries.push_back(std::move(entry));
  }
  ::closedir(dir);
  return entries;
}

}  // namespace jitcache::cache
