#include "runtime/kv/npy.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using Bytes = std::vector<std::uint8_t>;

// A .npy file built by hand from a header text, independent of the writer under test.
Bytes make_npy(std::string_view dict, std::size_t data_bytes = 0, int major = 1, int minor = 0) {
  std::string header(dict);
  header += '\n';
  Bytes out = {0x93,
               'N',
               'U',
               'M',
               'P',
               'Y',
               static_cast<std::uint8_t>(major),
               static_cast<std::uint8_t>(minor)};
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(i * 37 + 11));
  return out;
}

std::string f4_dict(std::string_view shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(shape) + ", }";
}

std::string error_of(const Result<npy::Array<float>>& r) {
  return r ? std::string("(no error)") : r.error().message;
}

void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

Bytes slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

std::size_t entries(const std::filesystem::path& dir) {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
}

// ---------------------------------------------------------------------------------------
// Positive paths

using NpyFileTest = testing::TempDirTest;

TEST_F(NpyFileTest, Float32RoundTripIsBitExactAndHeaderIsAligned) {
  std::mt19937_64 rng(testing::test_seed("npy round trip"));
  const std::uint64_t rows = 1 + rng() % 40;
  std::vector<float> values(rows * 576);
  for (float& v : values)
    v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));  // NaNs included
  const std::uint64_t shape[] = {rows, 576};
  const auto path = dir() / "x.npy";
  ASSERT_OK(npy::write_float32(path, shape, values));

  const Bytes bytes = slurp(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  const std::size_t header_len = bytes[8] | (bytes[9] << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + values.size() * 4);

  const auto read = npy::read_float32(path, 2);
  ASSERT_OK(read);
  EXPECT_EQ(read->shape, (std::vector<std::uint64_t>{rows, 576}));
  ASSERT_EQ(read->values.size(), values.size());
  EXPECT_EQ(std::memcmp(read->values.data(), values.data(), values.size() * 4), 0);
  EXPECT_EQ(entries(dir()), 1u) << "the temporary file must be gone";
}

TEST(Npy, HeaderMatchesNumpySaveByteForByte) {
  // What numpy.save(f, numpy.zeros((2, 3), numpy.float32)) writes: 118-byte header.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  Bytes expected = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
  expected.insert(expected.end(), dict.begin(), dict.end());
  expected.insert(expected.end(), 58, ' ');
  expected.push_back('\n');
  const std::uint64_t shape[] = {2, 3};
  const auto header = npy::encode_header(npy::DType::float32, shape);
  ASSERT_OK(header);
  EXPECT_EQ(*header, expected);
}

TEST(Npy, ReadsFormatVersions2And3) {
  for (const int major : {2, 3}) {
    const Bytes bytes = make_npy(f4_dict("(2, 3)"), 24, major);
    const auto array = npy::parse_float32(bytes, "v.npy");
    ASSERT_OK(array);
    EXPECT_EQ(array->shape, (std::vector<std::uint64_t>{2, 3}));
    float first;
    std::memcpy(&first, bytes.data() + bytes.size() - 24, 4);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(array->values[0]), std::bit_cast<std::uint32_t>(first));
    const auto header = npy::parse_header(bytes, "v.npy");
    ASSERT_OK(header);
    EXPECT_EQ(header->major_version, major);
    EXPECT_EQ(header->data_offset, bytes.size() - 24);
  }
}

TEST(Npy, AcceptsEveryHeaderSpellingPythonAllows) {
  struct Case {
    const char* dict;
    std::vector<std::uint64_t> shape;
  };
  const Case cases[] = {
      {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}", {2, 3}},
      {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", {2, 3}},
      {"  {\n 'descr' :'<f4' ,\t'fortran_order':False,'shape':( 2 ,3 , ) , }   ", {2, 3}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", {2, 3}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", {}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 576), }", {0, 576}},
  };
  for (const Case& c : cases) {
    std::uint64_t count = 1;
    for (auto d : c.shape) count *= d;
    const auto array = npy::parse_float32(make_npy(c.dict, count * 4), "h.npy");
    ASSERT_OK(array);
    EXPECT_EQ(array->shape, c.shape) << c.dict;
    EXPECT_EQ(array->values.size(), count) << c.dict;
  }
}

