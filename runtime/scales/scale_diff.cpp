#include "runtime/scales/scale_diff.hpp"

#include <cmath>
#include <system_error>
#include <utility>

#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"

namespace jitcache::scales {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Result<ScaleSet> load_file(const fs::path& path) {
  const std::string name = path.string();
  const std::string bytes = JC_TRY(read_regular_file(path, k_max_scales_file_bytes));
  const ScaleFileContents contents = JC_TRY(parse_scale_file(bytes, name, {}));
  ScaleSet set;
  set.path = path;
  set.kind = ScaleSetKind::file;
  for (std::size_t i = 0; i < contents.scales.size(); ++i) {
    set.scales.push_back(static_cast<float>(contents.scales[i]));
    set.max_abs.push_back(contents.max_abs ? std::optional<double>((*contents.max_abs)[i]) : std::nullopt);
  }
  ScaleProvenance& p = set.provenance;
  p.file = name;
  p.format = contents.format;
  p.sha256 = sha256_hex(bytes);
  p.model_revision = contents.model_revision;
  p.provenance_json = contents.provenance_json;
  return set;
}

Result<ScaleSet> load_checkpoint(const fs::path& path) {
  ResolveOptions options;
  options.checkpoint_dir = path;
  options.env = EnvOverride::ignore;  // the checkpoint's own metadata, never an override
  ResolvedScales resolved = JC_TRY(resolve_scales(options));
  ScaleSet set;
  set.path = path;
  set.kind = ScaleSetKind::checkpoint;
  for (const LayerScale& layer : resolved.layers) {
    if (layer.layer >= resolved.num_hidden_layers) break;
    set.scales.push_back(layer.scale);
    set.max_abs.push_back(layer.max_abs);
  }
  set.provenance = std::move(resolved.provenance);
  return set;
}

json side_json(const ScaleSet& set) {
  const ScaleProvenance& p = set.provenance;
  const auto text_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json side = {{"path", set.path.string()},
               {"kind", to_string(set.kind)},
               {"num_layers", set.scales.size()},
               {"file", text_or_null(p.file)},
               {"sha256", text_or_null(p.sha256)},
               {"model_revision", p.model_revision ? json(*p.model_revision) : json(nullptr)}};
  if (set.kind == ScaleSetKind::checkpoint) {
    side["source"] = to_string(p.source);
    side["checkpoint_form"] = to_string(p.checkpoint_form);
  }
  return side;
}

json optional_number(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

}  // namespace

const char* to_string(ScaleSetKind kind) {
  return kind == ScaleSetKind::checkpoint ? "checkpoint" : "file";
}

Result<ScaleSet> load_scale_set(const fs::path& path) {
  if (path.empty()) return make_error(ErrorCode::invalid_argument, "empty path for a scales file or checkpoint");
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_checkpoint(path);
  return load_file(path);
}

std::vector<int> ScaleDiff::exceeding(double tolerance) const {
  std::vector<int> out;
  for (const LayerChange& l : layers)
    if (l.change > tolerance) out.push_back(l.layer);
  return out;
}

Result<ScaleDiff> diff_scale_sets(ScaleSet a, ScaleSet b) {
  if (a.scales.size() != b.scales.size()) {
    return make_error(ErrorCode::invalid_input,
                      "cannot compare " + a.path.string() + " (" + std::to_string(a.scales.size()) +
                          " layers) with " + b.path.string() + " (" + std::to_string(b.scales.size()) +
                          " layers): the layer counts differ");
  }
  ScaleDiff diff;
  for (std::size_t i = 0; i < a.scales.size(); ++i) {
    LayerChange l;
    l.layer = static_cast<int>(i);
    l.a = a.scales[i];
    l.b = b.scales[i];
    // Both are validated finite positive floats, so the ratio and change are finite.
    l.ratio = static_cast<double>(l.b) / static_cast<double>(l.a);
    l.change = std::fabs(static_cast<double>(l.b) - static_cast<double>(l.a)) / static_cast<double>(l.a);
    l.max_abs_a = a.max_abs[i];
    l.max_abs_b = b.max_abs[i];
    if (l.a != l.b) {
      diff.differing.push_back(l.layer);
      if (!diff.largest || l.change > diff.layers[static_cast<std::size_t>(*diff.largest)].change)
        diff.largest = l.layer;
    }
    diff.layers.push_back(l);
  }
  diff.a = std::move(a);
  diff.b = std::move(b);
  return diff;
}

json to_json(const ScaleDiff& diff, double tolerance) {
  const auto change_json = [](const LayerChange& l) {
    return json{{"layer", l.layer},
                {"a", float_to_json(l.a)},
                {"b", float_to_json(l.b)},
                {"ratio", l.ratio},
                {"change", l.change},
                {"max_abs_a", optional_number(l.max_abs_a)},
                {"max_abs_b", optional_number(l.max_abs_b)}};
  };
  json layers = json::array();
  for (const LayerChange& l : diff.layers) layers.push_back(change_json(l));
  const std::vector<int> exceeding = diff.exceeding(tolerance);
  return {{"a", side_json(diff.a)},
          {"b", side_json(diff.b)},
          {"num_layers", diff.layers.size()},
          {"tolerance", tolerance},
          {"differing_layers", diff.differing},
          {"exceeding_layers", exceeding},
          {"within_tolerance", exceeding.empty()},
          {"largest_change",
           diff.largest ? change_json(diff.layers[static_cast<std::size_t>(*diff.largest)]) : json(nullptr)},
          {"layers", std::move(layers)}};
}

}  // namespace jitcache::scales
