// Cache providers (cache wheels), in one run:
//   1. time to a served model: Runtime::open + prepare() of the 79-layer example checkpoint
//      on sm_90 in a fresh process, (a) on a fresh node given a cache provider (an empty
//      cache directory, the kernels read from the provider, verified and copied in), the
//      same with NVRTC's content digest already in the fingerprint memo (what a fresh node
//      with a compiler pays once: hashing NVRTC's ~100 MB), (b) on a warm local cache,
//      (c) on a fresh node compiling everything (cold);
//   2. what a provider costs a lookup it cannot serve: Store::get of a key no tier holds,
//      with and without a provider of the checkpoint's entries below the disk, and the first
//      such lookup of a process (which reads and checks the manifest).
// Every figure of 1 is taken in a child process of its own (this program run with --child),
// so each pays what a starting engine pays: the NVRTC fingerprint (hashed, or read from the
// memo a warm cache keeps), the index, the reads. Each child checks what it measured (where
// its kernels came from); a failed check makes the program exit 1.
//
//   bench_providers [--checkpoint=DIR] [--reps=N] [--cold-reps=N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_support.hpp"
#include "cache/store.hpp"
#include "jitcache/log.hpp"
#include "jitcache/runtime.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "runtime/compile/cache_provider.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/compile/source_cache.hpp"

namespace {

namespace fs = std::filesystem;
using namespace jitcache;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_providers: %s\n", what.c_str());
  std::exit(1);
}

// --child MODE CACHE PROVIDER CHECKPOINT: open a runtime and prepare, print one JSON line.
int child(const std::string& mode, const fs::path& cache, const fs::path& provider, const fs::path& checkpoint) {
  set_log_level(LogLevel::error);
  const auto started = Clock::now();
  RuntimeOptions options;
  options.cache_dir = cache;
  options.device = DeviceUse::none;
  if (mode == "provider") options.providers = {provider};
  auto runtime = Runtime::open(options);
  if (!runtime) die(runtime.error().to_string());
  const double open_ms = ms_since(started);
  ModelSpec spec;
  spec.checkpoint = checkpoint;
  spec.target = "sm_90";
  auto model = (*runtime)->prepare(spec);
  if (!model) die(model.error().to_string());
  const double total_ms = ms_since(started);
  const PrepareStats& s = (*model)->stats();
  std::printf("%s\n", nlohmann::json{{"open_ms", open_ms},
                                     {"total_ms", total_ms},
                                     {"variants", s.variants},
                                     {"compiled", s.compiled},
                                     {"provider", s.provider},
                                     {"cached", s.cached}}
                          .dump()
                          .c_str());
  return 0;
}

nlohmann::json run_child(const fs::path& self, const std::string& mode, const fs::path& cache,
                         const fs::path& provider, const fs::path& checkpoint) {
  const std::string cmd = "'" + self.string() + "' --child " + mode + " '" + cache.string() + "' '" +
                          provider.string() + "' '" + checkpoint.string() + "'";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) die("cannot run " + cmd);
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  if (::pclose(pipe) != 0) die("child failed: " + cmd + "\n" + out);
  return nlohmann::json::parse(out);
}

fs::path fresh_dir(const fs::path& scratch, const std::string& name) {
  const fs::path p = scratch / name;
  fs::remove_all(p);
  fs::create_directories(p);
  fs::permissions(p, fs::perms::owner_all, fs::perm_options::replace);
  return p;
}

// The checkpoint's entries on sm_90 written as a provider directory (what `jitcache pack`
// puts in a cache wheel), compiled through a cache of its own.
std::vector<ExportEntry> make_provider(const fs::path& scratch, const fs::path& checkpoint, const fs::path& dir) {
  KernelCacheOptions options;
  options.cache_dir = fresh_dir(scratch, "packer-cache");
  options.remote = RemoteUse::off;
  options.provider_use = ProviderUse::off;
  auto opened = open_kernel_cache(options);
  if (!opened) die(opened.error().to_string());
  ResolveOptions resolve;
  resolve.checkpoint_dir = checkpoint;
  auto scales = resolve_scales(resolve);
  if (!scales) die(scales.error().to_string());
  auto plan = plan_variants(*scales, RecordFormat::b12x_432, *parse_target("sm_90"),
                            default_policy(RecordFormat::b12x_432));
  if (!plan) die(plan.error().to_string());
  auto gathered = gather_export_entries(*opened->kernels, *opened->compiler, plan->variants, 0);
  if (!gathered) die(gathered.error().to_string());
  fs::remove_all(dir);
  auto written = write_provider(dir, ProviderInfo{"bench", "now", "bench", "glm5-mini", "b12x-432", {"sm_90"}},
                                *gathered, std::nullopt);
  if (!written) die(written.error().to_string());
  return std::move(*gathered);
}

