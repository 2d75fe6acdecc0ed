// An exclusive lock held on a lock file that exists only while someone holds it, for a job
// that must not run twice at once on one thing (two `scales install` on one checkpoint).
//
// flock(2), so the kernel releases it when its holder dies. The holder removes the file
// before it releases the lock, so nothing is left behind; a waiter that then wins the lock
// on the removed file notices (the path no longer names its file) and starts over.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "jitcache/error.hpp"
#include "support/unique_fd.hpp"

namespace jitcache {

class FileLock {
 public:
  // Creates `path` (mode 0600) if needed and locks it, waiting up to `timeout`. Errors name
  // the lock file and, for a timeout, `what` the holder is doing ("a scales install").
  static Result<FileLock> acquire(const std::filesystem::path& path, std::chrono::milliseconds timeout,
                                  const std::string& what);

  FileLock(FileLock&& other) noexcept = default;
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Removes the lock file, then releases the lock.
  ~FileLock();

 private:
  FileLock(UniqueFd fd, std::filesystem::path path) : m_fd(std::move(fd)), m_path(std::move(path)) {}
  UniqueFd m_fd;
  std::filesystem::path m_path;
};

}  // namespace jitcache
