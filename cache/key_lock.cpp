#include "cache/key_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>

#include "jitcache/log.hpp"

namespace jitcache::cache {
namespace {

bool same_file(int fd, int dir_fd, const char* name) {
  struct stat held, named;
  if (::fstat(fd, &held) != 0) return false;
  if (::fstatat(dir_fd, name, &named, AT_SYMLINK_NOFOLLOW) != 0) return false;
  return held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// The holder's note: "<pid> <label>". Only informational; the flock is the truth.
void write_holder(int fd, std::string_view label) {
  const std::string note = std::to_string(::getpid()) + " " + std::string(label) + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, note.data(), note.size(), 0);
}

std::string read_holder(int fd) {
  char buffer[256];
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  if (n <= 0) return "another process";
  std::string note(buffer, static_cast<std::size_t>(n));
  if (const auto end = note.find('\n'); end != std::string::npos) note.resize(end);
  const auto space = note.find(' ');
  const std::string pid = note.substr(0, space);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return "another process";
  const std::string what = space == std::string::npos ? std::string() : note.substr(space + 1);
  return "process " + pid + (what.empty() ? std::string() : " compiling " + what);
}

// Lock files are only ever regular files a store created. Anything else at a lock's name
// (a FIFO, a socket, a symlink, a device) was put there by someone else and serialises
// nothing, so it is removed and a real lock file made in its place.
Status remove_foreign_lock(int dir_fd, const std::string& name, const std::filesystem::path& shown) {
  const auto removed = JC_TRY(remove_unless_regular(dir_fd, name, shown, "lock file"));
  if (removed) log_warning(shown.string() + ": is " + *removed + ", not a lock file; removing it");
  return {};
}

bool is_lock_name(const std::string& name) {
  constexpr std::string_view k_suffix = ".lock";
  return name.size() == k_hash_hex_chars + k_suffix.size() && name.ends_with(k_suffix) &&
         detail::is_hex(std::string_view(name).substr(0, k_hash_hex_chars));
}

}  // namespace

Result<UniqueFd> open_lock_file(int dir_fd, const std::string& name, const std::filesystem::path& shown) {
  // A handful of replacements: someone who keeps planting files here is not outrun.
  for (int attempt = 0; attempt < 4; ++attempt) {
    // O_NONBLOCK: whatever sits at the name, opening it never waits.
    const int raw = ::openat(dir_fd, name.c_str(),
                             O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (raw < 0) {
      const int err = errno;
      if (err != ELOOP && err != ENXIO && err != EISDIR && err != ENODEV && err != ETXTBSY)
        return std::unexpected(errno_error("opening lock " + shown.string(), err));
      JC_TRY(remove_foreign_lock(dir_fd, name, shown));
      continue;
    }
    UniqueFd fd(raw);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return std::unexpected(errno_error("stat " + shown.string(), errno));
    if (S_ISREG(st.st_mode)) return fd;
    fd.reset();
    JC_TRY(remove_foreign_lock(dir_fd, name, shown));
  }
  return make_error(ErrorCode::unsafe, shown.string() + ": something other than a lock file keeps "
                                                        "appearing at this name");
}

Result<std::optional<KeyLock>> KeyLock::acquire(int locks_fd, const std::filesystem::path& locks_dir,
                                                const CacheKey& key, std::chrono::milliseconds timeout,
                                                std::string_view label) {
  const std::string name = key.to_hex() + ".lock";
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + timeout;
  auto next_report = started + k_wait_report_first;
  // Polling with a short, growing sleep: a compile takes seconds, so waking a few
  // milliseconds late costs nothing, and unlike a blocking flock it honours the timeout.
  auto pause = std::chrono::microseconds(500);
  for (;;) {
    UniqueFd fd = JC_TRY(open_lock_file(locks_fd, name, locks_dir / name));
    // The creation mode passed through the umask; lock files are 0600 like every file.
    ::fchmod(fd.get(), 0600);
    for (;;) {
      if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) break;
      if (errno != EWOULDBLOCK && errno != EINTR)
        return std::unexpected(errno_error("flock " + (locks_dir / name).string(), errno));
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return std::optional<KeyLock>();
      if (now >= next_report) {
        // Ranks starting together otherwise sit silent for a whole compile.
        const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - started).count();
        log_info("cache: waiting for " + read_holder(fd.get()) + " (key " + key.to_hex() + ", " +
                 std::to_string(waited) + " s so far)");
        next_report = now + k_wait_report_every;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }
    if (same_file(fd.get(), locks_fd, name.c_str())) {
      write_holder(fd.get(), label.empty() ? std::string_view(name) : label);
      return std::optional<KeyLock>(KeyLock(std::move(fd)));
    }
    // gc unlinked the file between our open and our lock: lock the current one instead.
  }
}

Result<std::uint64_t> KeyLock::sweep(int locks_fd, const std::filesystem::path& locks_dir,
                                     std::int64_t cutoff_ms) {
  std::uint64_t removed = 0;
  const auto files = JC_TRY(list_dir(locks_fd, locks_dir));
  for (const DirEntry& file : files) {
    if (!file.regular || !is_lock_name(file.name) || file.mtime_ms >= cutoff_ms) continue;
    const int raw = ::openat(locks_fd, file.name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (raw < 0) continue;
    UniqueFd fd(raw);
    // Only unlink while holding the lock, so no holder is ever left on an unlinked inode.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (same_file(fd.get(), locks_fd, file.name.c_str()) &&
        ::unlinkat(locks_fd, file.name.c_str(), 0) == 0)
      ++removed;
  }
  return removed;
}

}  // namespace jitcache::cache
