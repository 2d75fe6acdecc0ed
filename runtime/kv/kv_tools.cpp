#include "runtime/kv/kv_tools.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/npy.hpp"
#include "runtime/scales/scale_file.hpp"
#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"

namespace jitcache::kv {
namespace {

// The host executor refuses buffers that are not 16-byte aligned, as the GPU would;
// every buffer here comes from operator new, which guarantees at least this much.
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 16);
static_assert(k_latent_dim == jc::k_latent_dim && k_rope_dim == jc::k_rope_dim &&
              k_row_dim == jc::k_out_dim);

// "432-byte b12x-432 record"
std::string record_label(RecordFormat format) {
  return std::to_string(record_bytes(format)) + "-byte " + to_string(format) + " record";
}

bool has_rope(RecordFormat format) { return output_columns(format) > k_latent_dim; }

// Slots per page: 1, or a page-major format's page (records come in whole pages).
std::int64_t page_slots(RecordFormat format) { return k_record_formats[format].page_size; }
bool page_major(RecordFormat format) { return page_slots(format) > 1; }

// The mode must be one the format is written with, and a per-token choice carries no
// layer scale (the kernels would refuse any launch scale but 1.0).
Status check_mode(const RecordOptions& options) {
  JC_TRY(check_format_mode(options.format, options.scale.variant));
  if (options.scale.variant == LatentScale::per_token && options.scale.value != 1.0f)
    return make_error(ErrorCode::invalid_argument,
                      "latent scale: per-token takes no layer scale (the value must be 1.0), given " +
                          std::to_string(options.scale.value));
  return {};
}

unsigned thread_count(std::int64_t tokens, unsigned requested) {
  if (tokens <= 1) return 1;
  std::int64_t want = requested;
  if (want == 0) {
    const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    want = std::clamp<std::int64_t>(tokens / k_min_tokens_per_thread, 1, cores);
  }
  return static_cast<unsigned>(std::min(want, tokens));
}

// Runs `run(begin, end)` over disjoint token ranges. Each range writes only its own
// records or rows and the kernel body is per token, so the bytes never depend on the
// split.
template <class Run>
Result<jc::u32> run_chunked(std::int64_t tokens, unsigned requested, const Run& run) {
  const unsigned threads = thread_count(tokens, requested);
  if (threads == 1) return run(0, tokens);
  std::vector<Result<jc::u32>> results(threads, jc::u32{0});
  {
    std::vector<std::jthread> workers;
    workers.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) {
      const std::int64_t begin = tokens * i / threads;
      const std::int64_t end = tokens * (i + 1) / threads;
      try {
        workers.emplace_back([&results, &run, i, begin, end] { results[i] = run(begin, end); });
      } catch (const std::system_error&) {
        results[i] = run(begin, end);  // no thread to be had: do this range here
      }
    }
  }
  jc::u32 status = 0;
  for (auto& result : results) {
    if (!result) return std::unexpected(std::move(result.error()));
    status |= *result;
  }
  return status;
}

Status check_status(jc::u32 status, const char* kernel) {
  if (status == 0) return {};
  return make_error(
      ErrorCode::internal,
      std::string("host ") + kernel + " reported kernel status bits " + std::to_string(status));
}

// bf16 rows [T, 576] -> records, token t into slot t.
Result<std::vector<std::uint8_t>> write_records(std::span<const std::uint16_t> rows,
                                                const RecordOptions& options) {
  const auto tokens = static_cast<std::int64_t>(rows.size() / k_row_dim);
  JC_TRY(check_mode(options));
  const auto bytes = static_cast<std::size_t>(record_bytes(options.format));
  // Whole pages: the last page's slots past the tokens stay zero bytes.
  const std::int64_t page = page_slots(options.format);
  const std::int64_t num_slots = (tokens + page - 1) / page * page;
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(num_slots) * bytes);
  std::vector<jc::i64> slots(static_cast<std::size_t>(tokens));
  std::iota(slots.begin(), slots.end(), jc::i64{0});
  const jc::u32 status =
      JC_TRY(run_chunked(tokens, options.threads, [&](std::int64_t begin, std::int64_t end) {
        jc::WriterParams params{};
        params.kv_c = rows.data() + begin * k_row_dim;
        params.kv_c_stride = k_row_dim;
        if (has_rope(options.format)) {  // a format without RoPE reads none
          params.k_pe = rows.data() + begin * k_row_dim + k_latent_dim;
          params.k_pe_stride = k_row_dim;
        }
        params.slot_mapping = slots.data() + begin;
        params.num_tokens = end - begin;
        params.cache = cache.data();
        params.num_slots = num_slots;
        return host_run_writer(options.scale.variant, options.format, params, options.scale.value);
      }));
  JC_TRY(check_status(status, "writer"));
  return cache;
}

