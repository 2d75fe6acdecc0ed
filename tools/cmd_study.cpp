// `jitcache kv study`: the identity-vs-calibrated error table across layer magnitudes
// (synthetic post-RMSNorm latents, host executor numerics).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/outer_scale_study.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {
namespace {

struct StudyArgs {
  std::size_t tokens = 1024;
  std::uint64_t seed = 20261129;
  std::string rope = "bf16";
  bool json = false;
};

int run_study(const StudyArgs& args) {
  study::StudyOptions options;
  options.tokens = args.tokens;
  options.seed = args.seed;
  options.rope = *parse_rope_format(args.rope);
  auto rows = study::run_outer_scale_study(study::default_layer_max_abs(), options);
  if (!rows) return report(rows.error());
  const double deep = rows->back().identity_rel_rms;
  if (args.json) {
    nlohmann::json out = {{"tokens", args.tokens}, {"seed", args.seed}, {"rope", args.rope},
                          {"layers", nlohmann::json::array()}};
    for (const auto& r : *rows)
      out["layers"].push_back({{"max_abs", r.max_abs},
                               {"calibrated_scale", r.calibrated_scale},
                               {"identity_rel_rms", r.identity_rel_rms},
                               {"calibrated_rel_rms", r.calibrated_rel_rms},
                               {"identity_subnormal_blocks", r.identity_subnormal_blocks},
                               {"calibrated_subnormal_blocks", r.calibrated_subnormal_blocks}});
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("Relative RMS round-trip error of the latent (NVFP4, %s RoPE; %zu synthetic "
              "post-RMSNorm tokens per layer, seed %llu)\n\n",
              args.rope.c_str(), args.tokens, static_cast<unsigned long long>(args.seed));
  std::printf("%8s %12s | %10s %8s %9s | %10s %8s %9s\n", "max_abs", "s_l", "identity", "vs deep",
              "subnorm", "calibrated", "vs deep", "subnorm");
  for (const auto& r : *rows)
    std::printf("%8g %12.4e | %10.5f %7.2fx %8.1f%% | %10.5f %7.3fx %8.1f%%\n", r.max_abs,
                r.calibrated_scale, r.identity_rel_rms, r.identity_rel_rms / deep,
                100.0 * r.identity_subnormal_blocks, r.calibrated_rel_rms, r.calibrated_rel_rms / deep,
                100.0 * r.calibrated_subnormal_blocks);
  std::printf("\n'vs deep' divides by the identity error at max_abs %g; 'subnorm' is the share of "
              "E4M3 block scales below 2^-6.\n",
              rows->back().max_abs);
  return k_exit_ok;
}

void register_study(CLI::App& root, Context& context) {
  CLI::App* kv = nullptr;
  try {
    kv = root.get_subcommand("kv");
  } catch (const CLI::OptionNotFound&) {
    kv = root.add_subcommand("kv", "CPU KV tools (the kernels' numerics, run on the host)");
  }
  auto args = std::make_shared<StudyArgs>();
  CLI::App* cmd = kv->add_subcommand(
      "study", "Identity vs calibrated outer scale: round-trip error across layer magnitudes");
  cmd->add_option("--tokens", args->tokens, "Synthetic tokens per layer")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", args->seed, "Seed of the synthetic data");
  cmd->add_option("--rope", args->rope, k_record_formats.joined("|"))
      ->check(CLI::IsMember(k_record_formats.names()));
  cmd->add_flag("--json", args->json, "One JSON document on stdout");
  context.bind(cmd, [args] { return run_study(*args); });
}

// After cmd_kv.cpp's registration, which creates the `kv` command.
const Registrar k_registrar(200, register_study);

}  // namespace
}  // namespace jitcache::cli
