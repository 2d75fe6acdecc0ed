// The one atomic file writer: every file jitcache publishes (a cache blob, the compiler
// fingerprint memo, a CLI output such as an .npy file) is written to a unique temporary
// file, synced, and renamed into place, so a reader sees the old file or the whole new one
// and never a part. A writer that is not committed leaves nothing behind: its destructor
// removes the temporary file, and it never commits on its own.
//
//   create / create_in -> write ... -> [finish] -> commit / commit_into
//
// The temporary file is "<stem>.tmp-<pid>-<sequence>-<random>" in its directory, created
// with O_EXCL and O_NOFOLLOW, so it is never an existing file or a link planted there.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"
#include "support/unique_fd.hpp"

namespace jitcache {

// A directory reached through an open descriptor, and the path messages show for it.
struct DirRef {
  int fd = -1;
  std::filesystem::path shown;
};

// The steps of an atomic write, in order; the test seam (AtomicFileOptions::fault) is
// called before each step that runs.
enum class AtomicWriteStep { temp_create, temp_write, temp_fsync, rename, dir_fsync };
const char* to_string(AtomicWriteStep step);
// 0 to go on, or an errno value the step then fails with (a failing write first writes
// half of its bytes, as a full disk does).
using AtomicWriteFault = std::function<int(AtomicWriteStep)>;

// What is synced. none: nothing, for throwaway caches; file: the content before the
// rename (a crash leaves the old file or the whole new one); file_and_directory: the
// directory entry too, so the new file survives a crash once commit returns.
enum class SyncRule { none, file, file_and_directory };

// What the rename may land on. regular_file_only: a new name or a regular file; anything
// else there (a FIFO, a socket, a device, a directory, a symbolic link) is refused and left
// as it is (check_replaceable_at). anything: whatever is there is replaced, for files in a
// private directory where a stranger's file is damage to repair.
enum class ReplaceRule { regular_file_only, anything };

// umask: the mode is filtered by the process umask, as for any file a user's command
// makes. exact: set with fchmod after creation, whatever the umask.
enum class ModeRule { umask, exact };

// Who reads the errors. target_first: "<target>: write failed: <why>", for the user who
// named the output. operation_first: "writing <temporary file>: <why>", naming the file
// each step touched, for the logs of a cache that owns its files.
enum class ErrorWording { target_first, operation_first };

struct AtomicFileOptions {
  mode_t mode = 0666;
  ModeRule mode_rule = ModeRule::umask;
  SyncRule sync = SyncRule::file_and_directory;
  ReplaceRule replace = ReplaceRule::regular_file_only;
  ErrorWording wording = ErrorWording::target_first;
  // The temporary file's name starts with this; empty: "." and the target's name.
  std::string temp_stem;
  AtomicWriteFault fault;
};

class AtomicFileWriter {
 public:
  // The temporary file goes into the directory of `target` (opened here), and commit()
  // renames it onto `target`. A missing directory is an io error naming it.
  static Result<AtomicFileWriter> create(const std::filesystem::path& target, AtomicFileOptions options = {});
  // The temporary file goes into `temp_dir` (its descriptor is duplicated: the caller's may
  // close), and commit_into names the destination, which must be on the same filesystem.
  static Result<AtomicFileWriter> create_in(const DirRef& temp_dir, AtomicFileOptions options);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  // Removes the temporary file unless it was committed.
  ~AtomicFileWriter();

  // Appends to the temporary file.
  Status write(std::span<const std::byte> data);
  Status write(std::string_view text) { return write(std::as_bytes(std::span(text))); }

  // Syncs (per SyncRule) and closes the temporary file: its content is complete. commit
  // does this when it has not been done; callers that act between the two (a test seam
  // that kills the process there) call it themselves.
  Status finish();

  // Renames the temporary file onto the target given to create(), then syncs the directory
  // (per SyncRule). Once the rename is done the file is committed, even if the directory
  // sync then fails (the error says so).
  Status commit();
  // The same into `dir` as `name`, for a writer made by create_in.
  Status commit_into(const DirRef& dir, const std::string& name);

  // The temporary file, as messages show it; empty once committed.
  std::filesystem::path temp_path() const;

 private:
  AtomicFileWriter(UniqueFd dir, std::filesystem::path dir_shown, AtomicFileOptions options);
  Status open_temp(const std::filesystem::path& target_shown);
  Status rename_into(const DirRef& dir, const std::string& name, const std::filesystem::path& target_shown);
  int fault_at(AtomicWriteStep step) const;
  // What target-first messages name: the target, or the temporary file before there is one.
  std::filesystem::path subject_path() const;

  UniqueFd m_dir;                    // where the temporary file is
  std::filesystem::path m_dir_shown;
  AtomicFileOptions m_options;
  UniqueFd m_file;
  std::string m_temp_name;           // empty once committed (or never created)
  std::filesystem::path m_target;    // create(): the target as the caller spelt it
  std::string m_target_name;         // create(): its name in m_dir
  bool m_finished = false;
};

// One whole file from `parts`, with the default options: the file is complete and durable
// when this returns, or nothing changed at `path`; a non-regular file there is refused.
Status write_file_atomic(const std::filesystem::path& path,
                         std::span<const std::span<const std::uint8_t>> parts);
// The same for one text (or any bytes held in a string).
Status write_text_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace jitcache
