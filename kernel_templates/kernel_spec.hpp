// What a kernel is specialized for. A KernelSpec is the first value of the pipeline
// (KernelSpec -> GeneratedSource -> CompiledArtifact -> ...); every field changes the
// generated code or the binary, so every field is a fact of the cache key. The values of
// each field are tables (kernel_templates/variant_dimensions.hpp).
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitcache/error.hpp"
#include "jitcache/kernel_types.hpp"
#include "jitcache/scales.hpp"

namespace jitcache {

// Facts as name -> value: a spec's own, a generated source's, an artifact's embedded ones.
using FactMap = std::map<std::string, std::string>;

// An exact compilation target. sm_120a, sm_120f, sm_120 and sm_121a are different
// targets: an arch-specific ("a") cubin runs only on that exact chip, a family-specific
// ("f") one on its family (variant_dimensions.hpp, k_targets).
struct Target {
  std::string name;  // "sm_90", "sm_100a", "sm_120a", ...

  bool operator==(const Target&) const = default;
  // The NVRTC --gpu-architecture value.
  const std::string& arch_option() const { return name; }
};

// Targets this build of jitcache generates code for.
std::span<const std::string_view> supported_targets();
// The three targets of the product: sm_90, sm_100a, sm_120a.
std::span<const std::string_view> default_targets();
Result<Target> parse_target(std::string_view text);

// NVIDIA's rule of which devices a cubin runs on (variant_dimensions.hpp: each target's
// compute capability and reach): whether a cubin of `target` runs on a device of compute
// capability major.minor. False for a name that is no target.
bool cubin_runs_on(std::string_view target, int major, int minor);
// The targets whose cubins run on a device of compute capability major.minor, most
// specific first: the arch-specific target of that capability, then the family-specific
// ones from the highest compute capability not above the device's, then the generic ones
// likewise. Empty for a device no target runs on (8.9, say).
std::vector<std::string> targets_for_device(int major, int minor);
// The error for a target whose cubin cannot run on major.minor (invalid_argument, naming
// both, what the target runs on and the targets that do run there); ok when it runs.
Status check_cubin_runs_on(std::string_view target, int major, int minor);
// "12.0" for major 12, minor 0.
std::string capability_text(int major, int minor);
// The known devices' compute capabilities a target's cubin runs on: "10.0 and 10.3",
// "12.0 only".
std::string capabilities_of(std::string_view target);

// The target for a device: the first of targets_for_device(major, minor) for which
// `held` says the cache already holds every cubin needed, else the one compiled on demand:
// the chip's product target when one runs there (a row shipped by default: sm_90 on
// Hopper, whose kernels use nothing of sm_90a; sm_100a, sm_120a), else the most specific. `held` is asked in that order and not after the first yes; its
// error is returned. unavailable when no target runs on the device, naming its capability.
Result<Target> choose_device_target(int major, int minor, const std::function<Result<bool>(const Target&)>& held);

int record_bytes(RecordFormat format);
// The values of one gathered row: 576 (latent, then RoPE), or 512 for a record without RoPE.
int gathered_row_elems(RecordFormat format);
// Whether a format can be written in a latent-scale mode: b12x-432 and flashmla-352 take
// identity or dynamic, b12x-368 all three, b12x-304 per-token only.
bool format_allows(RecordFormat format, LatentScale scale);
// The error for a mode a format does not take, naming both and the modes it does take.
Status check_format_mode(RecordFormat format, LatentScale scale);

// The kernel variant a layer's scale needs: identity only for a scale of exactly 1.0.
LatentScale latent_scale_for(ScaleMode mode);

// The fact that names a format in a key: {"format", name}, or {"rope", "bf16"|"fp8"} for
// b12x-432 and b12x-368 (the spelling of keys written before formats existed).
std::pair<std::string, std::string> format_fact(RecordFormat format);
// The format the facts name, from either spelling.
Result<RecordFormat> format_from_facts(const FactMap& facts);

struct KernelSpec {
  KernelKind kernel = KernelKind::writer;
  LatentScale latent_scale = LatentScale::identity;
  RecordFormat format = RecordFormat::b12x_432;
  Target target;

  bool operator==(const KernelSpec&) const = default;
  // "writer/dynamic/b12x-368/sm_100a": for logs and tables.
  std::string label() const;

  // The facts that name this variant: kernel, latent_scale, the format, target. The
  // generator's facts, the cache key and the artifact's embedded facts all start from
  // these. The format is `format=<name>`, except b12x-432 and b12x-368, which keep the
  // `rope=bf16|fp8` of the keys written before formats existed (variant_dimensions.hpp).
  FactMap to_facts() const;
  // The inverse: reads those four facts (others are ignored). A missing fact, a value
  // outside its table, a format named twice (rope and format) or a mode its format does
  // not take is ErrorCode::invalid_input naming the fact.
  static Result<KernelSpec> from_facts(const FactMap& facts);
};

}  // namespace jitcache
