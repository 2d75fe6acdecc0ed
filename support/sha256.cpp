#include "support/sha256.hpp"

// The low-level SHA256_Init/Update/Final rather than EVP_Digest (or the one-shot SHA256(),
// which goes through EVP in OpenSSL 3): EVP's first use loads the default provider, about
// 1.3 ms, most of a warm prepare(). The low-level calls are deprecated in 3.0 but compute
// the same digest without the provider machinery; tests/support/test_sha256.cpp pins it.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <cstdlib>

namespace jitcache {

Sha256Digest sha256(std::string_view data) {
  Sha256Digest digest{};
  static_assert(sizeof(Sha256Digest) == SHA256_DIGEST_LENGTH);
  // These cannot fail for valid pointers; a failure would mean a broken OpenSSL, and a
  // wrong digest would silently accept tampered files.
  SHA256_CTX context;
  if (SHA256_Init(&context) != 1 || SHA256_Update(&context, data.data(), data.size()) != 1 ||
      SHA256_Final(digest.data(), &context) != 1)
    std::abort();
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
