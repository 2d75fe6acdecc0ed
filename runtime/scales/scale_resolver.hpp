// Internals of scale resolution that the CLI and tests use beside the public API in
// include/jitcache/scales.hpp: the checkpoint sandbox for sidecar paths, revision
// discovery, and the JSON form of results (one schema, shared by every `--json`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"

namespace jitcache::scales {

// The revision a checkpoint directory names: `<rev>` for a Hugging Face snapshot
// `.../snapshots/<rev>` (as given, else after resolving symlinks), else nullopt.
std::optional<std::string> snapshot_revision(const std::filesystem::path& checkpoint_dir);

// Resolves a sidecar path from config.json. It must be relative, must not leave the
// checkpoint directory lexically, and its real path (symlinks resolved) must lie inside the
// checkpoint directory, or, for a Hugging Face snapshot, inside the repository's blobs/
// directory, where the hub cache keeps every snapshot file's content.
// `config_file` names config.json in error messages.
Result<std::filesystem::path> resolve_sidecar_path(const std::filesystem::path& checkpoint_dir,
                                                   const std::string& relative,
                                                   const std::string& config_file);

// The float as its shortest decimal, as a JSON number ("7.440476e-06", not the double
// expansion of the float).
nlohmann::json float_to_json(float value);

nlohmann::json to_json(const ScaleProvenance& provenance);
nlohmann::json to_json(const ResolvedScales& resolved);
nlohmann::json to_json(const ValidatedScaleFile& validated);

}  // namespace jitcache::scales
