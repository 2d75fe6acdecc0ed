// SHA-256 of byte strings, for digests that leave the process (scales files, checkpoint
// metadata) and must be checkable with `sha256sum`. Cache keys use xxHash instead.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace jitcache {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
// Lowercase hex, 64 characters: the form sha256sum prints and checkpoints record.
std::string sha256_hex(std::string_view data);
std::string to_hex(const Sha256Digest& digest);

// True for exactly 64 hex digits (either case).
bool is_sha256_hex(std::string_view text);

}  // namespace jitcache