TEST_F(NpyFileTest, Uint8RoundTripAndByteOrderFreeDescr) {
  const std::vector<std::uint8_t> values = {0, 1, 2, 254, 255, 7};
  const std::uint64_t shape[] = {2, 3};
  ASSERT_OK(npy::write_uint8(dir() / "u.npy", shape, values));
  const auto read = npy::read_uint8(dir() / "u.npy", 2);
  ASSERT_OK(read);
  EXPECT_EQ(read->values, values);
  for (const char* descr : {"|u1", "<u1", "u1"}) {
    const std::string dict =
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (5,), }";
    EXPECT_OK(npy::parse_uint8(make_npy(dict, 5), "u.npy"));
  }
}

TEST_F(NpyFileTest, WriterReplacesAnExistingFileWhole) {
  const auto path = dir() / "x.npy";
  write_bytes(path, Bytes(5000, 0xAB));
  const std::vector<float> values = {1.5f, -2.0f};
  const std::uint64_t shape[] = {2};
  ASSERT_OK(npy::write_float32(path, shape, values));
  const auto read = npy::read_float32(path);
  ASSERT_OK(read);
  EXPECT_EQ(read->values, values);
  EXPECT_EQ(entries(dir()), 1u);
}

TEST(Npy, FormatShapeSpellsPythonTuples) {
  EXPECT_EQ(npy::format_shape({}), "()");
  const std::uint64_t one[] = {3};
  EXPECT_EQ(npy::format_shape(one), "(3,)");
  const std::uint64_t two[] = {3, 576};
  EXPECT_EQ(npy::format_shape(two), "(3, 576)");
}

// ---------------------------------------------------------------------------------------
// Negative paths: each with its own error text.

TEST(NpyErrors, EmptyFile) {
  const auto r = npy::parse_float32(Bytes{}, "e.npy");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_input);
  EXPECT_EQ(r.error().message, "e.npy: empty file: not a NumPy .npy file");
}

TEST(NpyErrors, BadMagic) {
  Bytes bytes = make_npy(f4_dict("(1,)"), 4);
  bytes[1] = 'X';
  EXPECT_EQ(error_of(npy::parse_float32(bytes, "m.npy")),
            "m.npy: not a NumPy .npy file: bad magic: expected '\\x93NUMPY', found '\\x93XUMPY'");
  const Bytes text = {'h', 'e', 'l', 'l', 'o', '\n', '1', '2', '3', '4', '5', '6'};
  EXPECT_NE(error_of(npy::parse_float32(text, "m.npy")).find("bad magic"), std::string::npos);
}

TEST(NpyErrors, TruncatedPreamble) {
  const Bytes bytes = {0x93, 'N', 'U', 'M'};
  EXPECT_EQ(error_of(npy::parse_float32(bytes, "p.npy")),
            "p.npy: truncated: 4 bytes, shorter than the 10-byte .npy preamble");
  const Bytes v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10, 0};
  EXPECT_EQ(error_of(npy::parse_float32(v2, "p.npy")),
            "p.npy: truncated: 10 bytes, shorter than the 12-byte preamble of format version 2.0");
}

TEST(NpyErrors, UnsupportedVersion) {
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("(1,)"), 4, 4, 0), "v.npy")),
            "v.npy: unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
  EXPECT_NE(
      error_of(npy::parse_float32(make_npy(f4_dict("(1,)"), 4, 1, 1), "v.npy")).find("version 1.1"),
      std::string::npos);
  EXPECT_NE(
      error_of(npy::parse_float32(make_npy(f4_dict("(1,)"), 4, 0, 0), "v.npy")).find("version 0.0"),
      std::string::npos);
}

TEST(NpyErrors, TruncatedHeader) {
  Bytes bytes = make_npy(f4_dict("(1,)"));
  bytes.resize(bytes.size() - 10);
  EXPECT_EQ(
      error_of(npy::parse_float32(bytes, "h.npy")),
      "h.npy: header is truncated: header_len declares 58 bytes, only 48 follow the preamble");
}

TEST(NpyErrors, AbsurdHeaderLength) {
  const Bytes bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff, '{'};
  EXPECT_EQ(error_of(npy::parse_float32(bytes, "h.npy")),
            "h.npy: field 'header_len': 4294967295 bytes is absurd (the limit is 1048576)");
}

