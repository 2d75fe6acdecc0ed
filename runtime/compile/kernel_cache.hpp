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

// Whether a miss may be compiled. NoCompile::yes is the no-compile mode
// (JITCACHE_NO_COMPILE, RuntimeOptions::no_compile): a miss is an error
// (ErrorCode::unavailable) naming the variant and every tier it was looked up in, and the
// compiler is never called; a fleet that ships its kernels finds out at start, not by a
// silent compile.
enum class NoCompile { no, yes };

// The tiers a lookup in `store` asks, in order, for messages: "memory, disk (<root>), redis".
std::string describe_tiers(const cache::Store& store);

// The error of a miss in no-compile mode: `what` names what is missing ("kernel
// writer/dynamic/b12x-432/sm_100a (...)"), followed by the tiers it was looked up in.
Error no_compile_miss(const std::string& what, const cache::Store& store);

class KernelCache {
 public:
  KernelCache(cache::Store& store, const Compiler& compiler, NoCompile no_compile = NoCompile::no)
      : m_store(store), m_compiler(compiler), m_no_compile(no_compile) {}

  // The artifact for `spec`; compiles on a miss. A kernel stored under another compiler
  // fingerprint (an earlier derivation of it, or another build) is never served for this
  // one: nothing but the bytes of this compiler vouches for what it would produce. A stored
  // bundle that does not parse, or whose embedded facts disagree with the request, is
  // removed (from every tier) and compiled again. With
  // BundleText::skip the artifact's PTX and log are left empty (loading needs neither).
  Result<KernelFetch> get(const KernelSpec& spec, BundleText text = BundleText::load);

  // The same from the cache alone: std::nullopt where get() would have to compile.
  Result<std::optional<KernelFetch>> find(const KernelSpec& spec, BundleText text = BundleText::load);

  // The facts a lookup of `spec` uses (kernel_facts of its generated source) and their key.
  Result<cache::Facts> facts_of(const KernelSpec& spec) const;

  bool no_compile() const { return m_no_compile == NoCompile::yes; }
  // No-compile mode's error for `specs`, all missing: each named by its label, its kernel,
  // format, latent scale and target, and its key, then every tier looked up in.
  Error missing(std::span<const KernelSpec> specs) const;

  cache::Store& store() const { return m_store; }
  const Compiler& compiler() const { return m_compiler; }

 private:
  enum class OnMiss { compile, report };
  Result<std::optional<KernelFetch>> lookup(const KernelSpec& spec, BundleText text, OnMiss on_miss);
  Result<std::optional<KernelFetch>> fetch(const GeneratedSource& source, const cache::Facts& facts,
                                           BundleText text, OnMiss on_miss);

  cache::Store& m_store;
  const Compiler& m_compiler;
  NoCompile m_no_compile;
};

// Fetches every spec: first what the cache has, in order and on this thread, then the
// misses, compiled `jobs` at a time (0: one per core; each compile is one NVRTC call that
// takes a core). The warm path (everything cached) starts no thread. `on_fetched` is called
// once per spec, from the thread that fetched it, with the spec's index and when its fetch
// started; calls may run concurrently. The first error (a fetch's or on_fetched's) is
// returned once every thread is done. In no-compile mode the misses are one error naming
// each of them (KernelCache::missing), and nothing is compiled.
using OnFetched =
    std::function<Status(std::size_t index, const KernelFetch& fetched, std::chrono::steady_clock::time_point started)>;
Status fetch_each(KernelCache& kernels, std::span<const KernelSpec> specs, unsigned jobs, BundleText text,
                  const OnFetched& on_fetched);

}  // namespace jitcache
