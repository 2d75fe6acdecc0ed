// HMAC-SHA256 against the test vectors of RFC 4231 (section 4; case 5 is a truncated MAC,
// which jitcache never uses), and same_mac's comparison.
#include <gtest/gtest.h>

#include <string>

#include "support/hmac.hpp"
#include "support/sha256.hpp"

namespace jitcache {
namespace {

std::string repeat(unsigned char byte, std::size_t n) { return std::string(n, static_cast<char>(byte)); }

struct Vector {
  const char* name;
  std::string key;
  std::string data;
  const char* mac;
};

TEST(HmacTest, MatchesRfc4231) {
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  const Vector vectors[] = {
      {"case 1", repeat(0x0b, 20), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"case 2", "Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"case 3", repeat(0xaa, 20), repeat(0xdd, 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"case 4", key4, repeat(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"case 6", repeat(0xaa, 131), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {"case 7", repeat(0xaa, 131),
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs "
       "to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Vector& v : vectors) EXPECT_EQ(to_hex(hmac_sha256(v.key, {v.data})), v.mac) << v.name;
}

TEST(HmacTest, PartsAreConcatenated) {
  const std::string key = "Jefe";
  const std::string whole = "what do ya want for nothing?";
  const Sha256Digest expected = hmac_sha256(key, {whole});
  EXPECT_EQ(hmac_sha256(key, {"what do ", "", "ya want", " for nothing?"}), expected);
  // Every split point gives the same MAC: the parts carry no framing of their own.
  for (std::size_t cut = 0; cut <= whole.size(); ++cut)
    EXPECT_EQ(hmac_sha256(key, {whole.substr(0, cut), whole.substr(cut)}), expected) << cut;
}

TEST(HmacTest, EmptyKeyAndEmptyMessage) {
  // The value of Python's hmac.new(b"", b"", hashlib.sha256).
  EXPECT_EQ(to_hex(hmac_sha256("", {})), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  EXPECT_EQ(hmac_sha256("", {""}), hmac_sha256("", {}));
}

TEST(HmacTest, KeyBytesMatterIncludingNul) {
  const std::string a("key\0a", 5), b("key\0b", 5);
  EXPECT_NE(hmac_sha256(a, {"m"}), hmac_sha256(b, {"m"}));
  EXPECT_NE(hmac_sha256("key", {"m"}), hmac_sha256(a, {"m"}));
}

TEST(HmacTest, SameMacComparesLengthAndEveryByte) {
  const Sha256Digest mac = hmac_sha256("k", {"message"});
  const std::string bytes(reinterpret_cast<const char*>(mac.data()), mac.size());
  EXPECT_TRUE(same_mac(mac, bytes));
  EXPECT_FALSE(same_mac(mac, bytes.substr(0, 31)));
  EXPECT_FALSE(same_mac(mac, bytes + "x"));
  EXPECT_FALSE(same_mac(mac, ""));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    EXPECT_FALSE(same_mac(mac, changed)) << "byte " << i;
  }
}

}  // namespace
}  // namespace jitcache
