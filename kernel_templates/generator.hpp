// The generator: turns a KernelSpec into CUDA source specialized for it. The
// specialization is compile-time (template arguments), so the identity variant contains
// no latent-scale arithmetic at all, and the dynamic variant takes the scale as a launch
// argument so one compiled kernel serves every calibrated layer.
#pragma once

#include <string>
#include <vector>

#include "kernel_templates/embedded_headers.hpp"
#include "kernel_templates/kernel_spec.hpp"

namespace jitcache {

// Bump when the generated text or the kernel ABI changes in a way the template headers'
// bytes do not already show.
constexpr int k_generator_version = 1;

// The device symbol that carries the artifact's own facts. (The entry points are
// k_kernel_kinds' `entry`, kernel_templates/variant_dimensions.hpp.)
constexpr const char* k_facts_symbol = "jc_artifact_facts";

struct GeneratedSource {
  KernelSpec spec;
  std::string program_name;  // e.g. "jc_nvfp4_mla_writer_per-token_b12x-304.cu"
  std::string entry;         // the kernel's extern "C" name
  std::string source;        // the specialized translation unit
  std::vector<kernel_templates::EmbeddedHeader> headers;  // everything it may include
  // The specialization facts (spec.to_facts(), then record_bytes, latent_dim, ...), as
  // also embedded in the artifact under k_facts_symbol.
  FactMap facts;
};

GeneratedSource generate(const KernelSpec& spec);

// Whether nvfp4_mla.cuh's own kernel bodies build the variant (b12x-432 and b12x-368 with an
// identity or dynamic scale, whose keys predate the formats) rather than
// nvfp4_mla_formats.cuh's. The host executor runs the same bodies.
bool built_from_first_text(const KernelSpec& spec);

// Every (kernel, latent_scale, format) combination a format can be written with, for one
// target, in table order.
std::vector<KernelSpec> all_variants(const Target& target);

}  // namespace jitcache