TEST(NpyErrors, MalformedHeaders) {
  struct Case {
    std::string dict;
    const char* expected;
  };
  const Case cases[] = {
      {"['descr', '<f4']", "expected '{' at the start of the dictionary"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", "expected ':' after key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'shape': (1,), 'fortran_order': False, 'shape': (1,)}",
       "duplicate key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'fortran_order': False, 'shape': (1,)}", "missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (1,)}", "missing key 'fortran_order'"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}",
       "expected ',' or '}' after the value of 'descr'"},
      {"{'descr': '<f4", "unterminated string"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}",
       "escape sequences in strings are not supported"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}",
       "field 'fortran_order' at byte 34: expected True or False"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
       "field 'fortran_order' at byte 34: expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1)}",
       "a one-dimensional shape needs a trailing comma"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1, 2]}",
       "field 'shape' at byte 50: expected a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2)}",
       "dimensions must be non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1.5, 2)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, , 2)}",
       "expected a non-negative integer or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (03,)}", "leading zeros"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
       "absurdly large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
       "unexpected text after the closing '}'"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", "structured dtypes"},
      {"{'descr': 4, 'fortran_order': False, 'shape': (1,)}",
       "field 'descr' at byte 10: expected a dtype string"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
       "expected ',' or '}' after the value of 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,),",
       "expected a key string or '}', found the end"},
      {std::string("{'descr': '<f4',\0 'fortran_order': False, 'shape': (1,)}", 56),
       "expected a key string"},
      {"", "expected '{' at the start of the dictionary, found the end of the header"},
  };
  for (const Case& c : cases) {
    const auto r = npy::parse_float32(make_npy(c.dict, 4), "bad.npy");
    ASSERT_FALSE(r) << c.dict;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(r.error().message.rfind("bad.npy: ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(c.expected), std::string::npos)
        << "header: " << c.dict << "\nerror: " << r.error().message << "\nexpected: " << c.expected;
  }
}

TEST(NpyErrors, WrongDtypeSaysWhatWasFoundAndWhatIsExpected) {
  struct Case {
    const char* descr;
    const char* found;
  };
  const Case cases[] = {
      {"<f8", "dtype '<f8' (little-endian float64)"},
      {">f4", "dtype '>f4' (big-endian float32)"},
      {"<i4", "dtype '<i4' (little-endian int32)"},
      {"<f2", "dtype '<f2' (little-endian float16)"},
      {"|b1", "dtype '|b1' (bool)"},
      {"|O", "dtype '|O' (Python object)"},
      {"<x9", "dtype '<x9' (unknown dtype)"},
      {"=f4", "dtype '=f4' (float32)"},
  };
  for (const Case& c : cases) {
    const std::string dict =
        std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (1,), }";
    EXPECT_EQ(error_of(npy::parse_float32(make_npy(dict, 8), "d.npy")),
              std::string("d.npy: field 'descr': ") + c.found +
                  " is not supported; expected '<f4' (little-endian float32)");
  }
  const auto u8 = npy::parse_uint8(make_npy(f4_dict("(1,)"), 4), "d.npy");
  ASSERT_FALSE(u8);
  EXPECT_EQ(u8.error().message,
            "d.npy: field 'descr': dtype '<f4' (little-endian float32) is not supported; expected "
            "'|u1' (uint8)");
}

TEST(NpyErrors, FortranOrder) {
  const auto r = npy::parse_float32(
      make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), "f.npy");
  EXPECT_EQ(error_of(r),
            "f.npy: field 'fortran_order': True (column-major) is not supported; expected False (C "
            "order); "
            "save with numpy.ascontiguousarray first");
}

TEST(NpyErrors, WrongRank) {
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("(6,)"), 24), "r.npy", 2)),
            "r.npy: field 'shape': expected 2 dimensions, found (6,)");
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("(1, 2, 3)"), 24), "r.npy", 2)),
            "r.npy: field 'shape': expected 2 dimensions, found (1, 2, 3)");
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("()"), 4), "r.npy", 2)),
            "r.npy: field 'shape': expected 2 dimensions, found ()");
}

