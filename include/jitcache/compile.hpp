// Kernels from outside: the values of the compile API (Runtime::compile, Runtime::lookup,
// jitcache_compile in jitcache.h). A kernel library hands jitcache its source (CUDA C++,
// NVVM IR or PTX) for one entry and one exact target, tagged with the family it belongs to
// and the spec facts that select its variant; jitcache compiles it once per key across
// processes and keeps the cubin in its verified cache.
//
// Spec-keyed lookups. A library whose source generation is expensive looks a kernel up by
// family, spec and target before generating anything. That is only safe when the spec
// determines the source; when it does not (some input changed the code without being a
// fact, as the seed's latent scale was), a lookup would replay the wrong kernel. So every
// entry records the source it was built from, and whenever the library does bring the
// source (always on a miss, and on the hits chosen for verification) jitcache compares:
// a difference is an error naming the family, the spec and both digests, and the entry is
// not served.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jitcache {

enum class SourceKind {
  cuda,  // CUDA C++ (+ named headers) through NVRTC
  nvvm,  // NVVM IR, text or bitcode, through libNVVM, then nvJitLink
  ptx,   // PTX through nvJitLink
};

const char* to_string(SourceKind kind);  // "cuda", "nvvm", "ptx"
std::optional<SourceKind> parse_source_kind(std::string_view text);

// What ptxas reports for the entry function; -1 where it said nothing.
struct ResourceUsage {
  int registers = -1;
  int stack_frame_bytes = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
};

struct KernelRequest {
  std::string family;                       // a declared family (Runtime::declare_family)
  std::map<std::string, std::string> spec;  // spec fact name -> value, exactly the family's facts
  SourceKind kind = SourceKind::cuda;       // must be the family's
  std::string text;                         // the source; NVVM bitcode as its bytes
  std::vector<std::pair<std::string, std::string>> headers;  // include name, text (cuda only)
  std::string entry;                        // the kernel's symbol
  std::string target;                       // exact: "sm_90", "sm_100a", "sm_120a"
  std::vector<std::string> options;         // for the tool that reads the source; no architecture
};

// The values one spec fact may take: the listed strings, or (empty list) any non-empty string.
struct FactDomain {
  std::vector<std::string> allowed;
  bool any() const { return allowed.empty(); }
  // The same values, in any order.
  friend bool operator==(const FactDomain& a, const FactDomain& b);
};

// A family's declaration: its source kind and every fact that selects its variants. A spec
// must name each fact exactly once, with an allowed value.
struct SpecSchema {
  std::string family;
  SourceKind kind = SourceKind::cuda;
  std::map<std::string, FactDomain> facts;
  friend bool operator==(const SpecSchema&, const SpecSchema&) = default;
};

struct CompiledKernel {
  std::string family;
  SourceKind kind = SourceKind::cuda;
  std::string entry;
  std::string target;
  std::vector<std::uint8_t> cubin;
  ResourceUsage usage;
  std::string log;           // every tool's log, as compiled (also when read from the cache)
  std::string key;           // the cache key, 32 hex digits
  bool from_cache = false;   // found in the cache (memory, disk or remote), not compiled by this call
  bool from_remote = false;  // found in the shared remote tier
  bool verified = false;     // this call compared the source with the spec's record, and they agree
  double ms = 0.0;           // the call's wall time
};

enum class LookupOutcome {
  hit,     // the kernel, by spec alone
  miss,    // nothing cached for the spec: generate the source and compile()
  verify,  // cached, but this hit was chosen for shadow verification: generate the source and
           // compile(), which checks it against the record before serving the entry
};
const char* to_string(LookupOutcome outcome);  // "hit", "miss", "verify"

struct KernelLookup {
  LookupOutcome outcome = LookupOutcome::miss;
  std::optional<CompiledKernel> kernel;  // set on a hit only
};

}  // namespace jitcache
