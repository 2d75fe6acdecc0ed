// The kernel variant dimensions, each one constexpr table: kernel, latent-scale mode, RoPE
// format and target. A row holds everything that differs by its value: its name, the
// device enumerator and how generated code spells it, the record size. Names, cache facts,
// parsing, printing, the CLI's choices and the loops over all variants are all read from
// here; code that behaves differently per value switches over the enum without a default,
// and -Werror=switch-enum (top CMakeLists.txt) stops the build at every switch a new
// enumerator misses.
//
// One spelling per value: the name printed, parsed from the CLI and written as the cache
// fact's value is the same string, because `jitcache inspect --rope fp8` filters index
// rows by the fact value the user typed. Renaming a value is therefore a cache key change.
//
// A new record format: its enumerator (include/jitcache/kernel_types.hpp), a row in
// k_record_formats, its device enumerator and layout row (jc::fmt::layout,
// kernel_templates/nvfp4_mla_formats.cuh), and a case in the host executor's dispatch
// (runtime/kv/host_executor.cpp), which the compiler asks for. Everything else follows
// from the row.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitcache/kernel_types.hpp"
#include "kernel_templates/nvfp4_mla_formats.cuh"

namespace jitcache {

// One dimension: the cache fact that records it and one row per value. Rows of an enum
// dimension are in enumerator order (checked below), so a row is found by index.
template <class Row, std::size_t N>
struct Dimension {
  std::string_view fact;  // "kernel", "latent_scale", "format", "target"
  std::array<Row, N> rows;

  static constexpr std::size_t size() { return N; }

  constexpr const Row* find(std::string_view name) const {
    for (const Row& row : rows)
      if (name == row.name) return &row;
    return nullptr;
  }

  // The row of an enumerator. An enumerator without a row throws: in a constant
  // expression (the host executor's dispatch) that is a compile error.
  template <class Value>
  constexpr const Row& operator[](Value value) const {
    return rows.at(static_cast<std::size_t>(std::to_underlying(value)));
  }

  constexpr bool in_enumerator_order() const {
    for (std::size_t i = 0; i < N; ++i)
      if (static_cast<std::size_t>(std::to_underlying(rows[i].value)) != i) return false;
    return true;
  }

  // Each row's device enumerator has its host enumerator's value.
  constexpr bool device_values_match() const {
    for (const Row& row : rows)
      if (std::to_underlying(row.device) != std::to_underlying(row.value)) return false;
    return true;
  }

  // Every value in enumerator order, for loops over the whole dimension (tests, benches),
  // so that a new row is covered without anyone editing the loop.
  constexpr auto values() const {
    std::array<decltype(Row::value), N> out{};
    for (std::size_t i = 0; i < N; ++i) out[i] = rows[i].value;
    return out;
  }

  // For CLI::IsMember.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const Row& row : rows) out.emplace_back(row.name);
    return out;
  }

  // "bf16|fp8" (separator "|"), ...
  std::string joined(std::string_view separator) const {
    std::string out;
    for (const Row& row : rows) {
      if (!out.empty()) out += separator;
      out += row.name;
    }
    return out;
  }

  // "bf16 or fp8", "a, b or c": for messages. `describe` may add to each name.
  template <class Describe>
  std::string alternatives(Describe&& describe) const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += describe(rows[i]);
    }
    return out;
  }
  std::string alternatives() const {
    return alternatives([](const Row& row) { return std::string(row.name); });
  }
};

// ---- kernel ---------------------------------------------------------------------------

struct KernelKindRow {
  KernelKind value;
  const char* name;
  const char* entry;   // the extern "C" symbol of the generated kernel
  const char* params;  // its launch parameter struct, as generated code names it
  const char* body;    // the device template it instantiates (nvfp4_mla.cuh's first text)
  const char* formats_body;  // the same in nvfp4_mla_formats.cuh, for every other variant
};

inline constexpr Dimension<KernelKindRow, 2> k_kernel_kinds{
    "kernel",
    {{
        {KernelKind::writer, "writer", "jc_nvfp4_mla_writer", "jc::WriterParams", "jc::writer_kernel",
         "jc::fmt::writer_kernel"},
        {KernelKind::gather, "gather", "jc_nvfp4_mla_gather", "jc::GatherParams", "jc::gather_kernel",
         "jc::fmt::gather_kernel"},
    }}};
