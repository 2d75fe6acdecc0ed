// What the commands that ship kernels for a checkpoint (export, pack) plan: the variants of
// every target given, and the checkpoint's name as a manifest shows it.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "tools/format_options.hpp"

namespace jitcache::cli {

// The options these commands share: --checkpoint, --scales, --arch (repeated), the format.
struct CheckpointArgs {
  std::string checkpoint;
  std::string scales;
  std::vector<std::string> archs;
  FormatArgs format;
};
void add_checkpoint_options(CLI::App* cmd, CheckpointArgs& args);

// One line per variant on stderr as it is gathered; nothing for --json.
std::function<void(const GatherProgress&)> gather_progress(bool json);

struct CheckpointPlan {
  std::vector<std::string> targets;  // in the order given, each once
  std::vector<KernelSpec> specs;     // every target's variants, in that order
};

// Resolves the checkpoint's scales (the override file, when given) and plans the variants of
// each target in the format, the plan warm and the runtime use.
Result<CheckpointPlan> plan_checkpoint(const CheckpointArgs& args);

// The name a manifest shows for a checkpoint: its directory's, never a path of this machine.
std::string checkpoint_name(const std::string& dir);

}  // namespace jitcache::cli
