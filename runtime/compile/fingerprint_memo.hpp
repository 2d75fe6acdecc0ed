// The fingerprint memo in a cache root (compiler-fingerprints.json): what this cache has
// learnt about the compiler builds it has seen, keyed by a build's identity (its build-id,
// or for a file without that note its path, size, times and inode), so that a fresh
// process can key a kernel without the work of learning it again: NVRTC's fingerprint
// compile (tens of milliseconds), or loading libNVVM and nvJitLink for their versions
// (15 ms warm here, up to 870 ms cold).
//
// An entry "nvrtc earlier of <fingerprint>" holds the fingerprint an earlier jitcache gave
// that NVRTC build (Compiler::earlier_fingerprint: a test compile's digest), so that only
// the first process to miss on a cache compiles it.
//
// It also remembers, per tool, the build this cache was last keyed with ("last_keyed").
// That is what a process that finds no such compiler at all keys its lookups with, so that
// a node given a filled cache but no compiler still hits (a miss cannot be compiled
// there, and is an error naming what to install). It is never used to compile.
//
// Format: {"format": "jitcache_compiler_fingerprints_v1", "entries": {identity: value},
//          "last_keyed": {tool: {"version": text, "fingerprint": 32 hex digits}}}
// where an entry's value is a fingerprint (32 hex digits; an NVRTC without a version) or
// {"version": text, "fingerprint": 32 hex digits}, and a tool is "nvrtc", "libnvvm" or
// "nvjitlink". "last_keyed" is optional (a memo written before it has none, and a reader
// that predates it ignores it). At most 16 entries; any problem reading it (missing,
// foreign, another owner's, oversized, malformed, a value of another shape) is a miss,
// never an error: the memo is only a shortcut.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "jitcache/error.hpp"

namespace jitcache {

struct MemoValue {
  std::string version;  // empty for an NVRTC entry of the oldest shape
  std::string fingerprint;
  bool operator==(const MemoValue&) const = default;
};

// A memo's valid contents; both maps empty for a missing or unreadable file.
struct MemoContents {
  std::map<std::string, MemoValue> entries;     // identity -> value
  std::map<std::string, MemoValue> last_keyed;  // tool -> the build last keyed with
};

MemoContents read_memo_contents(const std::filesystem::path& file);

// The entry for `identity`, if the memo has a valid one.
std::optional<MemoValue> read_memo(const std::filesystem::path& file, const std::string& identity);

// Adds (or replaces) one entry, and with a `tool` records it as that tool's last keyed
// build. Concurrent writers each rename a whole file, so the worst case is a lost entry,
// which is a later miss. A full memo starts again empty.
Status write_memo(const std::filesystem::path& file, const std::string& identity, const MemoValue& value,
                  const std::string& tool = {});

// Records `value` (a version is required) as the build `tool` was last keyed with.
Status write_last_keyed(const std::filesystem::path& file, const std::string& tool, const MemoValue& value);

}  // namespace jitcache
