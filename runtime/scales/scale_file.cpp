#include "runtime/scales/scale_file.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <utility>
#include <vector>

#include "runtime/scales/field_problems.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/sha256.hpp"

namespace jitcache::scales {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 8> k_v1_fields = {
    "format", "num_layers", "latent_dim", "denominator",
    "scales", "max_abs",    "model_revision", "provenance"};
// Far above any real model; keeps a hostile num_layers from sizing allocations.
constexpr std::int64_t k_max_layers = 100000;
constexpr std::int64_t k_max_latent_dim = 1 << 20;
constexpr std::size_t k_max_revision_length = 256;

std::string supported_formats() { return std::string(k_scales_format_v1); }

std::string known_v1_fields() {
  std::string list;
  for (std::string_view f : k_v1_fields) list += (list.empty() ? "" : ", ") + std::string(f);
  return list;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}


// A positive integer field; nullopt (after recording why) when absent or unusable.
std::optional<int> positive_int(const json& object, std::string_view field, std::int64_t max,
                                FieldProblems& problems) {
  const auto it = object.find(field);
  if (it == object.end()) {
    problems.add_field(field, "missing (required)");
    return std::nullopt;
  }
  if (!it->is_number_integer()) {
    problems.add_field(field, "must be a positive integer, got " + describe_value(*it));
    return std::nullopt;
  }
  // nlohmann stores non-negative integers as unsigned, which may exceed int64's range.
  const bool in_range =
      it->is_number_unsigned()
          ? (it->get<std::uint64_t>() > 0 && it->get<std::uint64_t>() <= static_cast<std::uint64_t>(max))
          : (it->get<std::int64_t>() > 0 && it->get<std::int64_t>() <= max);
  if (!in_range) {
    problems.add_field(field, "must be a positive integer no larger than " + std::to_string(max) +
                            ", got " + it->dump());
    return std::nullopt;
  }
  return static_cast<int>(it->get<std::int64_t>());
}

// Numbers of an array field; an element that is not a usable number is nullopt.
std::vector<std::optional<double>> numbers(const json& array, std::string_view field,
                                           bool strictly_positive, FieldProblems& problems) {
  std::vector<std::optional<double>> values;
  values.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const json& element = array[i];
    const std::string where = std::string(field) + "[" + std::to_string(i) + "]";
    values.emplace_back();
    if (!element.is_number()) {
      problems.add_field(where, "must be a number, got " + describe_value(element));
      continue;
    }
    const double v = element.get<double>();
    if (!std::isfinite(v)) {
      problems.add_field(where, "must be finite, got " + format_number(v));
      continue;
    }
    if (strictly_positive) {
      if (auto problem = latent_scale_problem(v)) {
        problems.add_field(where, std::move(*problem));
        continue;
      }
    } else if (v < 0) {
      problems.add_field(where, "must be >= 0, got " + format_number(v));
      continue;
    }
    values.back() = v;
  }
  return values;
}

}  // namespace

std::string describe_value(const json& value) {
  if (value.is_boolean()) return std::string("boolean ") + (value.get<bool>() ? "true" : "false");
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    if (text.size() > 40) text = text.substr(0, 40) + "...";
    return "string \"" + text + "\"";
  }
  if (value.is_number()) return "number " + format_number(value.get<double>());
  return value.type_name();
}

std::optional<std::string> latent_scale_problem(double value) {
  if (!std::isfinite(value)) return "must be finite, got " + format_number(value);
  if (!(value > 0)) return "must be > 0, got " + format_number(value);
  // The kernels apply the float; a value that rounds to 0, a subnormal or infinity
  // would silently zero or destroy the layer.
  const float f = static_cast<float>(value);
  if (!(f >= FLT_MIN) || std::isinf(f))
    return "is outside the normal float32 range, got " + format_number(value);
  return std::nullopt;
}

