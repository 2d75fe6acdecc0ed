#include <gtest/gtest.h>

#include <string>

#include "support/sha256.hpp"

namespace jitcache {
namespace {

// FIPS 180-2 examples.
TEST(Sha256, MatchesPublishedVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, BinaryInputWithNulBytes) {
  const std::string data("\0\x01\xff", 3);
  EXPECT_NE(sha256_hex(data), sha256_hex(std::string("\x01\xff", 2)));
  EXPECT_EQ(to_hex(sha256(data)), sha256_hex(data));
}

TEST(Sha256, RecognisesHexDigests) {
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'a')));
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'F')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a')));
  EXPECT_FALSE(is_sha256_hex(std::string(65, 'a')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a') + "g"));
}

}  // namespace
}  // namespace jitcache
