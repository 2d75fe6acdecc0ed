#include "kernel_templates/kernel_spec.hpp"

#include <algorithm>

#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache {
namespace {
// sm_90 is the Hopper baseline (no wgmma needed here); the "a" targets are the
// arch-specific Blackwell variants the product ships for.
constexpr std::string_view k_supported[] = {"sm_90",   "sm_90a",  "sm_100",  "sm_100a", "sm_103a",
                                            "sm_110a", "sm_120",  "sm_120a", "sm_121a"};
constexpr std::string_view k_defaults[] = {"sm_90", "sm_100a", "sm_120a"};
}  // namespace

std::span<const std::string_view> supported_targets() { return k_supported; }
std::span<const std::string_view> default_targets() { return k_defaults; }

Result<Target> parse_target(std::string_view text) {
  if (std::find(std::begin(k_supported), std::end(k_supported), text) != std::end(k_supported))
    return Target{std::string(text)};
  std::string list;
  for (auto t : k_supported) list += (list.empty() ? "" : ", ") + std::string(t);
  return make_error(ErrorCode::invalid_argument,
                    "unknown target '" + std::string(text) + "' (supported: " + list + ")");
}

const char* to_string(KernelKind kind) {
  return kind == KernelKind::writer ? "writer" : "gather";
}
const char* to_string(LatentScale scale) {
  return scale == LatentScale::identity ? "identity" : "dynamic";
}
const char* to_string(RopeFormat rope) { return rope == RopeFormat::bf16 ? "bf16" : "fp8"; }

std::optional<KernelKind> parse_kernel_kind(std::string_view text) {
  if (text == "writer") return KernelKind::writer;
  if (text == "gather") return KernelKind::gather;
  return std::nullopt;
}
std::optional<LatentScale> parse_latent_scale(std::string_view text) {
  if (text == "identity") return LatentScale::identity;
  if (text == "dynamic") return LatentScale::dynamic;
  return std::nullopt;
}
std::optional<RopeFormat> parse_rope_format(std::string_view text) {
  if (text == "bf16") return RopeFormat::bf16;
  if (text == "fp8") return RopeFormat::fp8;
  return std::nullopt;
}

int record_bytes(RopeFormat rope) {
  return jc::record_bytes(rope == RopeFormat::bf16 ? jc::RopeMode::bf16 : jc::RopeMode::fp8);
}

std::string KernelSpec::label() const {
  return std::string(to_string(kernel)) + "/" + to_string(latent_scale) + "/" + to_string(rope) +
         "/" + target.name;
}

}  // namespace jitcache
