// `jitcache kv quantize | dequantize | error | formats` run as a user runs them: exit codes
// (0 ok, 1 invalid input, 2 usage), what goes to stdout and stderr, and that the files
// they write hold what the library computes.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "runtime/kv/npy.hpp"
#include "cli_runner.hpp"
#include "test_support.hpp"


namespace jitcache {
namespace {

namespace fs = std::filesystem;

using Outcome = testing::CliOutcome;

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class CliKvTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::mt19937_64 rng(testing::test_seed("cli kv input"));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    m_values.resize(k_tokens * kv::k_row_dim);
    for (float& v : m_values) v = 0.3f * normal(rng);
    m_input = write_npy("x.npy", {k_tokens, kv::k_row_dim}, m_values);
  }

  fs::path write_npy(const char* name, std::vector<std::uint64_t> shape,
                     const std::vector<float>& values) {
    EXPECT_OK(npy::write_float32(dir() / name, shape, values));
    return dir() / name;
  }

  fs::path write_raw(const char* name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream(dir() / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return dir() / name;
  }

  Outcome jitcache(std::vector<std::string> args) { return testing::run_cli(dir(), std::move(args)); }

  std::string p(const fs::path& path) const { return path.string(); }

  static constexpr std::uint64_t k_tokens = 7;
  std::vector<float> m_values;
  fs::path m_input;
};

kv::RecordOptions record_options(float scale, RecordFormat format) {
  return kv::RecordOptions{kv::choose_latent_scale(scale).value(), format, 1};
}

// ---------------------------------------------------------------------------------------
// Success: exit 0

TEST_F(CliKvTest, QuantizeAndDequantizeWriteWhatTheLibraryComputes) {
  const Outcome q =
      jitcache({"kv", "quantize", "--input", p(m_input), "--out", p(dir() / "r.bin")});
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_EQ(q.err, "");
  EXPECT_NE(q.out.find("7 tokens x 576 columns"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("latent scale 1 (identity)"), std::string::npos) << q.out;
  const auto records = read_bytes(dir() / "r.bin");
  EXPECT_EQ(records.size(), k_tokens * 432);
  EXPECT_EQ(records,
            kv::quantize(m_values, kv::k_row_dim, record_options(1.0f, RecordFormat::b12x_432)).value());

  const Outcome d =
      jitcache({"kv", "dequantize", "--input", p(dir() / "r.bin"), "--out", p(dir() / "y.npy")});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.err, "");
  const auto y = npy::read_float32(dir() / "y.npy", 2);
  ASSERT_OK(y);
  EXPECT_EQ(y->shape, (std::vector<std::uint64_t>{k_tokens, 576}));
  EXPECT_EQ(y->values, kv::dequantize(records, record_options(1.0f, RecordFormat::b12x_432)).value());
}

TEST_F(CliKvTest, Fp8RopeWithDynamicScale) {
  const Outcome q = jitcache({"kv", "quantize", "--input", p(m_input), "--scale", "0.002", "--rope",
                              "fp8", "--out", p(dir() / "r.bin")});
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_NE(q.out.find("(dynamic)"), std::string::npos) << q.out;
  const auto records = read_bytes(dir() / "r.bin");
  EXPECT_EQ(records.size(), k_tokens * 368);
  EXPECT_EQ(records,
            kv::quantize(m_values, kv::k_row_dim, record_options(0.002f, RecordFormat::b12x_368)).value());
  const Outcome d = jitcache({"kv", "dequantize", "--input", p(dir() / "r.bin"), "--scale", "0.002",
                              "--rope", "fp8", "--threads", "3", "--out", p(dir() / "y.npy")});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(npy::read_float32(dir() / "y.npy").value().values,
            kv::dequantize(records, record_options(0.002f, RecordFormat::b12x_368)).value());
}

// Every format in every mode it is written with, through --format and --scale or
// --latent-scale per-token: the files hold what the library computes, and the round trip
// comes back within NVFP4's error.
TEST_F(CliKvTest, EveryFormatAndModeRoundTrips) {
  std::vector<float> latent(k_tokens * kv::k_latent_dim);
  for (std::size_t t = 0; t < k_tokens; ++t)
    std::copy_n(&m_values[t * kv::k_row_dim], kv::k_latent_dim, &latent[t * kv::k_latent_dim]);
  const fs::path latent_input = write_npy("latent.npy", {k_tokens, kv::k_latent_dim}, latent);
  int runs = 0;
  for (const RecordFormatRow& format : k_record_formats.rows)
    for (const LatentScale mode : k_latent_scales.values()) {
      if (!format_allows(format.value, mode)) continue;
      SCOPED_TRACE(std::string(format.name) + " " + to_string(mode));
      std::vector<std::string> scale_args;
      kv::RecordOptions options{};
      switch (mode) {
        case LatentScale::identity:
          options = record_options(1.0f, format.value);
          break;
        case LatentScale::dynamic:
          scale_args = {"--scale", "0.0004"};
          options = record_options(0.0004f, format.value);
          break;
        case LatentScale::per_token:
          scale_args = {"--latent-scale", "per-token"};
          options = kv::RecordOptions{kv::per_token_latent_scale(), format.value, 1};
          break;
      }
      const std::size_t columns = kv::output_columns(format.value);
      const fs::path& input = columns == kv::k_row_dim ? m_input : latent_input;
      const std::vector<float>& values = columns == kv::k_row_dim ? m_values : latent;
      std::vector<std::string> q = {"kv", "quantize", "--input", p(input), "--format", format.name,
                                    "--out", p(dir() / "r.bin")};
      q.insert(q.end(), scale_args.begin(), scale_args.end());
      const Outcome qo = jitcache(q);
      ASSERT_EQ(qo.code, 0) << qo.err;
      EXPECT_NE(qo.out.find(std::to_string(k_tokens) + " " + format.name + " records of " +
                            std::to_string(format.record_bytes) + " bytes"),
                std::string::npos)
          << qo.out;
      EXPECT_NE(qo.out.find(mode == LatentScale::per_token ? "latent scale per-token"
                                                           : std::string("(") + to_string(mode) + ")"),
                std::string::npos)
          << qo.out;
      const auto records = read_bytes(dir() / "r.bin");
      // A page-major format's file is whole 64-slot pages; the slots past the tokens read as zero rows.
      const std::size_t page = static_cast<std::size_t>(format.page_size);
      const std::size_t slots = (k_tokens + page - 1) / page * page;
      ASSERT_EQ(records.size(), slots * format.record_bytes);
      EXPECT_EQ(records, kv::quantize(values, columns, options).value());

      std::vector<std::string> d = {"kv", "dequantize", "--input", p(dir() / "r.bin"), "--format",
                                    format.name, "--out", p(dir() / "y.npy")};
      d.insert(d.end(), scale_args.begin(), scale_args.end());
      const Outcome dout = jitcache(d);
      ASSERT_EQ(dout.code, 0) << dout.err;
      EXPECT_NE(dout.out.find("float32 (" + std::to_string(slots) + ", " + std::to_string(columns) + ")"),
                std::string::npos)
          << dout.out;
      const auto y = npy::read_float32(dir() / "y.npy", 2);
      ASSERT_OK(y);
      EXPECT_EQ(y->shape, (std::vector<std::uint64_t>{slots, columns}));
      EXPECT_EQ(y->values, kv::dequantize(records, options).value());
      double err = 0.0, ref = 0.0;
      for (std::size_t t = 0; t < k_tokens; ++t)
        for (std::size_t c = 0; c < kv::k_latent_dim; ++c) {
          const double x = values[t * columns + c], e = y->values[t * columns + c] - x;
          err += e * e;
          ref += x * x;
        }
      EXPECT_GT(std::sqrt(err / ref), 0.01) << "NVFP4 is lossy";
      EXPECT_LT(std::sqrt(err / ref), 0.2);
      ++runs;
    }
  EXPECT_EQ(runs, 12) << "2 + 3 + 1 + 2 + 2 + 1 + 1 (format, mode) pairs";
}

TEST_F(CliKvTest, FormatWithOnlyPerTokenIsPerTokenWithoutAsking) {
  const std::vector<float> latent(m_values.begin(), m_values.begin() + 2 * 512);
  const fs::path input = write_npy("latent.npy", {2, 512}, latent);
  const Outcome q = jitcache({"kv", "quantize", "--input", p(input), "--format", "b12x-304", "--out",
                              p(dir() / "r.bin")});
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_NE(q.out.find("latent scale per-token (each record's own s_t)"), std::string::npos) << q.out;
  EXPECT_EQ(read_bytes(dir() / "r.bin"),
            kv::quantize(latent, 512, kv::RecordOptions{kv::per_token_latent_scale(), RecordFormat::b12x_304, 1})
                .value());
  // Its records hold no RoPE: a [T, 576] input is refused, not cut.
  const Outcome rope = jitcache({"kv", "quantize", "--input", p(m_input), "--format", "b12x-304", "--out",
                                 p(dir() / "r2.bin")});
  EXPECT_EQ(rope.code, 1) << rope.err;
  EXPECT_NE(rope.err.find(p(m_input) + ": field 'shape': b12x-304 records hold no RoPE"), std::string::npos)
      << rope.err;
  EXPECT_FALSE(fs::exists(dir() / "r2.bin"));
  const Outcome e = jitcache({"kv", "error", "--input", p(input), "--format", "b12x-304"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("b12x-304 records (304 bytes per token)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("rope           none: b12x-304 records hold no RoPE"), std::string::npos) << e.out;
  const Outcome j = jitcache({"kv", "error", "--input", p(input), "--format", "b12x-304", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc.at("format"), "b12x-304");
  EXPECT_TRUE(doc.at("rope_format").is_null());
  EXPECT_TRUE(doc.at("rope").is_null());
  EXPECT_EQ(doc.at("latent_scale").at("variant"), "per-token");
}

TEST_F(CliKvTest, FormatsListsEveryFormat) {
  const Outcome text = jitcache({"kv", "formats"});
  ASSERT_EQ(text.code, 0) << text.err;
  const Outcome j = jitcache({"kv", "formats", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc.size(), k_record_formats.size());
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const RecordFormatRow& row = k_record_formats.rows[i];
    EXPECT_EQ(doc[i].at("name"), row.name);
    EXPECT_EQ(doc[i].at("record_bytes"), row.record_bytes);
    EXPECT_EQ(doc[i].at("output_columns"), kv::output_columns(row.value));
    EXPECT_EQ(doc[i].at("reader"), row.reader);
    std::vector<std::string> modes;
    for (const LatentScale mode : k_latent_scales.values())
      if (format_allows(row.value, mode)) modes.emplace_back(to_string(mode));
    EXPECT_EQ(doc[i].at("modes").get<std::vector<std::string>>(), modes);
    // A line of its own: the name, then the size.
    bool found = false;
    std::istringstream lines(text.out);
    for (std::string line; std::getline(lines, line);)
      found = found || (line.rfind(std::string(row.name) + " ", 0) == 0 &&
                        line.find(" " + std::to_string(row.record_bytes) + " bytes") != std::string::npos);
    EXPECT_TRUE(found) << row.name << "\n" << text.out;
  }
  EXPECT_NE(text.out.find("  modes   per-token\n  reader  b12x GLM_NEXT"), std::string::npos) << text.out;
}

TEST_F(CliKvTest, LatentOnlyInputDequantizesWithZeroRope) {
  const std::vector<float> latent(m_values.begin(), m_values.begin() + 3 * 512);
  const fs::path input = write_npy("latent.npy", {3, 512}, latent);
  ASSERT_EQ(jitcache({"kv", "quantize", "--input", p(input), "--out", p(dir() / "r.bin")}).code, 0);
  ASSERT_EQ(
      jitcache({"kv", "dequantize", "--input", p(dir() / "r.bin"), "--out", p(dir() / "y.npy")})
          .code,
      0);
  const auto y = npy::read_float32(dir() / "y.npy", 2);
  ASSERT_OK(y);
  ASSERT_EQ(y->values.size(), 3u * 576);
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t c = 512; c < 576; ++c) EXPECT_EQ(y->values[t * 576 + c], 0.0f);
}

TEST_F(CliKvTest, ErrorJsonIsOneDocumentWithTheLibrarysNumbers) {
  const Outcome e =
      jitcache({"kv", "error", "--input", p(m_input), "--calibrated", "--rope", "fp8", "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "");
  const nlohmann::json doc = nlohmann::json::parse(e.out);  // throws (fails) unless one document
  const auto expected =
      kv::measure_error(m_values, kv::k_row_dim,
                        kv::ErrorOptions{kv::ScaleSource::calibrated, {}, RecordFormat::b12x_368, 1});
  ASSERT_OK(expected);
  EXPECT_EQ(doc.at("input"), p(m_input));
  EXPECT_EQ(doc.at("tokens"), k_tokens);
  EXPECT_EQ(doc.at("input_columns"), 576);
  EXPECT_EQ(doc.at("format"), "b12x-368");
  EXPECT_EQ(doc.at("rope_format"), "fp8") << "the older name, where the format has one";
  EXPECT_EQ(doc.at("record_bytes"), 368);
  EXPECT_EQ(doc.at("latent_scale").at("source"), "calibrated");
  EXPECT_EQ(doc.at("latent_scale").at("variant"), "dynamic");
  EXPECT_EQ(doc.at("latent_scale").at("value").get<float>(), expected->scale.value);
  EXPECT_EQ(doc.at("latent").at("rel_rms").get<double>(), expected->latent.rel_rms);
  EXPECT_EQ(doc.at("rope").at("rel_rms").get<double>(), expected->rope_part.rel_rms);
  EXPECT_EQ(doc.at("latent").at("max_abs_error").get<double>(), expected->latent.max_abs_error);
  EXPECT_EQ(doc.at("latent").at("elements"), k_tokens * 512);
  EXPECT_EQ(doc.at("latent").at("nonfinite_inputs"), 0);
  EXPECT_GT(expected->latent.rel_rms, 0.0);
}

TEST_F(CliKvTest, ErrorPrintsHumanTextByDefault) {
  const Outcome e = jitcache({"kv", "error", "--input", p(m_input)});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("latent scale   1 (identity), given"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("latent         rel RMS"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("rope           rel RMS 0 "), std::string::npos) << "bf16 RoPE is exact\n"
                                                                        << e.out;
  EXPECT_EQ(e.out.find('{'), std::string::npos);
}

TEST_F(CliKvTest, NonFiniteInputsAreReportedWithAWarning) {
  std::vector<float> values = m_values;
  values[10] = std::numeric_limits<float>::quiet_NaN();
  values[700] = -std::numeric_limits<float>::infinity();
  const fs::path input = write_npy("nan.npy", {k_tokens, 576}, values);
  const Outcome e = jitcache({"kv", "error", "--input", p(input), "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.err.find("warning: " + p(input) + ": 2 non-finite inputs"), std::string::npos)
      << e.err;
  const nlohmann::json doc = nlohmann::json::parse(e.out);
  EXPECT_EQ(doc.at("latent").at("nonfinite_inputs"), 2);
  EXPECT_TRUE(doc.at("latent").at("rel_rms").is_number());
}

TEST_F(CliKvTest, ErrorNamesInputsBeyondBf16Range) {
  std::vector<float> values = m_values;
  values[3] = std::numeric_limits<float>::max();
  values[600] = -std::numeric_limits<float>::max();
  values[11] = std::numeric_limits<float>::quiet_NaN();
  const fs::path input = write_npy("big.npy", {k_tokens, 576}, values);
  const Outcome e = jitcache({"kv", "error", "--input", p(input)});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("out of bf16 range 2 inputs"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("non-finite     1 inputs, 0 outputs"), std::string::npos) << e.out;
  EXPECT_NE(e.err.find("warning: " + p(input) +
                       ": 1 non-finite inputs, 2 inputs out of bf16 range and 0 non-finite "
                       "outputs are left out of the error sums"),
            std::string::npos)
      << e.err;
  const Outcome j = jitcache({"kv", "error", "--input", p(input), "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc.at("latent").at("out_of_bf16_range"), 2);
  EXPECT_EQ(doc.at("latent").at("nonfinite_inputs"), 1);
  EXPECT_EQ(doc.at("rope").at("out_of_bf16_range"), 0);
}

TEST_F(CliKvTest, ErrorOfNothingMeasuredExitsOne) {
  std::vector<float> values(2 * 576, std::numeric_limits<float>::max());
  values[0] = std::numeric_limits<float>::infinity();
  const fs::path input = write_npy("huge.npy", {2, 576}, values);
  for (const bool json : {false, true}) {
    std::vector<std::string> args = {"kv", "error", "--input", p(input)};
    if (json) args.push_back("--json");
    const Outcome e = jitcache(args);
    EXPECT_EQ(e.code, 1) << e.out << e.err;
    EXPECT_EQ(e.out, "");
    EXPECT_NE(e.err.find("jitcache: error: " + p(input) +
                         ": nothing measured: every element was left out (1 non-finite inputs, "
                         "1151 inputs out of bf16 range and 0 non-finite outputs)"),
              std::string::npos)
        << e.err;
  }
}

TEST_F(CliKvTest, HelpListsTheSubcommands) {
  const Outcome h = jitcache({"kv", "--help"});
  EXPECT_EQ(h.code, 0);
  for (const char* sub : {"quantize", "dequantize", "error", "formats", "study"})
    EXPECT_NE(h.out.find(sub), std::string::npos) << sub;
}

// ---------------------------------------------------------------------------------------
// Invalid input: exit 1, an error naming the file and the field, nothing written

TEST_F(CliKvTest, MalformedNpyFilesExitOne) {
  std::vector<std::uint8_t> wrong_dtype =
      npy::encode_header(npy::DType::uint8, std::vector<std::uint64_t>{2, 576}).value();
  wrong_dtype.resize(wrong_dtype.size() + 2 * 576);
  std::vector<std::uint8_t> fortran;
  {
    const std::string dict = "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 576), }\n";
    fortran = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<std::uint8_t>(dict.size()), 0};
    fortran.insert(fortran.end(), dict.begin(), dict.end());
    fortran.resize(fortran.size() + 576 * 4);
  }
  std::vector<std::uint8_t> truncated = read_bytes(m_input);
  truncated.resize(truncated.size() - 3);
  struct Case {
    fs::path file;
    const char* expected;
  };
  const Case cases[] = {
      {write_raw("dtype.npy", wrong_dtype),
       "field 'descr': dtype '|u1' (uint8) is not supported; expected '<f4'"},
      {write_raw("fortran.npy", fortran),
       "field 'fortran_order': True (column-major) is not supported"},
      {write_raw("truncated.npy", truncated), "data is truncated"},
      {write_raw("text.npy", {'h', 'i', '\n'}), "not a NumPy .npy file: bad magic"},
      {write_npy("narrow.npy", {4, 100}, std::vector<float>(400)),
       "field 'shape': expected (T, 576) or (T, 512)"},
      {write_npy("flat.npy", {576}, std::vector<float>(576)),
       "field 'shape': expected 2 dimensions, found (576,)"},
  };
  for (const Case& c : cases) {
    for (const char* command : {"quantize", "error"}) {
      std::vector<std::string> args = {"kv", command, "--input", p(c.file)};
      if (std::string(command) == "quantize")
        args.insert(args.end(), {"--out", p(dir() / "out.bin")});
      const Outcome r = jitcache(args);
      EXPECT_EQ(r.code, 1) << command << " " << c.file << "\n" << r.err;
      EXPECT_NE(r.err.find("jitcache: error: " + p(c.file) + ": "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
      EXPECT_FALSE(fs::exists(dir() / "out.bin"));
    }
  }
}

TEST_F(CliKvTest, RecordsOfWrongLengthExitOne) {
  const fs::path records = write_raw("r.bin", std::vector<std::uint8_t>(432 * 2 + 5));
  const Outcome r =
      jitcache({"kv", "dequantize", "--input", p(records), "--out", p(dir() / "y.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(p(records) + ": field 'size': 869 bytes is not a multiple of the 432-byte"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir() / "y.npy"));
  const fs::path fp8 = write_raw("fp8.bin", std::vector<std::uint8_t>(368 * 3));
  const Outcome hint =
      jitcache({"kv", "dequantize", "--input", p(fp8), "--out", p(dir() / "y.npy")});
  EXPECT_EQ(hint.code, 1);
  EXPECT_NE(hint.err.find(p(fp8) + ": field 'size': 1104 bytes is not a multiple of the 432-byte b12x-432 "
                          "record (it is a multiple of the 368-byte b12x-368 record: is --format b12x-368 "
                          "meant?)"),
            std::string::npos)
      << hint.err;
  // Both names, whichever format was asked for.
  const fs::path glm = write_raw("glm.bin", std::vector<std::uint8_t>(304 * 5));
  const Outcome flashmla = jitcache(
      {"kv", "dequantize", "--input", p(glm), "--format", "flashmla-352", "--out", p(dir() / "y.npy")});
  EXPECT_EQ(flashmla.code, 1);
  EXPECT_NE(flashmla.err.find("1520 bytes is not a multiple of the 352-byte flashmla-352 record (it is a "
                              "multiple of the 304-byte b12x-304 record: is --format b12x-304 meant?)"),
            std::string::npos)
      << flashmla.err;
  EXPECT_FALSE(fs::exists(dir() / "y.npy"));
}

// Outputs never replace what is not a regular file, nor an input. Every special file here
// is the test's own, in its temporary directory: the system's /dev/null is never named
// (tests/support/test_regular_file.cpp checks it without any write), so a regression
// could never replace it. The character device is made only where mknod is allowed (root).
TEST_F(CliKvTest, OutputThatIsAFifoASocketOrADeviceIsRefusedAndKept) {
  ASSERT_EQ(::mkfifo(p(dir() / "pipe").c_str(), 0600), 0);
  ASSERT_TRUE(testing::make_unix_socket(dir() / "sock"));
  std::vector<const char*> names = {"pipe", "sock"};
  // The null device's numbers (1, 3): harmless to write, the same kind /dev/null is.
  const bool have_device = ::mknod(p(dir() / "null").c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;
  if (have_device) names.push_back("null");
  const fs::path records = dir() / "r.bin";
  ASSERT_EQ(jitcache({"kv", "quantize", "--input", p(m_input), "--out", p(records)}).code, 0);
  for (const char* name : names) {
    const Outcome q = testing::run_cli_within(
        std::chrono::seconds(30), dir(),
        {"kv", "quantize", "--input", p(m_input), "--out", p(dir() / name)});
    EXPECT_EQ(q.code, 1) << name << "\n" << q.err;
    EXPECT_NE(q.err.find("jitcache: error: " + p(dir() / name) + ": the output exists and is a"),
              std::string::npos)
        << q.err;
    EXPECT_NE(q.err.find("not a regular file; refusing to replace it"), std::string::npos) << q.err;
    const Outcome d = testing::run_cli_within(
        std::chrono::seconds(30), dir(),
        {"kv", "dequantize", "--input", p(records), "--out", p(dir() / name)});
    EXPECT_EQ(d.code, 1) << name << "\n" << d.err;
    EXPECT_NE(d.err.find("refusing to replace it"), std::string::npos) << d.err;
  }
  struct stat st {};
  ASSERT_EQ(::lstat(p(dir() / "pipe").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  ASSERT_EQ(::lstat(p(dir() / "sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode)) << "the socket was replaced";
  if (have_device) {
    ASSERT_EQ(::lstat(p(dir() / "null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced";
  }
}

TEST_F(CliKvTest, OutputThatIsTheInputIsRefused) {
  const std::vector<std::uint8_t> before = read_bytes(m_input);
  ASSERT_EQ(::link(p(m_input).c_str(), p(dir() / "hard.npy").c_str()), 0);
  const fs::path records = dir() / "r.bin";
  ASSERT_EQ(jitcache({"kv", "quantize", "--input", p(m_input), "--out", p(records)}).code, 0);
  const std::vector<std::uint8_t> records_before = read_bytes(records);
  const std::string same_npy[] = {p(m_input), p(dir() / "." / "x.npy"), p(dir() / "hard.npy")};
  for (const std::string& out : same_npy) {
    const Outcome q = jitcache({"kv", "quantize", "--input", p(m_input), "--out", out});
    EXPECT_EQ(q.code, 1) << out << "\n" << q.err;
    EXPECT_NE(q.err.find("jitcache: error: " + out + ": the output is the same file as the input '" +
                         p(m_input) + "'"),
              std::string::npos)
        << q.err;
  }
  ASSERT_TRUE(fs::create_directory(dir() / "sub"));
  const Outcome d2 = jitcache({"kv", "dequantize", "--input", p(records), "--out",
                               p(dir() / "sub" / ".." / "r.bin")});
  EXPECT_EQ(d2.code, 1) << d2.err;
  EXPECT_NE(d2.err.find("the output is the same file as the input"), std::string::npos) << d2.err;
  EXPECT_EQ(read_bytes(m_input), before) << "the input was overwritten";
  EXPECT_EQ(read_bytes(records), records_before) << "the records were overwritten";
}

TEST_F(CliKvTest, FifoAsInputExitsOneQuickly) {
  ASSERT_EQ(::mkfifo(p(dir() / "pipe").c_str(), 0600), 0);
  const std::vector<std::vector<std::string>> commands = {
      {"kv", "quantize", "--input", p(dir() / "pipe"), "--out", p(dir() / "o.bin")},
      {"kv", "dequantize", "--input", p(dir() / "pipe"), "--out", p(dir() / "o.npy")},
      {"kv", "error", "--input", p(dir() / "pipe")},
  };
  for (const auto& args : commands) {
    const Outcome r = testing::run_cli_within(std::chrono::seconds(20), dir(), args);
    EXPECT_EQ(r.code, 1) << args[1] << "\n" << r.err;
    EXPECT_NE(r.err.find(p(dir() / "pipe") + ": not a regular file (a FIFO)"), std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(fs::exists(dir() / "o.bin"));
  EXPECT_FALSE(fs::exists(dir() / "o.npy"));
}

// ---------------------------------------------------------------------------------------
// Usage: exit 2

TEST_F(CliKvTest, UsageErrorsExitTwo) {
  const std::string in = p(m_input), out = p(dir() / "out.bin");
  struct Case {
    std::vector<std::string> args;
    const char* expected;  // in stderr
  };
  const Case cases[] = {
      {{"kv"}, "subcommand"},
      {{"kv", "frobnicate"}, "subcommand"},
      {{"kv", "quantize", "--input", in}, "--out"},
      {{"kv", "quantize", "--out", out}, "--input"},
      {{"kv", "quantize", "--input", in, "--out", out, "--scale", "0"},
       "--scale: the latent scale must be > 0, got 0"},
      {{"kv", "quantize", "--input", in, "--out", out, "--scale", "1e-40"},
       "--scale: the latent scale is outside the normal float32 range, got 1e-40"},
      {{"kv", "error", "--input", in, "--scale", "3.4028236e38"},
       "--scale: the latent scale is outside the normal float32 range"},
      {{"kv", "quantize", "--input", in, "--out", out, "--scale", "-2"}, "--scale"},
      {{"kv", "quantize", "--input", in, "--out", out, "--scale", "1e39"},
       "--scale: the latent scale is outside the normal float32 range, got 1e+39"},
      {{"kv", "quantize", "--input", in, "--out", out, "--scale", "abc"}, "--scale"},
      {{"kv", "quantize", "--input", in, "--out", out, "--rope", "fp4"}, "--rope"},
      {{"kv", "quantize", "--input", in, "--out", out, "--format", "b12x-999"}, "--format"},
      {{"kv", "quantize", "--input", in, "--out", out, "--format", "b12x-368", "--rope", "fp8"}, "excludes"},
      // A layer's scale and a per-token scale at once.
      {{"kv", "quantize", "--input", in, "--out", out, "--format", "b12x-368", "--scale", "0.5",
        "--latent-scale", "per-token"},
       "--scale excludes --latent-scale"},
      {{"kv", "dequantize", "--input", in, "--out", out, "--format", "b12x-368", "--latent-scale", "per-token",
        "--scale", "1"},
       "excludes"},
      {{"kv", "error", "--input", in, "--format", "b12x-368", "--latent-scale", "per-token", "--calibrated"},
       "excludes"},
      {{"kv", "quantize", "--input", in, "--out", out, "--latent-scale", "per-layer"}, "--latent-scale"},
      // Modes a format is not written with, named with the option that asked for them.
      {{"kv", "quantize", "--input", in, "--out", out, "--format", "b12x-432", "--latent-scale", "per-token"},
       "--latent-scale: format b12x-432 is not written with a per-token latent scale (it takes: identity, "
       "dynamic)"},
      {{"kv", "quantize", "--input", in, "--out", out, "--format", "b12x-304", "--scale", "0.5"},
       "--scale: format b12x-304 is not written with a dynamic latent scale (it takes: per-token)"},
      {{"kv", "dequantize", "--input", in, "--out", out, "--format", "flashmla-352", "--latent-scale",
        "per-token"},
       "--latent-scale: format flashmla-352 is not written with a per-token latent scale"},
      {{"kv", "error", "--input", in, "--format", "b12x-304", "--calibrated"},
       "--calibrated: format b12x-304 is not written with a dynamic latent scale"},
      {{"kv", "dequantize", "--input", in, "--out", out, "--scale", "inf"}, "--scale"},
      {{"kv", "error", "--input", in, "--scale", "2", "--calibrated"}, "excludes"},
      {{"kv", "error", "--input", in, "--scale", "nan"}, "--scale"},
      {{"kv", "error", "--input", p(dir() / "absent.npy")}, "absent.npy: cannot open"},
  };
  for (const Case& c : cases) {
    const Outcome r = jitcache(c.args);
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    EXPECT_EQ(r.code, 2) << line << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << line << "\n" << r.err;
    EXPECT_FALSE(fs::exists(out)) << line;
  }
}

}  // namespace
}  // namespace jitcache
