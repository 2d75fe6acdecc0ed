// Calibration from per-rank captures (runtime/scales/calibration.*): the capture format's
// rules, what makes a complete run, per-rank agreement, the envelope, headroom, the
// checkpoint checks, and that the v1 object produced is exactly max_abs / 2688.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "jitcache/scales.hpp"
#include "runtime/scales/calibration.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/sha256.hpp"
#include "capture_support.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;
using scales::Capture;
using scales::CalibrationOptions;

constexpr const char* k_rev = testing::k_capture_revision;

json capture_json(int rank, int tp, const std::vector<double>& max_abs) {
  return testing::capture_json(rank, tp, max_abs, 100000 + rank);
}

Capture parse_ok(const json& object, const std::string& name) {
  auto parsed = scales::parse_capture(object.dump(), name);
  EXPECT_TRUE(parsed.has_value()) << parsed.error().to_string();
  return parsed ? *parsed : Capture{};
}

std::vector<Capture> run_of(const std::vector<std::vector<double>>& values, const std::string& stem = "r") {
  std::vector<Capture> captures;
  const int tp = static_cast<int>(values.size());
  for (int r = 0; r < tp; ++r)
    captures.push_back(parse_ok(capture_json(r, tp, values[static_cast<std::size_t>(r)]),
                                stem + std::to_string(r) + ".json"));
  return captures;
}

CalibrationOptions options() {
  CalibrationOptions o;
  o.jitcache_version = "test";
  return o;
}

std::string error_of(const auto& result) {
  EXPECT_FALSE(result.has_value());
  return result ? std::string() : result.error().to_string();
}

// --- capture files -------------------------------------------------------------------

TEST(CaptureFile, ParsesEveryField) {
  const json object = capture_json(2, 4, {0.5, 1.5, 0});
  const std::string text = object.dump();
  auto c = scales::parse_capture(text, "c.json");
  ASSERT_OK(c);
  EXPECT_EQ(c->file, "c.json");
  EXPECT_EQ(c->sha256, sha256_hex(text));
  EXPECT_EQ(c->model, "GLM-5.x");
  EXPECT_EQ(c->model_revision, k_rev);
  EXPECT_EQ(c->dataset, "wikitext-2");
  EXPECT_EQ(c->context, 2048);
  EXPECT_EQ(c->tp, 4);
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->tokens, 100002);
  EXPECT_EQ(c->num_layers, 3);
  EXPECT_EQ(c->latent_dim, 512);
  EXPECT_EQ(c->max_abs, (std::vector<double>{0.5, 1.5, 0}));
}

struct BadCapture {
  const char* name;
  std::function<void(json&)> mutate;
  std::string text;  // raw text instead of the mutated object, when set
  const char* expected;
};

