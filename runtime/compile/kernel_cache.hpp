// The kernel cache: joins the generator, a compiler back end and the generic store.
// It decides which facts identify a kernel binary (every fact that changes it, the
// latent scale's identity/dynamic mode first), and turns a KernelSpec into a verified
// CompiledArtifact: from the store's tiers (memory, disk, any extra one), or by compiling
// once per key across threads and processes. It keeps no cache of its own: a parsed
// artifact is attached to the store's memory entry (Store::attach), so a memory hit
// parses nothing and, with the memory tier off, every hit reads and verifies the blob once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/compiler.hpp"

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

// Whether `bytes` is a kernel bundle that was built with `facts`: it parses (checksums
// included), and the facts recorded in its facts section and embedded in its cubin agree
// with every one of `facts` they name, the kernel, latent scale, RoPE and target among
// them. Used on entries from tiers that are not this machine's (remote values, imports).
Status check_bundle_facts(const cache::Facts& facts, std::span<const std::byte> bytes);

struct KernelFetch {
  std::shared_ptr<const CompiledArtifact> artifact;
  cache::CacheKey key;
  cache::Source source;  // memory, disk, remote, coalesced or produced (compiled)
  cache::SharedBytes bytes;  // the stored bundle the artifact was read from (what an export copies)
};

class KernelCache {
 public:
  KernelCache(cache::Store& store, const Compiler& compiler) : m_store(store), m_compiler(compiler) {}

  // The artifact for `spec`; compiles on a miss. A kernel stored under another compiler
  // fingerprint (an earlier derivation of it, or another build) is never served for this
  // one: nothing but the bytes of this compiler vouches for what it would produce. A stored
  // bundle that does not parse, or whose embedded facts disagree with the request, is
  // removed (from every tier) and compiled again. With
  // BundleText::skip the artifact's PTX and log are left empty (loading needs neither).
  Result<KernelFetch> get(const KernelSpec& spec, BundleText text = BundleText::load);

  // The same from the cache alone: std::nullopt where get() would have to compile.
  Result<std::optional<KernelFetch>> find(const KernelSpec& spec, BundleText text = BundleText::load);

 private:
  enum class OnMiss { compile, report };
  Result<std::optional<KernelFetch>> lookup(const KernelSpec& spec, BundleText text, OnMiss on_miss);
  Result<std::optional<KernelFetch>> fetch(const GeneratedSource& source, const cache::Facts& facts,
                                           BundleText text, OnMiss on_miss);

  cache::Store& m_store;
  const Compiler& m_compiler;
};

// Fetches every spec: first what the cache has, in order and on this thread, then the
// misses, compiled `jobs` at a time (0: one per core; each compile is one NVRTC call that
// takes a core). The warm path (everything cached) starts no thread. `on_fetched` is called
// once per spec, from the thread that fetched it, with the spec's index and when its fetch
// started; calls may run concurrently. The first error (a fetch's or on_fetched's) is
// returned once every thread is done.
using OnFetched =
    std::function<Status(std::size_t index, const KernelFetch& fetched, std::chrono::steady_clock::time_point started)>;
Status fetch_each(KernelCache& kernels, std::span<const KernelSpec> specs, unsigned jobs, BundleText text,
                  const OnFetched& on_fetched);

}  // namespace jitcache
