// `jitcache scales show` and `jitcache scales validate`: per-layer outer scales as the
// runtime would resolve them, and a gate for scales files before they ship in a checkpoint.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "jitcache/scales.hpp"
#include "runtime/scales/scale_json.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "tools/cli.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

using nlohmann::json;

struct ShowArgs {
  std::string checkpoint;
  std::string scales_file;
  std::string revision;
  bool json = false;
};

struct ValidateArgs {
  std::string file;
  std::string checkpoint;
  std::string revision;
  bool json = false;
};

std::string float_text(float value) { return scales::float_to_json(value).dump(); }

void print_provenance(const ResolvedScales& r) {
  const ScaleProvenance& p = r.provenance;
  std::string source = to_string(p.source);
  if (p.source == ScaleSource::explicit_override)
    source += std::string(" (") + to_string(p.override_origin) + ")";
  if (p.source == ScaleSource::checkpoint)
    source += std::string(" (") + to_string(p.checkpoint_form) + ")";
  const auto row = [](const char* key, const std::string& value) {
    std::printf("  %-20s %s\n", key, value.empty() ? "-" : value.c_str());
  };
  std::printf("\nprovenance\n");
  row("checkpoint", r.checkpoint_dir.string());
  row("source", source);
  row("file", p.file);
  row("format", p.format);
  row("sha256", p.sha256);
  row("model_revision", p.model_revision.value_or(""));
  row("checkpoint_revision", p.checkpoint_revision.value_or("(unknown)"));
  if (!p.shadowed_checkpoint_file.empty()) row("shadows", p.shadowed_checkpoint_file);
  if (!p.provenance_json.empty()) {
    const json object = json::parse(p.provenance_json, nullptr, false);
    for (const auto& [key, value] : object.items())
      row(("  " + key).c_str(), value.is_string() ? value.get<std::string>() : value.dump());
  }
  for (const std::string& warning : p.warnings) row("warning", warning);
  std::printf("  %-20s %d (%d + %d draft): %d identity, %d dynamic\n", "layers",
              static_cast<int>(r.layers.size()), r.num_hidden_layers, r.num_draft_layers,
              r.count(ScaleMode::identity), r.count(ScaleMode::dynamic));
}

int run_show(const ShowArgs& args) {
  const auto resolved = resolve_scales({.checkpoint_dir = args.checkpoint,
                                        .override_file = unless_empty<std::filesystem::path>(args.scales_file),
                                        .checkpoint_revision = unless_empty(args.revision)});
  if (!resolved) return report_data(resolved.error());
  if (args.json) {
    std::cout << scales::to_json(*resolved).dump(2) << "\n";
    return k_exit_ok;
  }
  std::printf("%5s  %-14s %-9s %-17s %s\n", "layer", "scale", "mode", "source", "max_abs");
  for (const LayerScale& l : resolved->layers) {
    std::printf("%5d  %-14s %-9s %-17s %s\n", l.layer, float_text(l.scale).c_str(),
                to_string(l.mode), to_string(l.source),
                l.max_abs ? scales::format_number(*l.max_abs).c_str() : "-");
  }
  print_provenance(*resolved);
  return k_exit_ok;
}

int run_validate(const ValidateArgs& args) {
  const auto validated = validate_scales_file({.file = args.file,
                                                .checkpoint_dir = unless_empty<std::filesystem::path>(args.checkpoint),
                                                .checkpoint_revision = unless_empty(args.revision)});
  if (!validated) {
    const int code = report_data(validated.error());
    if (args.json) {
      json errors = json::array();
      std::istringstream lines(validated.error().detail.empty() ? validated.error().message
                                                                : validated.error().detail);
      for (std::string line; std::getline(lines, line);) errors.push_back(line);
      std::cout << json{{"file", args.file}, {"valid", false}, {"errors", errors}}.dump(2) << "\n";
    }
    return code;
  }
  if (args.json) {
    std::cout << scales::to_json(*validated).dump(2) << "\n";
    return k_exit_ok;
  }
  const ScaleFileContents& c = validated->contents;
  std::printf("%s: valid %s: %d layers, latent_dim %d, %s, sha256 %s", args.file.c_str(),
              c.format.c_str(), c.num_layers, c.latent_dim,
              c.max_abs ? "max_abs consistent" : "no max_abs", validated->sha256.c_str());
  if (c.model_revision) std::printf(", model_revision %s", c.model_revision->c_str());
  std::printf("\n");
  return k_exit_ok;
}

void register_scales(CLI::App& root, Context& context) {
  CLI::App* scales = add_command_group(root, "scales", "Show or validate per-layer NVFP4 MLA outer latent scales");

  auto [show, show_args] = add_subcommand(
      *scales, context, "show", "Resolve every layer's scale for a checkpoint (override > checkpoint > identity)",
      run_show);
  show->add_option("--checkpoint", show_args.checkpoint, "Checkpoint directory (with config.json)")->required();
  show->add_option("--scales", show_args.scales_file,
                   "Explicit override scales file (before VLLM_NVFP4_MLA_SCALES_FILE)");
  show->add_option("--revision", show_args.revision,
                   "Checkpoint revision to check model_revision against (default: the "
                   "snapshots/<rev> directory name, if any)");
  add_json_flag(show, show_args.json);

  auto [validate, validate_args] = add_subcommand(
      *scales, context, "validate", "Validate a nvfp4_ds_mla_outer_scale_v1 file: exit 0 valid, 1 invalid",
      run_validate);
  validate->add_option("file", validate_args.file, "The scales file")->required();
  validate->add_option("--checkpoint", validate_args.checkpoint,
                       "Also check it against this checkpoint's model and revision");
  validate->add_option("--revision", validate_args.revision, "Checkpoint revision to check model_revision against");
  add_json_flag(validate, validate_args.json);
}

const Registrar k_registrar(60, register_scales);

}  // namespace
}  // namespace jitcache::cli
