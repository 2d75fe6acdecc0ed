// What the commands that ship kernels for a checkpoint (export, pack) plan: the variants of
// every target given, and the checkpoint's name as a manifest shows it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "tools/format_options.hpp"

namespace jitcache::cli {

struct CheckpointPlan {
  std::vector<std::string> targets;  // in the order given, each once
  std::vector<KernelSpec> specs;     // every target's variants, in that order
};

// Resolves the checkpoint's scales (`scales`: an override file, or empty) and plans the
// variants of each of `archs` in `format`, the plan warm and the runtime use.
Result<CheckpointPlan> plan_checkpoint(const std::string& checkpoint, const std::string& scales,
                                       const std::vector<std::string>& archs, const FormatArgs& format);

// The name a manifest shows for a checkpoint: its directory's, never a path of this machine.
std::string checkpoint_name(const std::string& dir);

}  // namespace jitcache::cli
