// `jitcache scales install` and `jitcache scales diff`: putting a calibrated scales file into
// a checkpoint, and reviewing how two sets of scales differ. Added under the `scales`
// subcommand that cmd_scales.cpp creates (registered after it).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "jitcache/scales.hpp"
#include "runtime/scales/scale_diff.hpp"
#include "runtime/scales/scale_install.hpp"
#include "runtime/scales/scale_json.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "tools/cli.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

using nlohmann::json;

struct InstallArgs {
  std::string file;
  std::string checkpoint;
  bool inline_object = false;
  std::string sidecar;
  bool replace = false;
  std::string revision;
  bool json = false;
  CLI::Option* sidecar_option = nullptr;
};

struct DiffArgs {
  std::string a;
  std::string b;
  double tolerance = 0.0;
  bool all = false;
  bool json = false;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "jitcache: error: %s\n", message.c_str());
  return k_exit_usage;
}

int run_install(const InstallArgs& args) {
  const bool sidecar = args.sidecar_option->count() > 0;
  if (args.inline_object == sidecar)
    return usage_error("scales install: give exactly one of --inline or --sidecar NAME");
  scales::InstallOptions options;
  options.file = args.file;
  options.checkpoint_dir = args.checkpoint;
  options.form = sidecar ? scales::InstallForm::sidecar : scales::InstallForm::inline_object;
  options.sidecar_name = args.sidecar;
  options.replace = args.replace ? scales::ReplaceScales::yes : scales::ReplaceScales::no;
  if (!args.revision.empty()) options.checkpoint_revision = args.revision;
  const auto installed = scales::install_scales(options);
  if (!installed) return report_data(installed.error());
  const scales::InstallResult& r = *installed;
  if (args.json) {
    std::cout << scales::to_json(r).dump(2) << "\n";
    return k_exit_ok;
  }
  if (r.form == scales::InstallForm::sidecar) {
    std::printf("installed %s as sidecar %s (%s, sha256 %s) and referenced it from %s\n",
                args.file.c_str(), r.sidecar_name.c_str(),
                r.sidecar_written ? "written" : "already there with these bytes", r.sha256.c_str(),
                r.config_file.c_str());
  } else {
    std::printf("installed %s (sha256 %s) inline into %s\n", args.file.c_str(), r.sha256.c_str(),
                r.config_file.c_str());
  }
  if (r.previous_form == CheckpointForm::sidecar) {
    std::printf("replaced the previous scales: sidecar %s%s\n", r.previous_file.c_str(),
                r.previous_sidecar_left ? ", left in place and no longer referenced (delete it "
                                          "yourself if it is not needed)"
                                        : "");
  } else if (r.previous_form == CheckpointForm::inline_object) {
    std::printf("replaced the previous scales: an inline object\n");
  }
  const ResolvedScales& resolved = r.resolved;
  const ScaleProvenance& p = resolved.provenance;
  std::printf("resolves to: %s (%s), file %s, sha256 %s, %d layers (%d + %d draft): %d dynamic, "
              "%d identity\n",
              to_string(p.source), to_string(p.checkpoint_form), p.file.c_str(), p.sha256.c_str(),
              static_cast<int>(resolved.layers.size()), resolved.num_hidden_layers,
              resolved.num_draft_layers, resolved.count(ScaleMode::dynamic),
              resolved.count(ScaleMode::identity));
  return k_exit_ok;
}

std::string side_text(const scales::ScaleSet& set) {
  const ScaleProvenance& p = set.provenance;
  std::string text = set.path.string() + " (";
  if (set.kind == scales::ScaleSetKind::checkpoint) {
    text += "checkpoint: ";
    text += p.source == ScaleSource::checkpoint
                ? std::string(to_string(p.checkpoint_form)) + " " + p.file
                : std::string(to_string(p.source));
  } else {
    text += "scales file";
  }
  if (!p.sha256.empty()) text += ", sha256 " + p.sha256;
  if (p.model_revision) text += ", model_revision " + *p.model_revision;
  return text + ")";
}

std::string number_or_dash(const std::optional<double>& value) {
  return value ? scales::format_number(*value) : std::string("-");
}

std::string float_text(float value) { return scales::float_to_json(value).dump(); }

