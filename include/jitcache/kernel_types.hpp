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
// scale as a launch argument and applies it. per_token: no outer scale; the writer computes
// each token's own scale s_t = max|kv_c| / 2688, stores it in the record and quantizes
// relative to it, and the reader multiplies by the s_t it reads.
enum class LatentScale { identity, dynamic, per_token };
// The NVFP4 MLA KV record, one per layout the engines read (docs/record-formats.md):
// b12x's 432-byte (bf16 RoPE), 368-byte (fp8 RoPE) and 304-byte (no RoPE, per-token) records
// vLLM/FlashMLA's 352-byte record and FlashInfer's GLM NVFP4 416-byte record, one record
// per slot; then the page-major records, whose bytes are split between a page's data and
// its footer: FlashInfer's DeepSeek-V4 384-byte record and DeepSeek-V4.1's 288-byte one.
// The RoPE formats bf16 and fp8 of the CLI and the older API are the first two.
enum class RecordFormat {
  b12x_432,
  b12x_368,
  b12x_304,
  flashmla_352,
  flashinfer_glm_416 = 4,
  flashinfer_dsv4_384 = 5,
  flashmla_v41_288 = 6
};

const char* to_string(KernelKind kind);
const char* to_string(LatentScale scale);
const char* to_string(RecordFormat format);
std::optional<KernelKind> parse_kernel_kind(std::string_view text);
std::optional<LatentScale> parse_latent_scale(std::string_view text);
// A format's name ("b12x-368"), or one of its aliases: the RoPE names "bf16" and "fp8".
std::optional<RecordFormat> parse_record_format(std::string_view text);
// Only the RoPE names "bf16" and "fp8" (the `--rope` option and the older API).
std::optional<RecordFormat> parse_rope_format(std::string_view text);

}  // namespace jitcache
