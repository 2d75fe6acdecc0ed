#include "support/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "support/enum_names.hpp"
#include "support/regular_file.hpp"

namespace jitcache {
namespace {

// Attempts at a fresh temporary name, and at a rename whose target keeps appearing.
constexpr int k_name_attempts = 16;
constexpr int k_rename_attempts = 8;

// What failed, for the message: the fault steps plus the two calls no test injects into.
enum class Op { create, chmod, write, fsync, close, rename, dir_fsync };

std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" +
         std::to_string(rng() & 0xffffffffu);
}

// A writer used after its commit (or after it was moved from): a caller's mistake.
std::unexpected<Error> used_up() {
  return make_error(ErrorCode::invalid_argument, "atomic file writer: used after its commit");
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%o", static_cast<unsigned>(mode & 07777));
  return text;
}

// The message of a failed step. `target` is the file being published, `temp` the
// temporary file, `dir` the directory the step concerns (created in, or synced).
std::unexpected<Error> failure(ErrorWording wording, Op op, int err, const std::filesystem::path& target,
                               const std::filesystem::path& temp, const std::filesystem::path& dir,
                               mode_t mode = 0) {
  const std::string why = std::strerror(err);
  std::string text;
  if (wording == ErrorWording::target_first) {
    const std::string t = target.string();
    switch (op) {
      case Op::create:
        text = err == EEXIST ? t + ": cannot create a unique temporary file"
                             : t + ": cannot create a temporary file in '" + dir.string() + "': " + why;
        break;
      case Op::chmod: text = t + ": cannot set the mode of the temporary file: " + why; break;
      case Op::write: text = t + ": write failed: " + why; break;
      case Op::fsync: text = t + ": fsync failed: " + why; break;
      case Op::close: text = t + ": close failed: " + why; break;
      case Op::rename: text = t + ": cannot rename the temporary file into place: " + why; break;
      case Op::dir_fsync:
        text = t + ": written, but cannot fsync its directory '" + dir.string() + "': " + why;
        break;
    }
  } else {
    switch (op) {
      case Op::create: text = "creating a temporary file in " + dir.string() + ": " + why; break;
      case Op::chmod: text = "chmod " + octal(mode) + " " + temp.string() + ": " + why; break;
      case Op::write: text = "writing " + temp.string() + ": " + why; break;
      case Op::fsync: text = "fsync " + temp.string() + ": " + why; break;
      case Op::close: text = "closing " + temp.string() + ": " + why; break;
      case Op::rename: text = "renaming " + temp.string() + " to " + target.string() + ": " + why; break;
      case Op::dir_fsync: text = "fsync " + dir.string() + ": " + why; break;
    }
  }
  return make_error(ErrorCode::io, std::move(text));
}

}  // namespace

const char* to_string(AtomicWriteStep step) {
  return enum_name(step, {"temp_create", "temp_write", "temp_fsync", "rename", "dir_fsync"});
}

AtomicFileWriter::AtomicFileWriter(UniqueFd dir, std::filesystem::path dir_shown, AtomicFileOptions options)
    : m_dir(std::move(dir)), m_dir_shown(std::move(dir_shown)), m_options(std::move(options)) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : m_dir(std::move(other.m_dir)),
      m_dir_shown(std::move(other.m_dir_shown)),
      m_options(std::move(other.m_options)),
      m_file(std::move(other.m_file)),
      m_temp_name(std::exchange(other.m_temp_name, {})),
      m_target(std::move(other.m_target)),
      m_target_name(std::move(other.m_target_name)),
      m_finished(other.m_finished) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (!m_temp_name.empty() && m_dir) ::unlinkat(m_dir.get(), m_temp_name.c_str(), 0);
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::filesystem::path& target,
                                                  AtomicFileOptions options) {
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    return make_error(ErrorCode::invalid_argument, target.string() + ": does not name a file");
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return failure(options.wording, Op::create, errno, target, {}, dir);
  AtomicFileWriter writer(std::move(dir_fd), dir, std::move(options));
  writer.m_target = target;
  writer.m_target_name = name;
  JC_TRY(writer.open_temp(target));
  return writer;
}

Result<AtomicFileWriter> AtomicFileWriter::create_in(const DirRef& temp_dir, AtomicFileOptions options) {
  UniqueFd dir_fd(::fcntl(temp_dir.fd, F_DUPFD_CLOEXEC, 0));
  if (!dir_fd) return failure(options.wording, Op::create, errno, {}, {}, temp_dir.shown);
  AtomicFileWriter writer(std::move(dir_fd), temp_dir.shown, std::move(options));
  JC_TRY(writer.open_temp({}));
  return writer;
}

int AtomicFileWriter::fault_at(AtomicWriteStep step) const {
  return m_options.fault ? m_options.fault(step) : 0;
}

Status AtomicFileWriter::open_temp(const std::filesystem::path& target_shown) {
  const std::string stem = m_options.temp_stem.empty() ? "." + m_target_name : m_options.temp_stem;
  int err = fault_at(AtomicWriteStep::temp_create);
  for (int attempt = 0; err == 0 && attempt < k_name_attempts; ++attempt) {
    std::string name = stem + ".tmp-" + unique_suffix();
    const int fd = ::openat(m_dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            m_options.mode);
    if (fd >= 0) {
      m_file.reset(fd);
      m_temp_name = std::move(name);
      break;
    }
    if (errno != EEXIST) err = errno;
  }
  const ErrorWording wording = m_options.wording;
  if (!m_file) return failure(wording, Op::create, err != 0 ? err : EEXIST, target_shown, {}, m_dir_shown);
  if (m_options.mode_rule == ModeRule::exact && ::fchmod(m_file.get(), m_options.mode) != 0)
    return failure(wording, Op::chmod, errno, target_shown, temp_path(), m_dir_shown, m_options.mode);
  return {};
}

