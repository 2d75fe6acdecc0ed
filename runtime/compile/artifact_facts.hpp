// The facts a compiled artifact carries inside itself. The generator emits them as the
// device string `jc_artifact_facts` ("name=value;..."), so they can be read back from
// the cubin (by parsing its ELF, no GPU needed) and from the PTX text. The audit and the
// bind-time guard trust these, not only the cache index.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"  // FactMap

namespace jitcache {

// "a=1;b=2;" -> {a:1, b:2}. Malformed text (no '=', duplicate name) is an error.
Result<FactMap> parse_embedded_facts(std::string_view text);

// Reads the `jc_artifact_facts` symbol's bytes from an ELF64 cubin. Every offset is
// bounds-checked: a truncated or hostile image is an error, never a crash.
// ErrorCode::not_found when the image has no such symbol (an artifact from before
// artifacts carried facts).
Result<FactMap> facts_from_cubin(std::span<const std::uint8_t> cubin);

// The same from PTX: the initializer of `.global ... jc_artifact_facts[N] = {...}`.
Result<FactMap> facts_from_ptx(std::string_view ptx);

}  // namespace jitcache
