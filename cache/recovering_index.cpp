#include "cache/recovering_index.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace jitcache::cache {
namespace {

constexpr const char* k_index_name = "index.db";

// The index is this user's regular file, whatever else was put at its name.
Status check_index_file(const struct stat& st, const std::filesystem::path& path) {
  if (!S_ISREG(st.st_mode)) return make_error(ErrorCode::unsafe, path.string() + ": not a regular file");
  if (st.st_uid != ::geteuid())
    return make_error(ErrorCode::unsafe, path.string() + ": owned by uid " + std::to_string(st.st_uid) +
                                             ", not by the current user");
  return {};
}

// The index file must exist with mode 0600 before SQLite opens it: SQLite creates files
// with 0644 minus the umask, and gives the -wal and -shm files the database's mode.
Status prepare_index_file(int root_fd, const std::filesystem::path& path) {
  const int raw =
      ::openat(root_fd, k_index_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (raw < 0) {
    if (errno == ELOOP) return make_error(ErrorCode::unsafe, path.string() + ": is a symbolic link");
    return std::unexpected(errno_error(path.string(), errno));
  }
  UniqueFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return std::unexpected(errno_error(path.string(), errno));
  JC_TRY(check_index_file(st, path));
  if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0)
    return std::unexpected(errno_error("chmod 600 " + path.string(), errno));
  // SQLite opens index.db-wal and -shm by name. Anything but a regular file there (a FIFO,
  // a socket, a link) was planted: SQLite would fail on it with "disk I/O error" at best.
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string name = std::string(k_index_name) + suffix;
    const std::filesystem::path shown = path.parent_path() / name;
    const auto removed = JC_TRY(remove_unless_regular(root_fd, name, shown, "file"));
    if (removed) log_warning(shown.string() + ": was " + *removed + ", not SQLite's file; removed it");
  }
  return {};
}

}  // namespace

RecoveringIndex::RecoveringIndex(int root_fd, std::filesystem::path root, Settings settings)
    : m_root_fd(root_fd), m_root(std::move(root)), m_path(m_root / k_index_name), m_settings(settings) {}

Result<RecoveringIndex::Opened> RecoveringIndex::open(int root_fd, const std::filesystem::path& root,
                                                      const Settings& settings) {
  Opened opened{std::unique_ptr<RecoveringIndex>(new RecoveringIndex(root_fd, root, settings)), std::nullopt};
  RecoveringIndex& self = *opened.index;
  JC_TRY(prepare_index_file(root_fd, self.m_path));
  const auto before = file_id_of(self.m_path);
  auto index = Index::open(self.m_path, settings.busy_timeout, settings.durability);
  if (index) {
    self.m_index = std::move(*index);
  } else if (index.error().corrupt ||
             (index.error().schema_damaged && settings.damaged_index == DamagedIndex::quarantine)) {
    log_warning(index.error().error.message);
    self.m_index = JC_TRY(self.open_fresh(before, index.error().error.message));
  } else if (index.error().unwritable) {
    // A full disk still serves what is stored: read the index, write nothing.
    auto read_only = Index::open(self.m_path, IndexOptions{settings.busy_timeout, settings.durability,
                                                           IndexAccess::read_only});
    if (!read_only) return std::unexpected(index.error().error);
    log_warning("cache: " + index.error().error.message + "; using the cache read-only (nothing stored)");
    self.m_index = std::move(*read_only);
    opened.read_only_reason = index.error().error.message;
  } else {
    return std::unexpected(index.error().error);
  }
  return opened;
}

