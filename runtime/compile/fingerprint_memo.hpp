// The fingerprint memo in a cache root (compiler-fingerprints.json): what this cache has
// learnt about the compiler builds it has seen, keyed by a build's identity (its files'
// path, size, times and inode), so that a fresh process can key a kernel without the
// work of learning it again: NVRTC's fingerprint compile (tens of milliseconds), or
// loading libNVVM and nvJitLink for their versions (15 ms warm here, up to 870 ms cold).
//
// Format: {"format": "jitcache_compiler_fingerprints_v1", "entries": {identity: value}}
// where a value is a fingerprint (32 hex digits; NVRTC's) or {"version": text,
// "fingerprint": 32 hex digits} (a toolkit library's). At most 16 entries; any problem
// reading it (missing, foreign, another owner's, oversized, malformed, an entry of
// another shape) is a miss, never an error: the memo is only a shortcut.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "jitcache/error.hpp"

namespace jitcache {

struct MemoValue {
  std::string version;  // empty for NVRTC's entries
  std::string fingerprint;
};

// The entry for `identity`, if the memo has a valid one.
std::optional<MemoValue> read_memo(const std::filesystem::path& file, const std::string& identity);

// Adds (or replaces) one entry; concurrent writers each rename a whole file, so the worst
// case is a lost entry, which is a later miss. A full memo starts again empty.
Status write_memo(const std::filesystem::path& file, const std::string& identity, const MemoValue& value);

}  // namespace jitcache
