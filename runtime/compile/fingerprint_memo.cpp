#include "runtime/compile/fingerprint_memo.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"

namespace jitcache {
namespace {

constexpr const char* k_memo_format = "jitcache_compiler_fingerprints_v1";
constexpr std::size_t k_memo_max_entries = 16;
constexpr std::size_t k_memo_max_bytes = 64 * 1024;

bool is_fingerprint(const nlohmann::json& value) {
  if (!value.is_string()) return false;
  const auto& text = value.get_ref<const std::string&>();
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// A value of either shape, or nullopt.
std::optional<MemoValue> read_value(const nlohmann::json& value) {
  if (is_fingerprint(value)) return MemoValue{{}, value.get<std::string>()};
  if (!value.is_object() || value.size() != 2) return std::nullopt;
  const auto version = value.find("version");
  const auto fingerprint = value.find("fingerprint");
  if (version == value.end() || !version->is_string() || version->get_ref<const std::string&>().empty() ||
      fingerprint == value.end() || !is_fingerprint(*fingerprint))
    return std::nullopt;
  return MemoValue{version->get<std::string>(), fingerprint->get<std::string>()};
}

// The memo's valid entries; empty for a missing, foreign, oversized or malformed file.
nlohmann::json read_entries(const std::filesystem::path& file) {
  nlohmann::json entries = nlohmann::json::object();
  // Non-blocking and regular only: a FIFO planted in the cache root is a miss, not a hang.
  const auto opened = RegularFile::open(file, FollowSymlinks::no);
  if (!opened || opened->status().st_uid != ::geteuid()) return entries;
  const auto read = opened->read_all(k_memo_max_bytes);
  if (!read) return entries;
  const auto doc = nlohmann::json::parse(*read, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return entries;
  const auto format = doc.find("format");
  const auto found = doc.find("entries");
  if (format == doc.end() || *format != k_memo_format || found == doc.end() || !found->is_object())
    return entries;
  for (const auto& [identity, value] : found->items())
    if (read_value(value)) entries[identity] = value;
  return entries;
}

}  // namespace

std::optional<MemoValue> read_memo(const std::filesystem::path& file, const std::string& identity) {
  const nlohmann::json entries = read_entries(file);
  const auto it = entries.find(identity);
  return it == entries.end() ? std::nullopt : read_value(*it);
}

Status write_memo(const std::filesystem::path& file, const std::string& identity, const MemoValue& value) {
  nlohmann::json entries = read_entries(file);
  if (entries.size() >= k_memo_max_entries) entries = nlohmann::json::object();
  entries[identity] = value.version.empty()
                          ? nlohmann::json(value.fingerprint)
                          : nlohmann::json{{"version", value.version}, {"fingerprint", value.fingerprint}};
  const std::string text = nlohmann::json{{"format", k_memo_format}, {"entries", entries}}.dump(
                               2, ' ', false, nlohmann::json::error_handler_t::replace) +
                           "\n";

  AtomicFileOptions options;
  options.mode = 0600;
  // Synced before the rename so a crash leaves the old memo or the new one; the directory
  // is not: a memo lost to a crash is only a later miss.
  options.sync = SyncRule::file;
  // The cache root is private: a FIFO or a link planted at the memo's name is replaced.
  options.replace = ReplaceRule::anything;
  options.wording = ErrorWording::operation_first;
  AtomicFileWriter writer = JC_TRY(AtomicFileWriter::create(file, std::move(options)));
  JC_TRY(writer.write(text));
  return writer.commit();
}

}  // namespace jitcache
