#include "runtime/scales/scale_resolver.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <system_error>
#include <utility>

#include "jitcache/log.hpp"
#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"
#include "support/text.hpp"

namespace jitcache {

namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(ScaleMode mode) { return enum_name(mode, {"identity", "dynamic"}); }

const char* to_string(ScaleSource source) {
  return enum_name(source, {"override", "checkpoint", "identity-default", "draft-identity"});
}

const char* to_string(OverrideOrigin origin) {
  return enum_name(origin, {"none", "argument", "environment"});
}

const char* to_string(CheckpointForm form) { return enum_name(form, {"none", "inline", "sidecar"}); }

int ResolvedScales::count(ScaleMode mode) const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(),
                                        [mode](const LayerScale& l) { return l.mode == mode; }));
}

namespace scales {
namespace {

bool is_inside(const fs::path& path, const fs::path& root) {
  auto [root_end, path_it] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return root_end == root.end() && path_it != path.end();
}

fs::path without_trailing_slash(fs::path path) {
  if (path.filename().empty() && path.has_parent_path()) path = path.parent_path();
  return path;
}

std::optional<std::string> revision_of(const fs::path& path) {
  const fs::path dir = without_trailing_slash(path);
  if (dir.has_parent_path() && dir.parent_path().filename() == "snapshots" &&
      !dir.filename().empty())
    return dir.filename().string();
  return std::nullopt;
}

// A checkpoint revision and where it came from, for messages.
struct KnownRevision {
  std::string value;
  std::string origin;
};

std::optional<KnownRevision> known_revision(const std::optional<std::string>& explicit_revision,
                                            const fs::path& checkpoint_dir) {
  if (explicit_revision && !explicit_revision->empty())
    return KnownRevision{*explicit_revision, "given explicitly"};
  if (auto rev = snapshot_revision(checkpoint_dir))
    return KnownRevision{*rev, "the snapshots/<revision> directory name"};
  return std::nullopt;
}

std::string revision_mismatch(const std::string& file, const std::string& field_prefix,
                              const std::string& recorded, const KnownRevision& known) {
  return file + ": field '" + field_prefix + "model_revision': \"" + recorded +
         "\" does not match the checkpoint revision \"" + known.value + "\" (" + known.origin +
         "); these scales were calibrated on another revision";
}

Expectations expectations_of(const ModelConfig& model) {
  return Expectations{model.num_hidden_layers, model.kv_lora_rank};
}

std::string describe_checkpoint_metadata(const CheckpointConfig& config) {
  if (!config.scales_field) return {};
  const json& field = *config.scales_field;
  if (field.is_object()) {
    if (const auto it = field.find("file"); it != field.end() && it->is_string())
      return "sidecar " + it->get<std::string>() + " referenced by " + config.path.string();
  }
  return "inline " + std::string(k_scales_config_field) + " in " + config.path.string();
}

void log_resolution(const ResolvedScales& resolved) {
  const ScaleProvenance& p = resolved.provenance;
  std::string source;
  switch (p.source) {
    case ScaleSource::explicit_override:
      source = std::string("explicit override (") +
               (p.override_origin == OverrideOrigin::environment
                    ? std::string(env::vllm_nvfp4_mla_scales_file.name)
                    : std::string("argument")) +
               ")";
      break;
    case ScaleSource::checkpoint:
      source = std::string("checkpoint metadata (") + to_string(p.checkpoint_form) + ")";
      break;
    // draft_identity marks a layer, never a whole model's provenance; both mean "no scales".
    case ScaleSource::identity_default:
    case ScaleSource::draft_identity:
      source = "identity default (no " + std::string(k_scales_config_field) +
               " in config.json, no override)";
      break;
  }
  const int total = static_cast<int>(resolved.layers.size());
  std::string line = "outer scales for " + resolved.checkpoint_dir.string() + ": " + source;
  if (!p.file.empty()) line += ", file " + p.file;
  if (!p.sha256.empty()) line += ", sha256 " + p.sha256;
  line += ", " + std::to_string(total) + " layers (" + std::to_string(resolved.num_hidden_layers) +
          " + " + std::to_string(resolved.num_draft_layers) + " draft), " +
          std::to_string(resolved.count(ScaleMode::identity)) + " identity";
  log_info(line);
}

ResolvedScales build_layers(const fs::path& checkpoint_dir, const ModelConfig& model,
                            const ScaleFileContents* contents, ScaleSource source) {
  ResolvedScales resolved;
  resolved.checkpoint_dir = checkpoint_dir;
  resolved.num_hidden_layers = model.num_hidden_layers;
  resolved.num_draft_layers = model.num_nextn_predict_layers;
  resolved.latent_dim = model.kv_lora_rank;
  resolved.layers.reserve(static_cast<std::size_t>(model.total_layers()));
  for (int layer = 0; layer < model.total_layers(); ++layer) {
    LayerScale ls;
    ls.layer = layer;
    if (layer >= model.num_hidden_layers) {
      ls.source = ScaleSource::draft_identity;
    } else {
      ls.source = source;
      if (contents != nullptr) {
        const auto i = static_cast<std::size_t>(layer);
        ls.scale = static_cast<float>(contents->scales[i]);
        if (contents->max_abs) ls.max_abs = (*contents->max_abs)[i];
      }
    }
    // Decided on the float the kernels use: a value that rounds to 1.0f is an identity.
    ls.mode = ls.scale == 1.0f ? ScaleMode::identity : ScaleMode::dynamic;
    resolved.layers.push_back(ls);
  }
  return resolved;
}

void fill_from_contents(ScaleProvenance& p, const ScaleFileContents& contents) {
  p.format = contents.format;
  p.model_revision = contents.model_revision;
  p.provenance_json = contents.provenance_json;
}

Result<ResolvedScales> resolve_override(const ResolveOptions& options, const CheckpointConfig& config,
                                        const fs::path& path, OverrideOrigin origin,
                                        const std::optional<KnownRevision>& revision) {
  const std::string name = path.string();
  auto bytes = read_regular_file(path, k_max_scales_file_bytes);
  if (!bytes) {
    Error error = std::move(bytes.error());
    if (origin == OverrideOrigin::environment)
      error.message += " (from " + std::string(env::vllm_nvfp4_mla_scales_file.name) + ")";
    return std::unexpected(std::move(error));
  }
  const ScaleFileContents contents =
      JC_TRY(parse_scale_file(*bytes, name, expectations_of(config.model)));

  ScaleProvenance p;
  p.source = ScaleSource::explicit_override;
  p.override_origin = origin;
  p.file = name;
  p.sha256 = sha256_hex(*bytes);
  fill_from_contents(p, contents);
  if (revision) p.checkpoint_revision = revision->value;

  if (revision && contents.model_revision &&
      !revision_matches(*contents.model_revision, revision->value)) {
    const std::string text = revision_mismatch(name, "", *contents.model_revision, *revision);
    if (JC_TRY(env::strict_mode()))
      return make_error(ErrorCode::invalid_input,
                        text + " [an error in strict mode, " +
                            std::string(env::jitcache_strict.name) + "]");
    log_warning("!!! " + text + "; using the override anyway (set " +
                std::string(env::jitcache_strict.name) + "=1 to refuse)");
    p.warnings.push_back(text);
  }
  if (config.scales_field) {
    const std::string shadowed = describe_checkpoint_metadata(config);
    const json& field = *config.scales_field;
    p.shadowed_checkpoint_file =
        field.is_object() && field.contains("file") && field["file"].is_string()
            ? field["file"].get<std::string>()
            : std::string("config.json");
    const std::string text = "explicit override " + name + " (" +
                             (origin == OverrideOrigin::environment
                                  ? std::string(env::vllm_nvfp4_mla_scales_file.name)
                                  : std::string("argument")) +
                             ") shadows the checkpoint's scales metadata (" + shadowed +
                             "); the checkpoint's values are not used";
    log_warning(text);
    p.warnings.push_back(text);
  }
  ResolvedScales resolved =
      build_layers(options.checkpoint_dir, config.model, &contents, ScaleSource::explicit_override);
  resolved.provenance = std::move(p);
  return resolved;
}

Result<ResolvedScales> resolve_checkpoint(const ResolveOptions& options,
                                          const CheckpointConfig& config,
                                          const std::optional<KnownRevision>& revision) {
  const std::string config_name = config.path.string();
  const CheckpointScales field = JC_TRY(parse_checkpoint_field(*config.scales_field, config_name));
  const Expectations expected = expectations_of(config.model);

  ScaleProvenance p;
  p.source = ScaleSource::checkpoint;
  if (revision) p.checkpoint_revision = revision->value;
  ScaleFileContents contents;
  std::string file_for_messages;
  std::string field_prefix;
  if (const auto* inline_object = std::get_if<json>(&field)) {
    field_prefix = std::string(k_scales_config_field) + ".";
    contents = JC_TRY(validate_scale_object(*inline_object, config_name, field_prefix, expected));
    p.checkpoint_form = CheckpointForm::inline_object;
    p.file = "config.json";
    p.sha256 = config.sha256;
    file_for_messages = config_name;
  } else {
    const auto& reference = std::get<SidecarReference>(field);
    const fs::path path =
        JC_TRY(resolve_sidecar_path(options.checkpoint_dir, reference.file, config_name));
    const std::string name = (options.checkpoint_dir / reference.file).string();
    std::string bytes = JC_TRY(read_regular_file(path, k_max_scales_file_bytes, name));
    const std::string digest = sha256_hex(bytes);
    if (digest != reference.sha256) {
      return make_error(ErrorCode::invalid_input,
                        config_name + ": field '" + k_scales_config_field +
                            ".sha256': does not match " + name + " (file has sha256 " + digest +
                            ", config.json pins " + reference.sha256 + ")");
    }
    contents = JC_TRY(parse_scale_file(bytes, name, expected));
    p.checkpoint_form = CheckpointForm::sidecar;
    p.file = reference.file;
    p.sha256 = digest;
    file_for_messages = name;
  }
  fill_from_contents(p, contents);
  if (revision && contents.model_revision &&
      !revision_matches(*contents.model_revision, revision->value)) {
    return make_error(ErrorCode::invalid_input,
                      revision_mismatch(file_for_messages, field_prefix, *contents.model_revision,
                                        *revision));
  }
  ResolvedScales resolved =
      build_layers(options.checkpoint_dir, config.model, &contents, ScaleSource::checkpoint);
  resolved.provenance = std::move(p);
  return resolved;
}

// A near-miss key in config.json (see scales_key_near_misses) is most likely scales the
// publisher meant to ship: a WARNING with a did-you-mean, or an error in strict mode.
Result<std::vector<std::string>> check_near_misses(const CheckpointConfig& config) {
  std::vector<std::string> warnings;
  if (config.near_misses.empty()) return warnings;
  const bool strict = JC_TRY(env::strict_mode());
  for (const KeyNearMiss& miss : config.near_misses) {
    const std::string text = text::shown(config.path) + ": key '" + text::escape_control(miss.found) +
                             "' is not read (did you mean the top-level key '" + miss.expected +
                             "'?); without it the checkpoint's layers get no outer scales";
    if (strict)
      return make_error(ErrorCode::invalid_input,
                        text + " [an error in strict mode, " + std::string(env::jitcache_strict.name) + "]");
    log_warning(text);
    warnings.push_back(text);
  }
  return warnings;
}

}  // namespace

std::optional<std::string> snapshot_revision(const fs::path& checkpoint_dir) {
  std::error_code ec;
  const fs::path given = fs::absolute(checkpoint_dir, ec).lexically_normal();
  if (!ec) {
    if (auto rev = revision_of(given)) return rev;
  }
  const fs::path real = fs::canonical(checkpoint_dir, ec);
  if (!ec) return revision_of(real);
  return std::nullopt;
}

Result<fs::path> resolve_sidecar_path(const fs::path& checkpoint_dir, const std::string& relative,
                                      const std::string& config_file) {
  const std::string field = config_file + ": field '" + k_scales_config_field + ".file': ";
  const fs::path rel(relative);
  if (rel.is_absolute() || rel.has_root_directory() || rel.has_root_name()) {
    return make_error(ErrorCode::unsafe,
                      field + "must be a path relative to the checkpoint directory, got absolute "
                              "path \"" + relative + "\"");
  }
  const fs::path normal = rel.lexically_normal();
  if (normal.empty() || *normal.begin() == "..") {
    return make_error(ErrorCode::unsafe, field + "\"" + relative +
                                             "\" leaves the checkpoint directory (path traversal)");
  }
  if (normal == ".") {
    return make_error(ErrorCode::invalid_input, field + "\"" + relative + "\" names no file");
  }
  std::error_code ec;
  const fs::path root = fs::canonical(checkpoint_dir, ec);
  if (ec) {
    return make_error(ErrorCode::io, checkpoint_dir.string() + ": cannot resolve the checkpoint "
                                                               "directory: " + ec.message());
  }
  const fs::path target = fs::canonical(root / normal, ec);
  if (ec) {
    return make_error(ec == std::errc::no_such_file_or_directory ? ErrorCode::not_found : ErrorCode::io,
                      field + "sidecar \"" + relative + "\" cannot be opened in " + root.string() +
                          ": " + ec.message());
  }
  if (is_inside(target, root)) return target;
  // A Hugging Face snapshot keeps each file as a symlink into the repository's blobs/.
  if (root.parent_path().filename() == "snapshots") {
    const fs::path blobs = fs::canonical(root.parent_path().parent_path() / "blobs", ec);
    if (!ec && is_inside(target, blobs)) return target;
  }
  return make_error(ErrorCode::unsafe,
                    field + "\"" + relative + "\" resolves to " + target.string() +
                        ", outside the checkpoint directory " + root.string() +
                        " (a symlink escapes it)");
}

json float_to_json(float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  double shortest = 0.0;
  std::from_chars(buffer, result.ptr, shortest);
  return shortest;
}

json to_json(const ScaleProvenance& p) {
  json out;
  out["source"] = to_string(p.source);
  out["override_origin"] = to_string(p.override_origin);
  out["checkpoint_form"] = to_string(p.checkpoint_form);
  out["file"] = p.file.empty() ? json(nullptr) : json(p.file);
  out["format"] = p.format.empty() ? json(nullptr) : json(p.format);
  out["sha256"] = p.sha256.empty() ? json(nullptr) : json(p.sha256);
  out["model_revision"] = p.model_revision ? json(*p.model_revision) : json(nullptr);
  out["checkpoint_revision"] = p.checkpoint_revision ? json(*p.checkpoint_revision) : json(nullptr);
  out["provenance"] = p.provenance_json.empty() ? json(nullptr) : json::parse(p.provenance_json, nullptr, false);
  out["shadowed_checkpoint_file"] =
      p.shadowed_checkpoint_file.empty() ? json(nullptr) : json(p.shadowed_checkpoint_file);
  out["warnings"] = p.warnings;
  return out;
}

json to_json(const ResolvedScales& r) {
  json layers = json::array();
  for (const LayerScale& l : r.layers) {
    layers.push_back({{"layer", l.layer},
                      {"scale", float_to_json(l.scale)},
                      {"mode", to_string(l.mode)},
                      {"source", to_string(l.source)},
                      {"max_abs", l.max_abs ? json(*l.max_abs) : json(nullptr)}});
  }
  return {{"checkpoint", r.checkpoint_dir.string()},
          {"num_hidden_layers", r.num_hidden_layers},
          {"num_draft_layers", r.num_draft_layers},
          {"latent_dim", r.latent_dim},
          {"identity_layers", r.count(ScaleMode::identity)},
          {"dynamic_layers", r.count(ScaleMode::dynamic)},
          {"layers", std::move(layers)},
          {"provenance", to_json(r.provenance)}};
}

json to_json(const ValidatedScaleFile& v) {
  const ScaleFileContents& c = v.contents;
  return {{"file", v.file.string()},
          {"valid", true},
          {"sha256", v.sha256},
          {"format", c.format},
          {"num_layers", c.num_layers},
          {"latent_dim", c.latent_dim},
          {"denominator", c.denominator},
          {"has_max_abs", c.max_abs.has_value()},
          {"model_revision", c.model_revision ? json(*c.model_revision) : json(nullptr)},
          {"checkpoint_revision", v.checkpoint_revision ? json(*v.checkpoint_revision) : json(nullptr)},
          {"provenance", c.provenance_json.empty() ? json(nullptr)
                                                   : json::parse(c.provenance_json, nullptr, false)}};
}

namespace {

// One resolution; `config_sha256` is set to the config.json it read, once it has.
Result<ResolvedScales> resolve_once(const ResolveOptions& options, std::string& config_sha256) {
  const CheckpointConfig config = JC_TRY(read_checkpoint_config(options.checkpoint_dir));
  config_sha256 = config.sha256;
  const std::vector<std::string> key_warnings = JC_TRY(scales::check_near_misses(config));
  const auto revision = scales::known_revision(options.checkpoint_revision, options.checkpoint_dir);

  std::optional<fs::path> override_path;
  OverrideOrigin origin = OverrideOrigin::none;
  // Blank means unset, as for VLLM_NVFP4_MLA_SCALES_FILE (env::get): one rule for both.
  if (options.override_file && !text::is_blank(options.override_file->native())) {
    override_path = *options.override_file;
    origin = OverrideOrigin::argument;
  } else if (options.env == EnvOverride::read) {
    if (auto value = env::get(env::vllm_nvfp4_mla_scales_file)) {
      override_path = fs::path(*value);
      origin = OverrideOrigin::environment;
    }
  }

  ResolvedScales resolved;
  if (override_path) {
    resolved = JC_TRY(scales::resolve_override(options, config, *override_path, origin, revision));
  } else if (config.scales_field) {
    resolved = JC_TRY(scales::resolve_checkpoint(options, config, revision));
  } else {
    resolved = scales::build_layers(options.checkpoint_dir, config.model, nullptr,
                                    ScaleSource::identity_default);
    if (revision) resolved.provenance.checkpoint_revision = revision->value;
  }
  auto& warnings = resolved.provenance.warnings;
  warnings.insert(warnings.begin(), key_warnings.begin(), key_warnings.end());
  return resolved;
}

// config.json and the sidecar it pins are two files, read one after the other: an install
// (`jitcache scales install --replace`) that replaces them can land in between, so that
// the sidecar read is newer than the config.json that pins it, although the checkpoint
// resolves at every moment of the install. A failed resolution is therefore tried again
// while config.json changes under it; one whose config.json did not change fails as it
// did (a damaged checkpoint is never retried into success: each try checks everything).
constexpr int k_resolve_tries = 4;

}  // namespace
}  // namespace scales

