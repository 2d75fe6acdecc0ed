// `jitcache warm`: precompiles exactly the kernel variants a checkpoint needs, so that
// images and fleets start warm. A second run compiles nothing.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/compiled_kernel_json.hpp"
#include "tools/cli.hpp"
#include "tools/model_options.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

struct WarmArgs {
  ModelArgs model;
  unsigned jobs = 0;
  bool json = false;
  bool no_compile = false;
};

// One line per variant when stderr is not a terminal; a redrawn bar when it is.
void show_progress(const PrepareProgress& p, bool tty) {
  const char* how = p.compiled ? "compiled" : p.from_remote ? "remote" : p.from_provider ? "provider" : "cached";
  if (!tty) {
    std::fprintf(stderr, "[%zu/%zu] %s %s (%.0f ms)\n", p.done, p.total, p.variant.c_str(), how, p.ms);
    return;
  }
  constexpr int width = 30;
  const int filled = static_cast<int>(width * p.done / (p.total ? p.total : 1));
  std::fprintf(stderr, "\r[%.*s%.*s] %zu/%zu %-32s %-8s", filled, "##############################",
               width - filled, "                              ", p.done, p.total, p.variant.c_str(), how);
  if (p.done == p.total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

// A deploy step that pre-fills a cache must be able to tell that it did not: any needed
// variant missing from the cache afterwards (a full disk, a read-only directory) is an
// environment error.
int unstored_exit(const PrepareStats& s, const CacheStatus& cache) {
  if (s.stored == s.variants) return k_exit_ok;
  std::fprintf(stderr,
               "jitcache: error: stored %zu of %zu variants in %s (%s): %zu could not be stored (see the "
               "warnings above), so the next start compiles them again\n",
               s.stored, s.variants, cache.dir.string().c_str(), to_string(cache.mode), s.variants - s.stored);
  return k_exit_usage;
}

int run_warm(const WarmArgs& args, const GlobalOptions& global) {
  RuntimeOptions options;
  options.cache_dir = global.cache_dir;
  options.remote = global.remote;
  options.jobs = args.jobs;
  options.device = DeviceUse::none;  // warming needs no GPU
  // Warming is the cache's job: an unusable directory is an error, not a memory-only run.
  options.cache_requirement = CacheRequirement::required;
  // Without the flag JITCACHE_NO_COMPILE decides; a miss in that mode is exit 2 (unavailable).
  if (args.no_compile) options.no_compile = true;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (!args.json) options.progress = [tty](const PrepareProgress& p) { show_progress(p, tty); };
  auto runtime = Runtime::open(options);
  if (!runtime) return report(runtime.error(), k_exit_usage);  // the cache, the remote: environment
  auto prepared = (*runtime)->prepare(model_of(args.model));
  // Invalid or unsafe checkpoint metadata or scales is refused data (1), as for `scales show`.
  if (!prepared) return report_data(prepared.error());
  const PreparedModel& m = **prepared;
  const PrepareStats& s = m.stats();
  if (args.json) {
    nlohmann::json variants = nlohmann::json::array();
    for (const KernelInfo& k : m.kernels()) {
      nlohmann::json variant = kernel_info_json(k);
      variant["compiled"] = k.compiled_now;
      variants.push_back(std::move(variant));
    }
    const nlohmann::json out = {{"checkpoint", args.model.checkpoint},
                                {"cache_dir", (*runtime)->cache_dir().string()},
                                {"target", m.target()},
                                {"format", args.model.format.name()},
                                {"latent_scale_policy", args.model.format.policy() == LatentPolicy::per_token ? "per-token" : "per-layer"},
                                {"layers", m.layers().size()},
                                {"identity_layers", m.scales().count(ScaleMode::identity)},
                                {"dynamic_layers", m.scales().count(ScaleMode::dynamic)},
                                {"variants_needed", s.variants},
                                {"already_cached", s.cached},
                                {"from_remote", s.remote},
                                {"from_provider", s.provider},
                                {"compiled", s.compiled},
                                {"stored", s.stored},
                                {"cache_mode", to_string((*runtime)->cache_status().mode)},
                                {"wall_ms", s.wall_ms},
                                {"variants", variants}};
    std::printf("%s\n", out.dump(2).c_str());
    return unstored_exit(s, (*runtime)->cache_status());
  }
  if (args.model.format.policy() == LatentPolicy::per_token)
    std::printf("warm %s for %s (%s): %zu layers, all per-token (the per-layer scales are not applied)\n",
                args.model.checkpoint.c_str(), m.target().c_str(), args.model.format.name().c_str(), m.layers().size());
  else
    std::printf("warm %s for %s (%s): %zu layers (%d dynamic, %d identity)\n", args.model.checkpoint.c_str(),
                m.target().c_str(), args.model.format.name().c_str(), m.layers().size(),
                m.scales().count(ScaleMode::dynamic), m.scales().count(ScaleMode::identity));
  // The remote's share only when it had one: a node without a remote reads as before.
  std::string remote = s.remote ? " (" + std::to_string(s.remote) + " from the remote)" : "";
  if (s.provider) remote += " (" + std::to_string(s.provider) + " from a cache provider)";
  std::printf("variants needed %zu, already cached %zu%s, compiled %zu, stored %zu of %zu, wall time %.1f ms\n",
              s.variants, s.cached, remote.c_str(), s.compiled, s.stored, s.variants, s.wall_ms);
  return unstored_exit(s, (*runtime)->cache_status());
}

void register_warm(CLI::App& root, Context& context) {
  auto [cmd, args] = add_subcommand(root, context, "warm",
                                    "Precompile exactly the kernel variants a checkpoint needs", run_warm);
  add_model_options(cmd, args.model, true);
  add_jobs_option(cmd, args.jobs);
  add_json_flag(cmd, args.json);
  cmd->add_flag("--no-compile", args.no_compile,
                "Compile nothing: a variant missing from every cache tier is an error (exit 2) naming it; "
                "JITCACHE_NO_COMPILE=1 does the same");
}

const Registrar k_registrar(20, register_warm);

}  // namespace
}  // namespace jitcache::cli