struct Summary {
  double median = 0, min = 0;
};
Summary summarize(const std::vector<double>& v) {
  return {bench::median(v), v.empty() ? 0.0 : *std::min_element(v.begin(), v.end())};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--child") return child(argv[2], argv[3], argv[4], argv[5]);
  const fs::path self = fs::canonical("/proc/self/exe");
  fs::path checkpoint = fs::path(JITCACHE_SOURCE_DIR) / "examples" / "glm5-mini";
  int reps = 7, cold_reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--checkpoint=", 0) == 0) checkpoint = a.substr(13);
    else if (a.rfind("--reps=", 0) == 0) reps = std::max(1, std::atoi(a.c_str() + 7));
    else if (a.rfind("--cold-reps=", 0) == 0) cold_reps = std::max(1, std::atoi(a.c_str() + 12));
    else die("unknown argument " + a + " (--checkpoint=DIR --reps=N --cold-reps=N)");
  }
  set_log_level(LogLevel::error);
  std::string scratch_text = (fs::temp_directory_path() / "jitcache-bench-providers-XXXXXX").string();
  if (::mkdtemp(scratch_text.data()) == nullptr) die("mkdtemp");
  const fs::path scratch = scratch_text;
  const fs::path provider = scratch / "provider";
  const std::vector<ExportEntry> entries = make_provider(scratch, checkpoint, provider);

  // 1. Time to a served model, each scenario in fresh processes.
  std::vector<double> from_provider, from_provider_memo, warm, cold;
  auto check = [](const nlohmann::json& r, const char* what, std::size_t compiled, std::size_t provided) {
    if (r["compiled"] != compiled || r["provider"] != provided)
      die(std::string(what) + ": expected " + std::to_string(compiled) + " compiled, " + std::to_string(provided) +
          " from the provider, got " + r.dump());
  };
  const fs::path warm_cache = fresh_dir(scratch, "warm-cache");
  check(run_child(self, "provider", warm_cache, provider, checkpoint), "filling the warm cache", 0, 4);
  for (int r = 0; r < reps; ++r) {
    const nlohmann::json p = run_child(self, "provider", fresh_dir(scratch, "node"), provider, checkpoint);
    check(p, "fresh node with a provider", 0, 4);
    from_provider.push_back(p["total_ms"]);
    // The same node once it has hashed its NVRTC (the fingerprint memo, kept per cache
    // directory; a node with no compiler at all never hashes one: the provider's build
    // keys its lookups).
    const fs::path memo_node = fresh_dir(scratch, "memo-node");
    fs::copy_file(warm_cache / "compiler-fingerprints.json", memo_node / "compiler-fingerprints.json");
    const nlohmann::json m = run_child(self, "provider", memo_node, provider, checkpoint);
    check(m, "fresh node with a provider and its NVRTC memoized", 0, 4);
    from_provider_memo.push_back(m["total_ms"]);
    const nlohmann::json w = run_child(self, "local", warm_cache, provider, checkpoint);
    check(w, "warm local cache", 0, 0);
    warm.push_back(w["total_ms"]);
  }
  for (int r = 0; r < cold_reps; ++r) {
    const nlohmann::json c = run_child(self, "local", fresh_dir(scratch, "cold"), provider, checkpoint);
    check(c, "cold compile", 4, 0);
    cold.push_back(c["total_ms"]);
  }

  // 2. A lookup no tier can serve: the disk's miss alone, then with the provider below it.
  const cache::CacheKey absent = cache::Facts{{"kernel", "none"}, {"id", "absent"}}.key();
  auto time_misses = [&](bool with_provider, int n, double& first_ms) {
    cache::StoreOptions options;
    if (with_provider) options.extra_tiers.push_back(std::make_shared<ProviderTier>(provider, std::nullopt, check_stored_content));
    auto store = cache::Store::open(fresh_dir(scratch, "miss-cache"), options);
    if (!store) die(store.error().to_string());
    auto t = Clock::now();
    auto got = (*store)->get(absent);
    first_ms = ms_since(t);
    if (!got || *got) die("the absent key was found");
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
      t = Clock::now();
      got = (*store)->get(absent);
      us.push_back(ms_since(t) * 1000.0);
      if (!got || *got) die("the absent key was found");
    }
    return summarize(us);
  };
  double first_without = 0, first_with = 0;
  std::vector<double> first_with_samples, first_without_samples;
  Summary without{}, with{};
  for (int r = 0; r < reps; ++r) {
    without = time_misses(false, 2000, first_without);
    with = time_misses(true, 2000, first_with);
    first_without_samples.push_back(first_without);
    first_with_samples.push_back(first_with);
  }
  std::error_code ec;
  fs::remove_all(scratch, ec);

  const Summary p = summarize(from_provider), pm = summarize(from_provider_memo), w = summarize(warm),
                c = summarize(cold);
  const Summary fw = summarize(first_with_samples), fwo = summarize(first_without_samples);
  std::printf("\njitcache cache providers: %s, 79 layers, sm_90, 4 variants; %zu bundles in the provider\n",
              checkpoint.filename().c_str(), entries.size());
  std::printf("time to a served model (Runtime::open + prepare, fresh process), median / min of %d (cold: %d):\n", reps,
              cold_reps);
  std::printf("  %-44s %9.1f ms / %9.1f ms\n", "fresh node, kernels from a cache provider", p.median, p.min);
  std::printf("  %-44s %9.1f ms / %9.1f ms\n", "  the same, NVRTC's digest already memoized", pm.median, pm.min);
  std::printf("  %-44s %9.1f ms / %9.1f ms\n", "warm local cache", w.median, w.min);
  std::printf("  %-44s %9.1f ms / %9.1f ms\n", "fresh node, cold compile (no provider)", c.median, c.min);
  std::printf("a lookup no tier holds (Store::get), median / min of 2000:\n");
  std::printf("  %-44s %9.2f us / %9.2f us\n", "disk only", without.median, without.min);
  std::printf("  %-44s %9.2f us / %9.2f us\n", "disk, then a provider (manifest loaded)", with.median, with.min);
  std::printf("  %-44s %9.3f ms / %9.3f ms\n", "first miss of a process, disk only", fwo.median, fwo.min);
  std::printf("  %-44s %9.3f ms / %9.3f ms\n", "first miss of a process, with the provider", fw.median, fw.min);
  return 0;
}