std::filesystem::path AtomicFileWriter::subject_path() const {
  return m_target.empty() ? temp_path() : m_target;
}

std::filesystem::path AtomicFileWriter::temp_path() const {
  return m_temp_name.empty() ? std::filesystem::path() : m_dir_shown / m_temp_name;
}

Status AtomicFileWriter::write(std::span<const std::byte> data) {
  if (m_temp_name.empty()) return used_up();
  const std::filesystem::path subject = subject_path();
  if (m_finished) return make_error(ErrorCode::invalid_argument, subject.string() + ": written after finish");
  if (const int e = fault_at(AtomicWriteStep::temp_write)) {
    (void)write_fully(m_file.get(), data.first(data.size() / 2));
    return failure(m_options.wording, Op::write, e, subject, temp_path(), m_dir_shown);
  }
  if (const int e = write_fully(m_file.get(), data))
    return failure(m_options.wording, Op::write, e, subject, temp_path(), m_dir_shown);
  return {};
}

Status AtomicFileWriter::finish() {
  if (m_temp_name.empty()) return used_up();
  if (m_finished) return {};
  const std::filesystem::path subject = subject_path();
  if (m_options.sync != SyncRule::none) {
    int e = fault_at(AtomicWriteStep::temp_fsync);
    if (e == 0) e = fsync_retrying(m_file.get());
    if (e != 0) return failure(m_options.wording, Op::fsync, e, subject, temp_path(), m_dir_shown);
  }
  if (const int e = m_file.close())
    return failure(m_options.wording, Op::close, e, subject, temp_path(), m_dir_shown);
  m_finished = true;
  return {};
}

Status AtomicFileWriter::commit() {
  if (m_target_name.empty())
    return make_error(ErrorCode::invalid_argument,
                      temp_path().string() + ": no target to commit to (made by create_in: use commit_into)");
  return rename_into(DirRef{m_dir.get(), m_dir_shown}, m_target_name, m_target);
}

Status AtomicFileWriter::commit_into(const DirRef& dir, const std::string& name) {
  return rename_into(dir, name, dir.shown / name);
}

Status AtomicFileWriter::rename_into(const DirRef& dir, const std::string& name,
                                     const std::filesystem::path& target_shown) {
  JC_TRY(finish());
  const auto failed = [&](Op op, int err, const std::filesystem::path& about) {
    return failure(m_options.wording, op, err, target_shown, temp_path(), about);
  };
  const int from = m_dir.get();
  const char* temp = m_temp_name.c_str();
  int err = fault_at(AtomicWriteStep::rename);
  bool renamed = false;
  if (err == 0 && m_options.replace == ReplaceRule::anything) {
    renamed = ::renameat(from, temp, dir.fd, name.c_str()) == 0;
    if (!renamed) err = errno;
  }
  // A new name is taken with RENAME_NOREPLACE, so nothing that appears there meanwhile is
  // replaced; what remains is the window between the check of an existing regular file
  // and the rename, which only someone who can already write the directory can use.
  for (int attempt = 0; err == 0 && !renamed && attempt < k_rename_attempts; ++attempt) {
    JC_TRY(check_replaceable_at(dir.fd, name, target_shown));
    struct stat st {};
    const bool exists = ::fstatat(dir.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && ::renameat2(from, temp, dir.fd, name.c_str(), RENAME_NOREPLACE) == 0) {
      renamed = true;
    } else if (!exists && errno == EEXIST) {
      continue;  // created meanwhile: check what it is
    } else if (exists || errno == EINVAL || errno == ENOSYS) {
      // An existing regular file, or a filesystem without RENAME_NOREPLACE (the check
      // above is then the guard).
      renamed = ::renameat(from, temp, dir.fd, name.c_str()) == 0;
      if (!renamed) err = errno;
    } else {
      err = errno;
    }
  }
  if (err != 0) return failed(Op::rename, err, dir.shown);
  if (!renamed)
    return make_error(ErrorCode::io, target_shown.string() + ": the output keeps changing; not written");
  m_temp_name.clear();  // committed: the destructor leaves it alone
  if (m_options.sync == SyncRule::file_and_directory) {
    int e = fault_at(AtomicWriteStep::dir_fsync);
    if (e == 0) e = fsync_retrying(dir.fd);
    if (e != 0) return failed(Op::dir_fsync, e, dir.shown);
  }
  return {};
}

Status write_file_atomic(const std::filesystem::path& path,
                         std::span<const std::span<const std::uint8_t>> parts) {
  AtomicFileWriter writer = JC_TRY(AtomicFileWriter::create(path));
  for (const auto& part : parts) JC_TRY(writer.write(std::as_bytes(part)));
  return writer.commit();
}

Status write_text_atomic(const std::filesystem::path& path, std::string_view text) {
  const std::span<const std::uint8_t> parts[] = {
      std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())};
  return write_file_atomic(path, parts);
}

}  // namespace jitcache