static_assert(k_kernel_kinds.in_enumerator_order());

// ---- latent-scale mode ----------------------------------------------------------------

// The device enumerator is jc::fmt::Scaling (kernel_templates/nvfp4_mla_formats.cuh), whose
// first two values are nvfp4_mla.cuh's jc::LatentMode. `legacy_text` spells a mode as the
// kernels of nvfp4_mla.cuh take it (the first two formats' identity and dynamic kernels are
// generated from there, so that their cache keys stay as they were); per-token has none.
struct LatentScaleRow {
  LatentScale value;
  const char* name;
  jc::fmt::Scaling device;
  const char* device_text;  // `device` as generated code spells it
  const char* legacy_text;  // jc::LatentMode as generated code spells it, or nullptr
};

inline constexpr Dimension<LatentScaleRow, 3> k_latent_scales{
    "latent_scale",
    {{
        {LatentScale::identity, "identity", jc::fmt::Scaling::identity, "jc::fmt::Scaling::identity", "jc::LatentMode::identity"},
        {LatentScale::dynamic, "dynamic", jc::fmt::Scaling::dynamic, "jc::fmt::Scaling::dynamic", "jc::LatentMode::dynamic"},
        {LatentScale::per_token, "per-token", jc::fmt::Scaling::per_token, "jc::fmt::Scaling::per_token", nullptr},
    }}};
static_assert(k_latent_scales.in_enumerator_order() && k_latent_scales.device_values_match());
static_assert(std::to_underlying(jc::LatentMode::identity) == std::to_underlying(jc::fmt::Scaling::identity) &&
              std::to_underlying(jc::LatentMode::dynamic) == std::to_underlying(jc::fmt::Scaling::dynamic));

// ---- record format --------------------------------------------------------------------

// One row per record the engines read; the byte map itself is the device row,
// jc::fmt::layout(), and the asserts below hold this table to it.
//
// How a key names the format: the first two formats were jitcache's only records and their
// keys say `rope=bf16` / `rope=fp8` (their RoPE alias). They keep saying it, so caches
// written before the format dimension keep hitting; every other format writes
// `format=<name>`. KernelSpec::to_facts()/from_facts() are the only place that knows.
inline constexpr std::string_view k_legacy_format_fact = "rope";

constexpr unsigned latent_bit(LatentScale scale) { return 1u << std::to_underlying(scale); }

struct RecordFormatRow {
  RecordFormat value;
  const char* name;          // as printed, parsed and written into keys
  const char* rope_alias;    // "bf16" / "fp8": the RoPE name of the older API and CLI, or nullptr
  jc::fmt::Format device;
  const char* device_text;   // `device` as generated code spells it
  const char* legacy_text;   // jc::RopeMode as generated code spells it, or nullptr
  int record_bytes;          // one token's record
  unsigned latent_scales;    // the latent_bit()s of the modes it can be written with
  const char* summary;       // for help texts and `jitcache kv formats`
  const char* reader;        // the engine that reads it
  int page_size;             // slots per page of a page-major record (data, then footer); 1: per slot
};

inline constexpr unsigned k_static_modes = latent_bit(LatentScale::identity) | latent_bit(LatentScale::dynamic);

