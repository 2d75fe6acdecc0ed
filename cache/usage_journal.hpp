// The usage journal: where a process that only read the cache leaves its uses and counters.
//
// A warm start hits every kernel it needs and has nothing to record but those hits. Written
// to the index, they cost a SQLite transaction whose WAL is new (a header sync and a
// directory sync) and a checkpoint when the process closes the index (two more syncs, and
// the -wal and -shm files created and unlinked): four fdatasync calls and two unlinks, the
// largest part of a warm start's wall time on a loaded machine. Here they are one line
// appended to `<cache>/usage.journal` with a single write(2) and no sync; the commands that
// read uses or counters (stats, inspect, gc, clear, eviction) fold the journal into the
// index first, in one transaction, and empty it.
//
// Durability is that of usage statistics: a power loss may lose lines not yet folded (as
// synchronous=NORMAL may lose the last commits); it never loses or damages a cache entry,
// and the index is never written without its own syncs. A process killed between a fold's
// commit and the truncate that follows it counts that journal twice; every other crash
// loses at most the line being written, which the reader skips.
//
// Format (one batch per line, lines separated by '\n'; every append starts with a '\n' so
// that a torn line never swallows the next writer's):
//   <32 hex digits: XXH3-128 of the JSON> ' ' {"u":[["<key hex>",hits,last_used_ms],...],
//                                               "c":{"<counter>":value,...}}
// A line whose digest or JSON does not check out is skipped with one warning per fold.
//
// Concurrency: appenders hold a shared flock on the journal while they write (O_APPEND
// makes each line one atomic append on a local filesystem); a fold holds it exclusively
// from its read to its truncate, so no line is written between the two.
//
// Trust: the journal is opened without following links, and only a regular file with one
// link, owned by this user and writable by nobody else, is read or appended to. Anything
// else is left alone with a warning, and the uses go to the index as before.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "jitcache/error.hpp"

namespace jitcache::cache {

inline constexpr const char* k_usage_journal_name = "usage.journal";
// Beyond this size an appender folds the journal instead of growing it (a cache no
// maintenance command touches for a long time), so that a fold stays one short read.
inline constexpr std::uint64_t k_usage_journal_fold_bytes = 1u << 20;

// What a fold read: every batch of the journal, summed.
struct JournalContents {
  std::vector<Usage> uses;
  Counters counters;
  std::uint64_t batches = 0;
  std::uint64_t damaged = 0;  // lines skipped: torn, digest or JSON wrong
};

enum class AppendResult {
  appended,
  full,         // the journal is over k_usage_journal_fold_bytes: fold it, then write to the index
  unavailable,  // no usable journal (see the trust rule); write to the index
};

class UsageJournal {
 public:
  // `dir_fd` is the cache root, held open by the caller for the journal's lifetime; `shown`
  // is the journal's path for messages.
  UsageJournal(int dir_fd, std::filesystem::path shown) : m_dir_fd(dir_fd), m_shown(std::move(shown)) {}

  // One line, creating the journal when missing. Never syncs.
  AppendResult append(std::span<const Usage> uses, const Counters& counters) const;

  // Reads the whole journal under its exclusive lock, hands what it holds to `apply` (which
  // writes it to the index) and, when `apply` succeeded, empties the journal. No journal,
  // or an empty one, calls nothing.
  Status fold(const std::function<Status(const JournalContents&)>& apply) const;

  // What the journal holds, without taking it (for a store that may not write).
  Result<JournalContents> read() const;

  const std::filesystem::path& path() const { return m_shown; }

 private:
  int m_dir_fd;
  std::filesystem::path m_shown;
};

// Exposed for tests: one line's text (with its leading '\n') and the parse of a journal's
// bytes.
std::string journal_line(std::span<const Usage> uses, const Counters& counters);
JournalContents parse_journal(std::string_view bytes);

}  // namespace jitcache::cache
