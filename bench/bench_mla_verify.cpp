// The cost of shadow verification per hit for jitcache's own generator (issue 15). To
// verify a spec-keyed hit, the caller regenerates the variant's source and digests it
// (XXH3-128 of the translation unit and of each header, as request_facts does) to compare
// with the digest the entry recorded. Per variant of one target, sm_90:
//   generate           generate(spec) alone
//   generate_digest    generate(spec) + the digests: what one verification costs
//   generate_request   generate(spec) + mla_request + request_facts: the same through the
//                      compile API's request, as the runtime's verify path builds it
//   memory_hit         KernelCache::get of the compiled variant from the memory tier
//   disk_hit           the same with the memory tier off: index row, blob read and
//                      re-hash, bundle parse (BundleText::skip, as the runtime loads)
// for reference. KernelCache::get generates and digests the source itself to compute the
// key, so its hits already contain the generate_digest work. No GPU needed (NVRTC only,
// once per variant at setup).
//
//   bench_mla_verify [benchmark flags], e.g.
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "cache/hash.hpp"
#include "cache/store.hpp"
#include "kernel_templates/generator.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/mla_family.hpp"

namespace {

using namespace jitcache;

const Target k_target{"sm_90"};

const std::vector<KernelSpec>& variants() {
  static const std::vector<KernelSpec> all = all_variants(k_target);
  return all;
}

const KernelSpec& variant(const benchmark::State& state) {
  return variants().at(static_cast<std::size_t>(state.range(0)));
}

[[noreturn]] void die(const std::string& what, const Error& error) {
  std::fprintf(stderr, "bench_mla_verify: %s: %s\n", what.c_str(), error.to_string().c_str());
  std::exit(1);
}

// The compiler and a cache holding every variant, compiled once on first use.
struct Fixture {
  bench::ScratchDir scratch{"jitcache-bench-mla-"};  // a private cache root, removed at exit
  std::unique_ptr<Compiler> compiler = make_nvrtc_compiler();
  ToolFacts tools;

  Fixture() {
    auto store = open_store(cache::k_default_memory_max_bytes);
    KernelCache kernels(*store, *compiler);
    for (const KernelSpec& spec : variants())
      if (auto got = kernels.get(spec); !got) die("compiling " + spec.label(), got.error());
    auto probed = probe_tools(SourceKind::cuda);
    if (!probed) die("probing NVRTC", probed.error());
    tools = std::move(*probed);
  }

  std::unique_ptr<cache::Store> open_store(std::uint64_t memory_max_bytes) const {
    cache::StoreOptions options;
    options.memory_max_bytes = memory_max_bytes;
    auto store = cache::Store::open(scratch.path() / "cache", options);
    if (!store) die("opening the store", store.error());
    return std::move(*store);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// What a verification compares: the digests of the translation unit and of each header.
struct SourceDigests {
  cache::BlobDigest source;
  std::vector<cache::BlobDigest> headers;
};

SourceDigests digest(const GeneratedSource& generated) {
  SourceDigests out{cache::BlobDigest::of(generated.source), {}};
  out.headers.reserve(generated.headers.size());
  for (const auto& header : generated.headers) out.headers.push_back(cache::BlobDigest::of(header.text));
  return out;
}

void label(benchmark::State& state, const GeneratedSource& generated) {
  std::size_t bytes = generated.source.size();
  for (const auto& header : generated.headers) bytes += header.text.size();
  state.SetLabel(generated.spec.label() + ", " + std::to_string(bytes) + " bytes of source");
}

void BM_Generate(benchmark::State& state) {
  const KernelSpec& spec = variant(state);
  for (auto _ : state) benchmark::DoNotOptimize(generate(spec));
  label(state, generate(spec));
}

void BM_GenerateDigest(benchmark::State& state) {
  const KernelSpec& spec = variant(state);
  const SourceDigests recorded = digest(generate(spec));
  for (auto _ : state) {
    const SourceDigests now = digest(generate(spec));
    if (now.source != recorded.source) std::abort();  // the generator is deterministic
    benchmark::DoNotOptimize(now);
  }
  label(state, generate(spec));
}

void BM_GenerateRequest(benchmark::State& state) {
  const KernelSpec& spec = variant(state);
  const Fixture& f = fixture();
  const std::vector<std::string> options = f.compiler->options(spec);
  for (auto _ : state) {
    const KernelRequest request = mla_request(generate(spec), options);
    auto facts = request_facts(request, f.tools);
    if (!facts) die("request facts of " + spec.label(), facts.error());
    benchmark::DoNotOptimize(facts->get("source_xxh3"));
  }
  label(state, generate(spec));
}

void hits(benchmark::State& state, std::uint64_t memory_max_bytes, cache::Source expected) {
  const KernelSpec& spec = variant(state);
  const Fixture& f = fixture();
  auto store = f.open_store(memory_max_bytes);
  KernelCache kernels(*store, *f.compiler);
  if (auto warm = kernels.get(spec, BundleText::skip); !warm) die("warming " + spec.label(), warm.error());
  for (auto _ : state) {
    auto got = kernels.get(spec, BundleText::skip);
    if (!got) die("hit of " + spec.label(), got.error());
    if (got->source != expected) {
      state.SkipWithError("the lookup was not served by the expected tier");
      return;
    }
    benchmark::DoNotOptimize(got->artifact);
  }
  label(state, generate(spec));
}

void BM_MemoryHit(benchmark::State& state) { hits(state, cache::k_default_memory_max_bytes, cache::Source::memory); }
void BM_DiskHit(benchmark::State& state) { hits(state, 0, cache::Source::disk); }

void per_variant(benchmark::internal::Benchmark* b) {
  for (std::size_t i = 0; i < variants().size(); ++i) b->Arg(static_cast<std::int64_t>(i));
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Generate)->Apply(per_variant);
BENCHMARK(BM_GenerateDigest)->Apply(per_variant);
BENCHMARK(BM_GenerateRequest)->Apply(per_variant);
BENCHMARK(BM_MemoryHit)->Apply(per_variant);
BENCHMARK(BM_DiskHit)->Apply(per_variant);

}  // namespace

BENCHMARK_MAIN();
