#include "runtime/scales/checkpoint_files.hpp"

#include <variant>

#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/env.hpp"
#include "support/text.hpp"

namespace jitcache::scales {

namespace fs = std::filesystem;

CheckpointFiles checkpoint_files(const fs::path& checkpoint_dir, const std::optional<fs::path>& override_file,
                                 EnvOverride env) {
  CheckpointFiles files;
  const fs::path config_path = checkpoint_dir / "config.json";
  files.inputs.push_back(config_path);
  // The override precedence of resolve_scales: a non-blank argument, else the variable.
  if (override_file && !text::is_blank(override_file->native())) {
    files.inputs.push_back(*override_file);
  } else if (env == EnvOverride::read) {
    if (auto value = env::get(env::vllm_nvfp4_mla_scales_file)) files.inputs.emplace_back(*value);
  }
  const auto config = read_checkpoint_config(checkpoint_dir);
  if (!config || !config->scales_field) return files;
  const auto field = parse_checkpoint_field(*config->scales_field, config->path.string());
  if (!field) return files;
  if (const auto* reference = std::get_if<SidecarReference>(&*field)) {
    // Where the resolver reads it (a path that escapes the checkpoint is refused there).
    files.pinned.push_back(PinnedFile{checkpoint_dir / reference->file, reference->sha256, config_path.string(),
                                      k_max_scales_file_bytes});
  }
  return files;
}

}  // namespace jitcache::scales
