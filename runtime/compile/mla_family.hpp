// jitcache's own NVFP4 MLA kernels as a family of the compile API: the spec schema an
// outside library would declare for them, and the request it would send for one generated
// variant. The NVRTC back end (nvrtc_compiler.cpp) builds that request and compiles it
// through compile_source, so own kernels and outside kernels share one compile path.
//
// The schema's facts are the variant dimensions that select the generated text (kernel,
// latent_scale, rope), read from their tables (kernel_templates/variant_dimensions.hpp): a
// new row is a new allowed value here without anyone editing this file. The target is not
// a spec fact: it is the request's own field, which compile_source checks against the
// targets table (parse_target).
//
// KernelCache's keys do not come from here: its entries keep their own facts
// (kernel_facts), so existing caches stay valid.
#pragma once

#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "kernel_templates/generator.hpp"
#include "runtime/compile/kernel_request.hpp"

namespace jitcache {

inline constexpr const char* k_mla_family = "jitcache.nvfp4_mla";

// The family's schema, built once from the dimension tables.
const SpecSchema& mla_schema();

// The request for one generated variant: family k_mla_family, spec facts from
// source.spec (its to_facts() without the target), kind cuda, the generated text and
// headers, the entry, the exact target, and `options` less the architecture option that
// names source.spec's target (the target field owns it; any other architecture option is
// left in, for compile_source to refuse).
KernelRequest mla_request(const GeneratedSource& source, const std::vector<std::string>& options);

// A request of the family: its family is k_mla_family and its spec fits mla_schema(); else
// ErrorCode::invalid_argument naming the family and the fact.
Status validate_mla_request(const KernelRequest& request);

}  // namespace jitcache
