// What the export file's manifest and a provider's manifest.json share
// (runtime/compile/manifest_fields.hpp): an entry's object, written in the order both
// documents give (docs/export-format.md, docs/cache-wheels.md), and the fields read by type,
// each wrong one refused through the reader's own refusal with the field named.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/compile/manifest_fields.hpp"

namespace jitcache {
namespace {

// A refusal as a reader makes one: its file first, then the message.
ManifestFields::Refuse refusal() {
  return [](const std::string& why) { return make_error(ErrorCode::invalid_input, "m.json: " + why); };
}

template <class T>
std::string refused(const Result<T>& result) {
  EXPECT_FALSE(result.has_value());
  if (result) return "";
  EXPECT_EQ(result.error().code, ErrorCode::invalid_input) << result.error().message;
  return result.error().message;
}

ExportEntry entry_of(std::string_view text) {
  ExportEntry e;
  e.label = "writer/dynamic/bf16/sm_90";
  e.facts.set("kernel", "writer").set("target", "sm_90");
  e.key = e.facts.key();
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  e.bytes = std::make_shared<const cache::Bytes>(bytes, bytes + text.size());
  e.compile_ms = 812.5;
  return e;
}

TEST(ManifestEntryJson, KeysInTheDocumentedOrderWithTheProvidersSha256) {
  const ExportEntry e = entry_of("abc");
  const nlohmann::ordered_json with = manifest_entry_json(e, WithSha256::yes);
  std::vector<std::string> keys;
  for (const auto& [key, value] : with.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"key", "label", "facts", "digest", "sha256", "size", "compile_ms"}));
  EXPECT_EQ(with["key"], e.key.to_hex());
  EXPECT_EQ(with["label"], "writer/dynamic/bf16/sm_90");
  EXPECT_EQ(with["facts"], nlohmann::ordered_json::parse(R"({"kernel":"writer","target":"sm_90"})"));
  EXPECT_EQ(with["digest"], cache::BlobDigest::of(std::string_view("abc")).to_hex());
  // FIPS 180-2's example for "abc".
  EXPECT_EQ(with["sha256"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(with["size"], 3u);
  EXPECT_EQ(with["compile_ms"], 812.5);

  const nlohmann::ordered_json without = manifest_entry_json(e, WithSha256::no);
  nlohmann::ordered_json expected = with;
  expected.erase("sha256");
  EXPECT_EQ(without.dump(), expected.dump());
}

TEST(ManifestFields, GoodFieldsAreRead) {
  const nlohmann::json object = {{"name", "x"}, {"targets", {"sm_90", "sm_120a"}}, {"entries", {1, 2}}};
  const ManifestFields fields{object, "manifest: ", refusal()};
  EXPECT_EQ(fields.string("name").value(), "x");
  EXPECT_EQ(fields.strings("targets").value(), (std::vector<std::string>{"sm_90", "sm_120a"}));
  EXPECT_EQ(*fields.array("entries", 2).value(), object["entries"]);
  const nlohmann::json empty = {{"targets", nlohmann::json::array()}};
  const ManifestFields none{empty, "", refusal()};
  EXPECT_TRUE(none.strings("targets").value().empty());
}

TEST(ManifestFields, EachWrongFieldIsRefusedNamingIt) {
  const nlohmann::json object = {{"number", 7},
                                 {"text", "sm_90"},
                                 {"mixed", {"sm_90", 90}},
                                 {"three", {1, 2, 3}},
                                 {"object", {{"a", 1}}}};
  const ManifestFields fields{object, "manifest: ", refusal()};
  EXPECT_EQ(refused(fields.string("absent")), "m.json: manifest: absent: missing or not a string");
  EXPECT_EQ(refused(fields.string("number")), "m.json: manifest: number: missing or not a string");
  EXPECT_EQ(refused(fields.strings("absent")), "m.json: manifest: absent: missing or not an array");
  EXPECT_EQ(refused(fields.strings("text")), "m.json: manifest: text: missing or not an array");
  EXPECT_EQ(refused(fields.strings("mixed")), "m.json: manifest: mixed: not all strings");
  EXPECT_EQ(refused(fields.array("object", 10)), "m.json: manifest: object: missing or not an array");
  EXPECT_EQ(refused(fields.array("three", 2)), "m.json: manifest: three: 3 entries exceed the limit of 2");
  EXPECT_EQ(fields.array("three", 3).value()->size(), 3u);
}

TEST(ManifestFields, AnEmptyPlaceStartsTheMessageWithTheField) {
  const nlohmann::json object = {{"entries", 1}};
  const ManifestFields fields{object, "", refusal()};
  EXPECT_EQ(refused(fields.array("entries", 4)), "m.json: entries: missing or not an array");
}

}  // namespace
}  // namespace jitcache