TEST(CaptureFile, EveryBadFieldIsNamed) {
  const std::vector<BadCapture> rows = {
      {"negative", [](json& j) { j["max_abs"][3] = -1; }, "",
       "c.json: field 'max_abs[3]': must be finite and >= 0, got -1"},
      {"string", [](json& j) { j["max_abs"][1] = "0.5"; }, "",
       "c.json: field 'max_abs[1]': must be a number, got string \"0.5\""},
      {"null", [](json& j) { j["max_abs"][0] = nullptr; }, "", "field 'max_abs[0]': must be a number, got null"},
      {"short", [](json& j) { j["max_abs"].erase(4); }, "",
       "c.json: field 'max_abs': has 4 entries, expected 5 (num_layers)"},
      {"long", [](json& j) { j["max_abs"].push_back(1.0); }, "",
       "field 'max_abs': has 6 entries, expected 5 (num_layers)"},
      {"not_array", [](json& j) { j["max_abs"] = 1.0; }, "", "field 'max_abs': must be an array of numbers"},
      {"extra_key", [](json& j) { j["notes"] = "x"; }, "", "c.json: field 'notes': unknown field"},
      {"wrong_format", [](json& j) { j["format"] = "nvfp4_ds_mla_capture_v2"; }, "",
       "c.json: field 'format': must be \"nvfp4_ds_mla_capture_v1\", got string \"nvfp4_ds_mla_capture_v2\""},
      {"scales_file", [](json& j) { j["format"] = "nvfp4_ds_mla_outer_scale_v1"; }, "",
       "(a scales file, not a capture)"},
      {"no_format", [](json& j) { j.erase("format"); }, "", "c.json: field 'format': missing"},
      {"rank_ge_tp", [](json& j) { j["rank"] = 4; }, "",
       "c.json: field 'rank': must be in [0, tp) = [0, 4), got 4"},
      {"rank_negative", [](json& j) { j["rank"] = -1; }, "", "field 'rank': must be an integer >= 0"},
      {"tp_zero", [](json& j) { j["tp"] = 0; }, "", "c.json: field 'tp': must be a positive integer"},
      {"context_float", [](json& j) { j["context"] = 2048.0; }, "",
       "field 'context': must be a positive integer, got number 2048"},
      {"tokens_zero", [](json& j) { j["tokens"] = 0; }, "", "field 'tokens': must be a positive integer"},
      {"layers_zero", [](json& j) { j["num_layers"] = 0; }, "", "field 'num_layers': must be a positive integer"},
      {"latent_bool", [](json& j) { j["latent_dim"] = true; }, "", "field 'latent_dim': must be a positive integer, got boolean true"},
      {"empty_model", [](json& j) { j["model"] = ""; }, "", "c.json: field 'model': must be a non-empty string"},
      {"no_revision", [](json& j) { j.erase("model_revision"); }, "", "field 'model_revision': missing (required)"},
      {"dataset_number", [](json& j) { j["dataset"] = 2; }, "", "field 'dataset': must be a non-empty string, got number 2"},
      {"long_revision", [](json& j) { j["model_revision"] = std::string(300, 'a'); }, "",
       "field 'model_revision': is longer than 256 characters"},
      {"not_object", nullptr, "[1, 2]", "c.json: expected a JSON object (nvfp4_ds_mla_capture_v1), got array"},
      {"nan_token", nullptr, "", "NaN"},
      {"duplicate_key", nullptr, "", "duplicate"},
  };
  for (const BadCapture& row : rows) {
    SCOPED_TRACE(row.name);
    json object = capture_json(1, 4, {0.1, 0.2, 0.3, 0.4, 0.5});
    std::string text = row.text;
    if (row.mutate) row.mutate(object);
    if (text.empty()) text = object.dump();
    if (std::string(row.name) == "nan_token") {
      text.replace(text.find("0.3"), 3, "NaN");
    } else if (std::string(row.name) == "duplicate_key") {
      text.insert(1, "\"rank\":0,");
    }
    const auto parsed = scales::parse_capture(text, "c.json");
    ASSERT_FALSE(parsed.has_value()) << text;
    EXPECT_EQ(parsed.error().code, ErrorCode::invalid_input);
    EXPECT_CONTAINS(parsed.error().message, row.expected);
    EXPECT_CONTAINS(parsed.error().message, "c.json");
  }
}

TEST(CaptureFile, CollectsEveryProblem) {
  json object = capture_json(1, 4, {0.1, 0.2, 0.3});
  object["max_abs"][0] = -2;
  object["max_abs"][2] = -3;
  object["dataset"] = nullptr;
  const auto parsed = scales::parse_capture(object.dump(), "c.json");
  ASSERT_FALSE(parsed.has_value());
  EXPECT_CONTAINS(parsed.error().message, "field 'dataset'");
  EXPECT_CONTAINS(parsed.error().message, "(and 2 more problems)");
  EXPECT_CONTAINS(parsed.error().detail, "c.json: field 'max_abs[0]': must be finite and >= 0, got -2");
  EXPECT_CONTAINS(parsed.error().detail, "c.json: field 'max_abs[2]': must be finite and >= 0, got -3");
}

class CaptureFileOnDisk : public TempDirTest {};

