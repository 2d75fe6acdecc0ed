#include "support/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace jitcache {
namespace {

constexpr std::chrono::milliseconds k_poll{5};

std::unexpected<Error> lock_error(const std::filesystem::path& path, const char* step, int err) {
  return make_error(ErrorCode::io, path.string() + ": cannot " + step + " the lock file: " + std::strerror(err));
}

}  // namespace

Result<FileLock> FileLock::acquire(const std::filesystem::path& path, std::chrono::milliseconds timeout,
                                   const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
    if (!fd) return lock_error(path, "open", errno);
    struct stat held {};
    if (::fstat(fd.get(), &held) != 0) return lock_error(path, "stat", errno);
    if (!S_ISREG(held.st_mode))
      return make_error(ErrorCode::unsafe, path.string() + ": the lock file is not a regular file");
    // Polled rather than blocking, so that the wait has a bound.
    while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return lock_error(path, "lock", errno);
      if (std::chrono::steady_clock::now() >= deadline)
        return make_error(ErrorCode::io,
                          path.string() + ": " + what + " has held this lock for more than " +
                              std::to_string(timeout.count() / 1000) + " s; try again when it is done");
      std::this_thread::sleep_for(k_poll);
    }
    // The holder before us removed the file it locked: lock the one the path names now.
    struct stat named {};
    if (::lstat(path.c_str(), &named) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino)
      return FileLock(std::move(fd), path);
  }
}

FileLock::~FileLock() {
  if (!m_fd) return;  // moved from
  // Removed while still held: a waiter that wins the lock on this file then sees that the
  // path names another (or none) and starts over, so two holders never overlap.
  ::unlink(m_path.c_str());
}

}  // namespace jitcache
