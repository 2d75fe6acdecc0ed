// The files of a checkpoint that a command writing a file must leave alone: what resolving
// its scales reads, and what its config.json pins by SHA-256. Every CLI command that reads
// a checkpoint and writes a file passes these to check_output_target (support/
// regular_file.hpp) before it reads or writes anything else.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "jitcache/scales.hpp"
#include "support/regular_file.hpp"

namespace jitcache::scales {

struct CheckpointFiles {
  // config.json and the override file in effect (given, or from
  // VLLM_NVFP4_MLA_SCALES_FILE with EnvOverride::read).
  std::vector<std::filesystem::path> inputs;
  // The sidecar config.json references, with the sha256 it pins (check_output_target
  // compares its identity as for an input, and its bytes).
  std::vector<PinnedFile> pinned;
};

// Quiet and best effort: a config.json that cannot be read or parsed here still counts as
// an input, and pins nothing; the command's own read of the checkpoint reports it.
CheckpointFiles checkpoint_files(const std::filesystem::path& checkpoint_dir,
                                 const std::optional<std::filesystem::path>& override_file = std::nullopt,
                                 EnvOverride env = EnvOverride::ignore);

}  // namespace jitcache::scales
