#include "tools/checkpoint_plan.hpp"

#include <algorithm>
#include <filesystem>

#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"

namespace jitcache::cli {

Result<CheckpointPlan> plan_checkpoint(const std::string& checkpoint, const std::string& scales,
                                       const std::vector<std::string>& archs, const FormatArgs& format) {
  ResolveOptions resolve;
  resolve.checkpoint_dir = checkpoint;
  if (!scales.empty()) resolve.override_file = scales;
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