// records -> bf16 rows [T, 576], slot t into row t (a format without RoPE leaves the
// RoPE columns zero). `name` stands for the records in errors.
Result<std::vector<std::uint16_t>> gather_records(std::span<const std::uint8_t> records,
                                                  const RecordOptions& options,
                                                  std::string_view name) {
  JC_TRY(check_mode(options));
  const auto bytes = static_cast<std::size_t>(record_bytes(options.format));
  if (const auto page = static_cast<std::size_t>(page_slots(options.format));
      page > 1 && records.size() % bytes == 0 && records.size() % (bytes * page) != 0)
    return make_error(ErrorCode::invalid_input,
                      std::string(name) + ": field 'size': " + std::to_string(records.size()) + " bytes (" +
                          std::to_string(records.size() / bytes) + " records) is not a whole number of " +
                          std::to_string(page) + "-slot pages of the " + record_label(options.format));
  if (records.size() % bytes != 0) {
    std::string fits, meant;
    for (const RecordFormatRow& other : k_record_formats.rows)
      if (other.value != options.format &&
          records.size() % static_cast<std::size_t>(other.record_bytes) == 0) {
        fits += std::string(fits.empty() ? "" : " and the ") + record_label(other.value);
        meant += std::string(meant.empty() ? "--format " : " or --format ") + other.name;
      }
    const std::string hint =
        fits.empty() ? "" : " (it is a multiple of the " + fits + ": is " + meant + " meant?)";
    return make_error(ErrorCode::invalid_input,
                      std::string(name) + ": field 'size': " + std::to_string(records.size()) +
                          " bytes is not a multiple of the " + record_label(options.format) +
                          hint);
  }
  const std::size_t tokens = records.size() / bytes;
  if (tokens > static_cast<std::size_t>(std::numeric_limits<jc::i32>::max()))
    return make_error(ErrorCode::invalid_input,
                      std::string(name) + ": " + std::to_string(tokens) +
                          " records exceed the gather kernel's int32 slot range");
  // The kernel needs 16-byte aligned records; a caller's span may start anywhere.
  std::vector<std::uint8_t> aligned_copy;
  if (reinterpret_cast<std::uintptr_t>(records.data()) % 16 != 0) {
    aligned_copy.assign(records.begin(), records.end());
    records = aligned_copy;
  }
  std::vector<jc::i32> slots(tokens);
  std::iota(slots.begin(), slots.end(), jc::i32{0});
  std::vector<std::uint16_t> rows(tokens * k_row_dim);
  const auto count = static_cast<std::int64_t>(tokens);
  const jc::u32 status =
      JC_TRY(run_chunked(count, options.threads, [&](std::int64_t begin, std::int64_t end) {
        jc::GatherParams params{};
        params.cache = records.data();
        params.num_slots = count;
        params.slots = slots.data() + begin;
        params.num_rows = end - begin;
        params.out = rows.data() + begin * k_row_dim;
        params.out_stride = k_row_dim;
        return host_run_gather(options.scale.variant, options.format, params, options.scale.value);
      }));
  JC_TRY(check_status(status, "gather"));
  return rows;
}

// A format without RoPE takes the latent only: a RoPE it would drop is refused. A page-major
// format takes its engine's input row of 512 (448 NoPE + 64 RoPE, or 512 dims).
Status check_format_columns(std::size_t columns, RecordFormat format, std::string_view name) {
  if (columns == k_latent_dim || has_rope(format)) return {};
  if (page_major(format))
    return make_error(ErrorCode::invalid_input,
                      std::string(name) + ": field 'shape': " + to_string(format) +
                          " records are written from one row of 512 values per token (its engine's "
                          "input row), so the input must be float32 (T, 512); found " +
                          std::to_string(columns) + " columns");
  return make_error(ErrorCode::invalid_input,
                    std::string(name) + ": field 'shape': " + to_string(format) +
                        " records hold no RoPE, so the input must be float32 (T, 512), the "
                        "latent only; found " +
                        std::to_string(columns) + " columns");
}

