#include "runtime/scales/calibration.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "jitcache/scales.hpp"
#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/field_problems.hpp"
#include "runtime/scales/scale_json.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"

namespace jitcache::scales {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::array<std::string_view, 11> k_capture_fields = {
    "format", "model",      "model_revision", "dataset",  "context", "tp",
    "rank",   "tokens",     "num_layers",     "latent_dim", "max_abs"};
// The same bounds as the v1 format (scale_file.cpp): the output must pass it, and a hostile
// num_layers must not size allocations.
constexpr std::int64_t k_max_layers = 100000;
constexpr std::int64_t k_max_latent_dim = 1 << 20;
// Far above any real tensor-parallel degree; keeps "missing rank" lists bounded.
constexpr std::int64_t k_max_tp = 4096;
constexpr std::size_t k_max_text_length = 256;

// An integer field in [min, max]; nullopt (after recording why) when absent or unusable.
std::optional<std::int64_t> integer_field(const json& object, std::string_view field,
                                          std::int64_t min, std::int64_t max, FieldProblems& problems) {
  const auto it = object.find(field);
  if (it == object.end()) {
    problems.add_field(field, "missing (required)");
    return std::nullopt;
  }
  const std::string range = min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min);
  if (!it->is_number_integer()) {
    problems.add_field(field, "must be " + range + ", got " + describe_value(*it));
    return std::nullopt;
  }
  // nlohmann stores non-negative integers as unsigned, which may exceed int64's range.
  const bool fits = !it->is_number_unsigned() ||
                    it->get<std::uint64_t>() <= static_cast<std::uint64_t>(max);
  if (!fits || it->get<std::int64_t>() < min || it->get<std::int64_t>() > max) {
    problems.add_field(field, "must be " + range + " no larger than " + std::to_string(max) +
                                  ", got " + it->dump());
    return std::nullopt;
  }
  return it->get<std::int64_t>();
}

std::optional<std::string> text_field(const json& object, std::string_view field,
                                      FieldProblems& problems) {
  const auto it = object.find(field);
  if (it == object.end()) {
    problems.add_field(field, "missing (required)");
    return std::nullopt;
  }
  if (!it->is_string() || it->get<std::string>().empty()) {
    problems.add_field(field, "must be a non-empty string, got " + describe_value(*it));
    return std::nullopt;
  }
  if (it->get<std::string>().size() > k_max_text_length) {
    problems.add_field(field, "is longer than " + std::to_string(k_max_text_length) + " characters");
    return std::nullopt;
  }
  return it->get<std::string>();
}

std::string single_quoted(const std::string& text) { return "'" + text + "'"; }

