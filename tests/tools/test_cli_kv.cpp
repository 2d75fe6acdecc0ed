// `jitcache kv quantize | dequantize | error` run as a user runs them: exit codes
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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

kv::RecordOptions record_options(float scale, RecordFormat rope) {
  return kv::RecordOptions{kv::choose_latent_scale(scale).value(), rope, 1};
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
  EXPECT_EQ(doc.at("rope_format"), "fp8");
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
  for (const char* sub : {"quantize", "dequantize", "error"})
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
  EXPECT_NE(hint.err.find("is --rope fp8 meant?"), std::string::npos) << hint.err;
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
