#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

std::string hex_of(const std::string& bytes) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(k_digits[c >> 4]);
    out.push_back(k_digits[c & 0xF]);
  }
  return out;
}

// Everything the runtime is going to key a kernel on (issue 3's list).
Facts kernel_facts() {
  return Facts{{"key_schema", "1"},
               {"kernel_family", "nvfp4_mla"},
               {"kernel", "kv_write"},
               {"generator_version", "3"},
               {"source_hash", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},
               {"headers_hash", "00112233445566778899aabbccddeeff"},
               {"latent_scale", "identity"},
               {"rope", "bf16"},
               {"record_bytes", "432"},
               {"latent_dim", "512"},
               {"block_size", "64"},
               {"target", "sm_120a"},
               {"compiler", "nvrtc"},
               {"nvrtc_version", "12.8"},
               {"nvrtc_fingerprint", "a1b2c3d4e5f60718293a4b5c6d7e8f90"},
               {"options", "--fmad=false -default-device -std=c++17"},
               {"env.CUDA_CACHE_DISABLE", ""}};
}

TEST(CacheKey, HexRoundTrip) {
  const CacheKey key = Facts{{"a", "b"}}.key();
  const std::string hex = key.to_hex();
  ASSERT_EQ(hex.size(), 32u);
  auto parsed = CacheKey::from_hex(hex);
  ASSERT_OK(parsed);
  EXPECT_EQ(*parsed, key);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto parsed_upper = CacheKey::from_hex(upper);
  ASSERT_OK(parsed_upper);
  EXPECT_EQ(parsed_upper->to_hex(), hex);
}

