// HMAC-SHA256 (RFC 2104 over SHA-256) for entries that leave the machine: remote cache
// values and export files are signed with the fleet key, so that only a holder of the key
// can make a node load a kernel. Computed by OpenSSL's EVP_MAC; the provider it needs is
// loaded once per process (about a millisecond), not per call.
#pragma once

#include <initializer_list>
#include <string_view>

#include "support/sha256.hpp"

namespace jitcache {

inline constexpr std::size_t k_hmac_bytes = 32;

// HMAC-SHA256 under `key` of the concatenation of `parts`.
Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

// Compares two MACs in time independent of where they differ.
bool same_mac(const Sha256Digest& a, std::string_view b);

}  // namespace jitcache