Result<std::unique_ptr<RecoveringIndex>> RecoveringIndex::open_read_only(int root_fd,
                                                                         const std::filesystem::path& root,
                                                                         const Settings& settings) {
  std::unique_ptr<RecoveringIndex> self(new RecoveringIndex(root_fd, root, settings));
  struct stat st;
  if (::fstatat(root_fd, k_index_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return make_error(ErrorCode::io, root.string() + ": read-only to this process and holds no " +
                                         std::string(k_index_name) +
                                         ": there is nothing to read and nothing can be stored");
  JC_TRY(check_index_file(st, self->m_path));
  auto index = Index::open(self->m_path, IndexOptions{settings.busy_timeout, settings.durability,
                                                      IndexAccess::read_only});
  if (!index) return std::unexpected(index.error().error);
  self->m_index = std::move(*index);
  return self;
}

std::shared_ptr<Index> RecoveringIndex::current() const {
  std::lock_guard lock(m_index_mutex);
  return m_index;
}

// Opens index.db, moving a corrupt one aside first. `broken` is the file found corrupt;
// when index.db is no longer that file, another process has rebuilt it already.
Result<std::shared_ptr<Index>> RecoveringIndex::open_fresh(const std::optional<FileId>& broken,
                                                           const std::string& problem) {
  const IndexOptions options{m_settings.busy_timeout, m_settings.durability, IndexAccess::read_write};
  std::optional<FileId> suspect = broken;
  std::string why = problem;
  // A fresh index another process put in place may, rarely, be damaged in its turn.
  for (int round = 0; round < 3; ++round) {
    {
      // Rebuilds are serialized across processes, so that none moves aside a fresh index
      // another one has just created. Released before Index::open, which takes it itself.
      UniqueFd lock = JC_TRY(lock_index_file(m_path, m_settings.busy_timeout));
      const auto current = file_id_of(m_path);
      if (!current || current == suspect) JC_TRY(move_aside(why));
    }
    const auto opening = file_id_of(m_path);
    auto opened = Index::open(m_path, options);
    if (opened) return std::shared_ptr<Index>(std::move(*opened));
    if (!opened.error().corrupt) return std::unexpected(opened.error().error);
    log_warning(opened.error().error.message);
    suspect = opening;
    why = opened.error().error.message;
  }
  return make_error(ErrorCode::database,
                    m_path.string() + ": still not a usable index after moving it aside three times");
}

// Under index.lock: moves index.db (and -wal, -shm) to quarantine/, records it, and
// creates an empty index.db for the fresh index.
Result<std::optional<IndexRecovery>> RecoveringIndex::move_aside(const std::string& problem) {
  IndexRecovery recovery;
  recovery.problem = problem.empty() ? "not a usable index" : problem;
  if (const std::string prefix = m_path.string() + ": "; recovery.problem.starts_with(prefix))
    recovery.problem.erase(0, prefix.size());  // reports name the file already
  // Counted before the move, while its -wal file still lies beside it.
  recovery.entries = Index::count_entries(m_path);
  const std::string stamp = std::to_string(unix_now_ms()) + "." + std::to_string(::getpid());
  recovery.moved_to = m_root / "quarantine" / ("index.db." + stamp);
  bool moved = false;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::filesystem::path from = m_path.string() + suffix;
    const std::filesystem::path to = recovery.moved_to.string() + suffix;
    if (::rename(from.c_str(), to.c_str()) == 0) moved = moved || *suffix == '\0';
    else if (errno != ENOENT)
      return std::unexpected(errno_error("moving the damaged index " + from.string() + " aside", errno));
  }
  if (!moved) {  // nothing to discard: only the fresh file is needed
    JC_TRY(prepare_index_file(m_root_fd, m_path));
    return std::optional<IndexRecovery>();
  }
  const std::string held = recovery.entries ? "it held " + std::to_string(*recovery.entries) + " entries"
                                            : "its entries could not be counted";
  log_warning(m_path.string() + ": not a usable index; moved to " + recovery.moved_to.string() + " (" + held +
              ") and started a fresh one (entries are produced again on use; gc removes the old blobs)");
  JC_TRY(prepare_index_file(m_root_fd, m_path));
  std::lock_guard lock(m_recoveries_mutex);
  m_recoveries.push_back(recovery);
  return std::optional<IndexRecovery>(std::move(recovery));
}

Status RecoveringIndex::recover(const std::shared_ptr<Index>& broken, const std::string& problem) {
  std::lock_guard lock(m_recover_mutex);
  if (current() != broken) return {};  // another thread of this process recovered it
  auto fresh = JC_TRY(open_fresh(broken->file_id(), problem));
  std::lock_guard swap(m_index_mutex);
  m_index = std::move(fresh);
  return {};
}

Result<std::optional<IndexRecovery>> RecoveringIndex::replace(const std::string& problem) {
  std::lock_guard recovering(m_recover_mutex);
  std::optional<IndexRecovery> recovery;
  {
    UniqueFd lock = JC_TRY(lock_index_file(m_path, m_settings.busy_timeout));
    recovery = JC_TRY(move_aside(problem));
  }
  auto fresh = Index::open(m_path, IndexOptions{m_settings.busy_timeout, m_settings.durability,
                                                IndexAccess::read_write});
  if (!fresh) return std::unexpected(fresh.error().error);
  std::lock_guard swap(m_index_mutex);
  m_index = std::move(*fresh);
  return recovery;
}

std::vector<IndexRecovery> RecoveringIndex::recoveries() const {
  std::lock_guard lock(m_recoveries_mutex);
  return m_recoveries;
}

}  // namespace jitcache::cache