TEST_F(CaptureFileOnDisk, ReadsRegularFilesWithACap) {
  const fs::path path = dir() / "c.json";
  write_text(path, capture_json(0, 1, {1.0}).dump());
  auto c = scales::read_capture(path);
  ASSERT_OK(c);
  EXPECT_EQ(c->file, path.string());
  EXPECT_EQ(c->sha256, sha256_hex(read_text(path)));
  ASSERT_TRUE(c->identity.has_value());

  write_text(dir() / "big.json", std::string(scales::k_max_capture_file_bytes + 1, ' '));
  EXPECT_FALSE(scales::read_capture(dir() / "big.json").has_value());
  const auto missing = scales::read_capture(dir() / "none.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_CONTAINS(missing.error().message, "none.json");
}

TEST_F(CaptureFileOnDisk, TheSameFileUnderTwoSpellingsIsRefused) {
  const fs::path path = dir() / "c.json";
  write_text(path, capture_json(0, 2, {1.0}).dump());
  std::vector<Capture> captures;
  captures.push_back(*scales::read_capture(path));
  captures.push_back(*scales::read_capture(dir() / "." / "c.json"));
  const std::string error = error_of(scales::assemble_run(std::move(captures), "primary"));
  EXPECT_CONTAINS(error, "given twice");
  EXPECT_CONTAINS(error, path.string());
}

// --- runs ------------------------------------------------------------------------------

TEST(CalibrationRun, CompleteRunGivesExactlyMaxOver2688) {
  const std::uint64_t seed = test_seed("calibration complete run");
  const auto values = testing::rank_maxima(seed, 4, 12, 5e-4);
  std::vector<Capture> captures = run_of(values);
  std::swap(captures[0], captures[3]);  // any order on the command line
  auto c = scales::calibrate(captures, {}, options());
  ASSERT_OK(c);
  const std::vector<double> expected = max_over_ranks(values);
  ASSERT_EQ(c->max_abs.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(c->max_abs[i], expected[i]) << "layer " << i;
    EXPECT_EQ(c->scales[i], expected[i] / 2688.0) << "layer " << i;
  }
  EXPECT_EQ(c->layers_raised, 0);
  EXPECT_LE(c->primary_agreement.worst_spread, 5e-4);
  EXPECT_GT(c->primary_agreement.worst_spread, 0);

  // The object is a valid v1 file whose numbers read back exactly.
  const std::string text = scales::render_scale_file(c->object);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_CONTAINS(text, "\n  \"format\": \"nvfp4_ds_mla_outer_scale_v1\",\n");
  auto parsed = scales::parse_scale_file(text, "out.json", {12, 512});
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->scales, c->scales);
  EXPECT_EQ(*parsed->max_abs, c->max_abs);
  EXPECT_EQ(parsed->model_revision, k_rev);

  const json doc = json::parse(text);
  std::vector<std::string> keys;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  for (const auto& [k, v] : ordered.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "num_layers", "latent_dim", "denominator", "scales",
                                            "max_abs", "model_revision", "provenance"}));
  const json& p = doc["provenance"];
  EXPECT_EQ(p["tool"], "jitcache scales calibrate");
  EXPECT_EQ(p["jitcache_version"], "test");
  EXPECT_EQ(p["model"], "GLM-5.x");
  EXPECT_EQ(p["dataset"], "wikitext-2");
  EXPECT_EQ(p["context"], 2048);
  EXPECT_EQ(p["tp"], 4);
  EXPECT_EQ(p["tokens"], (json{100000, 100001, 100002, 100003}));
  EXPECT_EQ(p["per_rank_agreement"]["tolerance"], 1e-3);
  EXPECT_EQ(p["per_rank_agreement"]["worst_spread"], c->primary_agreement.worst_spread);
  ASSERT_EQ(p["captures"].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p["captures"][r]["rank"], r);
    EXPECT_EQ(p["captures"][r]["file"], "r" + std::to_string(r) + ".json");
    EXPECT_EQ(p["captures"][r]["sha256"],
              sha256_hex(capture_json(r, 4, values[static_cast<std::size_t>(r)]).dump()));
  }
  EXPECT_TRUE(p["envelope"].is_null());
  EXPECT_EQ(p["headroom"], 1.0);
  EXPECT_FALSE(p.contains("warnings"));
}

TEST(CalibrationRun, MissingRankIsNamed) {
  std::vector<Capture> captures = run_of(testing::rank_maxima(1, 4, 3, 0));
  captures.erase(captures.begin() + 2);
  const std::string error = error_of(scales::calibrate(captures, {}, options()));
  EXPECT_CONTAINS(error, "missing rank 2 of tp 4 (have 0, 1, 3)");

  captures.erase(captures.begin() + 1);
  EXPECT_CONTAINS(error_of(scales::calibrate(captures, {}, options())),
                  "missing ranks 1, 2 of tp 4 (have 0, 3)");
}

TEST(CalibrationRun, DuplicateRankNamesBothFiles) {
  const auto values = testing::rank_maxima(2, 3, 3, 0);
  std::vector<Capture> captures = run_of(values);
  captures[2] = parse_ok(capture_json(1, 3, values[1]), "again.json");
  const std::string error = error_of(scales::calibrate(captures, {}, options()));
  EXPECT_CONTAINS(error, "again.json: field 'rank': rank 1 also in r1.json");
}

