// Secrets read from files (the fleet signing key, a Redis password): a secret that anyone
// else on the machine can read or replace is not a secret, so the file must be
//   - a regular file (a symlink is followed: deployments mount secrets through links),
//   - owned by the user running jitcache (the effective uid),
//   - neither readable nor writable by group or others (mode & 077 == 0),
//   - within the size bounds of what it holds.
// Each refusal names the file, the variable it came from and the rule it broke.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"

namespace jitcache {

struct SecretRules {
  std::string_view what;  // "fleet key", "Redis password"
  std::string_view source;  // where the path came from: "JITCACHE_REMOTE_KEY_FILE"
  std::size_t min_bytes = 1;
  std::size_t max_bytes = 4096;
  // Drop one trailing "\n" or "\r\n" (a password written by `echo`); a key is taken byte
  // for byte.
  bool strip_final_newline = false;
};

// The file's bytes, or ErrorCode::unsafe (ownership, permissions, not a regular file),
// not_found, io, or invalid_input (size).
Result<std::string> read_secret_file(const std::filesystem::path& path, const SecretRules& rules);

}  // namespace jitcache
