// Signed remote values: the round trip, and every Rejection a value can earn. Values that
// need a valid signature over altered contents are signed here from the layout documented
// in remote/signed_entry.hpp, so the tests also pin that layout.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <string>

#include "cache/cache_test_support.hpp"
#include "remote/signed_entry.hpp"
#include "support/hmac.hpp"
#include "test_support.hpp"

namespace jitcache::remote {
namespace {

using cache::testing::make_bytes;
using cache::testing::sample_facts;

const std::string k_key(32, 'F');
const std::string k_other_key(32, 'G');
const std::string k_name = "jitcache:v1:entry:0123";

// The MAC of the layout's last 32 bytes, computed independently of signed_entry.cpp.
std::string mac_of(std::string_view name, std::string_view key, std::string_view body) {
  std::string length(4, '\0');
  const auto n = static_cast<std::uint32_t>(name.size());
  std::memcpy(length.data(), &n, 4);
  const Sha256Digest mac = hmac_sha256(key, {std::string_view("jitcache.remote.v1\0", 19), length, name, body});
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

// `value` with its body changed by `edit` and signed again with `key`.
template <class Edit>
std::string resigned(const std::string& value, std::string_view key, Edit edit, std::string_view name = k_name) {
  std::string body = value.substr(0, value.size() - k_signed_entry_mac_bytes);
  edit(body);
  return body + mac_of(name, key, body);
}

template <class T>
void poke(std::string& body, std::size_t offset, T field) {
  std::memcpy(body.data() + offset, &field, sizeof field);
}

class SignedEntryTest : public ::testing::Test {
 protected:
  std::uint64_t seed = jitcache::testing::test_seed("signed_entry");
  const cache::Facts facts = sample_facts("signed");
  const cache::Bytes bytes = make_bytes(40, seed);
  const std::string value = encode_signed_entry(k_name, k_key, facts, bytes, 7.25);

  Rejection rejection(std::string_view v, std::string_view key = k_key, std::string_view name = k_name) {
    auto decoded = decode_signed_entry(name, key, v, facts.key());
    EXPECT_FALSE(decoded.has_value()) << "accepted";
    return decoded ? Rejection::bad_content : decoded.error().why;
  }
};

TEST_F(SignedEntryTest, RoundTripKeepsFactsBytesAndCompileTime) {
  const std::string facts_json = facts.to_json();
  ASSERT_EQ(value.size(), k_signed_entry_header_bytes + facts_json.size() + bytes.size() + k_signed_entry_mac_bytes);
  EXPECT_EQ(value.substr(0, 8), "JCREMOTE");
  EXPECT_EQ(value.substr(48, facts_json.size()), facts_json);
  // The MAC is that of the documented layout.
  EXPECT_EQ(value.substr(value.size() - 32), mac_of(k_name, k_key, value.substr(0, value.size() - 32)));
  auto decoded = decode_signed_entry(k_name, k_key, value, facts.key());
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(decoded->facts, facts);
  EXPECT_EQ(decoded->bytes, bytes);
  EXPECT_EQ(decoded->compile_ms, 7.25);
  auto peeked = peek_facts(value);
  ASSERT_TRUE(peeked);
  EXPECT_EQ(*peeked, facts);
}

TEST_F(SignedEntryTest, EmptyEntryRoundTrips) {
  const std::string empty = encode_signed_entry(k_name, k_key, facts, {}, 0);
  auto decoded = decode_signed_entry(k_name, k_key, empty, facts.key());
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_TRUE(decoded->bytes.empty());
}

TEST_F(SignedEntryTest, EveryPrefixIsRejected) {
  for (std::size_t n = 0; n < value.size(); ++n) {
    const Rejection why = rejection(std::string_view(value).substr(0, n));
    // Shorter than the magic, a prefix cannot be told from a foreign value.
    if (n >= 8) EXPECT_EQ(why, Rejection::truncated) << n << " bytes";
    else EXPECT_EQ(why, Rejection::bad_magic) << n << " bytes";
  }
  EXPECT_EQ(rejection(value + "x"), Rejection::truncated) << "a byte appended";
  EXPECT_FALSE(peek_facts(value.substr(0, value.size() - 1)));
}

TEST_F(SignedEntryTest, LengthsThatPromiseMoreThanTheValueHasAreTruncated) {
  // Signed with the right key, so only the lengths are wrong.
  const std::string longer_blob = resigned(value, k_key, [&](std::string& b) { poke<std::uint64_t>(b, 16, bytes.size() + 1); });
  EXPECT_EQ(rejection(longer_blob), Rejection::truncated);
  const std::string huge_facts = resigned(value, k_key, [](std::string& b) { poke<std::uint32_t>(b, 12, 0xFFFFFFFFu); });
  EXPECT_EQ(rejection(huge_facts), Rejection::truncated);
  const std::string huge_blob =
      resigned(value, k_key, [](std::string& b) { poke<std::uint64_t>(b, 16, ~std::uint64_t{0}); });
  EXPECT_EQ(rejection(huge_blob), Rejection::truncated);
}

TEST_F(SignedEntryTest, UnsignedOrForeignBytesHaveBadMagic) {
  const std::string raw(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  EXPECT_EQ(rejection(raw), Rejection::bad_magic);
  EXPECT_EQ(rejection(std::string(200, '\0')), Rejection::bad_magic);
  EXPECT_EQ(rejection("jcremote" + value.substr(8)), Rejection::bad_magic);
  EXPECT_FALSE(peek_facts(raw));
}

TEST_F(SignedEntryTest, UnknownVersionIsRefusedSignedOrNot) {
  const std::string v2 = resigned(value, k_key, [](std::string& b) { poke<std::uint32_t>(b, 8, 2); });
  auto decoded = decode_signed_entry(k_name, k_key, v2, facts.key());
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().why, Rejection::unknown_version);
  EXPECT_NE(decoded.error().to_string().find("version 2"), std::string::npos) << decoded.error().to_string();
  std::string v0 = value;
  poke<std::uint32_t>(v0, 8, 0);
  EXPECT_EQ(rejection(v0), Rejection::unknown_version);
}

TEST_F(SignedEntryTest, EverySingleBitFlipIsRejected) {
  for (std::size_t i = 0; i < value.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = value;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      const Rejection why = rejection(flipped);
      // The magic, the version and the lengths are read before the signature; everything
      // after them (compile time, digest, facts, bytes, the MAC itself) is the signature's.
      if (i < 8) EXPECT_EQ(why, Rejection::bad_magic) << i;
      else if (i < 12) EXPECT_EQ(why, Rejection::unknown_version) << i;
      else if (i < 24) EXPECT_EQ(why, Rejection::truncated) << i;
      else EXPECT_EQ(why, Rejection::bad_signature) << "byte " << i << " bit " << bit;
    }
  }
}

TEST_F(SignedEntryTest, AnotherFleetKeyOrAnotherNameFailsTheSignature) {
  EXPECT_EQ(rejection(value, k_other_key), Rejection::bad_signature);
  // A key that differs in its last byte only.
  std::string close_key = k_key;
  close_key.back() = 'E';
  EXPECT_EQ(rejection(value, close_key), Rejection::bad_signature);
  // The same value stored under another Redis name (RENAME, COPY).
  EXPECT_EQ(rejection(value, k_key, "jitcache:v1:entry:0124"), Rejection::bad_signature);
  EXPECT_EQ(rejection(value, k_key, k_name + " "), Rejection::bad_signature);
  auto decoded = decode_signed_entry("elsewhere", k_key, value, facts.key());
  ASSERT_FALSE(decoded);
  EXPECT_NE(decoded.error().to_string().find("elsewhere"), std::string::npos) << decoded.error().to_string();
}

TEST_F(SignedEntryTest, FactsOfAnotherKeyAreWrongKeyEvenWhenSigned) {
  // An identity entry, properly signed, offered for the dynamic key of the same kernel.
  const cache::Facts identity = sample_facts("signed", "identity");
  ASSERT_NE(identity.key(), facts.key());
  const std::string other = encode_signed_entry(k_name, k_key, identity, bytes, 1.0);
  auto decoded = decode_signed_entry(k_name, k_key, other, facts.key());
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().why, Rejection::wrong_key);
  EXPECT_NE(decoded.error().detail.find(identity.key().to_hex()), std::string::npos) << decoded.error().detail;
}

TEST_F(SignedEntryTest, AlteredBytesSignedAgainAreCaughtByTheDigest) {
  const std::size_t blob_at = k_signed_entry_header_bytes + facts.to_json().size();
  const std::string altered = resigned(value, k_key, [&](std::string& b) { b[blob_at + 3] ^= 0x40; });
  EXPECT_EQ(rejection(altered), Rejection::bad_digest);
  const std::string digest_changed = resigned(value, k_key, [](std::string& b) { b[32] ^= 0x01; });
  EXPECT_EQ(rejection(digest_changed), Rejection::bad_digest);
}

TEST_F(SignedEntryTest, UnreadableFactsSignedAgainAreBadFacts) {
  const std::string json = facts.to_json();
  // Same length, so the layout stays consistent: only the JSON is broken.
  const std::string broken = resigned(value, k_key, [&](std::string& b) { b[48] = '['; });
  EXPECT_EQ(rejection(broken), Rejection::bad_facts);
  const std::string not_strings = resigned(value, k_key, [&](std::string& b) {
    const std::string replacement = std::string("{\"a\":1") + std::string(json.size() - 7, ' ') + "}";
    ASSERT_EQ(replacement.size(), json.size());
    b.replace(48, json.size(), replacement);
  });
  EXPECT_EQ(rejection(not_strings), Rejection::bad_facts);
}

// A correctly signed value whose compile time the index would refuse (NaN: SQLite stores
// NULL into a NOT NULL column; the rest: `verify` calls the index damaged) is rejected
// after its signature, naming the field; the bounds themselves are accepted.
TEST_F(SignedEntryTest, ACompileTimeOutOfRangeIsRejectedNamingTheField) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                     -1.0, -0.001, 1e300, 1e9 * 1.000001, std::numeric_limits<double>::max()}) {
    const std::string signed_bad = encode_signed_entry(k_name, k_key, facts, bytes, bad);
    auto decoded = decode_signed_entry(k_name, k_key, signed_bad, facts.key());
    ASSERT_FALSE(decoded.has_value()) << bad << " accepted";
    EXPECT_EQ(decoded.error().why, Rejection::bad_field) << bad;
    EXPECT_NE(decoded.error().to_string().find("field out of range: compile_ms: "), std::string::npos)
        << decoded.error().to_string();
    EXPECT_EQ(rejection(resigned(value, k_key, [&](std::string& body) { poke(body, 24, bad); })), Rejection::bad_field)
        << bad;
  }
  for (double good : {0.0, 1e9, 12.5}) {
    auto decoded = decode_signed_entry(k_name, k_key, encode_signed_entry(k_name, k_key, facts, bytes, good),
                                       facts.key());
    ASSERT_TRUE(decoded.has_value()) << good << ": " << decoded.error().to_string();
    EXPECT_EQ(decoded->compile_ms, good);
  }
}

TEST(RejectionTest, EveryReasonHasAName) {
  for (Rejection r : {Rejection::truncated, Rejection::bad_magic, Rejection::unknown_version, Rejection::bad_signature,
                      Rejection::bad_facts, Rejection::wrong_key, Rejection::bad_digest, Rejection::bad_field,
                      Rejection::oversized, Rejection::bad_content})
    EXPECT_STRNE(to_string(r), "?");
  EXPECT_EQ((Rejected{Rejection::oversized, "5 bytes"}.to_string()), "oversized: 5 bytes");
  EXPECT_EQ((Rejected{Rejection::bad_digest, ""}.to_string()), "digest mismatch");
}

}  // namespace
}  // namespace jitcache::remote
