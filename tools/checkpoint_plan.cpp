#include "tools/checkpoint_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"

namespace jitcache::cli {

void add_checkpoint_options(CLI::App* cmd, CheckpointArgs& args) {
  cmd->add_option("--checkpoint", args.checkpoint, "Checkpoint directory (holds config.json)")->required();
  cmd->add_option("--scales", args.scales, "Explicit scales override file");
  cmd->add_option("--arch", args.archs, "Target (repeat for several): sm_90, sm_100a, sm_120a, ...")->required();
  add_format_options(cmd, args.format);
}

std::function<void(const GatherProgress&)> gather_progress(bool json) {
  if (json) return {};
  return [](const GatherProgress& p) {
    std::fprintf(stderr, "[%zu/%zu] %s %s (%.0f ms)\n", p.done, p.total, p.label.c_str(),
                 p.compiled ? "compiled" : "cached", p.ms);
  };
}

Result<CheckpointPlan> plan_checkpoint(const CheckpointArgs& args) {
  const std::vector<std::string>& archs = args.archs;
  const FormatArgs& format = args.format;
  ResolveOptions resolve;
  resolve.checkpoint_dir = args.checkpoint;
  if (!args.scales.empty()) resolve.override_file = args.scales;
  const ResolvedScales resolved = JC_TRY(resolve_scales(resolve));
  CheckpointPlan plan;
  for (const std::string& arch : archs) {
    const Target target = JC_TRY(parse_target(arch));
    if (std::find(plan.targets.begin(), plan.targets.end(), target.name) != plan.targets.end()) continue;
    plan.targets.push_back(target.name);
    const VariantPlan variants = JC_TRY(plan_variants(resolved, format.record_format(), target, format.policy()));
    plan.specs.insert(plan.specs.end(), variants.variants.begin(), variants.variants.end());
  }
  return plan;
}

std::string checkpoint_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..")
    name = std::filesystem::absolute(p).lexically_normal().filename().string();
  return name;
}

}  // namespace jitcache::cli
