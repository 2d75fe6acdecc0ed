// The names of what a kernel is specialized for, shared by the public API and the
// internals (kernel_templates/kernel_spec.hpp builds on them). Each enum has one table
// (kernel_templates/variant_dimensions.hpp) holding its names, cache facts and sizes; a
// new enumerator needs a row there, and the build (-Werror=switch-enum) names every
// switch that must handle it.
#pragma once

#include <optional>
#include <string_view>

namespace jitcache {

enum class KernelKind { writer, gather };
// identity: built for scale 1.0, no scale arithmetic at all. dynamic: takes the layer's
// scale as a launch argument and applies it.
enum class LatentScale { identity, dynamic };
enum class RopeFormat { bf16, fp8 };

const char* to_string(KernelKind kind);
const char* to_string(LatentScale scale);
const char* to_string(RopeFormat rope);
std::optional<KernelKind> parse_kernel_kind(std::string_view text);
std::optional<LatentScale> parse_latent_scale(std::string_view text);
std::optional<RopeFormat> parse_rope_format(std::string_view text);

}  // namespace jitcache
