// A kernel request from outside jitcache (include/jitcache/compile.hpp): an engine's source
// (CUDA C++, NVVM IR or PTX) for one entry and an exact target, tagged with the family it
// belongs to and the spec facts that select its variant. The family declares its kind and
// those facts once (SpecSchema); the request's facts and keys are derived here, for the
// source cache (source_cache.hpp).
//
// Two keys per request:
//   key       record=source_bundle and every fact that changes the binary: the facts
//             schema version, family, spec.<name> for each spec fact, kind, target (exact),
//             for each tool that touches the binary for this kind tool.<name>.version and
//             tool.<name>.fingerprint (nvrtc for cuda; libnvvm and nvjitlink for nvvm;
//             nvjitlink for ptx), then entry, options (normalised), source_xxh3 and
//             header.<name> for each header.
//   spec key  record=spec_index and only what a library knows before it generates any
//             source: schema version, family, spec facts, kind, target and tools. What the
//             spec does not name (entry, options, source, headers) is what its record holds
//             and what shadow verification compares. A spec is complete when it determines
//             all of them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/facts.hpp"
#include "jitcache/compile.hpp"
#include "jitcache/error.hpp"
#include "runtime/compile/source_compiler.hpp"

namespace jitcache {

// Bump when the set or meaning of the request facts changes: old entries become
// unreachable instead of being misread.
inline constexpr int k_request_facts_schema = 2;

// A schema that can be used: a family name and fact names from [A-Za-z0-9_.-] (1 to 64
// characters), no empty allowed value, no value listed twice.
Status check_schema(const SpecSchema& schema);

// Refuses a missing, unknown or out-of-range fact (ErrorCode::invalid_argument), naming
// the family, the fact and the allowed values.
Status validate_spec(const SpecSchema& schema, const std::map<std::string, std::string>& spec);

// The schemas by family; thread-safe. Registering a family twice with a different schema
// is an error; an identical re-registration is fine.
class SpecRegistry {
 public:
  Status add(SpecSchema schema);
  // Shared, immutable: a lookup copies no schema.
  std::shared_ptr<const SpecSchema> find(const std::string& family) const;
  // The schema of the family (not_found when unregistered), with the spec checked against
  // it (invalid_argument naming the fact).
  Result<std::shared_ptr<const SpecSchema>> validate(const std::string& family,
                                                     const std::map<std::string, std::string>& spec) const;
  // The same for a request, whose kind must also be the family's.
  Status validate(const KernelRequest& request) const;
  // The process's registry.
  static SpecRegistry& global();

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, std::shared_ptr<const SpecSchema>> m_schemas;
};

// One tool that touches the binary: its version and its fingerprint (a digest of the
// loaded build, see Compiler::fingerprint, nvvm_fingerprint, nvjitlink_fingerprint).
struct ToolFact {
  std::string version;
  std::string fingerprint;
};
using ToolFacts = std::map<std::string, ToolFact>;  // "nvrtc", "libnvvm", "nvjitlink"

// What the compile step (compile_source) takes for `request`; `name` names it in messages
// and the tools' logs (empty: the kind's default).
SourceInput source_input(const KernelRequest& request, std::string name = {});

// A spec for messages: "{name=value, ...}".
std::string describe_spec(const std::map<std::string, std::string>& spec);

// The tools a kind runs, in order.
std::vector<std::string> tools_for(SourceKind kind);

// The process's tools for `kind` (unavailable when one is missing). NVRTC's fingerprint is
// `nvrtc`'s when given (the runtime's compiler, which remembers it in the cache directory,
// so that a fresh process does not compile the fingerprint program), else a process-wide
// compiler's. libNVVM and nvJitLink are loaded for their versions, unless `memo` (a
// fingerprint memo, fingerprint_memo.hpp) knows the file they would be loaded from: a
// fresh process can then key a lookup without loading them. A library loaded here is
// remembered in `memo`.
Result<ToolFacts> probe_tools(SourceKind kind, const Compiler* nvrtc = nullptr,
                              const std::filesystem::path& memo = {});

// The options as they enter the key: each trimmed of surrounding white space, empty ones
// dropped, order kept (it can matter to the tools), joined by newlines.
std::string normalized_options(const std::vector<std::string>& options);

// The `record` fact of the two kinds of entry; jitcache's own kernels have no such fact.
inline constexpr std::string_view k_record_source_bundle = "source_bundle";
inline constexpr std::string_view k_record_spec_index = "spec_index";

// Whether an entry's facts are a source cache entry's (either record), not a KernelCache one's.
bool is_request_facts(const cache::Facts& facts);

// The request's facts (key = facts.key()). `tools` must hold every tool of tools_for(kind).
Result<cache::Facts> request_facts(const KernelRequest& request, const ToolFacts& tools);

// The spec key's facts: record=spec_index, the schema version, family, spec facts, kind,
// target and tools. The request's entry, options, source and headers play no part.
Result<cache::Facts> spec_facts(const KernelRequest& request, const ToolFacts& tools);

// The same from a stored source bundle's facts (record=source_bundle): what an audit groups
// entries by to find one spec built from two sources (or entries, or options). invalid_input
// for other facts.
Result<cache::Facts> spec_facts_of(const cache::Facts& bundle_facts);

}  // namespace jitcache