inline constexpr Dimension<RecordFormatRow, 7> k_record_formats{
    "format",
    {{
        {RecordFormat::b12x_432, "b12x-432", "bf16", jc::fmt::Format::b12x_432, "jc::fmt::Format::b12x_432",
         "jc::RopeMode::bf16", 432, k_static_modes,
         "codes, 32 linear E4M3 scales, 16 zero bytes, 64 bf16 RoPE", "b12x sparse MLA (SM120)", 1},
        {RecordFormat::b12x_368, "b12x-368", "fp8", jc::fmt::Format::b12x_368, "jc::fmt::Format::b12x_368",
         "jc::RopeMode::fp8", 368, k_static_modes | latent_bit(LatentScale::per_token),
         "codes, 32 linear E4M3 scales, fp32 RoPE scale, s_t (per-token), 64 E4M3 RoPE",
         "b12x sparse MLA (SM120), per_token_scale for per-token", 1},
        {RecordFormat::b12x_304, "b12x-304", nullptr, jc::fmt::Format::b12x_304, "jc::fmt::Format::b12x_304",
         nullptr, 304, latent_bit(LatentScale::per_token), "codes, 32 linear E4M3 scales, s_t, no RoPE",
         "b12x GLM_NEXT (GLM-5.3 Flash)", 1},
        {RecordFormat::flashmla_352, "flashmla-352", nullptr, jc::fmt::Format::flashmla_352,
         "jc::fmt::Format::flashmla_352", nullptr, 352, k_static_modes,
         "codes, 64 unscaled E4M3 RoPE, 32 permuted E4M3 scales floored at 2^-9",
         "vLLM FlashMLASparseBackend (SM100), nvfp4_ds_mla", 1},
        {RecordFormat::flashinfer_glm_416, "flashinfer-glm-416", nullptr, jc::fmt::Format::flashinfer_glm_416,
         "jc::fmt::Format::flashinfer_glm_416", nullptr, 416, k_static_modes,
         "codes, 32 linear E4M3 scales, 64 bf16 RoPE; s_l as kv_global_scale",
         "FlashInfer SparseMLAGlmNvfp4Sm120Wrapper (SM120)", 1},
        // Page-major: a page of 64 slots holds every slot's data part, then every footer.
        // Identity only: neither reader takes a per-layer KV scale.
        {RecordFormat::flashinfer_dsv4_384, "flashinfer-dsv4-384", nullptr, jc::fmt::Format::flashinfer_dsv4_384,
         "jc::fmt::Format::flashinfer_dsv4_384", nullptr, 384, latent_bit(LatentScale::identity),
         "page data: 448 NoPE codes, 64 bf16 RoPE; page footer: 28 E4M3 scales, 4 zero bytes",
         "FlashInfer sparse MLA SM120, DeepSeek-V4 NVFP4 cache", jc::fmt::k_paged_page_size},
        {RecordFormat::flashmla_v41_288, "flashmla-v41-288", nullptr, jc::fmt::Format::flashmla_v41_288,
         "jc::fmt::Format::flashmla_v41_288", nullptr, 288, latent_bit(LatentScale::identity),
         "page data: 512 codes (RoPE included); page footer: 32 E4M3 scales floored at 2^-9, NaN-poisoned",
         "FlashInfer sparse MLA SM120, DeepSeek-V4.1 V41_FP4 extra cache", jc::fmt::k_paged_page_size},
    }}};
static_assert(k_record_formats.in_enumerator_order() && k_record_formats.device_values_match());

consteval bool record_sizes_are_the_kernels() {
  for (const RecordFormatRow& row : k_record_formats.rows) {
    const jc::fmt::Layout layout = jc::fmt::layout(row.device);
    if (layout.record_bytes != row.record_bytes || layout.page_size != row.page_size) return false;
    if ((layout.placement == jc::fmt::Placement::paged) != (row.page_size > 1)) return false;
    // A format nvfp4_ds_mla.cuh also writes has that text's record size.
    if (row.legacy_text != nullptr && row.rope_alias == nullptr) return false;
  }
  return jc::record_bytes(jc::RopeMode::bf16) == k_record_formats[RecordFormat::b12x_432].record_bytes &&
         jc::record_bytes(jc::RopeMode::fp8) == k_record_formats[RecordFormat::b12x_368].record_bytes;
}
static_assert(record_sizes_are_the_kernels(), "a format row's record size differs from the kernel text's");

constexpr bool allows(const RecordFormatRow& row, LatentScale scale) {
  return (row.latent_scales & latent_bit(scale)) != 0u;
}

// ---- target ---------------------------------------------------------------------------

// Targets are exact architecture names (the driver reports them), not an enum; the table
// lists the ones this build generates code for, with the compute capability each names
// and how far its cubin reaches.
enum class Shipped { by_default, on_request };

// Which devices a cubin of a target runs on: NVIDIA's rule, CUDA C++ Programming Guide,
// "Compute Capabilities" > "Feature Availability" (architecture- and family-specific
// features), and the NVIDIA blog "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce
// Family-Specific Architecture Features" (2025):
//   generic   sm_XY    every device of compute capability X.z with z >= Y (SASS is
//                      compatible within a major version, forward in the minor)
//   family    sm_XYf   the devices of X's family (k_device_capabilities: 10.0 and 10.3 for
//                      10, 11.0 for 11, 12.0 and 12.1 for 12) of compute capability >= X.Y:
//                      sm_100f runs on 10.0 and 10.3, sm_120f on 12.0 and 12.1
//   arch      sm_XYa   the devices of compute capability X.Y exactly: an sm_120a cubin never
//                      runs on a 12.1 device
// The most specific cubin that runs on a device is the best one for it: arch, then family
// (the highest compute capability first), then generic (kernel_spec.hpp:
// targets_for_device).
enum class TargetReach { generic, family, arch };

