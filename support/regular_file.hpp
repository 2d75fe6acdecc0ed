// Regular files only. Every file jitcache reads goes through RegularFile (or, where the
// open must be done elsewhere, for example openat2 below a directory descriptor, through
// the same checks): it opens without blocking, so a FIFO, a terminal or a device in place
// of a file is refused at once instead of waiting for a writer forever, and it refuses
// anything but a regular file with a message naming the path and what was found there.
// Every file the CLI writes passes check_output_target, so an output never replaces a
// device, a FIFO or a socket, never overwrites one of the command's own inputs and never
// replaces a file that a checkpoint it reads pins by SHA-256.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"
#include "support/unique_fd.hpp"

namespace jitcache {

// The kind of file a mode names, as a noun phrase: "a FIFO", "a socket", "a directory".
std::string_view file_type_name(mode_t mode);

enum class FollowSymlinks { yes, no };

class RegularFile {
 public:
  // Opens `path` for reading (O_NONBLOCK, O_NOCTTY, close-on-exec). Errors name
  // `display_name`, else the path: not_found when nothing is there, invalid_input when
  // something other than a regular file is (a symlink too, with FollowSymlinks::no), io
  // for anything else the system refuses.
  static Result<RegularFile> open(const std::filesystem::path& path,
                                  FollowSymlinks follow = FollowSymlinks::yes,
                                  std::string_view display_name = {});
  // Takes ownership of `fd`, opened elsewhere with O_NONBLOCK, and applies the same check.
  // The descriptor is closed on failure.
  static Result<RegularFile> adopt(int fd, std::string name);

  int fd() const { return m_fd.get(); }
  const std::string& name() const { return m_name; }
  // The size and identity when the file was opened.
  std::uint64_t size() const { return static_cast<std::uint64_t>(m_stat.st_size); }
  const struct stat& status() const { return m_stat; }

  // Exactly `size` bytes at `offset`; a file that ends sooner (it shrank) is an io error.
  Status read_at(std::uint64_t offset, void* dst, std::size_t size) const;
  // The whole file, read to its end (not to its size at open: a file that grows is still
  // capped), refusing one of more than `max_bytes` bytes.
  Result<std::string> read_all(std::size_t max_bytes) const;
  Result<std::vector<std::uint8_t>> read_all_bytes(std::size_t max_bytes) const;

 private:
  RegularFile(UniqueFd fd, std::string name, const struct stat& st);
  UniqueFd m_fd;
  std::string m_name;
  struct stat m_stat {};
};

// The whole of a regular file of at most `max_bytes` bytes (RegularFile::open, read_all).
Result<std::string> read_regular_file(const std::filesystem::path& path, std::size_t max_bytes,
                                      std::string_view display_name = {},
                                      FollowSymlinks follow = FollowSymlinks::yes);

// The same as bytes, for binary files (the kv tools' record files).
Result<std::vector<std::uint8_t>> read_regular_file_bytes(const std::filesystem::path& path,
                                                          std::size_t max_bytes);

// A file whose bytes an input pins by SHA-256: a checkpoint's config.json pins its scales
// sidecar. Replacing it breaks whatever pins it (an engine then refuses the checkpoint).
struct PinnedFile {
  std::filesystem::path path;  // where the pin says the file is (it may be missing)
  std::string sha256;          // the pinned digest, lowercase hex
  std::string pinned_by;       // the file that pins it, as messages name it
  // The largest file the pin's reader accepts: a larger output cannot hold the pinned
  // bytes and is not hashed.
  std::size_t max_bytes = 0;
};

// May `output` be written (replaced) by a command that reads `inputs` and is led by them to
// the `pinned` files? The one rule of every command that writes a file, checked before the
// command reads or writes anything else. Refused, as invalid_input naming the rule and both
// files: an existing `output` that is not a regular file (a device, a FIFO, a socket, a
// directory; a symbolic link too, since replacing it would replace the link and not what it
// names); an `output` that is the same file (device and inode) as any input or pinned file,
// whatever path spells it; and an `output` whose bytes are a pinned file's (its SHA-256 is
// the pin), since one file can show two identities (two mounts of one network filesystem,
// an overlay's layers) and a copy that matches a pin is what a repair would restore from.
// A missing output is fine.
Status check_output_target(const std::filesystem::path& output,
                           std::span<const std::filesystem::path> inputs = {},
                           std::span<const PinnedFile> pinned = {});
// Its first rule for the entry `name` below `dir_fd`, named `shown` in messages: nothing
// there, or a regular file (the atomic writer checks this right before its rename).
Status check_replaceable_at(int dir_fd, const std::string& name, const std::filesystem::path& shown);

}  // namespace jitcache
