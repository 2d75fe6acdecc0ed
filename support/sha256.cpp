#include "support/sha256.hpp"

#include <openssl/evp.h>

#include <cstdlib>

namespace jitcache {

Sha256Digest sha256(std::string_view data) {
  Sha256Digest digest{};
  unsigned int length = 0;
  // EVP_Digest fails only on allocation failure or a broken OpenSSL build; neither leaves a
  // meaningful digest to return, and a wrong digest would silently accept tampered files.
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != digest.size()) {
    std::abort();
  }
  return digest;
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest.size() * 2);
  for (std::uint8_t byte : digest) {
    hex += k_digits[byte >> 4];
    hex += k_digits[byte & 0xF];
  }
  return hex;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

}  // namespace jitcache