Status check_columns(std::span<const std::uint64_t> shape, RecordFormat format,
                     std::string_view name) {
  if (shape[1] != k_row_dim && shape[1] != k_latent_dim)
    return make_error(ErrorCode::invalid_input,
                      std::string(name) +
                          ": field 'shape': expected (T, 576) or (T, 512) float32 "
                          "(latent then RoPE per token), found " +
                          npy::format_shape(shape));
  return check_format_columns(static_cast<std::size_t>(shape[1]), format, name);
}

// bf16 rows [T, 576] -> float32 [T, columns]: a format without RoPE gives 512 columns.
std::vector<float> to_float_rows(std::span<const std::uint16_t> rows, std::size_t columns) {
  const std::size_t tokens = rows.size() / k_row_dim;
  std::vector<float> out(tokens * columns);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t c = 0; c < columns; ++c)
      out[t * columns + c] = jc::bf16_to_float(rows[t * k_row_dim + c]);
  return out;
}

// `source_finite`: whether the float32 the bf16 input was rounded from is finite; a finite
// value that rounded to infinity is beyond bf16's range, not a non-finite input.
void accumulate(ErrorStats& stats, double& sum_err, double& sum_ref, bool source_finite,
                std::uint16_t in, std::uint16_t out) {
  const float x = jc::bf16_to_float(in);
  const float y = jc::bf16_to_float(out);
  if (!std::isfinite(x)) {
    ++(source_finite ? stats.out_of_bf16_range : stats.nonfinite_inputs);
    return;
  }
  if (!std::isfinite(y)) {
    ++stats.nonfinite_outputs;
    return;
  }
  const double d = static_cast<double>(y) - static_cast<double>(x);
  sum_err += d * d;
  sum_ref += static_cast<double>(x) * static_cast<double>(x);
  stats.max_abs_error = std::max(stats.max_abs_error, std::fabs(d));
  stats.max_abs = std::max(stats.max_abs, std::fabs(static_cast<double>(x)));
  ++stats.elements;
}

double relative_rms(const ErrorStats& stats, double sum_err, double sum_ref) {
  if (stats.elements == 0) return std::numeric_limits<double>::quiet_NaN();  // nothing measured
  if (sum_ref > 0.0) return std::sqrt(sum_err / sum_ref);
  // An all-zero reference quantizes to exact zeros; anything else is unbounded error.
  return sum_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
}

}  // namespace

std::size_t output_columns(RecordFormat format) {
  return static_cast<std::size_t>(gathered_row_elems(format));
}

const char* to_string(ScaleSource source) {
  return source == ScaleSource::given ? "given" : "calibrated";
}

Result<LatentScaleChoice> choose_latent_scale(double scale, std::string_view field) {
  // The scales files' own rule, so that a scale refused there is refused here too.
  if (auto problem = scales::latent_scale_problem(scale))
    return make_error(ErrorCode::invalid_argument,
                      std::string(field) + ": the latent scale " + std::move(*problem));
  const auto value = static_cast<float>(scale);
  return LatentScaleChoice{value, value == 1.0f ? LatentScale::identity : LatentScale::dynamic};
}

LatentScaleChoice calibrated_latent_scale(float max_abs) {
  if (!std::isfinite(max_abs) || !(max_abs > 0.0f)) return {};
  const float value = jc::div_rn(max_abs, k_calibration_denominator);
  return LatentScaleChoice{value, value == 1.0f ? LatentScale::identity : LatentScale::dynamic};
}

Result<std::vector<std::uint16_t>> round_to_bf16_rows(std::span<const float> values,
                                                      std::size_t columns) {
  if (columns != k_row_dim && columns != k_latent_dim)
    return make_error(
        ErrorCode::invalid_argument,
        "token matrix: expected 576 or 512 columns, given " + std::to_string(columns));
  if (values.size() % columns != 0)
    return make_error(ErrorCode::invalid_argument,
                      "token matrix: " + std::to_string(values.size()) +
                          " values do not fill rows of " + std::to_string(columns));
  const std::size_t tokens = values.size() / columns;
  std::vector<std::uint16_t> rows(tokens * k_row_dim, 0);  // [T, 512] input: RoPE stays zero
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t c = 0; c < columns; ++c)
      rows[t * k_row_dim + c] = jc::float_to_bf16(values[t * columns + c]);
  return rows;
}

Result<std::vector<std::uint8_t>> quantize(std::span<const float> values, std::size_t columns,
                                           const RecordOptions& options) {
  JC_TRY(check_format_columns(columns, options.format, "token matrix"));
  const std::vector<std::uint16_t> rows = JC_TRY(round_to_bf16_rows(values, columns));
  return write_records(rows, options);
}

