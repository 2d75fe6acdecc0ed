#include "kernel_templates/kernel_spec.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {
namespace {

constexpr auto k_supported = [] {
  std::array<std::string_view, k_targets.size()> names{};
  std::ranges::transform(k_targets.rows, names.begin(), [](const TargetRow& row) { return row.name; });
  return names;
}();

constexpr bool by_default(const TargetRow& row) { return row.shipped == Shipped::by_default; }

constexpr auto k_defaults = [] {
  std::array<std::string_view, std::ranges::count_if(k_targets.rows, by_default)> names{};
  std::size_t i = 0;
  for (const TargetRow& row : k_targets.rows)
    if (by_default(row)) names[i++] = row.name;
  return names;
}();

// The row a fact names, or an error naming the fact.
template <class Row, std::size_t N>
Result<const Row*> fact_row(const FactMap& facts, const Dimension<Row, N>& dimension) {
  const std::string fact(dimension.fact);
  const auto it = facts.find(fact);
  if (it == facts.end()) return make_error(ErrorCode::invalid_input, "missing fact '" + fact + "'");
  const Row* row = dimension.find(it->second);
  if (row == nullptr)
    return make_error(ErrorCode::invalid_input,
                      "fact '" + fact + "' is '" + it->second + "', expected " + dimension.alternatives());
  return row;
}

template <class Row, std::size_t N>
std::optional<decltype(Row::value)> parse(const Dimension<Row, N>& dimension, std::string_view text) {
  const Row* row = dimension.find(text);
  if (row == nullptr) return std::nullopt;
  return row->value;
}

}  // namespace

std::span<const std::string_view> supported_targets() { return k_supported; }
std::span<const std::string_view> default_targets() { return k_defaults; }

Result<Target> parse_target(std::string_view text) {
  if (k_targets.find(text) != nullptr) return Target{std::string(text)};
  return make_error(ErrorCode::invalid_argument,
                    "unknown target '" + std::string(text) + "' (supported: " + k_targets.joined(", ") + ")");
}

const char* to_string(KernelKind kind) { return k_kernel_kinds[kind].name; }
const char* to_string(LatentScale scale) { return k_latent_scales[scale].name; }
const char* to_string(RecordFormat format) { return k_record_formats[format].name; }

std::optional<KernelKind> parse_kernel_kind(std::string_view text) { return parse(k_kernel_kinds, text); }
std::optional<LatentScale> parse_latent_scale(std::string_view text) { return parse(k_latent_scales, text); }
std::optional<RecordFormat> parse_rope_format(std::string_view text) {
  for (const RecordFormatRow& row : k_record_formats.rows)
    if (row.rope_alias != nullptr && text == row.rope_alias) return row.value;
  return std::nullopt;
}

std::optional<RecordFormat> parse_record_format(std::string_view text) {
  if (auto format = parse(k_record_formats, text)) return format;
  return parse_rope_format(text);
}

namespace {

bool runs_on(const TargetRow& row, int major, int minor) {
  switch (row.reach) {
    case TargetReach::generic:
      return major == row.major && minor >= row.minor;
    case TargetReach::family:
      return major == row.major && minor >= row.minor &&
             std::ranges::any_of(k_device_capabilities, [&](const DeviceCapability& d) {
               return d.major == major && d.minor == minor;
             });
    case TargetReach::arch:
      return major == row.major && minor == row.minor;
  }
  return false;
}

// Lower is more specific.
int specificity(TargetReach reach) {
  switch (reach) {
    case TargetReach::arch: return 0;
    case TargetReach::family: return 1;
    case TargetReach::generic: return 2;
  }
  return 3;
}

// "9.0, 10.0, 10.3, 11.0, 12.0 or 12.1": the devices some target runs on.
std::string known_capabilities() {
  std::vector<std::string> on;
  for (const DeviceCapability& d : k_device_capabilities)
    if (std::ranges::any_of(k_targets.rows, [&](const TargetRow& row) { return runs_on(row, d.major, d.minor); }))
      on.push_back(std::to_string(d.major) + "." + std::to_string(d.minor));
  std::string out;
  for (std::size_t i = 0; i < on.size(); ++i) out += (i == 0 ? "" : i + 1 == on.size() ? " or " : ", ") + on[i];
  return out;
}

}  // namespace

bool cubin_runs_on(std::string_view target, int major, int minor) {
  const TargetRow* row = k_targets.find(target);
  return row != nullptr && runs_on(*row, major, minor);
}

std::vector<std::string> targets_for_device(int major, int minor) {
  std::vector<const TargetRow*> rows;
  for (const TargetRow& row : k_targets.rows)
    if (runs_on(row, major, minor)) rows.push_back(&row);
  std::ranges::stable_sort(rows, [](const TargetRow* a, const TargetRow* b) {
    if (specificity(a->reach) != specificity(b->reach)) return specificity(a->reach) < specificity(b->reach);
    return a->minor > b->minor;  // the same major: the closest to the device first
  });
  std::vector<std::string> out;
  for (const TargetRow* row : rows) out.emplace_back(row->name);
  return out;
}

Status check_cubin_runs_on(std::string_view target, int major, int minor) {
  if (cubin_runs_on(target, major, minor)) return {};
  const std::vector<std::string> here = targets_for_device(major, minor);
  std::string those;
  for (const std::string& name : here) those += (those.empty() ? "" : ", ") + name;
  return make_error(ErrorCode::invalid_argument,
                    "an " + std::string(target) + " cubin cannot run on a device of compute capability " +
                        capability_text(major, minor) + ": it runs on " + capabilities_of(target) +
                        (here.empty() ? std::string("; no target of this build runs there")
                                      : "; the targets that run there: " + those));
}