struct TargetRow {
  const char* name;  // the NVRTC --gpu-architecture value
  Shipped shipped;   // by_default: one of the product's targets (`jitcache compile`'s default)
  int major;         // the compute capability it is compiled for
  int minor;
  TargetReach reach;
};

// sm_90 is the Hopper baseline (no wgmma needed here); the "a" targets are the
// arch-specific Blackwell variants the product ships for; sm_100f and sm_120f are the
// family-specific ones, one cubin for a whole family (B200 and B300; RTX 50xx / RTX PRO
// and GB10).
//
// NVRTC 13.0 takes --gpu-architecture=sm_100f and sm_120f (and sm_103f, sm_110f, sm_121f;
// not sm_90f). Their cubins carry the same ELF header as sm_100 / sm_100a (e_flags
// 0x6006402, SM 100 in bits 8-15) and sm_120 / sm_120a (0x6007802); an "a" cubin alone
// sets attribute 9 of .nv.compat, and an "f" cubin of code that uses no family feature
// differs from the generic one only in the options its .note.nv.tkinfo records. The
// target is therefore a fact of the key (kernel_spec.hpp), never read back from a cubin.
inline constexpr Dimension<TargetRow, 11> k_targets{
    "target",
    {{
        {"sm_90", Shipped::by_default, 9, 0, TargetReach::generic},
        {"sm_90a", Shipped::on_request, 9, 0, TargetReach::arch},
        {"sm_100", Shipped::on_request, 10, 0, TargetReach::generic},
        {"sm_100a", Shipped::by_default, 10, 0, TargetReach::arch},
        {"sm_100f", Shipped::on_request, 10, 0, TargetReach::family},
        {"sm_103a", Shipped::on_request, 10, 3, TargetReach::arch},
        {"sm_110a", Shipped::on_request, 11, 0, TargetReach::arch},
        {"sm_120", Shipped::on_request, 12, 0, TargetReach::generic},
        {"sm_120a", Shipped::by_default, 12, 0, TargetReach::arch},
        {"sm_120f", Shipped::on_request, 12, 0, TargetReach::family},
        {"sm_121a", Shipped::on_request, 12, 1, TargetReach::arch},
    }}};

// The devices the rule above knows, by compute capability; a family is the devices of one
// major version here. A family-specific cubin runs on none other.
struct DeviceCapability {
  int major;
  int minor;
  const char* chips;  // for docs and messages
};

inline constexpr std::array<DeviceCapability, 6> k_device_capabilities{{
    {9, 0, "H100, H200, GH200"},
    {10, 0, "B200, GB200"},
    {10, 3, "B300, GB300"},
    {11, 0, "Jetson Thor"},
    {12, 0, "RTX 50xx, RTX PRO 6000"},
    {12, 1, "GB10 (DGX Spark)"},
}};

// Each target's name spells its compute capability and reach, and names a device above.
consteval bool targets_name_their_capability() {
  for (const TargetRow& row : k_targets.rows) {
    const std::string_view name = row.name;
    const int number = row.major * 10 + row.minor;
    const std::string_view digits = name.substr(3, number >= 100 ? 3 : 2);
    int parsed = 0;
    for (char c : digits) parsed = parsed * 10 + (c - '0');
    if (!name.starts_with("sm_") || parsed != number) return false;
    const std::string_view suffix = name.substr(3 + digits.size());
    const std::string_view expected = row.reach == TargetReach::arch     ? "a"
                                      : row.reach == TargetReach::family ? "f"
                                                                         : "";
    if (suffix != expected) return false;
    bool known = false;
    for (const DeviceCapability& d : k_device_capabilities) known = known || (d.major == row.major && d.minor == row.minor);
    if (!known) return false;
  }
  return true;
}
static_assert(targets_name_their_capability(), "a target row's name disagrees with its compute capability or reach");

}  // namespace jitcache