Result<std::vector<float>> dequantize(std::span<const std::uint8_t> records,
                                      const RecordOptions& options) {
  const std::vector<std::uint16_t> rows = JC_TRY(gather_records(records, options, "records"));
  return to_float_rows(rows, output_columns(options.format));
}

Result<ErrorReport> measure_error(std::span<const float> values, std::size_t columns,
                                  const ErrorOptions& options) {
  JC_TRY(check_format_columns(columns, options.format, "token matrix"));
  const std::vector<std::uint16_t> rows = JC_TRY(round_to_bf16_rows(values, columns));
  const std::size_t tokens = rows.size() / k_row_dim;
  ErrorReport report;
  report.tokens = tokens;
  report.input_columns = columns;
  report.format = options.format;
  report.source = options.source;
  if (options.source == ScaleSource::calibrated) {
    // max_abs over the finite latent, as a bf16 tensor holds it: an infinity cannot be
    // a calibration, and NaN is ignored as the kernel's amax ignores it.
    float max_abs = 0.0f;
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t c = 0; c < k_latent_dim; ++c) {
        const float x = std::fabs(jc::bf16_to_float(rows[t * k_row_dim + c]));
        if (std::isfinite(x)) max_abs = std::max(max_abs, x);
      }
    report.scale = calibrated_latent_scale(max_abs);
  } else {
    report.scale = options.scale;
  }
  const RecordOptions record_options{report.scale, options.format, options.threads};
  const std::vector<std::uint8_t> records = JC_TRY(write_records(rows, record_options));
  const std::vector<std::uint16_t> round_trip =
      JC_TRY(gather_records(records, record_options, "records"));
  double latent_err = 0, latent_ref = 0, rope_err = 0, rope_ref = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::size_t t = i / k_row_dim, c = i % k_row_dim;
    // Columns past the input's (the zero RoPE of a [T, 512] input) are finite zeros.
    const bool source_finite = c >= columns || std::isfinite(values[t * columns + c]);
    if (c < k_latent_dim)
      accumulate(report.latent, latent_err, latent_ref, source_finite, rows[i], round_trip[i]);
    else if (has_rope(options.format))
      accumulate(report.rope_part, rope_err, rope_ref, source_finite, rows[i], round_trip[i]);
  }
  report.latent.rel_rms = relative_rms(report.latent, latent_err, latent_ref);
  report.rope_part.rel_rms = relative_rms(report.rope_part, rope_err, rope_ref);
  return report;
}

Result<FileSummary> quantize_file(const std::filesystem::path& input,
                                  const std::filesystem::path& output,
                                  const RecordOptions& options) {
  // Before any work: an output that could never be written fails fast, and one that is
  // the input would destroy the data it was made from.
  JC_TRY(check_output_target(output, std::span(&input, 1)));
  const npy::Array<float> array = JC_TRY(npy::read_float32(input, 2));
  JC_TRY(check_columns(array.shape, options.format, input.string()));
  const std::vector<std::uint8_t> records = JC_TRY(quantize(array.values, array.shape[1], options));
  const std::span<const std::uint8_t> parts[] = {records};
  JC_TRY(write_file_atomic(output, parts));
  return FileSummary{array.shape[0], static_cast<std::size_t>(array.shape[1]),
                     output_columns(options.format), records.size()};
}

Result<FileSummary> dequantize_file(const std::filesystem::path& input,
                                    const std::filesystem::path& output,
                                    const RecordOptions& options) {
  JC_TRY(check_output_target(output, std::span(&input, 1)));
  // No cap of its own: a records file is as large as the dump it was made from.
  const std::vector<std::uint8_t> records =
      JC_TRY(read_regular_file_bytes(input, std::numeric_limits<std::size_t>::max()));
  JC_TRY(check_mode(options));
  const std::vector<std::uint16_t> rows = JC_TRY(gather_records(records, options, input.string()));
  const std::size_t columns = output_columns(options.format);
  const std::vector<float> values = to_float_rows(rows, columns);
  const std::uint64_t shape[] = {values.size() / columns, columns};
  JC_TRY(npy::write_float32(output, shape, values));
  return FileSummary{shape[0], columns, columns,
                     values.size() * sizeof(float)};
}

Result<ErrorReport> measure_error_file(const std::filesystem::path& input,
                                       const ErrorOptions& options) {
  const npy::Array<float> array = JC_TRY(npy::read_float32(input, 2));
  JC_TRY(check_columns(array.shape, options.format, input.string()));
  return measure_error(array.values, array.shape[1], options);
}

}  // namespace jitcache::kv