Result<ResolvedScales> resolve_scales(const ResolveOptions& options) {
  JC_TRY(env::check_startup());
  for (int attempt = 1;; ++attempt) {
    std::string config_sha256;
    auto resolved = scales::resolve_once(options, config_sha256);
    if (resolved) {
      scales::log_resolution(*resolved);
      return resolved;
    }
    if (config_sha256.empty() || attempt == scales::k_resolve_tries) return resolved;
    const auto now = read_checkpoint_config(options.checkpoint_dir);
    if (!now || now->sha256 == config_sha256) return resolved;
    log_debug("scales: " + now->path.string() + " changed while the checkpoint was being resolved (" +
              resolved.error().message + "); resolving again");
  }
}

Result<ValidatedScaleFile> validate_scales_file(const ValidateOptions& options) {
  scales::Expectations expected;
  std::optional<scales::KnownRevision> revision;
  if (options.checkpoint_dir) {
    const CheckpointConfig config = JC_TRY(read_checkpoint_config(*options.checkpoint_dir));
    expected = scales::expectations_of(config.model);
    revision = scales::known_revision(options.checkpoint_revision, *options.checkpoint_dir);
  } else if (options.checkpoint_revision && !options.checkpoint_revision->empty()) {
    revision = scales::KnownRevision{*options.checkpoint_revision, "given explicitly"};
  }
  const std::string name = options.file.string();
  const std::string bytes =
      JC_TRY(read_regular_file(options.file, scales::k_max_scales_file_bytes));
  ValidatedScaleFile validated;
  validated.file = options.file;
  validated.sha256 = sha256_hex(bytes);
  validated.contents = JC_TRY(scales::parse_scale_file(bytes, name, expected));
  if (revision) {
    validated.checkpoint_revision = revision->value;
    if (validated.contents.model_revision &&
        !scales::revision_matches(*validated.contents.model_revision, revision->value)) {
      return make_error(ErrorCode::invalid_input,
                        scales::revision_mismatch(name, "", *validated.contents.model_revision,
                                                  *revision));
    }
  }
  return validated;
}

}  // namespace jitcache
