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
// A new RoPE format: its enumerator (include/jitcache/kernel_types.hpp), a row in
// k_rope_formats, its device enumerator and code (kernel_templates/nvfp4_mla.cuh), and a
// case in the host executor's dispatch (runtime/kv/host_executor.cpp), which the compiler
// asks for. Everything else follows from the row.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitcache/kernel_types.hpp"
#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache {

// One dimension: the cache fact that records it and one row per value. Rows of an enum
// dimension are in enumerator order (checked below), so a row is found by index.
template <class Row, std::size_t N>
struct Dimension {
  std::string_view fact;  // "kernel", "latent_scale", "rope", "target"
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
  const char* body;    // the device template it instantiates
};

inline constexpr Dimension<KernelKindRow, 2> k_kernel_kinds{
    "kernel",
    {{
        {KernelKind::writer, "writer", "jc_nvfp4_mla_writer", "jc::WriterParams", "jc::writer_kernel"},
        {KernelKind::gather, "gather", "jc_nvfp4_mla_gather", "jc::GatherParams", "jc::gather_kernel"},
    }}};
static_assert(k_kernel_kinds.in_enumerator_order());

// ---- latent-scale mode ----------------------------------------------------------------

struct LatentScaleRow {
  LatentScale value;
  const char* name;
  jc::LatentMode device;
  const char* device_text;  // `device` as generated code spells it
};

inline constexpr Dimension<LatentScaleRow, 2> k_latent_scales{
    "latent_scale",
    {{
        {LatentScale::identity, "identity", jc::LatentMode::identity, "jc::LatentMode::identity"},
        {LatentScale::dynamic, "dynamic", jc::LatentMode::dynamic, "jc::LatentMode::dynamic"},
    }}};
static_assert(k_latent_scales.in_enumerator_order() && k_latent_scales.device_values_match());

// ---- RoPE format ----------------------------------------------------------------------

// One RoPE enum, two spellings. The kernel text keeps jc::RopeMode: NVRTC compiles it
// without a standard library, so it cannot include the public header (<optional>,
// <string_view>), and its bytes are hashed into every cache key, so moving the enum out of
// it would change every key. The public header cannot include the kernel text either (it
// is not installed). So jitcache::RopeFormat is a checked alias of jc::RopeMode: this table
// is the only crossing between the two (`device`), and the asserts after it hold that the
// two agree value for value and that each record size is the kernel's own. The same goes
// for LatentScale and jc::LatentMode.
struct RopeFormatRow {
  RopeFormat value;
  const char* name;
  jc::RopeMode device;
  const char* device_text;  // `device` as generated code spells it
  int record_bytes;         // one token's nvfp4_ds_mla record
};

inline constexpr Dimension<RopeFormatRow, 2> k_rope_formats{
    "rope",
    {{
        {RopeFormat::bf16, "bf16", jc::RopeMode::bf16, "jc::RopeMode::bf16", jc::k_record_bytes_bf16_rope},
        {RopeFormat::fp8, "fp8", jc::RopeMode::fp8, "jc::RopeMode::fp8", jc::k_record_bytes_fp8_rope},
    }}};
static_assert(k_rope_formats.in_enumerator_order() && k_rope_formats.device_values_match());

consteval bool rope_record_sizes_are_the_kernels() {
  for (const RopeFormatRow& row : k_rope_formats.rows)
    if (jc::record_bytes(row.device) != row.record_bytes) return false;
  return true;
}
static_assert(rope_record_sizes_are_the_kernels(), "a RoPE row's record size differs from jc::record_bytes");

// ---- target ---------------------------------------------------------------------------

// Targets are exact architecture names (the driver reports them), not an enum; the table
// lists the ones this build generates code for.
enum class Shipped { by_default, on_request };

struct TargetRow {
  const char* name;  // the NVRTC --gpu-architecture value
  Shipped shipped;   // by_default: one of the product's targets (`jitcache compile`'s default)
};

// sm_90 is the Hopper baseline (no wgmma needed here); the "a" targets are the
// arch-specific Blackwell variants the product ships for.
inline constexpr Dimension<TargetRow, 9> k_targets{
    "target",
    {{
        {"sm_90", Shipped::by_default},
        {"sm_90a", Shipped::on_request},
        {"sm_100", Shipped::on_request},
        {"sm_100a", Shipped::by_default},
        {"sm_103a", Shipped::on_request},
        {"sm_110a", Shipped::on_request},
        {"sm_120", Shipped::on_request},
        {"sm_120a", Shipped::by_default},
        {"sm_121a", Shipped::on_request},
    }}};

}  // namespace jitcache
