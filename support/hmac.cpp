#include "support/hmac.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstdlib>
#include <memory>

namespace jitcache {
namespace {

// Fetched once: an EVP_MAC is immutable and may be shared by threads; contexts may not.
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

struct ContextFree {
  void operator()(EVP_MAC_CTX* ctx) const { EVP_MAC_CTX_free(ctx); }
};

}  // namespace

Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  Sha256Digest out{};
  // A failure here means a broken OpenSSL; a wrong MAC would accept forged entries, so
  // there is nothing sensible to return.
  EVP_MAC* mac = hmac_algorithm();
  if (mac == nullptr) std::abort();
  std::unique_ptr<EVP_MAC_CTX, ContextFree> ctx(EVP_MAC_CTX_new(mac));
  if (!ctx) std::abort();
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  // EVP_MAC_init refuses a null key pointer even with length 0.
  static const unsigned char empty = 0;
  const auto* key_bytes = key.empty() ? &empty : reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_MAC_init(ctx.get(), key_bytes, key.size(), params) != 1) std::abort();
  for (std::string_view part : parts)
    if (!part.empty() &&
        EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()), part.size()) != 1)
      std::abort();
  std::size_t written = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &written, out.size()) != 1 || written != out.size()) std::abort();
  return out;
}

bool same_mac(const Sha256Digest& a, std::string_view b) {
  return b.size() == a.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace jitcache