std::string capability_text(int major, int minor) { return std::to_string(major) + "." + std::to_string(minor); }

std::string capabilities_of(std::string_view target) {
  std::vector<std::string> on;
  for (const DeviceCapability& d : k_device_capabilities)
    if (cubin_runs_on(target, d.major, d.minor)) on.push_back(capability_text(d.major, d.minor));
  if (on.empty()) return "no known device";
  if (on.size() == 1) return on.front() + " only";
  std::string out;
  for (std::size_t i = 0; i < on.size(); ++i) out += (i == 0 ? "" : i + 1 == on.size() ? " and " : ", ") + on[i];
  return out;
}

Result<Target> choose_device_target(int major, int minor, const std::function<Result<bool>(const Target&)>& held) {
  const std::vector<std::string> candidates = targets_for_device(major, minor);
  if (candidates.empty())
    return make_error(ErrorCode::unavailable, "no target of this build runs on a device of compute capability " +
                                                  capability_text(major, minor) + " (its targets run on " +
                                                  known_capabilities() + ")");
  for (const std::string& name : candidates) {
    Target target{name};
    if (JC_TRY(held(target))) return target;
  }
  // Compiled now: the product's target for this chip, the one caches and cache wheels are
  // warmed with (`jitcache compile`'s default), so that nodes agree.
  for (const std::string& name : candidates)
    for (const TargetRow& row : k_targets.rows)
      if (name == row.name && row.shipped == Shipped::by_default) return Target{name};
  return Target{candidates.front()};
}

int record_bytes(RecordFormat format) { return k_record_formats[format].record_bytes; }

int gathered_row_elems(RecordFormat format) { return jc::fmt::layout(k_record_formats[format].device).out_dim; }

bool format_allows(RecordFormat format, LatentScale scale) { return allows(k_record_formats[format], scale); }

Status check_format_mode(RecordFormat format, LatentScale scale) {
  const RecordFormatRow& row = k_record_formats[format];
  if (allows(row, scale)) return {};
  std::string modes;
  for (const LatentScaleRow& mode : k_latent_scales.rows)
    if (allows(row, mode.value)) modes += std::string(modes.empty() ? "" : ", ") + mode.name;
  // A reader with no per-token scale is named: no record of it can carry one.
  const std::string why = scale == LatentScale::per_token ? std::string(": its reader, ") + row.reader +
                                                                ", has no per-token scale"
                                                          : std::string();
  return make_error(ErrorCode::invalid_argument, std::string("format ") + row.name + " is not written with a " +
                                                     to_string(scale) + " latent scale (it takes: " + modes + ")" +
                                                     why);
}

LatentScale latent_scale_for(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::identity: return LatentScale::identity;
    case ScaleMode::dynamic: return LatentScale::dynamic;
  }
  return LatentScale::dynamic;  // a value outside the enum: the variant right for any scale
}

std::string KernelSpec::label() const {
  return std::string(to_string(kernel)) + "/" + to_string(latent_scale) + "/" + to_string(format) +
         "/" + target.name;
}

std::pair<std::string, std::string> format_fact(RecordFormat format) {
  const RecordFormatRow& row = k_record_formats[format];
  if (row.rope_alias != nullptr) return {std::string(k_legacy_format_fact), row.rope_alias};
  return {std::string(k_record_formats.fact), row.name};
}

Result<RecordFormat> format_from_facts(const FactMap& facts) {
  const auto named = facts.find(std::string(k_record_formats.fact));
  const auto legacy = facts.find(std::string(k_legacy_format_fact));
  if (named != facts.end() && legacy != facts.end())
    return make_error(ErrorCode::invalid_input, "facts 'format' and 'rope' both name the record format");
  if (legacy != facts.end()) {
    if (auto format = parse_rope_format(legacy->second)) return *format;
    return make_error(ErrorCode::invalid_input, "fact 'rope' is '" + legacy->second + "', expected bf16 or fp8");
  }
  if (named == facts.end()) return make_error(ErrorCode::invalid_input, "missing fact 'format' (or 'rope')");
  const RecordFormatRow* row = k_record_formats.find(named->second);
  // A format with a RoPE alias is always keyed by it, so `format=b12x-432` is no key of ours.
  if (row == nullptr || row->rope_alias != nullptr) {
    std::string expected;
    for (const RecordFormatRow& r : k_record_formats.rows)
      if (r.rope_alias == nullptr) expected += std::string(expected.empty() ? "" : " or ") + r.name;
    return make_error(ErrorCode::invalid_input,
                      "fact 'format' is '" + named->second + "', expected " + expected);
  }
  return row->value;
}

FactMap KernelSpec::to_facts() const {
  FactMap facts{{std::string(k_kernel_kinds.fact), to_string(kernel)},
                {std::string(k_latent_scales.fact), to_string(latent_scale)},
                {std::string(k_targets.fact), target.name}};
  facts.insert(format_fact(format));
  return facts;
}

Result<KernelSpec> KernelSpec::from_facts(const FactMap& facts) {
  KernelSpec spec;
  spec.kernel = JC_TRY(fact_row(facts, k_kernel_kinds))->value;
  spec.latent_scale = JC_TRY(fact_row(facts, k_latent_scales))->value;
  spec.format = JC_TRY(format_from_facts(facts));
  spec.target = Target{JC_TRY(fact_row(facts, k_targets))->name};
  if (Status mode = check_format_mode(spec.format, spec.latent_scale); !mode)
    return make_error(ErrorCode::invalid_input, mode.error().message);
  return spec;
}

}  // namespace jitcache
