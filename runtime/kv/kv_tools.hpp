// CPU KV tools: quantize real KV data into the NVFP4 MLA records of any format
// (k_record_formats), dequantize records, and
// measure the round-trip error, all through the host executor. They run the GPU kernels'
// own lane bodies, so their numbers are the GPU's numbers.
//
// Data: a token matrix is float32 [T, 576] (512 latent then 64 RoPE) or [T, 512] (zero
// RoPE). A format without RoPE (b12x-304) takes [T, 512] only: a RoPE it cannot store is
// refused rather than dropped. Values are first rounded to bf16 (round to nearest even,
// NaN to the canonical 0x7FFF) exactly as a bf16 tensor would hold them. Records are T x
// record_bytes(format) raw bytes, token t in slot t. Dequantized rows are float32
// [T, gathered_row_elems(format)]: [T, 576], or [T, 512] for b12x-304.
// A page-major format (flashinfer-dsv4-384, flashmla-v41-288) takes its engine's input row,
// [T, 512] (448 NoPE + 64 RoPE, or 512 dims), and its records come in whole pages of 64
// slots: T tokens fill ceil(T / 64) pages, the rest of the last page zero bytes (which
// dequantize to zero rows), and a records file must be whole pages. Non-finite inputs quantize as nvfp4_mla.cuh documents: a NaN
// never becomes a block's amax and encodes as +6 x block scale; an infinity saturates its
// block scale to 448 (its finite block-mates mostly become 0); an infinity in fp8 RoPE
// makes rope_scale infinite, so the token's other RoPE elements decode as 0 * inf = NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"

namespace jitcache::kv {

constexpr std::size_t k_latent_dim = 512;
constexpr std::size_t k_rope_dim = 64;
constexpr std::size_t k_row_dim = k_latent_dim + k_rope_dim;
// Calibration puts the layer's largest block scale at the top of E4M3: 6 * 448.
constexpr float k_calibration_denominator = 2688.0f;
// Below this many tokens per thread, starting threads costs more than it saves.
constexpr std::int64_t k_min_tokens_per_thread = 1024;

// A latent scale and the kernel variant it selects: by scale, identity exactly when the
// scale is 1.0 (the kernel then has no scale operation at all), dynamic otherwise; or
// per-token (value 1.0: the writer stores each token's s_t in its record, the reader
// reads it from there).
struct LatentScaleChoice {
  float value = 1.0f;
  LatentScale variant = LatentScale::identity;
};

constexpr LatentScaleChoice per_token_latent_scale() { return {1.0f, LatentScale::per_token}; }

// Validates a user-given scale by the scales files' rule (scales::latent_scale_problem:
// finite, > 0, a normal float32). Errors are invalid_argument naming `field` ("--scale").
Result<LatentScaleChoice> choose_latent_scale(double scale, std::string_view field = "scale");

// The calibrated scale max_abs / 2688 (fp32, correctly rounded); identity when max_abs
// is 0 or not finite.
LatentScaleChoice calibrated_latent_scale(float max_abs);

// Every function taking these refuses, as ErrorCode::invalid_argument, a mode the format is
// not written with (check_format_mode: b12x-304 per-token only, b12x-432 and flashmla-352
// no per-token).
struct RecordOptions {
  LatentScaleChoice scale;
  RecordFormat format = RecordFormat::b12x_432;
  unsigned threads = 0;  // 0: one per core when T is large enough; results never depend on it
};

// The columns of a dequantized row: 576, or 512 for a format without RoPE.
std::size_t output_columns(RecordFormat format);

// float32 [T, columns] (columns 576 or 512) -> bf16 bits [T, 576], RoPE zero for 512.
Result<std::vector<std::uint16_t>> round_to_bf16_rows(std::span<const float> values,
                                                      std::size_t columns);

// Token matrix -> T x record_bytes(format) bytes.
Result<std::vector<std::uint8_t>> quantize(std::span<const float> values, std::size_t columns,
                                           const RecordOptions& options);
// T x record_bytes(format) bytes -> float32 [T, output_columns(format)]. The size must be
// a multiple of the record size; the error names the format and, when the size fits
// another format's records, asks whether --format <that> was meant. Per-token records
// are read with the s_t each holds.
Result<std::vector<float>> dequantize(std::span<const std::uint8_t> records,
                                      const RecordOptions& options);

// Error of one part (latent or RoPE) of the round trip. Elements whose bf16 input is
// not finite are counted and left out of the sums: non-finite inputs, and finite float32
// inputs beyond bf16's range (they round to infinity), each counted apart; so are finite
// inputs whose output is not (a huge dynamic scale can overflow the restore multiply).
// All are reported instead of turning every statistic into NaN.
struct ErrorStats {
  // sqrt(sum (x^ - x)^2 / sum x^2); 0 when both sums are 0; NaN when no element was
  // measured (elements == 0), which is no result at all.
  double rel_rms = 0.0;
  double max_abs_error = 0.0;  // max |x^ - x|
  double max_abs = 0.0;        // max |x| over finite inputs
  std::uint64_t elements = 0;  // elements in the sums
  std::uint64_t nonfinite_inputs = 0;   // NaN or infinity in the input
  std::uint64_t out_of_bf16_range = 0;  // finite in the input, infinite once rounded to bf16
  std::uint64_t nonfinite_outputs = 0;
};

enum class ScaleSource { given, calibrated };
const char* to_string(ScaleSource source);

struct ErrorOptions {
  ScaleSource source = ScaleSource::given;
  LatentScaleChoice scale;  // used when source == given (per-token included)
  RecordFormat format = RecordFormat::b12x_432;
  unsigned threads = 0;
};

struct ErrorReport {
  std::uint64_t tokens = 0;
  std::size_t input_columns = k_row_dim;
  RecordFormat format = RecordFormat::b12x_432;
  ScaleSource source = ScaleSource::given;
  LatentScaleChoice scale;
  ErrorStats latent;
  ErrorStats rope_part;  // all zero (elements 0) for a format without RoPE
};

Result<ErrorReport> measure_error(std::span<const float> values, std::size_t columns,
                                  const ErrorOptions& options);

// The same on files, with errors naming the file and the field.
struct FileSummary {
  std::uint64_t tokens = 0;
  std::size_t input_columns = k_row_dim;
  std::size_t output_columns = k_row_dim;  // of the .npy dequantize writes
  std::uint64_t bytes_written = 0;  // records, or the float32 data of the .npy
};
Result<FileSummary> quantize_file(const std::filesystem::path& input,
                                  const std::filesystem::path& output,
                                  const RecordOptions& options);
Result<FileSummary> dequantize_file(const std::filesystem::path& input,
                                    const std::filesystem::path& output,
                                    const RecordOptions& options);
Result<ErrorReport> measure_error_file(const std::filesystem::path& input,
                                       const ErrorOptions& options);

}  // namespace jitcache::kv