TEST(NpyErrors, TruncatedData) {
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("(2, 3)"), 20), "t.npy")),
            "t.npy: data is truncated: shape (2, 3) of '<f4' needs 24 bytes after the 70-byte "
            "header, the file "
            "has 20");
  // A huge declared shape is refused from the file size, before any allocation.
  EXPECT_NE(error_of(npy::parse_float32(make_npy(f4_dict("(1000000000, 1000000)"), 16), "t.npy"))
                .find("data is truncated: shape (1000000000, 1000000) of '<f4' needs "
                      "4000000000000000 bytes"),
            std::string::npos);
}

TEST(NpyErrors, TrailingGarbage) {
  EXPECT_EQ(
      error_of(npy::parse_float32(make_npy(f4_dict("(2, 3)"), 28), "g.npy")),
      "g.npy: trailing garbage: 4 bytes after the data (shape (2, 3) of '<f4' ends at byte 94)");
}

TEST(NpyErrors, ShapeProductOverflow) {
  EXPECT_EQ(
      error_of(npy::parse_float32(make_npy(f4_dict("(4294967296, 4294967296, 2)"), 4), "o.npy")),
      "o.npy: field 'shape': (4294967296, 4294967296, 2) holds more elements than 2^64: absurd "
      "size");
  EXPECT_EQ(error_of(npy::parse_float32(make_npy(f4_dict("(4611686018427387904, 2)"), 4), "o.npy")),
            "o.npy: field 'shape': (4611686018427387904, 2) needs more bytes than memory can "
            "address: absurd size");
  // A zero dimension makes any other dimension harmless.
  EXPECT_OK(npy::parse_float32(make_npy(f4_dict("(0, 4611686018427387904, 9)")), "o.npy"));
}

TEST(NpyErrors, EveryTruncationOfAValidFileFailsCleanly) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const std::uint64_t shape[] = {2, 3};
  auto header = npy::encode_header(npy::DType::float32, shape);
  ASSERT_OK(header);
  Bytes file = *header;
  file.resize(file.size() + 24);
  std::memcpy(file.data() + header->size(), values.data(), 24);
  ASSERT_OK(npy::parse_float32(file, "ok.npy"));
  for (std::size_t n = 0; n < file.size(); ++n) {
    const auto r = npy::parse_float32(std::span(file).first(n), "cut.npy");
    ASSERT_FALSE(r) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.error().code, ErrorCode::invalid_input) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("cut.npy: ", 0), 0u);
  }
}

TEST(NpyErrors, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(testing::test_seed("npy corruption"));
  const std::uint64_t shape[] = {3, 5};
  auto header = npy::encode_header(npy::DType::float32, shape);
  ASSERT_OK(header);
  Bytes base = *header;
  base.resize(base.size() + 60, 0x3f);
  int accepted = 0;
  for (int iteration = 0; iteration < 4000; ++iteration) {
    Bytes bytes = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % 80] = static_cast<std::uint8_t>(rng());
    if (rng() % 3 == 0) bytes.resize(rng() % (bytes.size() + 1));
    if (rng() % 5 == 0) bytes.resize(bytes.size() + rng() % 9, 0);
    const auto r = npy::parse_float32(bytes, "fuzz.npy");
    if (r) {
      ++accepted;
      std::uint64_t count = 1;
      for (auto d : r->shape) count *= d;
      EXPECT_EQ(r->values.size(), count);
    } else {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_input) << r.error().message;
      EXPECT_FALSE(r.error().message.empty());
    }
  }
  EXPECT_LT(accepted, 4000);
}

TEST_F(NpyFileTest, ErrorsFromFilesNameThePath) {
  const auto path = dir() / "wrong.npy";
  write_bytes(path, make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8));
  const auto r = npy::read_float32(path);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind(path.string() + ": field 'descr': dtype '<f8'", 0), 0u)
      << r.error().message;
}

TEST_F(NpyFileTest, MissingFileAndDirectory) {
  const auto missing = npy::read_float32(dir() / "absent.npy");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_NE(missing.error().message.find("absent.npy: cannot open"), std::string::npos);
  const auto directory = npy::read_float32(dir());
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.error().code, ErrorCode::invalid_input);
  EXPECT_NE(directory.error().message.find("not a regular file"), std::string::npos);
}