int run_diff(const DiffArgs& args) {
  if (!std::isfinite(args.tolerance) || args.tolerance < 0)
    return usage_error("scales diff: --tolerance must be a finite number >= 0, got " +
                       scales::format_number(args.tolerance));
  // Anything that keeps the two sides from being compared exits 2: 1 means "they differ".
  auto a = scales::load_scale_set(args.a);
  if (!a) return usage_error(a.error().to_string());
  auto b = scales::load_scale_set(args.b);
  if (!b) return usage_error(b.error().to_string());
  auto diff = scales::diff_scale_sets(std::move(*a), std::move(*b));
  if (!diff) return usage_error(diff.error().to_string());
  const std::vector<int> exceeding = diff->exceeding(args.tolerance);
  const int code = exceeding.empty() ? k_exit_ok : k_exit_findings;
  if (args.json) {
    std::cout << scales::to_json(*diff, args.tolerance).dump(2) << "\n";
    return code;
  }
  std::printf("A: %s\nB: %s\n", side_text(diff->a).c_str(), side_text(diff->b).c_str());
  if (!diff->differing.empty() || args.all) {
    std::printf("%5s  %-14s %-14s %-12s %-12s %-12s %s\n", "layer", "scale A", "scale B",
                "ratio B/A", "change", "max_abs A", "max_abs B");
    for (const scales::LayerChange& l : diff->layers) {
      if (!args.all && l.a == l.b) continue;
      std::printf("%5d  %-14s %-14s %-12.9g %-12.6g %-12s %s\n", l.layer, float_text(l.a).c_str(),
                  float_text(l.b).c_str(), l.ratio, l.change, number_or_dash(l.max_abs_a).c_str(),
                  number_or_dash(l.max_abs_b).c_str());
    }
  }
  const std::size_t total = diff->layers.size();
  std::string summary = std::to_string(total) + " layers: ";
  if (diff->differing.empty()) {
    summary += "identical";
  } else {
    const scales::LayerChange& l = diff->layers[static_cast<std::size_t>(*diff->largest)];
    char largest[160];
    std::snprintf(largest, sizeof largest, "largest change %.6g (%.4g%%) at layer %d, %s -> %s, ratio %.9g",
                  l.change, 100.0 * l.change, l.layer, float_text(l.a).c_str(),
                  float_text(l.b).c_str(), l.ratio);
    summary += std::to_string(diff->differing.size()) +
               (diff->differing.size() == 1 ? " differs; " : " differ; ") + largest;
  }
  summary += "; tolerance " + scales::format_number(args.tolerance) + ": ";
  summary += exceeding.empty() ? std::string("within")
                               : std::to_string(exceeding.size()) + " layer" +
                                     (exceeding.size() == 1 ? "" : "s") + " above it";
  std::printf("%s\n", summary.c_str());
  return code;
}

void register_scales_edit(CLI::App& root, Context& context) {
  CLI::App* scales_command = root.get_subcommand("scales");

  auto [install, install_args] = add_subcommand(
      *scales_command, context, "install",
      "Write a scales file into a checkpoint's config.json (inline or as a sidecar)", run_install);
  install->add_option("file", install_args.file, "The nvfp4_ds_mla_outer_scale_v1 file")->required();
  install->add_option("--checkpoint", install_args.checkpoint, "Checkpoint directory (with config.json)")
      ->required();
  install->add_flag("--inline", install_args.inline_object, "Put the v1 object itself into config.json");
  install_args.sidecar_option = install->add_option(
      "--sidecar", install_args.sidecar,
      "Copy the file to NAME (relative, inside the checkpoint) and reference it with its sha256");
  install->add_flag("--replace", install_args.replace,
                    "Replace existing scales (an old sidecar of another name is left in place)");
  install->add_option("--revision", install_args.revision,
                      "Checkpoint revision to check model_revision against (default: the "
                      "snapshots/<rev> directory name, if any)");
  add_json_flag(install, install_args.json);

  auto [diff, diff_args] = add_subcommand(*scales_command, context, "diff",
                                          "Compare two scales files or checkpoints layer by layer: exit 1 when a "
                                          "layer changes by more than --tolerance",
                                          run_diff);
  diff->add_option("a", diff_args.a, "A scales file or checkpoint directory (the reference)")->required();
  diff->add_option("b", diff_args.b, "A scales file or checkpoint directory")->required();
  diff->add_option("--tolerance", diff_args.tolerance,
                   "Largest relative change |B-A|/A allowed per layer (default 0: any change)");
  diff->add_flag("--all", diff_args.all, "List every layer, not only those that differ");
  diff->add_flag("--json", diff_args.json, "One JSON document on stdout, with every layer");
}

// After cmd_scales.cpp (60), which creates the `scales` subcommand.
const Registrar k_registrar(62, register_scales_edit);

}  // namespace
}  // namespace jitcache::cli
