// Export files: the cache entries a checkpoint needs on some targets, in one file that can
// travel where no network reaches (an air-gapped image), and be checked whole on arrival
// before a single entry is published into a cache.
//
// Layout, integers little-endian:
//
//   archive  := header manifest blob* trailer
//   header   := magic "JCEXPORT"            8 bytes   offset 0
//               version u32                 4         offset 8   (k_archive_version)
//               flags u32                   4         offset 12  (0; a reader refuses others)
//               manifest_len u64            8         offset 16  (at most k_max_manifest_bytes)
//   manifest := JSON object, manifest_len bytes, offset 24 (below)
//   blob     := one entry's bytes (a kernel bundle, runtime/compile/artifact_bundle.hpp), in
//               manifest order, each exactly its manifest size; together they run from the
//               end of the manifest to the trailer, with no byte unaccounted for
//   trailer  := magic "JCEXPEND"            8 bytes   offset size-64
//               signed u32                  4         (1: the mac is an HMAC; 0: 32 zero bytes)
//               reserved u32                4         (0)
//               checksum                    16        XXH3-128 of every byte before it
//               mac                         32        HMAC-SHA256 under the fleet key of
//                                                     "jitcache.export.v1\0" || every byte
//                                                     before it (checksum included)
//
//   manifest := {"format": "jitcache-export", "producer": "jitcache 0.1.0",
//                "created": "2026-11-29T14:02:11.123Z", "checkpoint": "glm5-mini",
//                "rope": "bf16", "targets": ["sm_90", "sm_120a"],
//                "entries": [{"key": <32 hex>, "label": "writer/dynamic/bf16/sm_90",
//                             "facts": {<cache/facts.hpp's readable form>},
//                             "digest": <32 hex: XXH3-128 of the blob>, "size": <bytes>,
//                             "compile_ms": <number>}, ...]}
//
// The checksum catches damage in any byte, signed or not; the mac proves that a holder of
// the fleet key wrote the file. Its domain prefix differs from remote values'
// ("jitcache.remote.v1"), so neither kind of signed bytes can pass for the other.
//
// Reading checks, in order, and refuses the whole file at the first problem, naming its
// offset, entry or field: the magic, the version, the flags, the manifest length against
// its cap and the file's size, the trailer, the checksum, the signature (a file without
// one is refused when a key is configured: stripping the signature must not bypass it),
// the manifest's fields, that the entries' sizes add up to the blobs section exactly, and
// per entry: that its facts hash to its key, that its blob hashes to its digest, and that
// the bundle's own facts agree with them (check_bundle_facts). Every length is bounded
// before anything is allocated for it; the file itself is read only up to
// k_max_archive_bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/export_entry.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {

// Bump when the layout above changes; the golden test in
// tests/runtime/compile/test_cache_archive.cpp fails when you forget.
inline constexpr std::uint32_t k_archive_version = 1;
inline constexpr std::string_view k_archive_format = "jitcache-export";
inline constexpr std::size_t k_archive_header_bytes = 24;
inline constexpr std::size_t k_archive_trailer_bytes = 64;
// A manifest is about 2 KiB per entry: 16 MiB is thousands of variants.
inline constexpr std::uint64_t k_max_manifest_bytes = 16u << 20;
inline constexpr std::size_t k_max_archive_entries = 4096;
// The whole file is read into memory to be checked before anything is published; every
// variant of a checkpoint on every target is a few MiB.
inline constexpr std::uint64_t k_max_archive_bytes = 1ull << 30;

// What the manifest says besides its entries.
struct ArchiveInfo {
  std::string producer;    // "jitcache <version>"
  std::string created;     // ISO 8601 UTC
  std::string checkpoint;  // the checkpoint directory's name (never a path of the exporting machine)
  std::string rope;
  std::vector<std::string> targets;
};

struct GatherProgress {
  std::size_t done = 0;
  std::size_t total = 0;
  std::string label;
  bool compiled = false;
  double ms = 0;
};

// Every variant in `specs`, in order: from the cache, the misses compiled `jobs` at a time
// (0: one per core) through `kernels` (so each compile is also stored there).
Result<std::vector<ExportEntry>> gather_export_entries(KernelCache& kernels, const Compiler& compiler,
                                                       std::span<const KernelSpec> specs, unsigned jobs,
                                                       const std::function<void(const GatherProgress&)>& progress = {});

// The file's bytes before the trailer: header, manifest, blobs.
std::string encode_archive_body(const ArchiveInfo& info, std::span<const ExportEntry> entries);
// The body with the header and manifest given as they are (a manifest of any content), for
// tests of the reader.
std::string encode_archive_body(std::string_view manifest_json, std::span<const std::string_view> blobs);
// `body` with its trailer: checksum, and an HMAC under `fleet_key` when one is given.
std::string seal_archive(std::string body, const std::optional<std::string>& fleet_key);

// Writes the archive to `path` atomically (a reader sees the old file or the whole new
// one). Returns its size in bytes.
Result<std::uint64_t> write_archive(const std::filesystem::path& path, const ArchiveInfo& info,
                                    std::span<const ExportEntry> entries,
                                    const std::optional<std::string>& fleet_key);

// How the file's authenticity was established.
enum class ArchiveSignature {
  verified,   // signed, and the signature checks under the configured fleet key
  absent,     // no signature and no key configured: intact (checksum, digests), but unauthenticated
  unchecked,  // signed, but no key is configured here to check it
};
const char* to_string(ArchiveSignature signature);  // "verified", "unsigned", "unchecked"

struct ArchiveItem {
  std::string label;
  cache::CacheKey key;
  cache::Facts facts;
  cache::BlobDigest digest;
  std::uint64_t offset = 0;  // of its blob in the file
  std::uint64_t size = 0;
  double compile_ms = 0;
};

// A file that passed every check: its bytes and its entries.
struct VerifiedArchive {
  std::uint32_t version = 0;
  ArchiveInfo info;
  ArchiveSignature signature = ArchiveSignature::absent;
  std::string data;
  std::vector<ArchiveItem> items;
  std::span<const std::byte> blob(const ArchiveItem& item) const {
    return std::as_bytes(std::span(data)).subspan(item.offset, item.size);
  }
};

// Checks `data` (the whole file, named `name` in errors) as the header says. Every
// refusal is ErrorCode::invalid_input.
Result<VerifiedArchive> verify_archive(std::string data, std::string_view name,
                                       const std::optional<std::string>& fleet_key);
// The same for a file, read through RegularFile and bounded by k_max_archive_bytes.
Result<VerifiedArchive> read_archive(const std::filesystem::path& path, const std::optional<std::string>& fleet_key);

// Points into the archive's items: valid while the archive is.
struct ImportReport {
  std::vector<const ArchiveItem*> added;
  std::vector<const ArchiveItem*> present;  // already in the cache under the same key
};

// The entries keyed for another NVRTC build than the one whose fingerprint is
// `fingerprint` (their compiler_fingerprint fact differs): they import like any other, but
// no lookup on a machine with that build computes their keys, so they are never hit there.
// Entries without the fact are not counted.
std::vector<const ArchiveItem*> keyed_for_other_build(const VerifiedArchive& archive, std::string_view fingerprint);

// The fingerprints of those entries, each once, in the archive's order.
std::vector<std::string> other_build_fingerprints(std::span<const ArchiveItem* const> items);

// Publishes every entry of a verified archive that `store` does not have yet. The store
// must be writable (a read-only or memory-only store is refused before anything is put).
Result<ImportReport> import_archive(cache::Store& store, const VerifiedArchive& archive);

}  // namespace jitcache
