// Cache figures (issue 3): key computation, memory-tier hit, verified disk hit in a fresh
// store, and lookups at 100 / 10k / 100k entries. Targets: memory hit <= 50 ns, disk hit
// <= 50 us, lookup at 100k <= 1.5x the time at 100.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "cache/store.hpp"

namespace {

using namespace jitcache::cache;

Bytes make_bytes(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes bytes(size);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  return bytes;
}

// Temporary cache roots, removed at exit.
const std::filesystem::path& scratch() {
  static const jitcache::bench::ScratchDir dir("jitcache-bench-");
  return dir.path();
}

std::unique_ptr<Store> open(const std::filesystem::path& root, std::uint64_t memory_max_bytes) {
  StoreOptions options;
  options.memory_max_bytes = memory_max_bytes;
  options.max_bytes = 64ull << 30;
  options.durability = Durability::relaxed;
  auto store = Store::open(root, options);
  if (!store) {
    std::fprintf(stderr, "open %s: %s\n", root.c_str(), store.error().to_string().c_str());
    std::abort();
  }
  return std::move(*store);
}

void BM_KeyComputation(benchmark::State& state) {
  const Facts facts = jitcache::bench::sample_kernel_facts("42");
  for (auto _ : state) benchmark::DoNotOptimize(facts.key());
  state.SetLabel(std::to_string(facts.size()) + " facts, " + std::to_string(facts.canonical().size()) + " bytes");
}
BENCHMARK(BM_KeyComputation);

void BM_MemoryHit(benchmark::State& state) {
  auto store = open(scratch() / "memory", 256ull << 20);
  const Facts facts = jitcache::bench::sample_kernel_facts("hot");
  const CacheKey key = facts.key();
  if (!store->put(key, facts, make_bytes(64 * 1024, 1), 100.0)) std::abort();
  for (auto _ : state) {
    auto hit = store->get(key);
    benchmark::DoNotOptimize(hit);
  }
}
BENCHMARK(BM_MemoryHit);

void BM_MemoryHitGetOrCreate(benchmark::State& state) {
  auto store = open(scratch() / "memory2", 256ull << 20);
  const Facts facts = jitcache::bench::sample_kernel_facts("hot");
  const CacheKey key = facts.key();
  const Producer producer = [] { return jitcache::Result<Produced>(Produced{make_bytes(64 * 1024, 1), 1.0}); };
  if (!store->get_or_create(key, facts, producer)) std::abort();
  for (auto _ : state) {
    auto hit = store->get_or_create(key, facts, producer);
    benchmark::DoNotOptimize(hit);
  }
}
BENCHMARK(BM_MemoryHitGetOrCreate);

// A fresh store has an empty memory tier; with the tier disabled every get is what the
// first get of a fresh store does: index lookup, open, read, re-hash.
void BM_DiskHitFreshStore(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto root = scratch() / ("disk" + std::to_string(size));
  const Facts facts = jitcache::bench::sample_kernel_facts("disk");
  {
    auto writer = open(root, 0);
    if (!writer->put(facts.key(), facts, make_bytes(size, 2), 100.0)) std::abort();
  }
  auto store = open(root, 0);
  for (auto _ : state) {
    auto hit = store->get(facts.key());
    if (!hit || !*hit) std::abort();
    benchmark::DoNotOptimize(hit);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_DiskHitFreshStore)->Arg(4 << 10)->Arg(64 << 10)->Arg(256 << 10)->Unit(benchmark::kMicrosecond);

// Stores with N entries of 1 KiB, built once per N.
struct Population {
  std::filesystem::path root;
  std::vector<CacheKey> keys;  // shuffled
};
const Population& population(std::size_t n) {
  static std::map<std::size_t, Population> built;
  auto it = built.find(n);
  if (it != built.end()) return it->second;
  Population p;
  p.root = scratch() / ("pop" + std::to_string(n));
  auto store = open(p.root, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Facts facts = jitcache::bench::sample_kernel_facts(std::to_string(i));
    Bytes bytes(1024, std::byte{0});
    std::memcpy(bytes.data(), &i, sizeof i);
    if (!store->put(facts.key(), facts, bytes, 1.0)) std::abort();
    p.keys.push_back(facts.key());
  }
  std::shuffle(p.keys.begin(), p.keys.end(), std::mt19937_64(n));
  return built.emplace(n, std::move(p)).first->second;
}

void BM_LookupHit(benchmark::State& state) {
  const Population& p = population(static_cast<std::size_t>(state.range(0)));
  auto store = open(p.root, 0);
  std::size_t i = 0;
  for (auto _ : state) {
    auto hit = store->get(p.keys[i++ % p.keys.size()]);
    if (!hit || !*hit) std::abort();
    benchmark::DoNotOptimize(hit);
  }
}
BENCHMARK(BM_LookupHit)->Arg(100)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);

// A miss touches only the index: the purest measure of how lookups scale.
void BM_LookupMiss(benchmark::State& state) {
  const Population& p = population(static_cast<std::size_t>(state.range(0)));
  auto store = open(p.root, 0);
  std::vector<CacheKey> absent;
  for (int i = 0; i < 1024; ++i) absent.push_back(jitcache::bench::sample_kernel_facts("absent" + std::to_string(i)).key());
  std::size_t i = 0;
  for (auto _ : state) {
    auto miss = store->get(absent[i++ % absent.size()]);
    if (!miss || *miss) std::abort();
    benchmark::DoNotOptimize(miss);
  }
}
BENCHMARK(BM_LookupMiss)->Arg(100)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
