// Content-addressed blob files below a cache root:
//
//   <root>/blobs/<d0d1>/<digest>   a published blob; <digest> is the 32-hex XXH3-128 of
//                                  its content and <d0d1> its first two hex digits
//   <root>/tmp/blob.tmp-*          a blob being written (support/atomic_file.hpp); never read
//   <root>/quarantine/...          blobs that failed verification, kept for inspection
//
// Only names derived from a digest are ever opened, always with O_NOFOLLOW. A blob is
// written to a temporary file, synced and renamed into place (AtomicFileWriter), so a reader sees either
// no file or the whole file; and every read re-hashes the content before returning it.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cache/files.hpp"
#include "cache/hash.hpp"
#include "jitcache/error.hpp"
#include "support/atomic_file.hpp"

namespace jitcache::cache {

using Bytes = std::vector<std::byte>;

// full: fsync blobs and their directories, SQLite synchronous=NORMAL (survives a crash of
// the process or the machine). relaxed: no fsync, synchronous=OFF; for throwaway caches in
// tests and benchmarks only.
enum class Durability { full, relaxed };

// Points of publishing an entry, in order; a test seam (see StoreOptions::publish_hook).
enum class PublishStep { temp_written, renamed, row_written };
const char* to_string(PublishStep step);

// The write steps of publishing a blob, in order; a test seam (StoreOptions::blob_fault_hook):
// the atomic writer's own steps and hook.
using WriteStep = AtomicWriteStep;
using BlobFaultHook = AtomicWriteFault;

enum class BlobProblem { missing, not_regular, wrong_size, altered, unreadable };
const char* to_string(BlobProblem problem);

struct BlobFailure {
  BlobProblem problem;
  std::string detail;  // names the file and what was found
};

struct StoredBlob {
  BlobDigest digest;
  std::int64_t mtime_ms = 0;
  std::uint64_t size = 0;
};

class BlobFiles {
 public:
  // Opens, creating as needed, blobs/, tmp/ and quarantine/ below an open private root.
  static Result<BlobFiles> open(int root_fd, const std::filesystem::path& root);
  // For a root that cannot be written: only blobs/ is opened (it must exist); publish,
  // quarantine and the sweeps fail or do nothing.
  static Result<BlobFiles> open_read_only(int root_fd, const std::filesystem::path& root);
  // No directory at all: every blob is missing, nothing can be published.
  static BlobFiles detached() { return BlobFiles(); }

  std::filesystem::path path_of(const BlobDigest& digest) const;

  // Temporary file (0600) -> write -> fsync -> rename -> fsync directory. `step`, when
  // set, is called after the temporary file is written and after the rename.
  Result<BlobDigest> publish(std::span<const std::byte> data, Durability durability,
                             const std::function<void(PublishStep)>& step) const;
  // Test seam: see BlobFaultHook.
  void set_fault_hook(BlobFaultHook hook) { m_fault = std::move(hook); }

  // The content of the blob, only if it has `expected_size` bytes and hashes to `digest`.
  std::expected<Bytes, BlobFailure> read_verified(const BlobDigest& digest,
                                                  std::uint64_t expected_size) const;

  // Moves the blob (if still present) into quarantine/. Best effort: logs on failure.
  void quarantine(const BlobDigest& digest) const;
  Status remove(const BlobDigest& digest) const;

  // Removes the blob unless `keep` says otherwise. The file is first moved aside into
  // tmp/, so a publish of the same content that lands meanwhile is never lost: `keep`
  // sees the moved file's modification time, and a kept file goes back (unless a newer
  // copy took its place). Returns whether the blob was removed.
  using KeepBlob = std::function<Result<bool>(std::int64_t mtime_ms)>;
  Result<bool> remove_unless(const BlobDigest& digest, const KeepBlob& keep) const;

  // Every file in blobs/ whose name is a digest in its right shard.
  Result<std::vector<StoredBlob>> list() const;

  // Removes files in tmp/ (abandoned writes) or quarantine/ older than `cutoff_ms`.
  Result<std::uint64_t> sweep_tmp(std::int64_t cutoff_ms) const;
  Result<std::uint64_t> sweep_quarantine(std::int64_t cutoff_ms) const;

 private:
  BlobFiles() = default;
  Result<std::uint64_t> sweep(int dir_fd, const std::filesystem::path& shown,
                              std::int64_t cutoff_ms) const;

  std::filesystem::path m_root;
  BlobFaultHook m_fault;
  UniqueFd m_blobs;
  UniqueFd m_tmp;
  UniqueFd m_quarantine;
};

}  // namespace jitcache::cache
