// Fakes for tests of the source cache (runtime/compile/source_cache.hpp) and of what reads
// its entries: tools with made-up versions and fingerprints, and a compile step whose
// "cubin" names its input (fast, no toolkit; not an ELF image, so such tests turn the
// cubin check off).
#pragma once

#include <string>

#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_compiler.hpp"

namespace jitcache::testing {

inline ToolFacts fake_tools(SourceKind kind, const std::string& fingerprint = "fp-1") {
  ToolFacts tools;
  for (const auto& name : tools_for(kind)) tools[name] = ToolFact{"13.0", name + "-" + fingerprint};
  return tools;
}

inline SourceOutput fake_output(const SourceInput& input) {
  SourceOutput out;
  const std::string image = "CUBIN:" + input.target + ":" + input.entry + ":" + input.text;
  out.cubin.assign(image.begin(), image.end());
  out.ptx = "// ptx of " + input.entry;
  out.usage = {32, 0, 0, 0};
  out.log = "== fake ==\nok\n";
  out.compile_ms = 5.0;
  out.tools["nvrtc"] = "13.0";
  return out;
}

}  // namespace jitcache::testing
