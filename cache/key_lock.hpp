// One producer per key across processes: an exclusive flock on <root>/locks/<key>.lock.
//
// flock, not a lock file holding a PID: the kernel releases it when its holder dies, so
// a killed producer never blocks the next one, and there is nothing stale to clean up.
// gc may unlink an idle lock file; a waiter that then wins the lock on the unlinked inode
// notices (the path no longer names its inode) and retries on the new file.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "cache/files.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

inline constexpr std::chrono::seconds k_wait_report_first{2};
inline constexpr std::chrono::seconds k_wait_report_every{30};

// Opens (creating, mode 0600) the lock file `name` in `dir_fd` without blocking. Anything
// but a regular file found at the name (a FIFO, a socket, a symlink) is no lock: it is
// removed, with a warning, and a lock file created in its place.
Result<UniqueFd> open_lock_file(int dir_fd, const std::string& name, const std::filesystem::path& shown);

class KeyLock {
 public:
  KeyLock(KeyLock&&) = default;
  KeyLock& operator=(KeyLock&&) = default;
  ~KeyLock() = default;  // closing the descriptor releases the lock

  // Waits up to `timeout` for the lock; std::nullopt when it timed out. The holder writes
  // its PID and `label` (what it produces) into the file; a waiter names them in a log
  // line after k_wait_report_first, then every k_wait_report_every.
  static Result<std::optional<KeyLock>> acquire(int locks_fd, const std::filesystem::path& locks_dir,
                                                const CacheKey& key, std::chrono::milliseconds timeout,
                                                std::string_view label = {});

  // Removes lock files older than `cutoff_ms` that nobody holds. Returns how many.
  static Result<std::uint64_t> sweep(int locks_fd, const std::filesystem::path& locks_dir,
                                     std::int64_t cutoff_ms);

 private:
  explicit KeyLock(UniqueFd fd) : m_fd(std::move(fd)) {}
  UniqueFd m_fd;
};

}  // namespace jitcache::cache
