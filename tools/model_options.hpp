// The options of the commands that ask about one checkpoint on one target as the runtime
// prepares it (warm, coverage, explain): --checkpoint, --arch, --scales and the record
// format, and the ModelSpec they stand for.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "jitcache/runtime.hpp"
#include "tools/format_options.hpp"

namespace jitcache::cli {

struct ModelArgs {
  std::string checkpoint;
  std::string scales;
  std::string arch;
  FormatArgs format;
};

inline void add_model_options(CLI::App* cmd, ModelArgs& args, bool checkpoint_required) {
  auto* checkpoint = cmd->add_option("--checkpoint", args.checkpoint, "Checkpoint directory (holds config.json)");
  if (checkpoint_required) checkpoint->required();
  cmd->add_option("--arch", args.arch, "Target: sm_90, sm_100a, sm_120a, ...")->required();
  cmd->add_option("--scales", args.scales, "Explicit scales override file");
  add_format_options(cmd, args.format);
}

inline ModelSpec model_of(const ModelArgs& args) {
  ModelSpec model;
  model.checkpoint = args.checkpoint;
  model.format = args.format.record_format();
  if (args.format.policy() == LatentPolicy::per_token) model.latent_scale = LatentScale::per_token;
  model.target = args.arch;
  if (!args.scales.empty()) model.scales_override = args.scales;
  return model;
}

}  // namespace jitcache::cli