TEST(CalibrationRun, TheSameFileTwiceIsRefused) {
  std::vector<Capture> captures = run_of(testing::rank_maxima(3, 2, 3, 0));
  captures.push_back(captures[1]);
  EXPECT_CONTAINS(error_of(scales::calibrate(captures, {}, options())),
                  "r1.json: given twice (also as r1.json)");
}

TEST(CalibrationRun, FactsMustAgreeAcrossFiles) {
  const auto values = testing::rank_maxima(4, 2, 3, 0);
  struct Row {
    const char* field;
    json value;
    const char* expected;
  };
  const std::vector<Row> rows = {
      {"model_revision", "fedcba9876543210", "r1.json: field 'model_revision': 'fedcba9876543210' differs from '0123456789abcdef0123456789abcdef01234567' in r0.json"},
      {"dataset", "c4", "r1.json: field 'dataset': 'c4' differs from 'wikitext-2' in r0.json"},
      {"model", "DeepSeek-V3.2", "r1.json: field 'model': 'DeepSeek-V3.2' differs from 'GLM-5.x' in r0.json"},
      {"context", 4096, "r1.json: field 'context': 4096 differs from 2048 in r0.json"},
      {"latent_dim", 256, "r1.json: field 'latent_dim': 256 differs from 512 in r0.json"},
      {"tp", 3, "r1.json: field 'tp': 3 differs from 2 in r0.json"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.field);
    std::vector<Capture> captures = run_of(values);
    json other = capture_json(1, 2, values[1]);
    other[row.field] = row.value;
    captures[1] = parse_ok(other, "r1.json");
    const auto result = scales::calibrate(captures, {}, options());
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code, ErrorCode::invalid_input);
    EXPECT_CONTAINS(result.error().message, row.expected);
  }
  // A different layer count is named too (its max_abs array has the other length).
  std::vector<Capture> captures = run_of(values);
  captures[1] = parse_ok(capture_json(1, 2, {1.0, 2.0}), "r1.json");
  EXPECT_CONTAINS(error_of(scales::calibrate(captures, {}, options())),
                  "r1.json: field 'num_layers': 2 differs from 3 in r0.json");
}

TEST(CalibrationRun, NoCapturesIsAUsageError) {
  const auto result = scales::calibrate({}, {}, options());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::invalid_argument);
}

// --- agreement -------------------------------------------------------------------------

TEST(CalibrationAgreement, DisagreeingLayersAreNamedWithEveryRanksValue) {
  std::vector<std::vector<double>> values = {{1.0, 2.0, 3.0, 4.0}, {1.0, 2.0, 3.0, 4.0}, {1.0, 2.0, 3.0, 4.0}};
  values[1][2] = 2.9;  // spread 1/30
  values[2][3] = 3.0;  // spread 1/4
  const auto result = scales::calibrate(run_of(values), {}, options());
  ASSERT_FALSE(result.has_value());
  const Error& e = result.error();
  EXPECT_EQ(e.code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(e.message, "disagree at 2 layers");
  EXPECT_CONTAINS(e.message, "tolerance 0.001");
  EXPECT_CONTAINS(e.message, "layer 2: spread " + scales::format_number((3.0 - 2.9) / 3.0) +
                                 " (rank 0: 3, rank 1: 2.9, rank 2: 3)");
  EXPECT_CONTAINS(e.detail, "layer 2: spread");
  EXPECT_CONTAINS(e.detail, "layer 3: spread 0.25 (rank 0: 4, rank 1: 4, rank 2: 3)");
  EXPECT_EQ(e.detail.find("layer 0"), std::string::npos) << e.detail;
}

TEST(CalibrationAgreement, SpreadExactlyAtTheTolerancePasses) {
  // 0.75 and 1.0 are exact in binary: the spread is exactly 0.25.
  const std::vector<std::vector<double>> values = {{1.0, 0.5}, {0.75, 0.5}};
  CalibrationOptions o = options();
  o.agreement_tolerance = 0.25;
  auto c = scales::calibrate(run_of(values), {}, o);
  ASSERT_OK(c);
  EXPECT_EQ(c->primary_agreement.worst_spread, 0.25);
  EXPECT_EQ(c->primary_agreement.worst_layer, 0);
  EXPECT_EQ(c->max_abs, (std::vector<double>{1.0, 0.5}));
  o.agreement_tolerance = std::nextafter(0.25, 0.0);
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(values), {}, o)), "layer 0: spread 0.25");
}

