// An orphan blob for the audit's tests: a blob file in a cache directory that no index row
// refers to.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache/hash.hpp"

namespace jitcache::testing {

// Writes `content` as the blob file of its digest under `root`/blobs, with the modes the
// store gives its own, and nothing in the index; its path.
inline std::filesystem::path write_orphan_blob(const std::filesystem::path& root, const std::string& content) {
  const std::string digest = cache::BlobDigest::of(content).to_hex();
  const auto path = root / "blobs" / digest.substr(0, 2) / digest;
  std::filesystem::create_directories(path.parent_path());
  ::chmod(path.parent_path().c_str(), 0700);
  std::ofstream(path) << content;
  ::chmod(path.c_str(), 0600);
  return path;
}

}  // namespace jitcache::testing
