// POSIX file helpers of the cache: private directories, whole-file writes, directory
// listings (the owning descriptor and the atomic writer are in support/). Everything below
// a verified root is reached through directory descriptors and *at() calls, so a path
// component swapped for a symlink after the check is never followed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitcache/error.hpp"
#include "support/unique_fd.hpp"

namespace jitcache::cache {

// "<what>: <strerror(errno)>" as an io error.
Error errno_error(const std::string& what, int error_number);

enum class CreateParents { no, yes };

// SQLite's unix VFS opens no path longer than this (its MAX_PATHNAME).
inline constexpr std::size_t k_max_index_path_bytes = 512;

// The absolute path a cache root is used under, checked before anything is created:
// the part above the root resolved to its canonical form (symlinks above the root are
// fine: /home may link to /data/home), the root's own name kept as given, the nearest
// existing ancestor a directory, and the index path within SQLite's limit.
Result<std::filesystem::path> resolve_root_path(const std::filesystem::path& path);

// Opens `path` (resolved by resolve_root_path) as a private directory, creating it (and, on request, missing parents)
// with mode 0700 whatever the umask. Refuses a symlink, a non-directory, a directory
// owned by another user, a group- or world-writable one, and one on a network filesystem.
Result<UniqueFd> open_private_dir(const std::filesystem::path& path, CreateParents parents);

// The same checks for a subdirectory `name` of an open private directory.
Result<UniqueFd> open_private_subdir(int parent_fd, const std::string& name,
                                     const std::filesystem::path& shown_path);

// Filesystems on which SQLite's locks and flock are unreliable.
bool is_network_filesystem(std::int64_t statfs_type);

// Removes what sits at `name` below `dir_fd` unless it is a regular file or nothing: a FIFO,
// socket, device or symlink planted where the cache keeps a file of its own. Returns what
// was removed ("a FIFO", ...), or std::nullopt. When it cannot be removed: an unsafe error
// naming `shown` and saying it is not a regular `role`.
Result<std::optional<std::string>> remove_unless_regular(int dir_fd, const std::string& name,
                                                         const std::filesystem::path& shown, std::string_view role);

// Writes all bytes (support/unique_fd.hpp's loops), with errors worded as errno_error's.
Status write_all(int fd, std::span<const std::byte> data, const std::filesystem::path& shown_path);
Status fsync_fd(int fd, const std::filesystem::path& shown_path);

std::int64_t unix_now_ms();

// Identifies a file across renames: what a path named when it was looked at.
struct FileId {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};
std::optional<FileId> file_id_of(const std::filesystem::path& path);

// Regular files in a directory (not following symlinks), with their modification time.
struct DirEntry {
  std::string name;
  std::int64_t mtime_ms = 0;
  std::uint64_t size = 0;
  bool regular = false;
  bool directory = false;
};
Result<std::vector<DirEntry>> list_dir(int dir_fd, const std::filesystem::path& shown_path);

}  // namespace jitcache::cache