TEST(CalibrationAgreement, AllZeroLayerHasNoSpreadButIsNeverObserved) {
  const std::vector<std::vector<double>> values = {{1.0, 0.0, 2.0, 0.0}, {1.0, 0.0, 2.0, 0.0}};
  const scales::Agreement a = scales::measure_agreement(*scales::assemble_run(run_of(values), "primary"), 1e-3);
  EXPECT_TRUE(a.disagreeing.empty());
  EXPECT_EQ(a.worst_spread, 0);
  const auto result = scales::calibrate(run_of(values), {}, options());
  ASSERT_FALSE(result.has_value());
  EXPECT_CONTAINS(result.error().message, "layer 1: max_abs is 0 in every capture (the layer was never observed)");
  EXPECT_CONTAINS(result.error().message, "(and 1 more problem)");
  EXPECT_CONTAINS(result.error().detail, "layer 3: max_abs is 0");
}

TEST(CalibrationAgreement, ToleranceMustBeFiniteAndNonNegative) {
  for (double bad : {-1e-9, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CalibrationOptions o = options();
    o.agreement_tolerance = bad;
    const auto result = scales::calibrate(run_of(testing::rank_maxima(5, 2, 2, 0)), {}, o);
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code, ErrorCode::invalid_argument);
    EXPECT_CONTAINS(result.error().message, "--agreement");
  }
  CalibrationOptions o = options();
  o.agreement_tolerance = 0;
  EXPECT_OK(scales::calibrate(run_of(testing::rank_maxima(5, 2, 2, 0)), {}, o));
}

// --- envelope and headroom ---------------------------------------------------------------

TEST(CalibrationEnvelope, RaisesLayersToTheLargerMaximumAndCountsThem) {
  const std::uint64_t seed = test_seed("calibration envelope");
  const auto primary = testing::rank_maxima(seed, 4, 16, 1e-4);
  auto envelope = testing::rank_maxima(seed + 1, 2, 16, 0);
  const std::vector<double> p = max_over_ranks(primary);
  // Raise every third layer above the primary, keep the others below it.
  int expected_raised = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double v = i % 3 == 0 ? p[i] * 1.5 : p[i] * 0.5;
    expected_raised += i % 3 == 0 ? 1 : 0;
    for (auto& rank : envelope) rank[i] = v;
  }
  envelope[0][1] = p[1];  // equal is not raised
  envelope[1][1] = p[1];
  auto c = scales::calibrate(run_of(primary), run_of(envelope, "e"), options());
  ASSERT_OK(c);
  EXPECT_EQ(c->layers_raised, expected_raised);
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(c->max_abs[i], std::max(p[i], envelope[0][i])) << "layer " << i;
    EXPECT_EQ(c->scales[i], c->max_abs[i] / 2688.0);
  }
  const json doc = json::parse(scales::render_scale_file(c->object));
  const json& e = doc["provenance"]["envelope"];
  EXPECT_EQ(e["layers_raised"], expected_raised);
  EXPECT_EQ(e["tp"], 2);
  EXPECT_EQ(e["captures"].size(), 2u);
  EXPECT_EQ(e["captures"][1]["file"], "e1.json");
  EXPECT_EQ(e["model_revision"], k_rev);
  EXPECT_EQ(e["per_rank_agreement"]["worst_spread"], 0.0);
  EXPECT_TRUE(c->warnings.empty());
}

TEST(CalibrationEnvelope, OtherCountsAreRefused) {
  const auto primary = testing::rank_maxima(6, 2, 4, 0);
  const auto result = scales::calibrate(run_of(primary), run_of(testing::rank_maxima(7, 1, 5, 0), "e"), options());
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(result.error().message, "e0.json: field 'num_layers': envelope has 5, the primary run has 4 (r0.json)");

  std::vector<Capture> env = run_of(testing::rank_maxima(7, 1, 4, 0), "e");
  env[0].latent_dim = 256;
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), env, options())),
                  "e0.json: field 'latent_dim': envelope has 256, the primary run has 512");
}

