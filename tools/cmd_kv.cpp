// `jitcache kv quantize | dequantize | error`: the NVFP4 record numerics on real KV data,
// on the CPU, through the host executor (runtime/kv/kv_tools.hpp): the GPU's numbers
// without a GPU.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {
namespace {

struct KvArgs {
  std::string input;
  std::string out;
  double scale = 1.0;
  bool calibrated = false;
  std::string rope = "bf16";
  unsigned threads = 0;
  bool json = false;
};

std::string variant_text(const kv::LatentScaleChoice& scale) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.9g (%s)", static_cast<double>(scale.value),
                to_string(scale.variant));
  return buf;
}

// Options every kv subcommand shares, parsed into the library's types.
Result<kv::RecordOptions> record_options(const KvArgs& args) {
  const kv::LatentScaleChoice scale = JC_TRY(kv::choose_latent_scale(args.scale, "--scale"));
  const auto rope = parse_rope_format(args.rope);
  if (!rope)
    return make_error(ErrorCode::invalid_argument,
                      "--rope: expected " + k_record_formats.alternatives() + ", got '" + args.rope + "'");
  return kv::RecordOptions{scale, *rope, args.threads};
}

int run_quantize(const KvArgs& args) {
  const auto options = record_options(args);
  if (!options) return report(options.error());
  const auto summary = kv::quantize_file(args.input, args.out, *options);
  if (!summary) return report(summary.error());
  std::printf(
      "%s: %llu tokens x %zu columns -> %s: %llu bytes (%llu nvfp4_ds_mla records of %d bytes, %s "
      "RoPE), "
      "latent scale %s\n",
      args.input.c_str(), static_cast<unsigned long long>(summary->tokens), summary->input_columns,
      args.out.c_str(), static_cast<unsigned long long>(summary->bytes_written),
      static_cast<unsigned long long>(summary->tokens), record_bytes(options->rope),
      to_string(options->rope), variant_text(options->scale).c_str());
  return k_exit_ok;
}

int run_dequantize(const KvArgs& args) {
  const auto options = record_options(args);
  if (!options) return report(options.error());
  const auto summary = kv::dequantize_file(args.input, args.out, *options);
  if (!summary) return report(summary.error());
  std::printf(
      "%s: %llu nvfp4_ds_mla records (%s RoPE) -> %s: float32 (%llu, 576), latent scale %s\n",
      args.input.c_str(), static_cast<unsigned long long>(summary->tokens),
      to_string(options->rope), args.out.c_str(), static_cast<unsigned long long>(summary->tokens),
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
  const kv::ErrorOptions options{
      args.calibrated ? kv::ScaleSource::calibrated : kv::ScaleSource::given, base->scale,
      base->rope, base->threads};
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
  if (args.json) {
    const nlohmann::json doc = {{"input", args.input},
                                {"tokens", r->tokens},
                                {"input_columns", r->input_columns},
                                {"rope_format", to_string(r->rope)},
                                {"record_bytes", record_bytes(r->rope)},
                                {"latent_scale",
                                 {{"value", r->scale.value},
                                  {"variant", to_string(r->scale.variant)},
                                  {"source", to_string(r->source)}}},
                                {"latent", stats_json(r->latent)},
                                {"rope", stats_json(r->rope_part)}};
    std::printf("%s\n", doc.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("%s: %llu tokens x %zu columns, nvfp4_ds_mla with %s RoPE (%d bytes per token)\n",
              args.input.c_str(), static_cast<unsigned long long>(r->tokens), r->input_columns,
              to_string(r->rope), record_bytes(r->rope));
  std::printf("  %-14s %s, %s\n", "latent scale", variant_text(r->scale).c_str(),
              to_string(r->source));
  print_stats("latent", r->latent);
  print_stats("rope", r->rope_part);
  std::printf("  %-14s %llu inputs, %llu outputs\n", "non-finite",
              static_cast<unsigned long long>(nonfinite_in),
              static_cast<unsigned long long>(nonfinite_out));
  std::printf("  %-14s %llu inputs\n", "out of bf16 range",
              static_cast<unsigned long long>(beyond_bf16));
  return k_exit_ok;
}

void add_common(CLI::App* cmd, KvArgs& args) {
  const std::string layouts = k_record_formats.alternatives([](const RecordFormatRow& row) {
    return std::string(row.name) + " (" + std::to_string(row.record_bytes) + " bytes)";
  });
  cmd->add_option("--rope", args.rope, "RoPE layout of the record: " + layouts)
      ->check(CLI::IsMember(k_record_formats.names()));
  cmd->add_option("--threads", args.threads, "Host threads (0: one per core for large inputs)");
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
      kv->add_subcommand("quantize", "float32 [T, 576] or [T, 512] .npy -> nvfp4_ds_mla records");
  q->add_option("--input", quantize->input,
                "Input .npy (float32 [T, 576], or [T, 512] with zero RoPE)")
      ->required();
  q->add_option("--scale", quantize->scale, "Latent scale s_l (1.0: identity variant)");
  q->add_option("--out", quantize->out, "Output records file (T x record bytes)")->required();
  add_common(q, *quantize);
  context.bind(q, [quantize] { return run_quantize(*quantize); });

  auto dequantize = std::make_shared<KvArgs>();
  CLI::App* d = kv->add_subcommand("dequantize", "nvfp4_ds_mla records -> float32 [T, 576] .npy");
  d->add_option("--input", dequantize->input, "Records file (T x record bytes)")->required();
  d->add_option("--scale", dequantize->scale, "Latent scale s_l the records were written with");
  d->add_option("--out", dequantize->out, "Output .npy")->required();
  add_common(d, *dequantize);
  context.bind(d, [dequantize] { return run_dequantize(*dequantize); });

  auto error = std::make_shared<KvArgs>();
  CLI::App* e =
      kv->add_subcommand("error", "Relative RMS error of the quantize/dequantize round trip");
  e->add_option("--input", error->input, "Input .npy (float32 [T, 576] or [T, 512])")->required();
  CLI::Option* scale =
      e->add_option("--scale", error->scale, "Latent scale s_l (default 1.0: identity)");
  e->add_flag("--calibrated", error->calibrated, "Use s_l = max_abs(latent) / 2688")
      ->excludes(scale);
  e->add_flag("--json", error->json, "One JSON document on stdout");
  add_common(e, *error);
  context.bind(e, [error] { return run_error(*error); });
}

const Registrar k_registrar(70, register_kv);

}  // namespace
}  // namespace jitcache::cli
