// `jitcache scales calibrate`: per-rank capture files in, a checked v1 scales file out.
// The work is runtime/scales/calibration.*; this file parses options, reads files, writes
// the output atomically and prints.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/log.hpp"
#include "runtime/scales/calibration.hpp"
#include "runtime/scales/checkpoint_files.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/atomic_file.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"
#include "tools/cli.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct CalibrateArgs {
  std::vector<std::string> captures;
  std::string out;
  std::vector<std::string> envelope;
  std::optional<std::string> headroom;  // unset: the default; "" given is an error
  std::optional<std::string> agreement;
  std::string checkpoint;
  std::string revision;
  bool json = false;
};

// A number option, read here rather than by CLI11 so that the whole text must be a number
// and the message names the option. Range rules are calibrate's.
Result<double> number_option(const std::optional<std::string>& given, const char* option,
                             double fallback) {
  if (!given) return fallback;
  const std::string& text = *given;
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    return make_error(ErrorCode::invalid_argument,
                      std::string(option) + ": not a number: \"" + text + "\"");
  return value;
}

// Errors of this command: findings in the data and a refused output exit 1, everything
// else (options, missing files, an output in a missing or unwritable directory) 2. With --json the errors also go to stdout as one document.
int fail(const CalibrateArgs& args, const Error& error, std::optional<int> code = std::nullopt) {
  const int exit_code = code ? *code : report(error);
  if (code) std::fprintf(stderr, "jitcache: error: %s\n", error.to_string().c_str());
  if (args.json) {
    ordered_json errors = ordered_json::array();
    std::istringstream lines(error.detail.empty() ? error.message : error.detail);
    for (std::string line; std::getline(lines, line);) errors.push_back(line);
    const ordered_json doc = {{"out", args.out}, {"written", false}, {"errors", errors}};
    std::cout << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return exit_code;
}

Result<std::vector<scales::Capture>> read_captures(const std::vector<std::string>& paths) {
  std::vector<scales::Capture> captures;
  for (const std::string& path : paths) captures.push_back(JC_TRY(scales::read_capture(path)));
  return captures;
}

ordered_json run_summary(const scales::CaptureRun& run, const scales::Agreement& agreement) {
  return ordered_json{{"model", run.model},
                      {"model_revision", run.model_revision},
                      {"dataset", run.dataset},
                      {"context", run.context},
                      {"tp", run.tp},
                      {"captures", run.captures.size()},
                      {"per_rank_agreement",
                       {{"tolerance", agreement.tolerance},
                        {"worst_spread", agreement.worst_spread},
                        {"worst_layer", agreement.worst_layer}}}};
}

int run_calibrate(const CalibrateArgs& args) {
  scales::CalibrationOptions options;
  options.jitcache_version = JITCACHE_VERSION_STRING;
  {
    auto headroom = number_option(args.headroom, "--headroom", scales::k_default_headroom);
    if (!headroom) return fail(args, headroom.error(), k_exit_usage);
    auto tolerance = number_option(args.agreement, "--agreement", scales::k_default_agreement_tolerance);
    if (!tolerance) return fail(args, tolerance.error(), k_exit_usage);
    options.headroom = *headroom;
    options.agreement_tolerance = *tolerance;
  }
  if (!args.revision.empty()) options.revision = args.revision;

  std::vector<fs::path> inputs(args.captures.begin(), args.captures.end());
  inputs.insert(inputs.end(), args.envelope.begin(), args.envelope.end());
  std::vector<PinnedFile> pinned;
  if (!args.checkpoint.empty()) {
    inputs.push_back(fs::path(args.checkpoint) / "config.json");
    pinned = scales::checkpoint_files(args.checkpoint).pinned;
  }
  // An output that is not a regular file, one of the inputs or the checkpoint's pinned
  // sidecar is refused (1) before anything is read.
  if (auto ok = check_output_target(args.out, inputs, pinned); !ok) return fail(args, ok.error());
  // Opened before any work, so an --out in a missing or unwritable directory is reported
  // at once; never committed unless everything below succeeds (it then leaves nothing).
  auto writer = AtomicFileWriter::create(args.out);
  if (!writer) return fail(args, writer.error(), k_exit_usage);

  auto primary = read_captures(args.captures);
  if (!primary) return fail(args, primary.error());
  auto envelope = read_captures(args.envelope);
  if (!envelope) return fail(args, envelope.error());
  if (!args.checkpoint.empty()) {
    auto facts = scales::checkpoint_facts(args.checkpoint, options.revision);
    if (!facts) return fail(args, facts.error());
    options.checkpoint = std::move(*facts);
  }
  auto calibration = scales::calibrate(std::move(*primary), std::move(*envelope), options);
  if (!calibration) return fail(args, calibration.error());
  const scales::Calibration& c = *calibration;
  for (const std::string& warning : c.warnings) log_warning(warning);

  const std::string text = scales::render_scale_file(c.object);
  if (auto ok = writer->write(text); !ok) return fail(args, ok.error(), k_exit_usage);
  if (auto ok = writer->commit(); !ok) return fail(args, ok.error(), k_exit_usage);
  const std::string digest = sha256_hex(text);

  const auto [lo, hi] = std::minmax_element(c.scales.begin(), c.scales.end());
  if (args.json) {
    ordered_json doc = {{"out", args.out},
                        {"written", true},
                        {"sha256", digest},
                        {"num_layers", c.primary.num_layers},
                        {"latent_dim", c.primary.latent_dim},
                        {"primary", run_summary(c.primary, c.primary_agreement)},
                        {"envelope", nullptr},
                        {"headroom", c.headroom},
                        {"scale_min", *lo},
                        {"scale_max", *hi},
                        {"warnings", c.warnings}};
    if (c.envelope) {
      doc["envelope"] = run_summary(*c.envelope, *c.envelope_agreement);
      doc["envelope"]["layers_raised"] = c.layers_raised;
    }
    std::cout << doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
    return k_exit_ok;
  }
  const auto& p = c.primary;
  std::printf("calibrated %d layers (latent_dim %d) of %s revision %s: %s, context %lld, tp %d\n",
              p.num_layers, p.latent_dim, p.model.c_str(), p.model_revision.c_str(),
              p.dataset.c_str(), static_cast<long long>(p.context), p.tp);
  // The exact spread is in the file's provenance; three digits say enough here.
  std::printf("  per-rank agreement  worst spread %.3g at layer %d (tolerance %s)\n",
              c.primary_agreement.worst_spread,
              c.primary_agreement.worst_layer,
              scales::format_number(c.primary_agreement.tolerance).c_str());
  if (c.envelope) {
    std::printf("  envelope            %s revision %s, tp %d: raised %d of %d layers (worst spread %.3g at layer %d)\n",
                c.envelope->model.c_str(), c.envelope->model_revision.c_str(), c.envelope->tp,
                c.layers_raised, p.num_layers,
                c.envelope_agreement->worst_spread,
                c.envelope_agreement->worst_layer);
  } else {
    std::printf("  envelope            none\n");
  }
  std::printf("  headroom            %s\n", scales::format_number(c.headroom).c_str());
  std::printf("  scales              %.6g .. %.6g (max_abs %.6g .. %.6g)\n", *lo, *hi,
              *std::min_element(c.max_abs.begin(), c.max_abs.end()),
              *std::max_element(c.max_abs.begin(), c.max_abs.end()));
  std::printf("wrote %s (sha256 %s)\n", args.out.c_str(), digest.c_str());
  return k_exit_ok;
}

void register_scales_calibrate(CLI::App& root, Context& context) {
  auto [calibrate, args] = add_subcommand(
      *root.get_subcommand("scales"), context, "calibrate",
      "Turn per-rank max_abs capture files into a v1 scales file (agreement, envelope, headroom)", run_calibrate);
  calibrate->add_option("captures", args.captures,
                        "Capture files (nvfp4_ds_mla_capture_v1) of one run: ranks 0..tp-1")
      ->required();
  calibrate->add_option("--out", args.out, "The scales file to write (replaced atomically)")->required();
  calibrate->add_option("--envelope", args.envelope,
                        "Capture files of an independent run on the same base; each layer "
                        "takes the larger maximum");
  calibrate->add_option("--headroom", args.headroom,
                        "Multiply every layer's maximum by H (finite, >= 1; default 1)");
  calibrate->add_option("--agreement", args.agreement,
                        "Largest relative spread across ranks per layer (default 1e-3)");
  calibrate->add_option("--checkpoint", args.checkpoint,
                        "Check the counts (and revision) against this checkpoint's config.json");
  calibrate->add_option("--revision", args.revision,
                        "Checkpoint revision the captures' model_revision must match (default: "
                        "the snapshots/<rev> directory name of --checkpoint, if any)");
  add_json_flag(calibrate, args.json);
}

// After cmd_scales.cpp (60), which makes the `scales` subcommand.
const Registrar k_registrar(61, register_scales_calibrate);

}  // namespace
}  // namespace jitcache::cli
