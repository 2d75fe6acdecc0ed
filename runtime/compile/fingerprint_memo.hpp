// The fingerprint memo in a cache root (compiler-fingerprints.json): what this cache has
// learnt about the compiler builds it has seen, so that a fresh process can key a kernel
// without the work of learning it again: hashing NVRTC's ~100 MB (tens of milliseconds),
// or loading libNVVM and nvJitLink for their versions (15 ms warm here, up to 870 ms cold).
// An entry is keyed by a file's identity, "<tool> content <dev:ino size mtime ctime>" (for
// NVRTC with its builtins'), which changes whenever the file's bytes do, and holds the
// digest of those bytes (toolkit_trust.hpp).
//
// An entry "<tool> imported <fingerprint>" records a build that entries imported from an
// export file were keyed with (cache_archive.hpp): a node with no compiler keys its lookups
// with it, and the audit knows the build.
//
// It also remembers, per tool, the build this cache was last keyed with ("last_keyed").
// That is what a process that finds no such compiler at all keys its lookups with, so that
// a node given a filled cache but no compiler still hits (a miss cannot be compiled
// there, and is an error naming what to install). It is never used to compile.
//
// Entries of other shapes ("nvrtc build-id ...", "nvrtc earlier of ...") were written by
// earlier jitcaches, whose fingerprints were not digests of the files; they are read, but
// vouch for no build (known_builds).
//
// Format: {"format": "jitcache_compiler_fingerprints_v1", "entries": {identity: value},
//          "last_keyed": {tool: {"version": text, "fingerprint": 32 hex digits}}}
// where an entry's value is a fingerprint (32 hex digits; an NVRTC without a version) or
// {"version": text, "fingerprint": 32 hex digits}, and a tool is "nvrtc", "libnvvm" or
// "nvjitlink". "last_keyed" is optional (a memo written before it has none, and a reader
// that predates it ignores it). At most 64 entries; any problem reading it (missing,
// foreign, another owner's, oversized, malformed, a value of another shape) is a miss,
// never an error: the memo is only a shortcut.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/facts.hpp"
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

// Records builds that imported entries were keyed with: an "<tool> imported <fingerprint>"
// entry for each, and for each tool the build of `last` as the one last keyed with. One
// write.
struct ImportedBuild {
  std::string tool;  // "nvrtc", "libnvvm", "nvjitlink"
  MemoValue value;
};
Status write_imported_builds(const std::filesystem::path& file, const std::vector<ImportedBuild>& builds,
                             const std::vector<ImportedBuild>& last);

// The compiler builds an entry's facts say it was keyed with: jitcache's own kernels name
// NVRTC (compiler, compiler_version, compiler_fingerprint), kernels from outside each tool
// their kind runs (tool.<tool>.version, tool.<tool>.fingerprint).
std::vector<ImportedBuild> compiler_builds_of(const cache::Facts& facts);

// The builds of `tool` the memo vouches for: the fingerprints of its content and imported
// entries, and the build it was last keyed with.
std::set<std::string> known_builds(const MemoContents& memo, const std::string& tool);

}  // namespace jitcache
