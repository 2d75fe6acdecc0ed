#include "runtime/compile/fingerprint_memo.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"

namespace jitcache {
namespace {

constexpr const char* k_memo_format = "jitcache_compiler_fingerprints_v1";
constexpr std::size_t k_memo_max_entries = 64;
constexpr std::size_t k_memo_max_bytes = 64 * 1024;

bool is_fingerprint(const nlohmann::json& value) {
  if (!value.is_string()) return false;
  const auto& text = value.get_ref<const std::string&>();
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool is_tool(const std::string& name) { return name == "nvrtc" || name == "libnvvm" || name == "nvjitlink"; }

// A {"version", "fingerprint"} object, or nullopt.
std::optional<MemoValue> read_versioned(const nlohmann::json& value) {
  if (!value.is_object() || value.size() != 2) return std::nullopt;
  const auto version = value.find("version");
  const auto fingerprint = value.find("fingerprint");
  if (version == value.end() || !version->is_string() || version->get_ref<const std::string&>().empty() ||
      fingerprint == value.end() || !is_fingerprint(*fingerprint))
    return std::nullopt;
  return MemoValue{version->get<std::string>(), fingerprint->get<std::string>()};
}

// An entry's value of either shape, or nullopt.
std::optional<MemoValue> read_value(const nlohmann::json& value) {
  if (is_fingerprint(value)) return MemoValue{{}, value.get<std::string>()};
  return read_versioned(value);
}

nlohmann::json versioned_json(const MemoValue& value) {
  return nlohmann::json{{"version", value.version}, {"fingerprint", value.fingerprint}};
}

// The memo's valid parts as JSON: {"entries": {...}, "last_keyed": {...}}, both empty for
// a missing, foreign, oversized or malformed file.
struct MemoJson {
  nlohmann::json entries = nlohmann::json::object();
  nlohmann::json last_keyed = nlohmann::json::object();
};

MemoJson read_json(const std::filesystem::path& file) {
  MemoJson memo;
  // Non-blocking and regular only: a FIFO planted in the cache root is a miss, not a hang.
  const auto opened = RegularFile::open(file, FollowSymlinks::no);
  if (!opened || opened->status().st_uid != ::geteuid()) return memo;
  const auto read = opened->read_all(k_memo_max_bytes);
  if (!read) return memo;
  const auto doc = nlohmann::json::parse(*read, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return memo;
  const auto format = doc.find("format");
  const auto found = doc.find("entries");
  if (format == doc.end() || *format != k_memo_format || found == doc.end() || !found->is_object()) return memo;
  for (const auto& [identity, value] : found->items())
    if (read_value(value)) memo.entries[identity] = value;
  if (const auto last = doc.find("last_keyed"); last != doc.end() && last->is_object())
    for (const auto& [tool, value] : last->items())
      if (is_tool(tool) && read_versioned(value)) memo.last_keyed[tool] = value;
  return memo;
}

Status write_json(const std::filesystem::path& file, const MemoJson& memo) {
  nlohmann::json doc{{"format", k_memo_format}, {"entries", memo.entries}};
  if (!memo.last_keyed.empty()) doc["last_keyed"] = memo.last_keyed;
  const std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";

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

}  // namespace

MemoContents read_memo_contents(const std::filesystem::path& file) {
  const MemoJson memo = read_json(file);
  MemoContents contents;
  for (const auto& [identity, value] : memo.entries.items()) contents.entries[identity] = *read_value(value);
  for (const auto& [tool, value] : memo.last_keyed.items()) contents.last_keyed[tool] = *read_versioned(value);
  return contents;
}

std::optional<MemoValue> read_memo(const std::filesystem::path& file, const std::string& identity) {
  const MemoJson memo = read_json(file);
  const auto it = memo.entries.find(identity);
  return it == memo.entries.end() ? std::nullopt : read_value(*it);
}

Status write_memo(const std::filesystem::path& file, const std::string& identity, const MemoValue& value,
                  const std::string& tool) {
  MemoJson memo = read_json(file);
  if (memo.entries.size() >= k_memo_max_entries) memo.entries = nlohmann::json::object();
  memo.entries[identity] = value.version.empty() ? nlohmann::json(value.fingerprint) : versioned_json(value);
  if (!tool.empty() && is_tool(tool) && !value.version.empty()) memo.last_keyed[tool] = versioned_json(value);
  return write_json(file, memo);
}

Status write_last_keyed(const std::filesystem::path& file, const std::string& tool, const MemoValue& value) {
  if (!is_tool(tool) || value.version.empty() || !is_fingerprint(nlohmann::json(value.fingerprint)))
    return make_error(ErrorCode::invalid_argument, "fingerprint memo: not a tool's versioned build: " + tool);
  MemoJson memo = read_json(file);
  memo.last_keyed[tool] = versioned_json(value);
  return write_json(file, memo);
}

Status write_imported_builds(const std::filesystem::path& file, const std::vector<ImportedBuild>& builds,
                             const std::vector<ImportedBuild>& last) {
  MemoJson memo = read_json(file);
  if (memo.entries.size() + builds.size() > k_memo_max_entries) memo.entries = nlohmann::json::object();
  for (const ImportedBuild& build : builds) {
    if (!is_tool(build.tool) || build.value.version.empty() || !is_fingerprint(nlohmann::json(build.value.fingerprint)))
      return make_error(ErrorCode::invalid_argument, "fingerprint memo: not a tool's versioned build: " + build.tool);
    memo.entries[build.tool + " imported " + build.value.fingerprint] = versioned_json(build.value);
  }
  for (const ImportedBuild& build : last)
    if (is_tool(build.tool) && !build.value.version.empty()) memo.last_keyed[build.tool] = versioned_json(build.value);
  return write_json(file, memo);
}

std::vector<ImportedBuild> compiler_builds_of(const cache::Facts& facts) {
  std::vector<ImportedBuild> builds;
  const auto add = [&](const std::string& tool, std::string_view version_fact, std::string_view fingerprint_fact) {
    const auto version = facts.get(version_fact);
    const auto fingerprint = facts.get(fingerprint_fact);
    if (version && fingerprint && !version->empty() && is_fingerprint(nlohmann::json(std::string(*fingerprint))))
      builds.push_back({tool, MemoValue{std::string(*version), std::string(*fingerprint)}});
  };
  if (facts.get("compiler") == std::optional<std::string_view>("nvrtc"))
    add("nvrtc", "compiler_version", "compiler_fingerprint");
  for (const char* tool : {"nvrtc", "libnvvm", "nvjitlink"})
    add(tool, "tool." + std::string(tool) + ".version", "tool." + std::string(tool) + ".fingerprint");
  return builds;
}

std::set<std::string> known_builds(const MemoContents& memo, const std::string& tool) {
  std::set<std::string> known;
  for (const auto& [identity, value] : memo.entries)
    if (identity.starts_with(tool + " content ") || identity.starts_with(tool + " imported "))
      known.insert(value.fingerprint);
  if (const auto last = memo.last_keyed.find(tool); last != memo.last_keyed.end()) known.insert(last->second.fingerprint);
  return known;
}

}  // namespace jitcache
