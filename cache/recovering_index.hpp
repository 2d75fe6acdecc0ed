// The index of one cache root (cache/index.hpp) and its recovery: a garbage or truncated
// index.db is moved to quarantine/ and a fresh index started, once per damaged file
// across threads and processes; every recovery is remembered for verify() to report.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "jitcache/log.hpp"

namespace jitcache::cache {

// What DiskTier::open does with an index that has a table, column or trigger missing.
// refuse: an error naming the recovery (`jitcache clear --all`); quarantine: move it aside
// and start a fresh index, as for a corrupt file (what `clear --all` asks for).
enum class DamagedIndex { refuse, quarantine };

// An index.db found unusable, moved to quarantine/ and replaced by a fresh one.
struct IndexRecovery {
  std::filesystem::path moved_to;
  std::optional<std::uint64_t> entries;  // what the old index held; std::nullopt: unreadable
  std::string problem;                   // what was wrong with it
};

class RecoveringIndex {
 public:
  struct Settings {
    std::chrono::milliseconds busy_timeout;
    Durability durability;
    DamagedIndex damaged_index;
  };
  struct Opened {
    std::unique_ptr<RecoveringIndex> index;
    // Set when the index could only be opened read-only (a full disk): why.
    std::optional<std::string> read_only_reason;
  };

  // Opens <root>/index.db for writing, creating it (0600) when missing and recovering a
  // corrupt one. `root_fd` is the open root; it must outlive the index.
  static Result<Opened> open(int root_fd, const std::filesystem::path& root, const Settings& settings);
  // Opens an existing index.db read-only, for a root this process cannot write.
  static Result<std::unique_ptr<RecoveringIndex>> open_read_only(int root_fd,
                                                                 const std::filesystem::path& root,
                                                                 const Settings& settings);

  const std::filesystem::path& path() const { return m_path; }

  // Runs f on the index; when SQLite found the file corrupt, rebuilds it and retries once.
  template <class F>
  auto with(F&& f) -> decltype(f(std::declval<Index&>()));

  // For clearing an index that opens but cannot be read or changed: moves it aside (as a
  // corrupt one is) and starts a fresh one. std::nullopt when there was no file to move.
  Result<std::optional<IndexRecovery>> replace(const std::string& problem);

  // The index files moved aside so far, oldest first.
  std::vector<IndexRecovery> recoveries() const;

 private:
  RecoveringIndex(int root_fd, std::filesystem::path root, Settings settings);
  std::shared_ptr<Index> current() const;
  Result<std::shared_ptr<Index>> open_fresh(const std::optional<FileId>& broken, const std::string& problem);
  Result<std::optional<IndexRecovery>> move_aside(const std::string& problem);
  Status recover(const std::shared_ptr<Index>& broken, const std::string& problem);

  int m_root_fd;
  std::filesystem::path m_root;
  std::filesystem::path m_path;
  Settings m_settings;
  mutable std::mutex m_index_mutex;
  std::shared_ptr<Index> m_index;
  std::mutex m_recover_mutex;  // one rebuild at a time in this process
  mutable std::mutex m_recoveries_mutex;
  std::vector<IndexRecovery> m_recoveries;
};

template <class F>
auto RecoveringIndex::with(F&& f) -> decltype(f(std::declval<Index&>())) {
  std::shared_ptr<Index> index = current();
  auto result = f(*index);
  if (!result && index->corrupt()) {
    log_warning(result.error().message);
    if (auto recovered = recover(index, result.error().message); !recovered)
      return std::unexpected(recovered.error());
    index = current();
    result = f(*index);
  }
  return result;
}

}  // namespace jitcache::cache