TEST(CalibrationEnvelope, MustBeCompleteAndAgree) {
  const auto primary = testing::rank_maxima(8, 2, 3, 0);
  std::vector<Capture> env = run_of(testing::rank_maxima(9, 3, 3, 0), "e");
  env.pop_back();
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), env, options())),
                  "envelope run: missing rank 2 of tp 3 (have 0, 1)");
  auto values = testing::rank_maxima(9, 2, 3, 0);
  values[1][0] *= 0.9;
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), run_of(values, "e"), options())),
                  "Envelope run (e0.json, ...): the 2 ranks disagree at 1 layer");
}

TEST(CalibrationEnvelope, AnotherRevisionIsAllowedButRecorded) {
  const auto primary = testing::rank_maxima(10, 2, 3, 0);
  std::vector<Capture> env = run_of(testing::rank_maxima(11, 1, 3, 0), "e");
  env[0].model_revision = "fedcba9";
  auto c = scales::calibrate(run_of(primary), env, options());
  ASSERT_OK(c);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_CONTAINS(c->warnings[0], "'fedcba9'");
  EXPECT_CONTAINS(c->warnings[0], k_rev);
  const json doc = json::parse(scales::render_scale_file(c->object));
  EXPECT_EQ(doc["provenance"]["warnings"], json::array({c->warnings[0]}));
  EXPECT_EQ(doc["provenance"]["envelope"]["model_revision"], "fedcba9");
  EXPECT_EQ(doc["model_revision"], k_rev);  // the primary's revision is the file's
}

// An envelope is an independent run: the primary captures given again, as the same file,
// as a copy of their bytes or re-saved with the same values, would count one run as two.
TEST(CalibrationEnvelope, ThePrimaryRunAgainIsRefusedNamingBothFiles) {
  const auto primary = testing::rank_maxima(12, 2, 3, 0);
  // The same bytes under other names (a copy).
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), run_of(primary, "e"), options())),
                  "e0.json: envelope capture has the same bytes (sha256 ");
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), run_of(primary, "e"), options())),
                  ") as the primary capture r0.json; an envelope must be an independent run");
  // The same file: its path, or its identity under another spelling.
  std::vector<Capture> same_path = run_of(primary);
  same_path[1].file = "e1.json";
  same_path[1].sha256 = "not the primary's";
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), same_path, options())),
                  "r0.json: envelope capture is the same file as the primary capture r0.json");
  std::vector<Capture> with_identity = run_of(primary);
  std::vector<Capture> by_identity = run_of(primary, "./e");
  for (std::size_t r = 0; r < by_identity.size(); ++r) {
    with_identity[r].identity = std::pair(dev_t{7}, ino_t{100 + r});
    by_identity[r].identity = with_identity[r].identity;
    by_identity[r].sha256 = "re-read: " + std::to_string(r);
  }
  EXPECT_CONTAINS(error_of(scales::calibrate(with_identity, by_identity, options())),
                  "./e0.json: envelope capture is the same file as the primary capture r0.json");
  // Re-saved: other bytes, every recorded value the same.
  std::vector<Capture> resaved;
  for (int r = 0; r < 2; ++r)
    resaved.push_back(*scales::parse_capture(capture_json(r, 2, primary[static_cast<std::size_t>(r)]).dump(2),
                                             "e" + std::to_string(r) + ".json"));
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(primary), resaved, options())),
                  "e0.json: envelope capture records the same values as the primary capture r0.json");
  // Another run with the same facts is independent: accepted.
  auto independent = primary;
  for (auto& rank : independent) rank[0] *= 1.01;
  EXPECT_OK(scales::calibrate(run_of(primary), run_of(independent, "e"), options()));
}

TEST(CalibrationHeadroom, MultipliesEveryLayer) {
  const std::uint64_t seed = test_seed("calibration headroom");
  const auto values = testing::rank_maxima(seed, 2, 8, 0);
  CalibrationOptions o = options();
  o.headroom = 1.25;
  auto c = scales::calibrate(run_of(values), {}, o);
  ASSERT_OK(c);
  const std::vector<double> m = max_over_ranks(values);
  for (std::size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(c->max_abs[i], m[i] * 1.25);
    EXPECT_EQ(c->scales[i], m[i] * 1.25 / 2688.0);
  }
  EXPECT_EQ(json::parse(scales::render_scale_file(c->object))["provenance"]["headroom"], 1.25);
}