Result<ScaleFileContents> validate_scale_object(const json& object, const std::string& file,
                                                const std::string& field_prefix,
                                                const Expectations& expectations) {
  FieldProblems problems(file + ": ", field_prefix);
  if (!object.is_object()) {
    const std::string where =
        field_prefix.empty() ? std::string() : " field '" + field_prefix.substr(0, field_prefix.size() - 1) + "':";
    return make_error(ErrorCode::invalid_input,
                      file + ":" + where + " expected a JSON object (" + supported_formats() +
                          "), got " + describe_value(object));
  }

  // A wrong format means the other fields follow rules we do not know: report only that.
  const auto format = object.find("format");
  if (format == object.end()) {
    problems.add_field("format", "missing; supported formats: " + supported_formats());
    return problems.error();
  }
  if (!format->is_string()) {
    problems.add_field("format", "must be a string, got " + describe_value(*format) +
                               "; supported formats: " + supported_formats());
    return problems.error();
  }
  if (format->get<std::string>() != k_scales_format_v1) {
    problems.add_field("format", "unsupported format \"" + format->get<std::string>() +
                               "\"; supported formats: " + supported_formats());
    return problems.error();
  }

  ScaleFileContents contents;
  contents.format = k_scales_format_v1;

  for (const auto& [key, value] : object.items()) {
    if (std::find(k_v1_fields.begin(), k_v1_fields.end(), key) == k_v1_fields.end())
      problems.add_field(key, "unknown field; a v1 object has only " + known_v1_fields());
  }

  const std::optional<int> num_layers = positive_int(object, "num_layers", k_max_layers, problems);
  if (num_layers && expectations.num_layers && *num_layers != *expectations.num_layers) {
    problems.add_field("num_layers", "is " + std::to_string(*num_layers) + " but the model has " +
                                   std::to_string(*expectations.num_layers) +
                                   " layers (num_hidden_layers)");
  }
  const std::optional<int> latent_dim =
      positive_int(object, "latent_dim", k_max_latent_dim, problems);
  if (latent_dim && expectations.latent_dim && *latent_dim != *expectations.latent_dim) {
    problems.add_field("latent_dim", "is " + std::to_string(*latent_dim) + " but the model's kv_lora_rank is " +
                                   std::to_string(*expectations.latent_dim));
  }

  std::optional<double> denominator;
  if (const auto it = object.find("denominator"); it == object.end()) {
    problems.add_field("denominator", "missing (required; must be 2688 = 6 * 448)");
  } else if (!it->is_number()) {
    problems.add_field("denominator", "must be the number 2688 (6 * 448), got " + describe_value(*it));
  } else if (it->get<double>() != k_scales_denominator) {
    problems.add_field("denominator", "must be exactly 2688 (6 * 448), got " + format_number(it->get<double>()));
  } else {
    denominator = k_scales_denominator;
  }

  // Entries are counted against the file's own num_layers, else the model's.
  const std::optional<int> expected_count = num_layers ? num_layers : expectations.num_layers;
  std::vector<std::optional<double>> scales;
  bool have_scales = false;
  if (const auto it = object.find("scales"); it == object.end()) {
    problems.add_field("scales", "missing (required)");
  } else if (!it->is_array()) {
    problems.add_field("scales", "must be an array of numbers, got " + describe_value(*it));
  } else {
    if (expected_count && it->size() != static_cast<std::size_t>(*expected_count))
      problems.add_field("scales", "has " + std::to_string(it->size()) + " entries, expected " +
                                 std::to_string(*expected_count) + " (num_layers)");
    scales = numbers(*it, "scales", /*strictly_positive=*/true, problems);
    have_scales = true;
  }

  std::vector<std::optional<double>> max_abs;
  const auto max_abs_it = object.find("max_abs");
  if (max_abs_it != object.end()) {
    if (!max_abs_it->is_array()) {
      problems.add_field("max_abs", "must be an array of numbers, got " + describe_value(*max_abs_it));
    } else {
      if (have_scales && max_abs_it->size() != scales.size())
        problems.add_field("max_abs", "has " + std::to_string(max_abs_it->size()) +
                                    " entries, scales has " + std::to_string(scales.size()));
      max_abs = numbers(*max_abs_it, "max_abs", /*strictly_positive=*/false, problems);
      const std::size_t common = std::min(max_abs.size(), scales.size());
      for (std::size_t i = 0; denominator && i < common; ++i) {
        if (!max_abs[i] || !scales[i]) continue;
        const double expected = *max_abs[i] / *denominator;
        const double difference = std::fabs(*scales[i] - expected);
        if (!(difference <= k_max_abs_tolerance * std::fabs(expected))) {
          problems.add_field("max_abs[" + std::to_string(i) + "]",
                       format_number(*max_abs[i]) + " / 2688 = " + format_number(expected) +
                           " disagrees with scales[" + std::to_string(i) + "] = " +
                           format_number(*scales[i]) + " (more than 1e-6 relative)");
        }
      }
    }
  }

  if (const auto it = object.find("model_revision"); it != object.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      problems.add_field("model_revision", "must be a non-empty string, got " + describe_value(*it));
    } else if (it->get<std::string>().size() > k_max_revision_length) {
      problems.add_field("model_revision", "is longer than " + std::to_string(k_max_revision_length) +
                                         " characters");
    } else {
      contents.model_revision = it->get<std::string>();
    }
  }

  if (const auto it = object.find("provenance"); it != object.end()) {
    if (!it->is_object()) {
      problems.add_field("provenance", "must be an object, got " + describe_value(*it));
    } else {
      contents.provenance_json = it->dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }

  if (!problems.empty()) return problems.error();

  contents.num_layers = *num_layers;
  contents.latent_dim = *latent_dim;
  contents.denominator = *denominator;
  contents.scales.reserve(scales.size());
  for (const auto& v : scales) contents.scales.push_back(*v);
  if (max_abs_it != object.end()) {
    contents.max_abs.emplace();
    for (const auto& v : max_abs) contents.max_abs->push_back(*v);
  }
  return contents;
}