TEST_F(NpyFileTest, WriterRejectsValueCountMismatchAndLeavesNothing) {
  const std::vector<float> values(5);
  const std::uint64_t shape[] = {2, 3};
  const auto r = npy::write_float32(dir() / "x.npy", shape, values);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("shape (2, 3) needs 6 values, given 5"), std::string::npos);
  EXPECT_EQ(entries(dir()), 0u);
}

TEST_F(NpyFileTest, FailedWriteLeavesNoPartialOutput) {
  const std::vector<float> values(6);
  const std::uint64_t shape[] = {2, 3};
  // Missing directory: nothing can be created.
  const auto missing_dir = npy::write_float32(dir() / "no" / "x.npy", shape, values);
  ASSERT_FALSE(missing_dir);
  EXPECT_EQ(missing_dir.error().code, ErrorCode::io);
  EXPECT_NE(missing_dir.error().message.find("cannot create a temporary file"), std::string::npos);
  // The target is a non-empty directory: the rename fails after the data was written,
  // and the temporary file must not stay behind.
  std::filesystem::create_directories(dir() / "taken" / "child");
  const auto taken = npy::write_float32(dir() / "taken", shape, values);
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, ErrorCode::invalid_input);
  EXPECT_NE(taken.error().message.find("the output exists and is a directory"), std::string::npos)
      << taken.error().message;
  EXPECT_EQ(entries(dir()), 1u);
  EXPECT_TRUE(std::filesystem::is_directory(dir() / "taken" / "child"));
}

TEST_F(NpyFileTest, AFifoAsInputIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir() / "x.npy").c_str(), 0600), 0);
  const testing::HangGuard guard(10);
  const auto npy_read = npy::read_float32(dir() / "x.npy");
  ASSERT_FALSE(npy_read);
  EXPECT_EQ(npy_read.error().code, ErrorCode::invalid_input);
  EXPECT_EQ(npy_read.error().message, (dir() / "x.npy").string() + ": not a regular file (a FIFO)");
  const auto raw_read = read_regular_file_bytes(dir() / "x.npy", std::numeric_limits<std::size_t>::max());
  ASSERT_FALSE(raw_read);
  EXPECT_EQ(raw_read.error().message, (dir() / "x.npy").string() + ": not a regular file (a FIFO)");
}

// The writer's own check at the rename, not only the callers': a FIFO or a socket at the
// target is refused and left as it was, and no temporary file stays behind.
TEST_F(NpyFileTest, WriterNeverReplacesAFifoOrASocket) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  ASSERT_TRUE(testing::make_unix_socket(dir() / "sock"));
  const testing::HangGuard guard(10);
  const std::vector<float> values(6, 1.5f);
  const std::uint64_t shape[] = {2, 3};
  for (const char* name : {"pipe", "sock"}) {
    const auto refused = npy::write_float32(dir() / name, shape, values);
    ASSERT_FALSE(refused) << name;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_NE(refused.error().message.find(": the output exists and is a "), std::string::npos)
        << refused.error().message;
    const std::uint8_t bytes[] = {1, 2, 3};
    const std::span<const std::uint8_t> parts[] = {bytes};
    EXPECT_FALSE(write_file_atomic(dir() / name, parts)) << name;
  }
  struct stat st {};
  ASSERT_EQ(::lstat((dir() / "pipe").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat((dir() / "sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(entries(dir()), 2u) << "no temporary file left";
}

TEST_F(NpyFileTest, WriterReplacesARegularFileAndCreatesANewOne) {
  const std::vector<float> values(6, 2.0f);
  const std::uint64_t shape[] = {2, 3};
  ASSERT_OK(npy::write_float32(dir() / "new.npy", shape, values));
  ASSERT_OK(npy::write_float32(dir() / "new.npy", shape, std::vector<float>(6, 3.0f)));
  const auto read = npy::read_float32(dir() / "new.npy");
  ASSERT_OK(read);
  EXPECT_EQ(read->values, std::vector<float>(6, 3.0f));
  EXPECT_EQ(entries(dir()), 1u);
}

}  // namespace
}  // namespace jitcache