TEST(CacheKey, FromHexRejectsWrongLength) {
  for (const char* text : {"", "abc", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0"}) {
    auto parsed = CacheKey::from_hex(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_EQ(parsed.error().code, ErrorCode::invalid_input);
    EXPECT_NE(parsed.error().message.find("cache key"), std::string::npos) << parsed.error().message;
  }
}

TEST(CacheKey, FromHexRejectsNonHex) {
  for (const char* text : {"0123456789abcdef0123456789abcdeg", "0123456789abcdef 123456789abcdef",
                           "../../../../../../../../etc/passw", "0123456789abcdef0123456789abcd\n1"}) {
    auto parsed = BlobDigest::from_hex(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_NE(parsed.error().message.find("blob digest"), std::string::npos);
  }
}

TEST(CacheKey, MatchesXxh3OfContent) {
  // xxhsum -H2 of an empty input: the well-known XXH3-128 of nothing.
  EXPECT_EQ(BlobDigest::of(std::string_view()).to_hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Facts, FieldOrderDoesNotMatter) {
  Facts forward;
  Facts backward;
  const auto fields = kernel_facts().fields();
  for (auto it = fields.begin(); it != fields.end(); ++it) forward.set(it->first, it->second);
  for (auto it = fields.rbegin(); it != fields.rend(); ++it) backward.set(it->first, it->second);
  EXPECT_EQ(forward.canonical(), backward.canonical());
  EXPECT_EQ(forward.key(), backward.key());
}

TEST(Facts, SetReplaces) {
  Facts facts{{"latent_scale", "identity"}};
  facts.set("latent_scale", "dynamic");
  EXPECT_EQ(facts.size(), 1u);
  EXPECT_EQ(facts.get("latent_scale"), "dynamic");
  EXPECT_EQ(facts.get("absent"), std::nullopt);
  EXPECT_EQ(facts, (Facts{{"latent_scale", "dynamic"}}));
}

TEST(Facts, LengthPrefixesPreventConcatenationCollisions) {
  const std::vector<Facts> sets = {
      Facts{{"ab", "c"}},
      Facts{{"a", "bc"}},
      Facts{{"abc", ""}},
      Facts{{"a", "b"}, {"c", ""}},
      Facts{{"a", ""}, {"bc", ""}},
      Facts{{"a", ""}},
      Facts{},
      // A value that spells out the serialization of a second field must not equal it.
      Facts{{"a", std::string("b") + "F" + std::string("\x01\0\0\0\0\0\0\0", 8) + "c" +
                      std::string("\x01\0\0\0\0\0\0\0", 8) + "d"}},
      Facts{{"a", "b"}, {"c", "d"}},
  };
  std::set<std::string> canonicals;
  std::set<CacheKey> keys;
  for (const Facts& facts : sets) {
    canonicals.insert(facts.canonical());
    keys.insert(facts.key());
  }
  EXPECT_EQ(canonicals.size(), sets.size());
  EXPECT_EQ(keys.size(), sets.size());
}

TEST(Facts, IdentityAndDynamicLatentScaleHaveDifferentKeys) {
  // The field failure: a kernel built for identity replayed for a calibrated layer.
  Facts identity = kernel_facts();
  Facts dynamic = kernel_facts();
  dynamic.set("latent_scale", "dynamic");
  EXPECT_NE(identity.key(), dynamic.key());
}

TEST(Facts, ChangingAnySingleFactChangesTheKey) {
  const Facts base = kernel_facts();
  const CacheKey base_key = base.key();
  std::set<CacheKey> keys{base_key};
  for (const auto& [name, value] : base.fields()) {
    for (const std::string& changed : {value + "x", std::string(), value.empty() ? "0" : value.substr(1)}) {
      if (changed == value) continue;
      Facts modified = base;
      modified.set(name, changed);
      const CacheKey key = modified.key();
      EXPECT_NE(key, base_key) << "changing " << name << " to '" << changed << "' kept the key";
      keys.insert(key);
    }
    Facts removed;
    for (const auto& [other, other_value] : base.fields())
      if (other != name) removed.set(other, other_value);
    EXPECT_NE(removed.key(), base_key) << "removing " << name << " kept the key";
  }
  Facts added = base;
  added.set("extra", "");
  EXPECT_NE(added.key(), base_key);
  // The exact targets of the brief must never share a key.
  std::set<CacheKey> targets;
  for (const char* target : {"sm_120a", "sm_120", "sm_121a", "sm_100a", "sm_90"}) {
    Facts f = base;
    f.set("target", target);
    targets.insert(f.key());
  }
  EXPECT_EQ(targets.size(), 5u);
}

TEST(Facts, CanonicalLayoutIsPinned) {
  // magic "jitcache.facts", u32 version 1, u64 count 1, 'F', u64 1, "a", u64 1, "b".
  EXPECT_EQ(hex_of(Facts{{"a", "b"}}.canonical()),
            "6a697463616368652e6661637473"
            "01000000"
            "0100000000000000"
            "46" "0100000000000000" "61" "0100000000000000" "62");
}

// Golden key. If this fails you changed the canonical serialization: bump
// k_key_schema_version (cache/facts.hpp) and then update the pinned values here.
TEST(Facts, GoldenKey) {
  static_assert(k_key_schema_version == 1, "update the golden keys below with the new version");
  EXPECT_EQ(kernel_facts().key().to_hex(), "bf1ada5b858047c28e99ea5c2814cb21");
  EXPECT_EQ(Facts{}.key().to_hex(), "739c95424f4ed1922e585e74b896519e");
}

TEST(Facts, JsonRoundTrip) {
  const Facts facts = kernel_facts();
  const std::string json = facts.to_json();
  auto parsed = Facts::from_json(json);
  ASSERT_OK(parsed);
  EXPECT_EQ(*parsed, facts);
  EXPECT_EQ(parsed->key(), facts.key());
  EXPECT_EQ(Facts({{"b", "2"}, {"a", "1"}}).to_json(), R"({"a":"1","b":"2"})");
}

TEST(Facts, JsonUnicodeAndEscapesRoundTrip) {
  const Facts facts{{"note", "quote\" backslash\\ newline\n tab\t é 中"}};
  auto parsed = Facts::from_json(facts.to_json());
  ASSERT_OK(parsed);
  EXPECT_EQ(*parsed, facts);
}

TEST(Facts, FromJsonRejectsMalformedInput) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"", "not valid JSON"},
      {R"(["a"])", "expected a JSON object"},
      {R"("a")", "expected a JSON object"},
      {R"({"a": 1})", "facts field 'a': expected a string, got number"},
      {R"({"a": null})", "facts field 'a': expected a string, got null"},
      {R"({"a": true})", "facts field 'a': expected a string, got boolean"},
      {R"({"a": ["x"]})", "facts field 'a': expected a string, got array"},
      {R"({"a": {"b": "c"}})", "facts field 'a': expected a string, got object"},
      {R"({"bad name": "x"})", "fact name 'bad name'"},
      {R"({"": "x"})", "fact name ''"},
  };
  for (const auto& [text, expected] : cases) {
    auto parsed = Facts::from_json(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_EQ(parsed.error().code, ErrorCode::invalid_input);
    EXPECT_NE(parsed.error().message.find(expected), std::string::npos)
        << text << " -> " << parsed.error().message;
  }
}

TEST(Facts, ValidateAcceptsTypicalFacts) { EXPECT_OK(kernel_facts().validate()); }

TEST(Facts, ValidateRejectsBadNames) {
  for (const std::string& name : {std::string(), std::string("has space"), std::string("quote\""),
                                  std::string("dollar$"), std::string("slash/"), std::string(129, 'n')}) {
    Facts facts;
    facts.set(name, "v");
    auto valid = facts.validate();
    ASSERT_FALSE(valid) << name;
    EXPECT_EQ(valid.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(valid.error().message.find("fact name"), std::string::npos);
  }
  Facts longest;
  longest.set(std::string(128, 'n'), "v");
  EXPECT_OK(longest.validate());
}

TEST(Facts, ValidateRejectsBadValues) {
  for (const std::string& value : {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                   std::string("abc\xe2\x82"), std::string(k_max_fact_value_bytes + 1, 'v')}) {
    Facts facts;
    facts.set("name", value);
    auto valid = facts.validate();
    ASSERT_FALSE(valid) << value.size();
    EXPECT_NE(valid.error().message.find("fact 'name'"), std::string::npos) << valid.error().message;
  }
}

}  // namespace
}  // namespace jitcache::cache