Result<ScaleFileContents> parse_scale_file(std::string_view text, const std::string& file,
                                           const Expectations& expectations) {
  const json document = JC_TRY(parse_json_strict(text, file));
  return validate_scale_object(document, file, "", expectations);
}

Result<CheckpointScales> parse_checkpoint_field(const json& value, const std::string& config_file) {
  const std::string field = k_scales_config_field;
  const auto fail = [&](std::string_view subfield, const std::string& text) {
    return make_error(ErrorCode::invalid_input,
                      config_file + ": field '" + field + std::string(subfield) + "': " + text);
  };
  if (!value.is_object()) {
    return fail("", "expected an inline " + std::string(k_scales_format_v1) +
                        " object or a sidecar reference {\"file\": ..., \"sha256\": ...}, got " +
                        describe_value(value));
  }
  const bool has_file = value.contains("file");
  if (has_file && value.contains("format"))
    return fail("", "has both 'file' (a sidecar reference) and 'format' (an inline object); "
                    "use one");
  if (!has_file) return CheckpointScales(value);

  for (const auto& [key, unused] : value.items()) {
    if (key != "file" && key != "sha256")
      return fail("." + key, "unknown field; a sidecar reference has only file and sha256");
  }
  const json& file = value.at("file");
  if (!file.is_string() || file.get<std::string>().empty())
    return fail(".file", "must be a non-empty relative path, got " + describe_value(file));
  if (file.get<std::string>().find('\0') != std::string::npos)
    return fail(".file", "contains a NUL character");
  const auto sha = value.find("sha256");
  if (sha == value.end())
    return fail(".sha256", "missing; a sidecar reference must pin the file's SHA-256");
  if (!sha->is_string() || !is_sha256_hex(sha->get<std::string>()))
    return fail(".sha256", "must be 64 hexadecimal digits, got " + describe_value(*sha));
  return CheckpointScales(SidecarReference{file.get<std::string>(), lower(sha->get<std::string>())});
}

bool revision_matches(std::string_view recorded, std::string_view known) {
  const std::string a = lower(recorded), b = lower(known);
  if (a == b) return true;
  const std::string& shorter = a.size() < b.size() ? a : b;
  const std::string& longer = a.size() < b.size() ? b : a;
  return shorter.size() >= 7 && all_hex(shorter) && all_hex(longer) && longer.starts_with(shorter);
}

}  // namespace jitcache::scales