std::string join_numbers(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

std::string capitalised(std::string_view role) {
  std::string out(role);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// "rank 0: 1.5, rank 1: 1.4"
std::string per_rank_text(const std::vector<double>& values) {
  std::string out;
  for (std::size_t r = 0; r < values.size(); ++r)
    out += (out.empty() ? "" : ", ") + ("rank " + std::to_string(r) + ": " + format_number(values[r]));
  return out;
}

ordered_json agreement_json(const Agreement& a) {
  return ordered_json{{"tolerance", a.tolerance},
                      {"worst_spread", a.worst_spread},
                      {"worst_layer", a.worst_layer}};
}

ordered_json captures_json(const CaptureRun& run) {
  ordered_json list = ordered_json::array();
  for (const Capture& c : run.captures)
    list.push_back(ordered_json{{"file", c.file}, {"rank", c.rank}, {"sha256", c.sha256}});
  return list;
}

// Tokens per rank, in rank order: one shape whether or not the ranks saw the same count.
ordered_json tokens_json(const CaptureRun& run) {
  ordered_json list = ordered_json::array();
  for (const Capture& c : run.captures) list.push_back(c.tokens);
  return list;
}

Status check_option_values(const CalibrationOptions& options) {
  if (!std::isfinite(options.agreement_tolerance) || options.agreement_tolerance < 0)
    return make_error(ErrorCode::invalid_argument,
                      "--agreement: the tolerance must be finite and >= 0, got " +
                          format_number(options.agreement_tolerance));
  if (!std::isfinite(options.headroom) || options.headroom < 1)
    return make_error(ErrorCode::invalid_argument,
                      "--headroom: must be finite and >= 1 (it only ever raises a maximum), got " +
                          format_number(options.headroom));
  return {};
}

// The primary run against the checkpoint's config.json (and its known revision).
Status check_fits_checkpoint(const CaptureRun& run, const CalibrationOptions& options) {
  const Capture& first = run.captures.front();
  if (const auto& ckpt = options.checkpoint) {
    FieldProblems problems(ckpt->config_file + ": ");
    if (ckpt->num_hidden_layers != run.num_layers)
      problems.add_field("num_hidden_layers",
                         "is " + std::to_string(ckpt->num_hidden_layers) + " but the captures have num_layers " +
                             std::to_string(run.num_layers) + " (" + first.file + ")");
    if (ckpt->kv_lora_rank != run.latent_dim)
      problems.add_field("kv_lora_rank", "is " + std::to_string(ckpt->kv_lora_rank) +
                                             " but the captures have latent_dim " +
                                             std::to_string(run.latent_dim) + " (" + first.file + ")");
    if (!problems.empty()) return problems.error();
  }
  std::optional<std::string> known = options.revision;
  std::string origin = "given explicitly";
  if (options.checkpoint && options.checkpoint->revision) {
    known = options.checkpoint->revision;
    origin = options.checkpoint->revision_origin;
  }
  if (known && !revision_matches(run.model_revision, *known))
    return make_error(ErrorCode::invalid_input,
                      first.file + ": field 'model_revision': " + single_quoted(run.model_revision) +
                          " does not match the checkpoint revision " + single_quoted(*known) + " (" +
                          origin + "); these captures were taken on another revision");
  return {};
}

// An envelope is an independent run: a primary capture given again (the same file under
// any spelling, a copy of its bytes, or the same recorded values re-saved) would be counted
// as a second run confirming the first.
Status check_independent(const CaptureRun& envelope, const CaptureRun& primary) {
  for (const Capture& e : envelope.captures) {
    for (const Capture& p : primary.captures) {
      std::string how;
      if (e.file == p.file || (e.identity && e.identity == p.identity)) how = "is the same file as";
      else if (e.sha256 == p.sha256) how = "has the same bytes (sha256 " + e.sha256 + ") as";
      else if (e.model == p.model && e.model_revision == p.model_revision && e.dataset == p.dataset &&
               e.context == p.context && e.tp == p.tp && e.rank == p.rank && e.tokens == p.tokens &&
               e.max_abs == p.max_abs)
        how = "records the same values as";
      if (!how.empty())
        return make_error(ErrorCode::invalid_input,
                          e.file + ": envelope capture " + how + " the primary capture " + p.file +
                              "; an envelope must be an independent run (other captures of the same base)");
    }
  }
  return {};
}

}  // namespace

Result<Capture> parse_capture(std::string_view text, const std::string& file) {
  const json object = JC_TRY(parse_json_strict(text, file));
  FieldProblems problems(file + ": ");
  if (!object.is_object())
    return make_error(ErrorCode::invalid_input, file + ": expected a JSON object (" +
                                                    std::string(k_capture_format_v1) + "), got " +
                                                    describe_value(object));
  // A wrong format means the other fields follow rules we do not know: report only that.
  const auto format = object.find("format");
  if (format == object.end() || !format->is_string() ||
      format->get<std::string>() != k_capture_format_v1) {
    const std::string wanted = "\"" + std::string(k_capture_format_v1) + "\"";
    if (format == object.end()) {
      problems.add_field("format", "missing (required: " + wanted + ")");
    } else {
      std::string text = "must be " + wanted + ", got " + describe_value(*format);
      if (format->is_string() && format->get<std::string>() == k_scales_format_v1)
        text += " (a scales file, not a capture)";
      problems.add_field("format", text);
    }
    return problems.error();
  }

  for (const auto& [key, value] : object.items()) {
    if (std::find(k_capture_fields.begin(), k_capture_fields.end(), key) == k_capture_fields.end())
      problems.add_field(key, "unknown field; a capture has only format, model, model_revision, "
                              "dataset, context, tp, rank, tokens, num_layers, latent_dim, max_abs");
  }

  Capture capture;
  capture.file = file;
  capture.sha256 = sha256_hex(text);
  const auto model = text_field(object, "model", problems);
  const auto revision = text_field(object, "model_revision", problems);
  const auto dataset = text_field(object, "dataset", problems);
  const auto context = integer_field(object, "context", 1, std::numeric_limits<std::int64_t>::max(), problems);
  const auto tp = integer_field(object, "tp", 1, k_max_tp, problems);
  const auto rank = integer_field(object, "rank", 0, k_max_tp, problems);
  if (rank && tp && *rank >= *tp) {
    problems.add_field("rank", "must be in [0, tp) = [0, " + std::to_string(*tp) + "), got " +
                                   std::to_string(*rank));
  }
  const auto tokens = integer_field(object, "tokens", 1, std::numeric_limits<std::int64_t>::max(), problems);
  const auto num_layers = integer_field(object, "num_layers", 1, k_max_layers, problems);
  const auto latent_dim = integer_field(object, "latent_dim", 1, k_max_latent_dim, problems);

  if (const auto it = object.find("max_abs"); it == object.end()) {
    problems.add_field("max_abs", "missing (required)");
  } else if (!it->is_array()) {
    problems.add_field("max_abs", "must be an array of numbers, got " + describe_value(*it));
  } else {
    if (num_layers && it->size() != static_cast<std::size_t>(*num_layers)) {
      problems.add_field("max_abs", "has " + std::to_string(it->size()) + " entries, expected " +
                                        std::to_string(*num_layers) + " (num_layers)");
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& element = (*it)[i];
      const std::string where = "max_abs[" + std::to_string(i) + "]";
      if (!element.is_number()) {
        problems.add_field(where, "must be a number, got " + describe_value(element));
        continue;
      }
      const double v = element.get<double>();
      if (!std::isfinite(v) || v < 0) {
        problems.add_field(where, "must be finite and >= 0, got " + format_number(v));
        continue;
      }
      capture.max_abs.push_back(v);
    }
  }
  if (!problems.empty()) return problems.error();

  capture.model = *model;
  capture.model_revision = *revision;
  capture.dataset = *dataset;
  capture.context = *context;
  capture.tp = static_cast<int>(*tp);
  capture.rank = static_cast<int>(*rank);
  capture.tokens = *tokens;
  capture.num_layers = static_cast<int>(*num_layers);
  capture.latent_dim = static_cast<int>(*latent_dim);
  return capture;
}

Result<Capture> read_capture(const std::filesystem::path& path) {
  const std::string name = path.string();
  const RegularFile file = JC_TRY(RegularFile::open(path, FollowSymlinks::yes, name));
  const std::string bytes = JC_TRY(file.read_all(k_max_capture_file_bytes));
  Capture capture = JC_TRY(parse_capture(bytes, name));
  capture.identity = std::pair(file.status().st_dev, file.status().st_ino);
  return capture;
}

Result<CaptureRun> assemble_run(std::vector<Capture> captures, std::string_view role) {
  if (captures.empty())
    return make_error(ErrorCode::invalid_argument, std::string(role) + " run: no capture files given");

  // The same file twice would count one rank's values as two ranks agreeing.
  for (std::size_t i = 0; i < captures.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const bool same = captures[i].file == captures[j].file ||
                        (captures[i].identity && captures[i].identity == captures[j].identity);
      if (same)
        return make_error(ErrorCode::invalid_input,
                          captures[i].file + ": given twice (also as " + captures[j].file + ")");
    }
  }

  const Capture& first = captures.front();
  FieldProblems problems("");
  for (const Capture& c : captures) {
    const auto differs = [&](std::string_view field, const std::string& mine, const std::string& theirs) {
      if (mine != theirs)
        problems.add(c.file + ": field '" + std::string(field) + "': " + mine + " differs from " +
                     theirs + " in " + first.file);
    };
    differs("model", single_quoted(c.model), single_quoted(first.model));
    differs("model_revision", single_quoted(c.model_revision), single_quoted(first.model_revision));
    differs("dataset", single_quoted(c.dataset), single_quoted(first.dataset));
    differs("context", std::to_string(c.context), std::to_string(first.context));
    differs("tp", std::to_string(c.tp), std::to_string(first.tp));
    differs("num_layers", std::to_string(c.num_layers), std::to_string(first.num_layers));
    differs("latent_dim", std::to_string(c.latent_dim), std::to_string(first.latent_dim));
  }
  if (!problems.empty()) return problems.error();

  std::map<int, const Capture*> by_rank;
  for (const Capture& c : captures) {
    const auto [it, inserted] = by_rank.emplace(c.rank, &c);
    if (!inserted)
      problems.add(c.file + ": field 'rank': rank " + std::to_string(c.rank) + " also in " +
                   it->second->file);
  }
  if (!problems.empty()) return problems.error();

  const int tp = first.tp;
  std::vector<int> missing, have;
  for (int r = 0; r < tp; ++r) (by_rank.contains(r) ? have : missing).push_back(r);
  if (!missing.empty()) {
    const std::string which =
        missing.size() == 1 ? "rank " + join_numbers(missing) : "ranks " + join_numbers(missing);
    return make_error(ErrorCode::invalid_input,
                      std::string(role) + " run: missing " + which + " of tp " + std::to_string(tp) +
                          " (have " + join_numbers(have) + ")");
  }

  CaptureRun run;
  static_cast<CaptureFacts&>(run) = first;
  std::sort(captures.begin(), captures.end(),
            [](const Capture& a, const Capture& b) { return a.rank < b.rank; });
  run.captures = std::move(captures);
  return run;
}

