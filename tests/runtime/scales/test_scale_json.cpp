#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/regular_file.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache::scales {
namespace {

using namespace jitcache::testing;

TEST(StrictJson, ParsesOrdinaryDocuments) {
  const auto parsed = parse_json_strict(R"({"a": [1, 2.5, "x", null, true], "b": {"c": {}}})", "f");
  ASSERT_OK(parsed);
  EXPECT_EQ((*parsed)["a"][1], 2.5);
  EXPECT_TRUE((*parsed)["b"]["c"].is_object());
}

TEST(StrictJson, SameKeyInSiblingObjectsIsNotADuplicate) {
  ASSERT_OK(parse_json_strict(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})", "f"));
}

TEST(StrictJson, DuplicateKeyInsideAnArrayElementNamesItsPath) {
  const auto parsed = parse_json_strict(R"({"a": [{"k": 1}, {"k": 2, "k": 3}]})", "f.json");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message, "f.json: duplicate key \"k\" in object \"a[1]\" (each key may appear once)");
}

TEST(StrictJson, DepthLimitIsExact) {
  const auto nested = [](std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  ASSERT_OK(parse_json_strict(nested(k_max_json_depth), "f"));
  const auto too_deep = parse_json_strict(nested(k_max_json_depth + 1), "f");
  ASSERT_FALSE(too_deep);
  EXPECT_CONTAINS(too_deep.error().message, "nesting deeper than 64 levels");
}

TEST(StrictJson, MillionLevelsFailFastWithoutRecursion) {
  const std::string hostile = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  const auto start = std::chrono::steady_clock::now();
  const auto parsed = parse_json_strict(hostile, "f");
  ASSERT_FALSE(parsed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(StrictJson, CommentsAreNotJson) {
  ASSERT_FALSE(parse_json_strict("{\"a\": 1 /* no */}", "f"));
  ASSERT_FALSE(parse_json_strict("// no\n{}", "f"));
}

TEST(StrictJson, NegativeInfinityIsExplained) {
  const auto parsed = parse_json_strict("[-Infinity]", "f");
  ASSERT_FALSE(parsed);
  EXPECT_CONTAINS(parsed.error().message, "NaN and Infinity are not JSON numbers");
}

class ReadBounded : public TempDirTest {};

TEST_F(ReadBounded, ReadsUpToTheCapAndRefusesOneByteMore) {
  write_text(dir() / "f", std::string(100, 'x'));
  ASSERT_OK(read_regular_file(dir() / "f", 100));
  const auto refused = read_regular_file(dir() / "f", 99);
  ASSERT_FALSE(refused);
  EXPECT_CONTAINS(refused.error().message, "file is 100 bytes, over the limit of 99 bytes");
}

TEST_F(ReadBounded, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  const auto refused = read_regular_file(dir() / "pipe", 100, "display-name");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "display-name: not a regular file (a FIFO)");
}

TEST_F(ReadBounded, MissingFileIsNotFound) {
  const auto missing = read_regular_file(dir() / "absent", 100);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}

TEST(RevisionMatch, AcceptsEqualAndAbbreviatedCommitIds) {
  EXPECT_TRUE(revision_matches("main", "main"));
  EXPECT_TRUE(revision_matches("ABCDEF0123", "abcdef0123"));
  EXPECT_TRUE(revision_matches("abcdef0", "abcdef0123456789"));
  EXPECT_TRUE(revision_matches("abcdef0123456789", "abcdef0"));
  EXPECT_FALSE(revision_matches("abcdef", "abcdef0123456789"));  // under 7 digits
  EXPECT_FALSE(revision_matches("main", "mainline"));             // not hex: exact only
  EXPECT_FALSE(revision_matches("abcdef1", "abcdef0123456789"));
}

TEST(ScaleFile, MaxAbsAgreementUsesOnePartPerMillion) {
  json scales = valid_scales(1, 2);
  scales["num_layers"] = 2;
  scales["max_abs"] = {2.688, 5.376};
  scales["scales"] = {0.001 * (1 + 0.9e-6), 0.002 * (1 - 0.9e-6)};
  ASSERT_OK(parse_scale_file(scales.dump(), "f", {}));
  scales["scales"][1] = 0.002 * (1 - 1.1e-6);
  const auto refused = parse_scale_file(scales.dump(), "f", {});
  ASSERT_FALSE(refused);
  EXPECT_CONTAINS(refused.error().message, "field 'max_abs[1]'");
}

TEST(ScaleFile, IntegerDenominatorIsTheSameNumber) {
  json scales = valid_scales(2);
  scales["denominator"] = 2688;
  ASSERT_OK(parse_scale_file(scales.dump(), "f", {78, 512}));
}

TEST(ScaleFile, ManyBadEntriesGiveABoundedMessage) {
  json scales = valid_scales(3);
  for (auto& s : scales["scales"]) s = "bad";
  const auto refused = parse_scale_file(scales.dump(), "f", {78, 512});
  ASSERT_FALSE(refused);
  EXPECT_CONTAINS(refused.error().message, "(and 77 more problems)");
  EXPECT_CONTAINS(refused.error().detail, "more not shown");
  EXPECT_LT(refused.error().detail.size(), 4000u);
}

}  // namespace
}  // namespace jitcache::scales
