// Comparing two sets of per-layer outer scales (`jitcache scales diff`), for reviewing a
// recalibration: each side is a v1 scales file or a checkpoint directory (its own metadata,
// resolved as the runtime would, with no override).
//
// Scales are compared as the float32 values the kernels apply, so a file and the checkpoint
// it was installed into compare equal, whatever digits the file spells its doubles with.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"

namespace jitcache::scales {

enum class ScaleSetKind { file, checkpoint };
const char* to_string(ScaleSetKind kind);  // "file" | "checkpoint"

// One side of a comparison: the main layers' scales (draft layers are never calibrated).
struct ScaleSet {
  std::filesystem::path path;  // as given
  ScaleSetKind kind = ScaleSetKind::file;
  std::vector<float> scales;
  std::vector<std::optional<double>> max_abs;  // per layer, where recorded
  // A file: its name, digest, revision and provenance object (source and form unused). A
  // checkpoint: the resolution's provenance (source, form, file and digest of the values).
  ScaleProvenance provenance;
};

// A directory is a checkpoint (resolve_scales, EnvOverride::ignore, no override: the
// identity default gives 1.0 for every layer); anything else is read as a v1 file.
Result<ScaleSet> load_scale_set(const std::filesystem::path& path);

struct LayerChange {
  int layer = 0;
  float a = 0.0f;
  float b = 0.0f;
  double ratio = 1.0;   // b / a
  double change = 0.0;  // |b - a| / a, relative to the first side
  std::optional<double> max_abs_a;
  std::optional<double> max_abs_b;
};

struct ScaleDiff {
  ScaleSet a;
  ScaleSet b;
  std::vector<LayerChange> layers;  // every main layer
  std::vector<int> differing;       // layers whose scales are not equal
  std::optional<int> largest;       // index into layers of the largest change; none if equal

  // Layers whose change is above `tolerance` (strictly).
  std::vector<int> exceeding(double tolerance) const;
};

// Both sides must have the same number of main layers.
Result<ScaleDiff> diff_scale_sets(ScaleSet a, ScaleSet b);

nlohmann::json to_json(const ScaleDiff& diff, double tolerance);

}  // namespace jitcache::scales
