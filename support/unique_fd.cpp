#include "support/unique_fd.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace jitcache {
namespace {
// Linux transfers at most about 2 GiB per read or write call.
constexpr std::size_t k_max_chunk = std::size_t{1} << 30;
}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = fd;
}

int UniqueFd::close() {
  if (m_fd < 0) return 0;
  // Never retried on EINTR: on Linux the descriptor is released whatever close returns.
  return ::close(std::exchange(m_fd, -1)) == 0 ? 0 : errno;
}

int write_fully(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), std::min(data.size(), k_max_chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return 0;
}

int fsync_retrying(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

std::expected<std::size_t, int> read_fully_at(int fd, std::uint64_t offset, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, std::min(out.size() - done, k_max_chunk),
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errno);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace jitcache
