// `jitcache compile`: compiles every kernel variant for the given targets (default: the
// product's three) and prints a resource table. A smoke test of the toolchain and of
// the kernels' register budget; it does not touch the cache.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/compile/compiler.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {
namespace {

struct CompileArgs {
  std::vector<std::string> archs;
  bool json = false;
};

int run_compile(const CompileArgs& args) {
  std::vector<Target> targets;
  if (args.archs.empty()) {
    for (auto t : default_targets()) targets.push_back(Target{std::string(t)});
  } else {
    for (const auto& a : args.archs) {
      auto t = parse_target(a);
      if (!t) return report(t.error());
      targets.push_back(*t);
    }
  }
  const auto compiler = make_nvrtc_compiler();
  nlohmann::json rows = nlohmann::json::array();
  if (!args.json) {
    std::printf("Compiling with %s %s\n\n", compiler->name().c_str(), compiler->version().c_str());
    std::printf("%-26s %-8s %10s %11s %9s %7s\n", "variant", "target", "compile ms", "cubin bytes",
                "registers", "spills");
  }
  int failures = 0;
  for (const Target& target : targets) {
    for (const KernelSpec& spec : all_variants(target)) {
      auto artifact = compiler->compile(generate(spec));
      if (!artifact) {
        ++failures;
        std::fprintf(stderr, "jitcache: error: %s\n", artifact.error().to_string().c_str());
        continue;
      }
      const std::string variant = std::string(to_string(spec.kernel)) + "/" +
                                  to_string(spec.latent_scale) + "/" + to_string(spec.rope);
      const int spills = artifact->usage.spill_store_bytes + artifact->usage.spill_load_bytes;
      if (args.json) {
        rows.push_back({{"variant", variant},
                        {"target", target.name},
                        {"compile_ms", artifact->compile_ms},
                        {"cubin_bytes", artifact->cubin.size()},
                        {"registers", artifact->usage.registers},
                        {"spill_store_bytes", artifact->usage.spill_store_bytes},
                        {"spill_load_bytes", artifact->usage.spill_load_bytes}});
      } else {
        std::printf("%-26s %-8s %10.1f %11zu %9d %7d\n", variant.c_str(), target.name.c_str(),
                    artifact->compile_ms, artifact->cubin.size(), artifact->usage.registers, spills);
      }
    }
  }
  if (args.json)
    std::printf("%s\n", nlohmann::json{{"compiler", compiler->name()},
                                       {"version", compiler->version()},
                                       {"variants", rows},
                                       {"failures", failures}}
                            .dump(2)
                            .c_str());
  return failures == 0 ? k_exit_ok : k_exit_findings;
}

void register_compile(CLI::App& root, Context& context) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* cmd = root.add_subcommand(
      "compile", "Compile every kernel variant with NVRTC and print registers, spills, sizes");
  cmd->add_option("--arch", args->archs, "Target(s), e.g. sm_90 sm_100a sm_120a (default: those three)");
  cmd->add_flag("--json", args->json, "One JSON document on stdout");
  context.bind(cmd, [args] { return run_compile(*args); });
}

const Registrar k_registrar(90, register_compile);

}  // namespace
}  // namespace jitcache::cli