Agreement measure_agreement(const CaptureRun& run, double tolerance) {
  Agreement agreement;
  agreement.tolerance = tolerance;
  for (int layer = 0; layer < run.num_layers; ++layer) {
    LayerSpread s;
    s.layer = layer;
    for (const Capture& c : run.captures) s.per_rank.push_back(c.max_abs[static_cast<std::size_t>(layer)]);
    const auto [lo, hi] = std::minmax_element(s.per_rank.begin(), s.per_rank.end());
    s.spread = *hi > 0 ? (*hi - *lo) / *hi : 0.0;
    if (s.spread > agreement.worst_spread) {
      agreement.worst_spread = s.spread;
      agreement.worst_layer = layer;
    }
    if (s.spread > tolerance) agreement.disagreeing.push_back(std::move(s));
  }
  return agreement;
}

Status check_agreement(const Agreement& agreement, const CaptureRun& run, std::string_view role) {
  if (agreement.disagreeing.empty()) return {};
  // Every disagreeing layer is named with every rank's value: which rank is off is the
  // first thing the person who ran the capture needs to know.
  std::string detail;
  for (const LayerSpread& s : agreement.disagreeing)
    detail += (detail.empty() ? "" : "\n") +
              ("layer " + std::to_string(s.layer) + ": spread " + format_number(s.spread) + " (" +
               per_rank_text(s.per_rank) + ")");
  const LayerSpread& first = agreement.disagreeing.front();
  const std::size_t n = agreement.disagreeing.size();
  std::string message = capitalised(role) + " run (" + run.captures.front().file + ", ...): the " +
                        std::to_string(run.tp) + " ranks disagree at " + std::to_string(n) +
                        " layer" + (n == 1 ? "" : "s") + " (relative spread > tolerance " +
                        format_number(agreement.tolerance) + "); first: layer " +
                        std::to_string(first.layer) + ": spread " + format_number(first.spread) +
                        " (" + per_rank_text(first.per_rank) + ")";
  return make_error(ErrorCode::invalid_input, std::move(message), n > 1 ? detail : std::string());
}

