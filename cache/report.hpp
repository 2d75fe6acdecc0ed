// Stable JSON and text forms of the store's value types, shared by the CLI and by anyone
// who reports on a cache. Field names here are a public contract for scripts that read
// `jitcache ... --json`; add fields, never rename them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/entry.hpp"
#include "cache/store.hpp"

namespace jitcache::cache {

enum class TimeFormat { human, iso };
// Unix milliseconds as UTC: "2026-11-29 14:02:11" (human) or "2026-11-29T14:02:11.123Z".
std::string format_time(std::int64_t unix_ms, TimeFormat format);

// {"key", "digest", "size", "key_schema", "created", "last_used", "hits", "compile_ms", "facts"}
nlohmann::ordered_json to_json(const EntryInfo& entry);
// {"entries", "bytes", "max_bytes", "hits": {"memory", "disk"}, "coalesced", "misses",
//  "compiles", "compile_failures", "compile_ms": {"spent", "saved"}, "quarantined", "evicted"}
// The counters' part comes from k_counter_fields (cache/entry.hpp).
nlohmann::ordered_json to_json(const Stats& stats);
// The counters' part alone: {"hits": {"memory", "disk"}, "coalesced", ...}.
nlohmann::ordered_json counters_json(const Counters& counters);
// The counters' rows of `jitcache stats`, label and text, in k_counter_fields' order:
// {"hits", "memory 3, disk 1, waited for a thread 0"}, {"misses", "2"}, ...
std::vector<std::pair<std::string, std::string>> counter_text_rows(const Counters& counters);
// What follows when an index was moved to quarantine (verify's JSON "next" and its text).
inline constexpr const char* k_after_index_quarantine =
    "a fresh index was started: its entries are compiled again on use, and `jitcache gc` removes the blobs "
    "the old index referred to";

// {"clean", "checked", "bad": [{"key", "digest", "problem"}], "integrity": [...],
//  "index_quarantined": [{"moved_to", "entries" (null: unknown), "problem", "next"}], "orphan_blobs"}
nlohmann::ordered_json to_json(const VerifyReport& report);
nlohmann::ordered_json to_json(const GcReport& report);

}  // namespace jitcache::cache