TEST(CalibrationHeadroom, BelowOneOrNotFiniteIsRefused) {
  for (double bad : {0.5, 0.0, -2.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    CalibrationOptions o = options();
    o.headroom = bad;
    const auto result = scales::calibrate(run_of(testing::rank_maxima(12, 2, 2, 0)), {}, o);
    ASSERT_FALSE(result.has_value()) << bad;
    EXPECT_EQ(result.error().code, ErrorCode::invalid_argument);
    EXPECT_CONTAINS(result.error().message, "--headroom: must be finite and >= 1");
  }
}

TEST(CalibrationScales, AScaleOutsideNormalFloat32IsRefused) {
  // 1e-40 / 2688 is far below FLT_MIN; 1e308 * 2 overflows to infinity.
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of({{1.0, 1e-40}}), {}, options())),
                  "layer 1: scale 1e-40 / 2688 is outside the normal float32 range");
  CalibrationOptions o = options();
  o.headroom = 2;
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of({{1e308, 1.0}}), {}, o)),
                  "layer 0: max_abs 1e+308 x headroom 2 is not finite");
}

// --- the checkpoint ----------------------------------------------------------------------

class CalibrationCheckpoint : public TempDirTest {};

TEST_F(CalibrationCheckpoint, CountsMustMatchConfigJson) {
  write_text(dir() / "ckpt" / "config.json", glm_config(40).dump(2));
  auto facts = scales::checkpoint_facts(dir() / "ckpt", std::nullopt);
  ASSERT_OK(facts);
  EXPECT_EQ(facts->num_hidden_layers, 40);
  EXPECT_FALSE(facts->revision.has_value());
  CalibrationOptions o = options();
  o.checkpoint = *facts;
  const auto result = scales::calibrate(run_of(testing::rank_maxima(13, 2, 6, 0)), {}, o);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(result.error().message, (dir() / "ckpt" / "config.json").string() +
                                              ": field 'num_hidden_layers': is 40 but the captures have "
                                              "num_layers 6 (r0.json)");

  json config = glm_config(6);
  config["kv_lora_rank"] = 256;
  write_text(dir() / "ckpt" / "config.json", config.dump(2));
  o.checkpoint = *scales::checkpoint_facts(dir() / "ckpt", std::nullopt);
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(testing::rank_maxima(13, 2, 6, 0)), {}, o)),
                  "config.json: field 'kv_lora_rank': is 256 but the captures have latent_dim 512");

  write_text(dir() / "ckpt" / "config.json", glm_config(6).dump(2));
  o.checkpoint = *scales::checkpoint_facts(dir() / "ckpt", std::nullopt);
  EXPECT_OK(scales::calibrate(run_of(testing::rank_maxima(13, 2, 6, 0)), {}, o));
}

TEST_F(CalibrationCheckpoint, MissingConfigIsNamed) {
  const auto facts = scales::checkpoint_facts(dir() / "nowhere", std::nullopt);
  ASSERT_FALSE(facts.has_value());
  EXPECT_CONTAINS(facts.error().message, "nowhere");
}

TEST_F(CalibrationCheckpoint, RevisionFromTheSnapshotDirectoryMustMatch) {
  const fs::path snapshot = dir() / "models--org--m" / "snapshots" / "89abcdef01234567";
  write_text(snapshot / "config.json", glm_config(3).dump(2));
  auto facts = scales::checkpoint_facts(snapshot, std::nullopt);
  ASSERT_OK(facts);
  ASSERT_EQ(facts->revision, "89abcdef01234567");
  CalibrationOptions o = options();
  o.checkpoint = *facts;
  const auto values = testing::rank_maxima(14, 2, 3, 0);
  const auto result = scales::calibrate(run_of(values), {}, o);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(result.error().message,
                  "r0.json: field 'model_revision': '0123456789abcdef0123456789abcdef01234567' does not "
                  "match the checkpoint revision '89abcdef01234567' (the snapshots/<revision> directory name)");

  // An explicit revision wins over the directory name; an abbreviation matches.
  o.checkpoint = *scales::checkpoint_facts(snapshot, std::string("0123456"));
  EXPECT_OK(scales::calibrate(run_of(values), {}, o));
  // Without a checkpoint, --revision alone checks the captures.
  o.checkpoint.reset();
  o.revision = "fedcba98";
  EXPECT_CONTAINS(error_of(scales::calibrate(run_of(values), {}, o)), "(given explicitly)");
}

}  // namespace
}  // namespace jitcache
