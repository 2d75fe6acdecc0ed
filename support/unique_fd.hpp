// File descriptors: the one owning type, and the loops every whole read, write and sync
// needs (a system call may transfer less than asked, or be interrupted by a signal). The
// loops report the system's errno and leave the wording of a message to the caller, which
// knows what the file is to its reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <utility>

namespace jitcache {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : m_fd(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return m_fd; }
  explicit operator bool() const { return m_fd >= 0; }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void reset(int fd = -1);
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(m_fd, -1); }
  // Closes now and returns 0 or close's errno: some filesystems report a failed write
  // only at close, so a writer that must know checks this instead of the destructor.
  [[nodiscard]] int close();

 private:
  int m_fd = -1;
};

// Writes all of `data`, retrying short writes and EINTR: 0, or the errno of the failed write.
[[nodiscard]] int write_fully(int fd, std::span<const std::byte> data);

// fsync, retried on EINTR: 0 or the errno.
[[nodiscard]] int fsync_retrying(int fd);

// Reads at `offset` until `out` is full or the file ends, retrying short reads and EINTR:
// the number of bytes read (fewer than out.size() only at the end of the file), or the errno.
std::expected<std::size_t, int> read_fully_at(int fd, std::uint64_t offset, std::span<std::byte> out);

}  // namespace jitcache
