// What a kernel is specialized for. A KernelSpec is the first value of the pipeline
// (KernelSpec -> GeneratedSource -> CompiledArtifact -> ...); every field changes the
// generated code or the binary, so every field is a fact of the cache key. The values of
// each field are tables (kernel_templates/variant_dimensions.hpp).
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "jitcache/error.hpp"
#include "jitcache/kernel_types.hpp"
#include "jitcache/scales.hpp"

namespace jitcache {

// Facts as name -> value: a spec's own, a generated source's, an artifact's embedded ones.
using FactMap = std::map<std::string, std::string>;

// An exact compilation target. sm_120a, sm_120 and sm_121a are different targets: an
// arch-specific ("a") cubin runs only on that exact chip.
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