std::vector<double> run_max_abs(const CaptureRun& run) {
  std::vector<double> out(static_cast<std::size_t>(run.num_layers), 0.0);
  for (const Capture& c : run.captures)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], c.max_abs[i]);
  return out;
}

Result<CheckpointFacts> checkpoint_facts(const std::filesystem::path& checkpoint_dir,
                                         const std::optional<std::string>& explicit_revision) {
  const CheckpointConfig config = JC_TRY(read_checkpoint_config(checkpoint_dir));
  CheckpointFacts facts;
  facts.config_file = config.path.string();
  facts.num_hidden_layers = config.model.num_hidden_layers;
  facts.kv_lora_rank = config.model.kv_lora_rank;
  if (explicit_revision && !explicit_revision->empty()) {
    facts.revision = *explicit_revision;
    facts.revision_origin = "given explicitly";
  } else if (auto rev = snapshot_revision(checkpoint_dir)) {
    facts.revision = std::move(*rev);
    facts.revision_origin = "the snapshots/<revision> directory name";
  }
  return facts;
}

Result<Calibration> calibrate(std::vector<Capture> primary, std::vector<Capture> envelope,
                              const CalibrationOptions& options) {
  JC_TRY(check_option_values(options));
  Calibration out;
  out.headroom = options.headroom;
  out.primary = JC_TRY(assemble_run(std::move(primary), "primary"));
  const CaptureRun& run = out.primary;
  JC_TRY(check_fits_checkpoint(run, options));
  out.primary_agreement = measure_agreement(run, options.agreement_tolerance);
  JC_TRY(check_agreement(out.primary_agreement, run, "primary"));

  std::vector<double> max_abs = run_max_abs(run);
  if (!envelope.empty()) {
    CaptureRun env = JC_TRY(assemble_run(std::move(envelope), "envelope"));
    JC_TRY(check_independent(env, run));
    const Capture& e = env.captures.front();
    FieldProblems problems(e.file + ": ");
    if (env.num_layers != run.num_layers)
      problems.add_field("num_layers", "envelope has " + std::to_string(env.num_layers) +
                                           ", the primary run has " + std::to_string(run.num_layers) +
                                           " (" + run.captures.front().file + ")");
    if (env.latent_dim != run.latent_dim)
      problems.add_field("latent_dim", "envelope has " + std::to_string(env.latent_dim) +
                                           ", the primary run has " + std::to_string(run.latent_dim) +
                                           " (" + run.captures.front().file + ")");
    if (!problems.empty()) return problems.error();
    // The envelope is meant to be the same base; another revision is allowed (a second
    // capture after a small fix-up) but must be visible in the output and the log.
    if (env.model != run.model || env.model_revision != run.model_revision)
      out.warnings.push_back("envelope captures (" + e.file + ") are of model " + single_quoted(env.model) +
                             " revision " + single_quoted(env.model_revision) + ", the primary run (" +
                             run.captures.front().file + ") of model " + single_quoted(run.model) +
                             " revision " + single_quoted(run.model_revision));
    Agreement env_agreement = measure_agreement(env, options.agreement_tolerance);
    JC_TRY(check_agreement(env_agreement, env, "envelope"));
    const std::vector<double> env_max = run_max_abs(env);
    for (std::size_t i = 0; i < max_abs.size(); ++i) {
      if (env_max[i] > max_abs[i]) {
        max_abs[i] = env_max[i];
        ++out.layers_raised;
      }
    }
    out.envelope = std::move(env);
    out.envelope_agreement = std::move(env_agreement);
  }

  FieldProblems problems("");
  for (std::size_t i = 0; i < max_abs.size(); ++i) {
    const double m = max_abs[i] * options.headroom;
    const std::string layer = "layer " + std::to_string(i) + ": ";
    if (max_abs[i] == 0) {
      problems.add(layer + "max_abs is 0 in every capture (the layer was never observed)");
    } else if (!std::isfinite(m)) {
      problems.add(layer + "max_abs " + format_number(max_abs[i]) + " x headroom " +
                   format_number(options.headroom) + " is not finite");
    } else if (auto problem = latent_scale_problem(m / k_scales_denominator)) {
      problems.add(layer + "scale " + format_number(m) + " / 2688 " + *problem);
    }
    out.max_abs.push_back(m);
    out.scales.push_back(m / k_scales_denominator);
  }
  if (!problems.empty()) return problems.error();

  ordered_json provenance = {
      {"tool", k_calibrate_tool_name},
      {"jitcache_version", options.jitcache_version},
      {"model", run.model},
      {"dataset", run.dataset},
      {"context", run.context},
      {"tp", run.tp},
      {"tokens", tokens_json(run)},
      {"per_rank_agreement", agreement_json(out.primary_agreement)},
      {"captures", captures_json(run)},
      {"envelope", nullptr},
      {"headroom", options.headroom}};
  if (out.envelope) {
    const CaptureRun& env = *out.envelope;
    provenance["envelope"] = ordered_json{{"model", env.model},
                                          {"model_revision", env.model_revision},
                                          {"dataset", env.dataset},
                                          {"context", env.context},
                                          {"tp", env.tp},
                                          {"tokens", tokens_json(env)},
                                          {"per_rank_agreement", agreement_json(*out.envelope_agreement)},
                                          {"captures", captures_json(env)},
                                          {"layers_raised", out.layers_raised}};
  }
  if (!out.warnings.empty()) provenance["warnings"] = out.warnings;

  out.object = ordered_json{{"format", k_scales_format_v1},
                            {"num_layers", run.num_layers},
                            {"latent_dim", run.latent_dim},
                            {"denominator", k_scales_denominator},
                            {"scales", out.scales},
                            {"max_abs", out.max_abs},
                            {"model_revision", run.model_revision},
                            {"provenance", std::move(provenance)}};

  // The gate every consumer applies, on the very text that will be written.
  Expectations expectations;
  if (options.checkpoint) {
    expectations.num_layers = options.checkpoint->num_hidden_layers;
    expectations.latent_dim = options.checkpoint->kv_lora_rank;
  }
  const auto checked = parse_scale_file(render_scale_file(out.object), "calibrated scales", expectations);
  if (!checked)
    return make_error(ErrorCode::internal,
                      "the calibrated object fails the v1 rules: " + checked.error().message,
                      checked.error().detail);
  return out;
}

// A capture's path as given need not be UTF-8; JSON text must be.
std::string render_scale_file(const ordered_json& object) {
  return object.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace jitcache::scales
