// The kernel cache: joins the generator, a compiler back end and the generic store.
// It decides which facts identify a kernel binary (every fact that changes it, the
// latent scale's identity/dynamic mode first), and turns a KernelSpec into a verified
// CompiledArtifact: from this process's memory, from disk, or by compiling once per key
// across threads and processes.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "runtime/compiler.hpp"

namespace jitcache {

// Bump when the set or meaning of the facts below changes (a new fact, a renamed one):
// entries keyed under the old set become unreachable instead of being misread.
inline constexpr int k_kernel_facts_schema = 1;

// The facts of one kernel binary:
//   facts_schema, kernel_family, kernel, generator_version,
//   latent_scale (identity|dynamic), rope (bf16|fp8), record_bytes, latent_dim,
//   rope_dim, quant_block, threads_per_cta,
//   target (exact: sm_120a != sm_120 != sm_121a),
//   source_xxh3 (the generated translation unit), header.<name> (each header it may include),
//   compiler, compiler_version, compiler_fingerprint, options (normalized, space-joined),
//   env.<NAME> for every registered variable that affects compilation (unset reads as
//   its default), bundle_format.
Result<cache::Facts> kernel_facts(const GeneratedSource& source, const Compiler& compiler);

struct KernelFetch {
  std::shared_ptr<const CompiledArtifact> artifact;
  cache::CacheKey key;
  cache::Source source;  // memory, disk, coalesced or produced (compiled)
};

class KernelCache {
 public:
  KernelCache(cache::Store& store, const Compiler& compiler) : m_store(store), m_compiler(compiler) {}

  // The artifact for `spec`; compiles on a miss. A stored bundle that does not parse, or
  // whose embedded facts disagree with the request, is removed and compiled again.
  Result<KernelFetch> get(const KernelSpec& spec);

 private:
  Result<KernelFetch> fetch(const KernelSpec& spec, const GeneratedSource& source,
                            const cache::Facts& facts);

  cache::Store& m_store;
  const Compiler& m_compiler;
  std::mutex m_mutex;
  // Parsed artifacts of this process, so a repeated get does not re-parse a bundle.
  std::unordered_map<cache::CacheKey, std::shared_ptr<const CompiledArtifact>> m_parsed;
};

}  // namespace jitcache
