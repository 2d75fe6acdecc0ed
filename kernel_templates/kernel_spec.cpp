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
const char* to_string(RopeFormat rope) { return k_rope_formats[rope].name; }

std::optional<KernelKind> parse_kernel_kind(std::string_view text) { return parse(k_kernel_kinds, text); }
std::optional<LatentScale> parse_latent_scale(std::string_view text) { return parse(k_latent_scales, text); }
std::optional<RopeFormat> parse_rope_format(std::string_view text) { return parse(k_rope_formats, text); }

int record_bytes(RopeFormat rope) { return k_rope_formats[rope].record_bytes; }

LatentScale latent_scale_for(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::identity: return LatentScale::identity;
    case ScaleMode::dynamic: return LatentScale::dynamic;
  }
  return LatentScale::dynamic;  // a value outside the enum: the variant right for any scale
}

std::string KernelSpec::label() const {
  return std::string(to_string(kernel)) + "/" + to_string(latent_scale) + "/" + to_string(rope) +
         "/" + target.name;
}

FactMap KernelSpec::to_facts() const {
  return {{std::string(k_kernel_kinds.fact), to_string(kernel)},
          {std::string(k_latent_scales.fact), to_string(latent_scale)},
          {std::string(k_rope_formats.fact), to_string(rope)},
          {std::string(k_targets.fact), target.name}};
}

Result<KernelSpec> KernelSpec::from_facts(const FactMap& facts) {
  KernelSpec spec;
  spec.kernel = JC_TRY(fact_row(facts, k_kernel_kinds))->value;
  spec.latent_scale = JC_TRY(fact_row(facts, k_latent_scales))->value;
  spec.rope = JC_TRY(fact_row(facts, k_rope_formats))->value;
  spec.target = Target{JC_TRY(fact_row(facts, k_targets))->name};
  return spec;
}

}  // namespace jitcache
