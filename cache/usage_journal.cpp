#include "cache/usage_journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "cache/hash.hpp"
#include "jitcache/log.hpp"
#include "support/unique_fd.hpp"

namespace jitcache::cache {
namespace {

using nlohmann::json;

// A fold holds the lock for one read and one SQLite transaction; an appender that cannot
// get its shared lock in this long writes to the index instead of waiting longer.
constexpr auto k_lock_wait = std::chrono::milliseconds(200);
// A journal is read whole; one that grew past this (appenders stop at
// k_usage_journal_fold_bytes) is read up to it and the rest counted as damaged.
constexpr std::uint64_t k_max_read_bytes = 16u << 20;

struct HashTag {
  static constexpr const char* k_name = "usage journal digest";
};
using LineDigest = Hash128<HashTag>;

std::string errno_text(int error) { return std::strerror(error); }

// The trust rule of the header: a regular file with one link, ours, writable by us alone.
std::string untrusted_reason(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_nlink != 1) return "has " + std::to_string(st.st_nlink) + " links";
  if (st.st_uid != ::geteuid()) return "is owned by uid " + std::to_string(st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "is writable by other users";
  return {};
}

bool lock(int fd, int operation) {
  const auto deadline = std::chrono::steady_clock::now() + k_lock_wait;
  for (auto pause = std::chrono::microseconds(100);; pause = std::min(pause * 2, std::chrono::microseconds(10'000))) {
    if (::flock(fd, operation | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
  }
}

// Opens the journal for `flags` (O_CREAT or not) and checks it. nullopt with `why` set
// when there is none to use; `why` empty means simply absent.
UniqueFd open_checked(int dir_fd, int flags, std::string& why) {
  const int fd = ::openat(dir_fd, k_usage_journal_name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    if (errno != ENOENT) why = errno == ELOOP ? "is a symbolic link" : errno_text(errno);
    return UniqueFd();
  }
  UniqueFd held(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    why = errno_text(errno);
    return UniqueFd();
  }
  why = untrusted_reason(st);
  if (!why.empty()) return UniqueFd();
  // Created under a strict umask (or by an older run under one): ours, so made 0600 like
  // every file of the cache.
  if ((st.st_mode & 0777) != 0600 && ::fchmod(fd, 0600) != 0) {
    why = "cannot be made private (mode 0600): " + errno_text(errno);
    return UniqueFd();
  }
  return held;
}

Result<std::string> read_all(int fd, const std::filesystem::path& shown, std::uint64_t& beyond) {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return make_error(ErrorCode::io, shown.string() + ": cannot stat: " + errno_text(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t wanted = std::min(size, k_max_read_bytes);
  beyond = size - wanted;
  std::string bytes(wanted, '\0');
  std::size_t done = 0;
  while (done < wanted) {
    const ssize_t n = ::pread(fd, bytes.data() + done, wanted - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorCode::io, shown.string() + ": cannot read: " + errno_text(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

bool parse_batch(std::string_view text, JournalContents& into) {
  const json batch = json::parse(text, nullptr, false);
  if (!batch.is_object()) return false;
  JournalContents parsed;
  const auto uses = batch.find("u");
  const auto counters = batch.find("c");
  if (uses == batch.end() || !uses->is_array() || counters == batch.end() || !counters->is_object()) return false;
  for (const json& use : *uses) {
    if (!use.is_array() || use.size() != 3 || !use[0].is_string() || !use[1].is_number_unsigned() ||
        !use[2].is_number_integer())
      return false;
    auto key = CacheKey::from_hex(use[0].get<std::string>());
    if (!key) return false;
    parsed.uses.push_back(Usage{*key, use[1].get<std::uint64_t>(), use[2].get<std::int64_t>()});
  }
  for (const auto& [name, value] : counters->items()) {
    const CounterField* field = nullptr;
    for (const CounterField& f : k_counter_fields)
      if (f.name == name) field = &f;
    // A counter this build does not know (a newer jitcache wrote the line) is dropped.
    if (field == nullptr) continue;
    switch (field->kind) {
      case CounterKind::count:
        if (!value.is_number_unsigned()) return false;
        parsed.counters.*field->count = value.get<std::uint64_t>();
        break;
      case CounterKind::milliseconds:
        if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) return false;
        parsed.counters.*field->milliseconds = value.get<double>();
        break;
    }
  }
  into.uses.insert(into.uses.end(), parsed.uses.begin(), parsed.uses.end());
  into.counters += parsed.counters;
  return true;
}

void warn_damaged(const std::filesystem::path& shown, const JournalContents& contents) {
  if (contents.damaged > 0)
    log_warning(shown.string() + ": skipped " + std::to_string(contents.damaged) +
                " damaged line(s) of usage (torn or altered); the cache entries are not affected");
}

}  // namespace

std::string journal_line(std::span<const Usage> uses, const Counters& counters) {
  json u = json::array();
  for (const Usage& use : uses) u.push_back(json::array({use.key.to_hex(), use.hits, use.last_used_ms}));
  json c = json::object();
  for (const CounterField& field : k_counter_fields) {
    switch (field.kind) {
      case CounterKind::count:
        if (counters.*field.count != 0) c[std::string(field.name)] = counters.*field.count;
        break;
      case CounterKind::milliseconds: {
        const double ms = counters.*field.milliseconds;
        if (ms != 0 && std::isfinite(ms)) c[std::string(field.name)] = ms;
        break;
      }
    }
  }
  const std::string payload = json{{"u", std::move(u)}, {"c", std::move(c)}}.dump();
  return "\n" + LineDigest::of(payload).to_hex() + " " + payload;
}

JournalContents parse_journal(std::string_view bytes) {
  JournalContents contents;
  std::size_t start = 0;
  while (start <= bytes.size()) {
    std::size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const bool framed = line.size() > k_hash_hex_chars + 1 && line[k_hash_hex_chars] == ' ';
    const std::string_view payload = framed ? line.substr(k_hash_hex_chars + 1) : std::string_view();
    if (framed && LineDigest::of(payload).to_hex() == line.substr(0, k_hash_hex_chars) &&
        parse_batch(payload, contents)) {
      ++contents.batches;
    } else {
      ++contents.damaged;
    }
  }
  return contents;
}

AppendResult UsageJournal::append(std::span<const Usage> uses, const Counters& counters) const {
  std::string why;
  UniqueFd fd = open_checked(m_dir_fd, O_WRONLY | O_APPEND | O_CREAT, why);
  if (!fd) {
    log_warning(m_shown.string() + ": " + why + "; recording usage in the index instead");
    return AppendResult::unavailable;
  }
  if (!lock(fd.get(), LOCK_SH)) return AppendResult::unavailable;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return AppendResult::unavailable;
  if (static_cast<std::uint64_t>(st.st_size) >= k_usage_journal_fold_bytes) return AppendResult::full;
  const std::string line = journal_line(uses, counters);
  const ssize_t n = ::write(fd.get(), line.data(), line.size());
  if (n == static_cast<ssize_t>(line.size())) return AppendResult::appended;
  // A short write (a full disk) leaves a torn line, which a fold skips; the whole batch
  // then goes to the index, so it is counted once.
  if (n < 0)
    log_debug(m_shown.string() + ": cannot append: " + errno_text(errno) + "; recording usage in the index");
  return AppendResult::unavailable;
}

Status UsageJournal::fold(const std::function<Status(const JournalContents&)>& apply) const {
  std::string why;
  UniqueFd fd = open_checked(m_dir_fd, O_RDWR, why);
  if (!fd) {
    if (!why.empty()) log_warning(m_shown.string() + ": " + why + "; not read");
    return {};
  }
  if (!lock(fd.get(), LOCK_EX)) {
    log_warning(m_shown.string() + ": held by another process; its usage is folded later");
    return {};
  }
  std::uint64_t beyond = 0;
  const std::string bytes = JC_TRY(read_all(fd.get(), m_shown, beyond));
  if (bytes.empty() && beyond == 0) return {};
  JournalContents contents = parse_journal(bytes);
  if (beyond > 0) ++contents.damaged;
  warn_damaged(m_shown, contents);
  if (contents.batches > 0) JC_TRY(apply(contents));
  if (::ftruncate(fd.get(), 0) != 0)
    return make_error(ErrorCode::io, m_shown.string() + ": cannot empty it after folding: " + errno_text(errno));
  return {};
}

Result<JournalContents> UsageJournal::read() const {
  std::string why;
  UniqueFd fd = open_checked(m_dir_fd, O_RDONLY, why);
  if (!fd) {
    if (!why.empty()) log_warning(m_shown.string() + ": " + why + "; not read");
    return JournalContents{};
  }
  std::uint64_t beyond = 0;
  const std::string bytes = JC_TRY(read_all(fd.get(), m_shown, beyond));
  JournalContents contents = parse_journal(bytes);
  if (beyond > 0) ++contents.damaged;
  return contents;
}

}  // namespace jitcache::cache
