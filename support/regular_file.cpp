#include "support/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "support/sha256.hpp"

namespace jitcache {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::unexpected<Error> not_regular(const std::string& name, mode_t mode) {
  return make_error(ErrorCode::invalid_input,
                    name + ": not a regular file (" + std::string(file_type_name(mode)) + ")");
}

std::unexpected<Error> too_big(const std::string& name, std::uint64_t size, std::size_t max_bytes) {
  return make_error(ErrorCode::invalid_input,
                    name + ": file is " + std::to_string(size) + " bytes, over the limit of " +
                        std::to_string(max_bytes) + " bytes for this kind of file");
}

template <class Container>
Result<Container> read_to_end(int fd, const std::string& name, std::uint64_t size_hint,
                              std::size_t max_bytes) {
  if (size_hint > max_bytes) return too_big(name, size_hint, max_bytes);
  // One byte over the cap is enough to know a file is too big.
  const std::size_t cap = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  Container data;
  // One byte past the expected end, so that end of file is seen without another grow.
  data.resize(static_cast<std::size_t>(size_hint) + 1);
  std::size_t have = 0;
  for (;;) {
    if (have == data.size()) {
      if (data.size() > max_bytes) return too_big(name, data.size(), max_bytes);
      data.resize(std::min(cap, std::max<std::size_t>(data.size() * 2, 1 << 16)));
    }
    const auto free = std::as_writable_bytes(std::span(data)).subspan(have);
    const auto n = read_fully_at(fd, have, free);
    if (!n) return make_error(ErrorCode::io, name + ": read failed: " + errno_text(n.error()));
    have += *n;
    if (*n < free.size()) break;  // the end of the file
  }
  if (have > max_bytes) return too_big(name, have, max_bytes);
  data.resize(have);
  return data;
}

std::unexpected<Error> refuse_to_replace(const std::filesystem::path& output, mode_t mode) {
  return make_error(ErrorCode::invalid_input,
                    output.string() + ": the output exists and is " + std::string(file_type_name(mode)) +
                        ", not a regular file; refusing to replace it (name a new file or a "
                        "regular one)");
}

std::unexpected<Error> cannot_stat_output(const std::filesystem::path& output, int err) {
  return make_error(ErrorCode::io, output.string() + ": cannot stat the output: " + errno_text(err));
}

}  // namespace

std::string_view file_type_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: return "an unknown kind of file";
  }
}

RegularFile::RegularFile(UniqueFd fd, std::string name, const struct stat& st)
    : m_fd(std::move(fd)), m_name(std::move(name)), m_stat(st) {}

Result<RegularFile> RegularFile::open(const std::filesystem::path& path, FollowSymlinks follow,
                                      std::string_view display_name) {
  std::string name = display_name.empty() ? path.string() : std::string(display_name);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever, and
  // some devices block in open. O_NOCTTY: a terminal never becomes our controlling one.
  int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (follow == FollowSymlinks::no) flags |= O_NOFOLLOW;
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    // A socket cannot be opened at all (ENXIO), a symlink not without following it
    // (ELOOP): say what is there rather than echo the system's words.
    struct stat st {};
    const int looked = follow == FollowSymlinks::no ? ::lstat(path.c_str(), &st)
                                                    : ::stat(path.c_str(), &st);
    if (err != ENOENT && looked == 0 && !S_ISREG(st.st_mode)) return not_regular(name, st.st_mode);
    return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io,
                      name + ": cannot open: " + errno_text(err));
  }
  return adopt(fd, std::move(name));
}

Result<RegularFile> RegularFile::adopt(int raw_fd, std::string name) {
  UniqueFd fd(raw_fd);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return make_error(ErrorCode::io, name + ": cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return not_regular(name, st.st_mode);
  // Only needed to open; reads of a regular file never block on it, but clearing it keeps
  // the descriptor ordinary for whoever uses it next.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return RegularFile(std::move(fd), std::move(name), st);
}

Status RegularFile::read_at(std::uint64_t offset, void* dst, std::size_t size) const {
  const auto n = read_fully_at(m_fd.get(), offset, {static_cast<std::byte*>(dst), size});
  if (!n) return make_error(ErrorCode::io, m_name + ": read failed: " + errno_text(n.error()));
  if (*n < size) return make_error(ErrorCode::io, m_name + ": unexpected end of file while reading");
  return {};
}

Result<std::string> RegularFile::read_all(std::size_t max_bytes) const {
  return read_to_end<std::string>(m_fd.get(), m_name, size(), max_bytes);
}

Result<std::vector<std::uint8_t>> RegularFile::read_all_bytes(std::size_t max_bytes) const {
  return read_to_end<std::vector<std::uint8_t>>(m_fd.get(), m_name, size(), max_bytes);
}

Result<std::string> read_regular_file(const std::filesystem::path& path, std::size_t max_bytes,
                                      std::string_view display_name, FollowSymlinks follow) {
  const RegularFile file = JC_TRY(RegularFile::open(path, follow, display_name));
  return file.read_all(max_bytes);
}

Result<std::vector<std::uint8_t>> read_regular_file_bytes(const std::filesystem::path& path,
                                                          std::size_t max_bytes) {
  const RegularFile file = JC_TRY(RegularFile::open(path));
  return file.read_all_bytes(max_bytes);
}

Status check_replaceable_at(int dir_fd, const std::string& name, const std::filesystem::path& shown) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return cannot_stat_output(shown, errno);
  }
  if (!S_ISREG(st.st_mode)) return refuse_to_replace(shown, st.st_mode);
  return {};
}

Status check_output_target(const std::filesystem::path& output,
                           std::span<const std::filesystem::path> inputs,
                           std::span<const PinnedFile> pinned) {
  struct stat out {};
  if (::lstat(output.c_str(), &out) != 0) {
    if (errno == ENOENT) return {};  // a new name: nothing to replace
    return cannot_stat_output(output, errno);
  }
  if (!S_ISREG(out.st_mode)) return refuse_to_replace(output, out.st_mode);
  const auto same_file = [&out](const std::filesystem::path& path) {
    struct stat in {};
    // A missing file is not the output; its reader reports it.
    return ::stat(path.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino;
  };
  for (const std::filesystem::path& input : inputs) {
    if (same_file(input))
      return make_error(ErrorCode::invalid_input,
                        output.string() + ": the output is the same file as the input '" +
                            input.string() + "'; refusing to overwrite an input (name another output)");
  }
  const auto refuse_pinned = [&output](const PinnedFile& pin, const std::string& how) {
    return make_error(ErrorCode::invalid_input,
                      output.string() + ": the output " + how + " '" + pin.path.string() + "', which " +
                          pin.pinned_by + " pins by sha256 " + pin.sha256 +
                          "; replacing it would break " + pin.pinned_by + " (name another output)");
  };
  std::optional<std::string> digest;  // the output's SHA-256, read once when needed
  for (const PinnedFile& pin : pinned) {
    if (same_file(pin.path)) return refuse_pinned(pin, "is the same file as");
    if (static_cast<std::uint64_t>(out.st_size) > pin.max_bytes) continue;
    if (!digest) {
      auto file = RegularFile::open(output, FollowSymlinks::no);
      if (!file) return std::unexpected(std::move(file.error()));
      auto bytes = file->read_all(pin.max_bytes);
      if (!bytes) continue;  // it grew past any pinned size meanwhile: not a pinned file
      digest = sha256_hex(*bytes);
    }
    if (*digest == pin.sha256) return refuse_pinned(pin, "holds the very bytes of");
  }
  return {};
}

}  // namespace jitcache
