// `jitcache kv quantize | dequantize | error | formats`: the NVFP4 record numerics of every
// record format on real KV data, on the CPU, through the host executor
// (runtime/kv/kv_tools.hpp): the GPU's numbers without a GPU.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "tools/cli.hpp"
#include "tools/format_options.hpp"

namespace jitcache::cli {
namespace {

struct KvArgs {
  std::string input;
  std::string out;
  double scale = 1.0;
  const CLI::Option* scale_option = nullptr;  // whether --scale was given
  bool calibrated = false;
  FormatArgs format;
  unsigned threads = 0;
  bool json = false;
};

std::string variant_text(const kv::LatentScaleChoice& scale) {
  if (scale.variant == LatentScale::per_token) return "per-token (each record's own s_t)";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.9g (%s)", static_cast<double>(scale.value),
                to_string(scale.variant));
  return buf;
}

// Options every kv subcommand shares, parsed into the library's types. The latent scale:
// --scale S (identity for 1.0, else dynamic), else per-token when --latent-scale asks for
// it or the format takes nothing else (b12x-304), else identity. CLI11 refuses --scale
// with --latent-scale; a --scale the format does not take is refused here, naming both.
Result<kv::RecordOptions> record_options(const KvArgs& args) {
  const RecordFormat format = args.format.record_format();
  const bool scale_given = args.scale_option != nullptr && args.scale_option->count() > 0;
  kv::LatentScaleChoice scale;
  if (scale_given || args.format.policy() == LatentPolicy::per_layer)
    scale = JC_TRY(kv::choose_latent_scale(args.scale, "--scale"));
  else
    scale = kv::per_token_latent_scale();
  if (Status mode = check_format_mode(format, scale.variant); !mode) {
    const char* field = scale_given                          ? "--scale: "
                        : !args.format.latent_scale.empty() ? "--latent-scale: "
                                                             : "--format: ";
    return make_error(ErrorCode::invalid_argument, field + mode.error().message);
  }
  return kv::RecordOptions{scale, format, args.threads};
}

std::string rows_text(std::uint64_t tokens, std::size_t columns) {
  return "(" + std::to_string(tokens) + ", " + std::to_string(columns) + ")";
}

int run_quantize(const KvArgs& args) {
  const auto options = record_options(args);
  if (!options) return report(options.error());
  const auto summary = kv::quantize_file(args.input, args.out, *options);
  if (!summary) return report(summary.error());
  std::printf("%s: %llu tokens x %zu columns -> %s: %llu bytes (%llu %s records of %d bytes), "
              "latent scale %s\n",
              args.input.c_str(), static_cast<unsigned long long>(summary->tokens), summary->input_columns,
              args.out.c_str(), static_cast<unsigned long long>(summary->bytes_written),
              static_cast<unsigned long long>(summary->tokens), to_string(options->format),
              record_bytes(options->format), variant_text(options->scale).c_str());
  return k_exit_ok;
}

int run_dequantize(const KvArgs& args) {
  const auto options = record_options(args);
  if (!options) return report(options.error());
  const auto summary = kv::dequantize_file(args.input, args.out, *options);
  if (!summary) return report(summary.error());
  std::printf("%s: %llu %s records -> %s: float32 %s, latent scale %s\n", args.input.c_str(),
              static_cast<unsigned long long>(summary->tokens), to_string(options->format),
              args.out.c_str(), rows_text(summary->tokens, summary->output_columns).c_str(),
              variant_text(options->scale).c_str());
  return k_exit_ok;
}

// JSON has no infinity: an unbounded relative error is written as null.
nlohmann::json finite_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json stats_json(const kv::ErrorStats& s) {
  return {{"rel_rms", finite_or_null(s.rel_rms)},
          {"max_abs_error", finite_or_null(s.max_abs_error)},
          {"max_abs", s.max_abs},
          {"elements", s.elements},
          {"nonfinite_inputs", s.nonfinite_inputs},
          {"out_of_bf16_range", s.out_of_bf16_range},
          {"nonfinite_outputs", s.nonfinite_outputs}};
}

void print_stats(const char* part, const kv::ErrorStats& s) {
  std::printf("  %-14s rel RMS %-12.6g max abs error %-12.6g max |x| %-12.6g (%llu elements)\n",
              part, s.rel_rms, s.max_abs_error, s.max_abs,
              static_cast<unsigned long long>(s.elements));
}

int run_error(const KvArgs& args) {
  auto base = record_options(args);
  if (!base) return report(base.error());
  if (args.calibrated) {
    if (Status mode = check_format_mode(base->format, LatentScale::dynamic); !mode)
      return report(make_error(ErrorCode::invalid_argument, "--calibrated: " + mode.error().message).error());
  }
  const kv::ErrorOptions options{
      args.calibrated ? kv::ScaleSource::calibrated : kv::ScaleSource::given, base->scale,
      base->format, base->threads};
  const auto r = kv::measure_error_file(args.input, options);
  if (!r) return report(r.error());
  const std::uint64_t nonfinite_in = r->latent.nonfinite_inputs + r->rope_part.nonfinite_inputs;
  const std::uint64_t beyond_bf16 = r->latent.out_of_bf16_range + r->rope_part.out_of_bf16_range;
  const std::uint64_t nonfinite_out = r->latent.nonfinite_outputs + r->rope_part.nonfinite_outputs;
  char excluded[160];
  std::snprintf(excluded, sizeof excluded,
                "%llu non-finite inputs, %llu inputs out of bf16 range and %llu non-finite outputs",
                static_cast<unsigned long long>(nonfinite_in),
                static_cast<unsigned long long>(beyond_bf16),
                static_cast<unsigned long long>(nonfinite_out));
  // An error of nothing is no error of 0: a result must have measured something.
  if (r->latent.elements + r->rope_part.elements == 0)
    return report(make_error(ErrorCode::invalid_input,
                             args.input + ": nothing measured: every element was left out (" +
                                 excluded + "); there is no error to report")
                      .error());
  if (nonfinite_in + beyond_bf16 + nonfinite_out > 0)
    std::fprintf(stderr, "jitcache: warning: %s: %s are left out of the error sums\n",
                 args.input.c_str(), excluded);
  const RecordFormatRow& format = k_record_formats[r->format];
  const bool has_rope = kv::output_columns(r->format) > kv::k_latent_dim;
  if (args.json) {
    // "rope_format": the older name (bf16 / fp8) where the format has one; "rope": null
    // for a format that stores no RoPE.
    const nlohmann::json doc = {
        {"input", args.input},
        {"tokens", r->tokens},
        {"input_columns", r->input_columns},
        {"format", format.name},
        {"rope_format", format.rope_alias != nullptr ? nlohmann::json(format.rope_alias) : nullptr},
        {"record_bytes", format.record_bytes},
        {"latent_scale",
         {{"value", r->scale.value}, {"variant", to_string(r->scale.variant)}, {"source", to_string(r->source)}}},
        {"latent", stats_json(r->latent)},
        {"rope", has_rope ? stats_json(r->rope_part) : nlohmann::json(nullptr)}};
    std::printf("%s\n", doc.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("%s: %llu tokens x %zu columns, %s records (%d bytes per token)\n", args.input.c_str(),
              static_cast<unsigned long long>(r->tokens), r->input_columns, format.name, format.record_bytes);
  std::printf("  %-14s %s, %s\n", "latent scale", variant_text(r->scale).c_str(),
              to_string(r->source));
  print_stats("latent", r->latent);
  if (has_rope)
    print_stats("rope", r->rope_part);
  else
    std::printf("  %-14s none: %s records hold no RoPE\n", "rope", format.name);
  std::printf("  %-14s %llu inputs, %llu outputs\n", "non-finite",
              static_cast<unsigned long long>(nonfinite_in),
              static_cast<unsigned long long>(nonfinite_out));
  std::printf("  %-14s %llu inputs\n", "out of bf16 range",
              static_cast<unsigned long long>(beyond_bf16));
  return k_exit_ok;
}

// --format / --rope / --latent-scale and --threads; `scale` (--scale), when given, is
// refused together with --latent-scale.
void add_common(CLI::App* cmd, KvArgs& args, CLI::Option* scale) {
  add_format_options(cmd, args.format);
  cmd->get_option("--latent-scale")
      ->description("per-token: each token's own s_t, written into its record and read from there "
                    "(b12x-368; b12x-304 is always per-token). Default: --scale");
  if (scale != nullptr) {
    args.scale_option = scale;
    scale->excludes(cmd->get_option("--latent-scale"));
  }
  cmd->add_option("--threads", args.threads, "Host threads (0: one per core for large inputs)");
}

std::string modes_of(const RecordFormatRow& row) {
  std::string modes;
  for (const LatentScaleRow& mode : k_latent_scales.rows)
    if (allows(row, mode.value)) modes += std::string(modes.empty() ? "" : ", ") + mode.name;
  return modes;
}

int run_formats(bool json) {
  if (json) {
    nlohmann::json doc = nlohmann::json::array();
    for (const RecordFormatRow& row : k_record_formats.rows) {
      nlohmann::json modes = nlohmann::json::array();
      for (const LatentScaleRow& mode : k_latent_scales.rows)
        if (allows(row, mode.value)) modes.push_back(mode.name);
      doc.push_back({{"name", row.name},
                     {"rope_alias", row.rope_alias != nullptr ? nlohmann::json(row.rope_alias) : nullptr},
                     {"record_bytes", row.record_bytes},
                     {"output_columns", kv::output_columns(row.value)},
                     {"page_size", row.page_size},
                     {"layout", row.summary},
                     {"modes", modes},
                     {"reader", row.reader}});
    }
    std::printf("%s\n", doc.dump(2).c_str());
    return k_exit_ok;
  }
  for (const RecordFormatRow& row : k_record_formats.rows) {
    std::printf("%-13s %4d bytes%s\n", row.name, row.record_bytes,
                row.rope_alias != nullptr ? (std::string("  (--rope ") + row.rope_alias + ")").c_str() : "");
    std::printf("  %-7s %s\n  %-7s %s\n  %-7s %s\n", "layout", row.summary, "modes", modes_of(row).c_str(),
                "reader", row.reader);
    if (row.page_size > 1)
      std::printf("  %-7s %d slots: every slot's data part, then every footer; input (T, 512)\n", "page",
                  row.page_size);
  }
  return k_exit_ok;
}

void register_kv(CLI::App& root, Context& context) {
  // Other commands (`kv study`) hang under `kv` too; whoever registers first creates it.
  CLI::App* kv = nullptr;
  for (CLI::App* existing :
       root.get_subcommands([](const CLI::App* app) { return app->get_name() == "kv"; }))
    kv = existing;
  if (kv == nullptr) kv = root.add_subcommand("kv");
  kv->description("Quantize, dequantize and measure KV data on the CPU (host executor)");
  kv->require_subcommand(1);

  auto quantize = std::make_shared<KvArgs>();
  CLI::App* q =
      kv->add_subcommand("quantize", "float32 [T, 576] or [T, 512] .npy -> records of a format");
  q->add_option("--input", quantize->input,
                "Input .npy (float32 [T, 576], or [T, 512] with zero RoPE)")
      ->required();
  CLI::Option* q_scale =
      q->add_option("--scale", quantize->scale, "Latent scale s_l (1.0: identity variant)");
  q->add_option("--out", quantize->out, "Output records file (T x record bytes)")->required();
  add_common(q, *quantize, q_scale);
  context.bind(q, [quantize] { return run_quantize(*quantize); });

  auto dequantize = std::make_shared<KvArgs>();
  CLI::App* d = kv->add_subcommand("dequantize", "records of a format -> float32 [T, 576] (or [T, 512]) .npy");
  d->add_option("--input", dequantize->input, "Records file (T x record bytes)")->required();
  CLI::Option* d_scale =
      d->add_option("--scale", dequantize->scale, "Latent scale s_l the records were written with");
  d->add_option("--out", dequantize->out, "Output .npy ([T, 576], or [T, 512] for a format without RoPE)")
      ->required();
  add_common(d, *dequantize, d_scale);
  context.bind(d, [dequantize] { return run_dequantize(*dequantize); });

  auto error = std::make_shared<KvArgs>();
  CLI::App* e =
      kv->add_subcommand("error", "Relative RMS error of the quantize/dequantize round trip");
  e->add_option("--input", error->input, "Input .npy (float32 [T, 576] or [T, 512])")->required();
  CLI::Option* scale =
      e->add_option("--scale", error->scale, "Latent scale s_l (default 1.0: identity)");
  CLI::Option* calibrated =
      e->add_flag("--calibrated", error->calibrated, "Use s_l = max_abs(latent) / 2688")->excludes(scale);
  add_json_flag(e, error->json);
  add_common(e, *error, scale);
  calibrated->excludes(e->get_option("--latent-scale"));
  context.bind(e, [error] { return run_error(*error); });

  auto formats_json = std::make_shared<bool>(false);
  CLI::App* f = kv->add_subcommand("formats", "The record formats: bytes, layout, latent-scale modes, reader");
  add_json_flag(f, *formats_json);
  context.bind(f, [formats_json] { return run_formats(*formats_json); });
}

const Registrar k_registrar(70, register_kv);

}  // namespace
}  // namespace jitcache::cli
