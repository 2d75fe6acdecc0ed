#include "cache/blob_files.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "jitcache/log.hpp"
#include "support/enum_names.hpp"
#include "support/regular_file.hpp"

namespace jitcache::cache {

const char* to_string(PublishStep step) {
  return enum_name(step, {"temp_written", "renamed", "row_written"});
}

const char* to_string(BlobProblem problem) {
  return enum_name(problem, {"missing", "not a regular file", "wrong size",
                             "content does not match its digest", "unreadable"});
}

namespace {

std::string shard_of(const std::string& hex) { return hex.substr(0, 2); }

}  // namespace

Result<BlobFiles> BlobFiles::open(int root_fd, const std::filesystem::path& root) {
  BlobFiles files;
  files.m_root = root;
  files.m_blobs = JC_TRY(open_private_subdir(root_fd, "blobs", root / "blobs"));
  files.m_tmp = JC_TRY(open_private_subdir(root_fd, "tmp", root / "tmp"));
  files.m_quarantine = JC_TRY(open_private_subdir(root_fd, "quarantine", root / "quarantine"));
  return files;
}

Result<BlobFiles> BlobFiles::open_read_only(int root_fd, const std::filesystem::path& root) {
  BlobFiles files;
  files.m_root = root;
  files.m_blobs = JC_TRY(open_private_subdir(root_fd, "blobs", root / "blobs"));
  // Only listed and swept by gc, which a read-only store refuses: absent is fine.
  if (auto tmp = open_private_subdir(root_fd, "tmp", root / "tmp")) files.m_tmp = std::move(*tmp);
  if (auto quarantine = open_private_subdir(root_fd, "quarantine", root / "quarantine"))
    files.m_quarantine = std::move(*quarantine);
  return files;
}

std::filesystem::path BlobFiles::path_of(const BlobDigest& digest) const {
  const std::string hex = digest.to_hex();
  return m_root / "blobs" / shard_of(hex) / hex;
}

Result<BlobDigest> BlobFiles::publish(std::span<const std::byte> data, Durability durability,
                                      const std::function<void(PublishStep)>& step) const {
  const BlobDigest digest = BlobDigest::of(data);
  const std::string hex = digest.to_hex();

  // A read-only store whose tmp/ is missing: what creating a file in it would say.
  if (!m_tmp)
    return std::unexpected(errno_error("creating a temporary file in " + (m_root / "tmp").string(), ENOENT));
  AtomicFileOptions options;
  // Exactly 0600 whatever the umask: a blob is nobody else's business.
  options.mode = 0600;
  options.mode_rule = ModeRule::exact;
  options.sync = durability == Durability::full ? SyncRule::file_and_directory : SyncRule::none;
  // Renaming over an existing blob of the same digest is harmless (same bytes) and heals
  // a damaged copy, whatever was put there.
  options.replace = ReplaceRule::anything;
  options.wording = ErrorWording::operation_first;
  options.temp_stem = "blob";
  options.fault = m_fault;
  AtomicFileWriter writer = JC_TRY(AtomicFileWriter::create_in(DirRef{m_tmp.get(), m_root / "tmp"}, options));
  JC_TRY(writer.write(data));
  JC_TRY(writer.finish());
  if (step) step(PublishStep::temp_written);

  const std::string shard = shard_of(hex);
  const std::filesystem::path shard_path = m_root / "blobs" / shard;
  struct stat st;
  const bool shard_existed = ::fstatat(m_blobs.get(), shard.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  const UniqueFd shard_fd = JC_TRY(open_private_subdir(m_blobs.get(), shard, shard_path));
  JC_TRY(writer.commit_into(DirRef{shard_fd.get(), shard_path}, hex));
  // A new shard is itself a new entry in blobs/.
  if (durability == Durability::full && !shard_existed) JC_TRY(fsync_fd(m_blobs.get(), m_root / "blobs"));
  if (step) step(PublishStep::renamed);
  return digest;
}

namespace {

// O_NONBLOCK: a FIFO put in place of a blob must not block the open waiting for a writer;
// fstat then finds it is no regular file, and it is a bad blob like any other.
constexpr int k_blob_open_flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;

// Opens <shard>/<hex> below `blobs_fd` following no symlink in either component. One
// openat2 call where the kernel has it (Linux 5.6+), else the shard and the file in turn.
int open_blob(int blobs_fd, const std::string& hex) {
  static std::atomic<bool> have_openat2{true};
  const std::string relative = shard_of(hex) + "/" + hex;
  if (have_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = k_blob_open_flags;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const long fd = ::syscall(SYS_openat2, blobs_fd, relative.c_str(), &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return static_cast<int>(fd);
    have_openat2 = false;  // an old kernel, or a seccomp filter that forbids it
  }
  const int shard = ::openat(blobs_fd, shard_of(hex).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (shard < 0) return -1;
  const int fd = ::openat(shard, hex.c_str(), k_blob_open_flags);
  const int saved = errno;
  ::close(shard);
  errno = saved;
  return fd;
}

}  // namespace

std::expected<Bytes, BlobFailure> BlobFiles::read_verified(const BlobDigest& digest,
                                                           std::uint64_t expected_size) const {
  const std::string hex = digest.to_hex();
  auto fail = [&](BlobProblem problem, std::string detail) {
    return std::unexpected(BlobFailure{problem, path_of(digest).string() + ": " + std::move(detail)});
  };
  const int raw = open_blob(m_blobs.get(), hex);
  if (raw < 0) {
    const int e = errno;
    if (e == ENOENT) return fail(BlobProblem::missing, "no such file");
    if (e == ELOOP || e == EXDEV) return fail(BlobProblem::not_regular, "is or passes through a symbolic link");
    if (e == ENOTDIR) return fail(BlobProblem::not_regular, "its shard is not a directory");
    // A socket cannot be opened (ENXIO), nor some devices without their driver.
    if (e == ENXIO || e == ENODEV) {
      struct stat st;
      const std::string relative = shard_of(hex) + "/" + hex;
      const bool known = ::fstatat(m_blobs.get(), relative.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      return fail(BlobProblem::not_regular,
                  known ? "is " + std::string(file_type_name(st.st_mode)) : std::string(std::strerror(e)));
    }
    return fail(BlobProblem::unreadable, std::strerror(e));
  }
  UniqueFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail(BlobProblem::unreadable, std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fail(BlobProblem::not_regular, "is " + std::string(file_type_name(st.st_mode)));
  if (static_cast<std::uint64_t>(st.st_size) != expected_size)
    return fail(BlobProblem::wrong_size, std::to_string(st.st_size) + " bytes, the index says " +
                                             std::to_string(expected_size));
  // Not RegularFile: each way a blob can be bad is a BlobProblem of its own, which the
  // store acts on (quarantine, heal), so the checks above stay here; the read is shared.
  Bytes bytes(expected_size);
  const auto read = read_fully_at(fd.get(), 0, bytes);
  if (!read) return fail(BlobProblem::unreadable, std::strerror(read.error()));
  if (*read < bytes.size()) return fail(BlobProblem::wrong_size, "shorter than its size while reading");
  const BlobDigest actual = BlobDigest::of(bytes);
  if (actual != digest)
    return fail(BlobProblem::altered, "content hashes to " + actual.to_hex());
  return bytes;
}

void BlobFiles::quarantine(const BlobDigest& digest) const {
  static std::atomic<std::uint64_t> sequence{0};
  const std::string hex = digest.to_hex();
  const int shard_raw =
      ::openat(m_blobs.get(), shard_of(hex).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (shard_raw < 0) return;
  UniqueFd shard_fd(shard_raw);
  const std::string target = hex + "." + std::to_string(unix_now_ms()) + "." +
                             std::to_string(::getpid()) + "." + std::to_string(sequence++);
  if (::renameat(shard_fd.get(), hex.c_str(), m_quarantine.get(), target.c_str()) != 0 &&
      errno != ENOENT) {
    log_warning("cache: could not move " + path_of(digest).string() + " to quarantine: " +
                std::strerror(errno) + "; removing it");
    ::unlinkat(shard_fd.get(), hex.c_str(), 0);
  }
}

Status BlobFiles::remove(const BlobDigest& digest) const {
  const std::string hex = digest.to_hex();
  const int shard_raw =
      ::openat(m_blobs.get(), shard_of(hex).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (shard_raw < 0) return {};
  UniqueFd shard_fd(shard_raw);
  if (::unlinkat(shard_fd.get(), hex.c_str(), 0) != 0 && errno != ENOENT)
    return std::unexpected(errno_error("removing " + path_of(digest).string(), errno));
  return {};
}

Result<bool> BlobFiles::remove_unless(const BlobDigest& digest, const KeepBlob& keep) const {
  static std::atomic<std::uint64_t> sequence{0};
  const std::string hex = digest.to_hex();
  const int shard_raw =
      ::openat(m_blobs.get(), shard_of(hex).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (shard_raw < 0) return false;
  UniqueFd shard_fd(shard_raw);
  const std::string aside = "orphan." + hex + "." + std::to_string(::getpid()) + "." + std::to_string(sequence++);
  if (::renameat(shard_fd.get(), hex.c_str(), m_tmp.get(), aside.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return std::unexpected(errno_error("moving " + path_of(digest).string() + " aside", errno));
  }
  struct stat st;
  if (::fstatat(m_tmp.get(), aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return std::unexpected(errno_error((m_root / "tmp" / aside).string(), errno));
  }
  const std::int64_t mtime_ms =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
  auto kept = keep(mtime_ms);
  if (kept && !*kept) {
    if (::unlinkat(m_tmp.get(), aside.c_str(), 0) != 0 && errno != ENOENT)
      return std::unexpected(errno_error("removing " + (m_root / "tmp" / aside).string(), errno));
    return true;
  }
  // Back in place; a copy published meanwhile has the same bytes and may stay instead.
  if (::renameat2(m_tmp.get(), aside.c_str(), shard_fd.get(), hex.c_str(), RENAME_NOREPLACE) != 0) {
    const int e = errno;
    if (e == EEXIST) ::unlinkat(m_tmp.get(), aside.c_str(), 0);
    else if (::renameat(m_tmp.get(), aside.c_str(), shard_fd.get(), hex.c_str()) != 0)
      return std::unexpected(errno_error("putting " + path_of(digest).string() + " back", errno));
  }
  if (!kept) return std::unexpected(kept.error());
  return false;
}

Result<std::vector<StoredBlob>> BlobFiles::list() const {
  std::vector<StoredBlob> blobs;
  const auto shards = JC_TRY(list_dir(m_blobs.get(), m_root / "blobs"));
  for (const DirEntry& shard : shards) {
    if (!shard.directory || shard.name.size() != 2 || !detail::is_hex(shard.name)) continue;
    const int raw =
        ::openat(m_blobs.get(), shard.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (raw < 0) continue;
    UniqueFd shard_fd(raw);
    const auto files = JC_TRY(list_dir(shard_fd.get(), m_root / "blobs" / shard.name));
    for (const DirEntry& file : files) {
      if (!file.regular) continue;
      auto digest = BlobDigest::from_hex(file.name);
      // Only lowercase names in their own shard are names this store could have made.
      if (!digest || digest->to_hex() != file.name || !file.name.starts_with(shard.name)) continue;
      blobs.push_back(StoredBlob{*digest, file.mtime_ms, file.size});
    }
  }
  return blobs;
}

Result<std::uint64_t> BlobFiles::sweep(int dir_fd, const std::filesystem::path& shown,
                                       std::int64_t cutoff_ms) const {
  std::uint64_t removed = 0;
  const auto files = JC_TRY(list_dir(dir_fd, shown));
  for (const DirEntry& file : files) {
    if (file.directory || file.mtime_ms >= cutoff_ms) continue;
    if (::unlinkat(dir_fd, file.name.c_str(), 0) == 0) ++removed;
  }
  return removed;
}

Result<std::uint64_t> BlobFiles::sweep_tmp(std::int64_t cutoff_ms) const {
  return sweep(m_tmp.get(), m_root / "tmp", cutoff_ms);
}

Result<std::uint64_t> BlobFiles::sweep_quarantine(std::int64_t cutoff_ms) const {
  return sweep(m_quarantine.get(), m_root / "quarantine", cutoff_ms);
}

}  // namespace jitcache::cache
