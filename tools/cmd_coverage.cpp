// `jitcache coverage`: which cache tier holds each kernel variant a checkpoint needs, and
// `jitcache explain`: why one layer's kernels (or a spec-keyed kernel from outside) hit or
// miss. Both ask the cache only: nothing is compiled, counted or copied between tiers.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "runtime/compile/explain.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/model_plan.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/model_options.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

// "0-3, 5, 7-9"
std::string layer_ranges(const std::vector<int>& layers) {
  std::string text;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += std::to_string(layers[i]);
    if (j > i) text += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return text.empty() ? "-" : text;
}

// ---- coverage -------------------------------------------------------------------------

struct CoverageArgs {
  ModelArgs model;
  bool json = false;
};

int run_coverage(const CoverageArgs& args, const GlobalOptions& global) {
  RuntimeOptions options;
  options.cache_dir = global.cache_dir;
  options.remote = global.remote;
  options.device = DeviceUse::none;
  // The question is about the cache: one that cannot be used is the environment's problem.
  options.cache_requirement = CacheRequirement::required;
  auto runtime = Runtime::open(options);
  if (!runtime) return report(runtime.error(), k_exit_usage);
  auto covered = (*runtime)->coverage(model_of(args.model));
  if (!covered) return report_data(covered.error());
  std::size_t missing = 0;
  for (const VariantCoverage& v : *covered) missing += v.tier ? 0 : 1;
  if (args.json) {
    nlohmann::json doc = coverage_json(*covered);
    doc["checkpoint"] = args.model.checkpoint;
    doc["cache_dir"] = (*runtime)->cache_dir().string();
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    const std::string target = covered->empty() ? args.model.arch : covered->front().target;
    std::printf("coverage of %s for %s (%s): %zu variants, %zu covered, %zu missing\n",
                args.model.checkpoint.c_str(), target.c_str(), args.model.format.name().c_str(), covered->size(),
                covered->size() - missing, missing);
    std::printf("%-36s %-18s %-32s %s\n", "variant", "tier", "key", "layers");
    for (const VariantCoverage& v : *covered) {
      const std::string tier = v.tier ? std::string(to_string(*v.tier)) + " (" + v.tier_name + ")" : "none";
      std::printf("%-36s %-18s %-32s %s\n", v.label.c_str(), tier.c_str(), v.key.c_str(),
                  layer_ranges(v.layers).c_str());
    }
    if (missing != 0)
      std::printf("%zu variant%s in no tier: prepare would compile %s (with JITCACHE_NO_COMPILE=1 it fails); "
                  "`jitcache explain --checkpoint ... --layer L` says why\n",
                  missing, missing == 1 ? " is" : "s are", missing == 1 ? "it" : "them");
  }
  return missing == 0 ? k_exit_ok : k_exit_findings;
}

// ---- explain --------------------------------------------------------------------------

struct ExplainArgs {
  ModelArgs model;
  std::optional<int> layer;
  std::string family;
  std::vector<std::string> spec;  // name=value
  std::string kind = "cuda";
  std::size_t nearest = 3;
  bool json = false;
};

Result<std::map<std::string, std::string>> parse_spec(const std::vector<std::string>& given) {
  std::map<std::string, std::string> spec;
  for (const std::string& item : given) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(ErrorCode::invalid_argument, "--spec " + item + ": expected NAME=VALUE");
    if (!spec.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
      return make_error(ErrorCode::invalid_argument, "--spec " + item.substr(0, eq) + " is given twice");
  }
  return spec;
}

int print_explanations(const std::vector<KeyExplanation>& explained, bool json) {
  bool all_found = true;
  for (const KeyExplanation& e : explained) all_found = all_found && e.found.has_value();
  if (json) {
    nlohmann::json doc = nlohmann::json::array();
    for (const KeyExplanation& e : explained) doc.push_back(to_json(e));
    std::printf("%s\n", nlohmann::json{{"found", all_found}, {"lookups", doc}}.dump(2).c_str());
  } else {
    for (std::size_t i = 0; i < explained.size(); ++i)
      std::printf("%s%s\n", i ? "\n" : "", to_text(explained[i]).c_str());
  }
  return all_found ? k_exit_ok : k_exit_findings;
}

int run_explain(const ExplainArgs& args, const GlobalOptions& global) {
  const bool by_spec = !args.family.empty();
  if (by_spec == !args.model.checkpoint.empty())
    return report(make_error(ErrorCode::invalid_argument,
                             "explain needs either --checkpoint with --layer, or --family with --spec")
                      .error());
  if (!by_spec && !args.layer)
    return report(make_error(ErrorCode::invalid_argument, "--checkpoint needs --layer").error());
  if (by_spec && args.layer)
    return report(make_error(ErrorCode::invalid_argument, "--layer goes with --checkpoint, not --family").error());
  std::optional<SourceKind> kind = parse_source_kind(args.kind);
  if (!kind)
    return report(make_error(ErrorCode::invalid_argument, "--kind " + args.kind + ": expected cuda, nvvm or ptx").error());

  auto opened = open_command_cache(global);
  if (!opened) return report(opened.error(), k_exit_usage);

  if (by_spec) {
    auto spec = parse_spec(args.spec);
    if (!spec) return report(spec.error());
    const std::filesystem::path memo = opened->dir.empty() ? std::filesystem::path() : opened->dir / k_fingerprint_memo_name;
    auto explained = explain_spec(*opened->store, *opened->compiler, memo, args.family, *spec, *kind,
                                  args.model.arch, args.nearest);
    if (!explained) return report(explained.error());
    return print_explanations({*explained}, args.json);
  }
  DeviceStatus no_device;
  no_device.reason = "explain uses no device";
  auto planned = plan_model(model_of(args.model), no_device);
  if (!planned) return report_data(planned.error());
  auto explained = explain_layer(*opened->kernels, *planned, *args.layer, args.nearest);
  if (!explained) return report(explained.error());
  return print_explanations(*explained, args.json);
}

void register_coverage(CLI::App& root, Context& context) {
  {
    auto [cmd, args] = add_subcommand(
        root, context, "coverage",
        "Which cache tier (memory, local, provider, remote) holds each kernel variant a checkpoint needs; "
        "exit 1 when any is in none. Compiles, counts and copies nothing",
        run_coverage);
    add_model_options(cmd, args.model, true);
    add_json_flag(cmd, args.json);
  }
  {
    auto [cmd, args] = add_subcommand(
        root, context, "explain",
        "Why a lookup hits or misses: the key a layer's kernels (or a spec-keyed kernel from outside) use, each "
        "fact in it, and for a miss the nearest entries of every tier with the facts that differ; exit 1 on a miss",
        run_explain);
    add_model_options(cmd, args.model, false);
    cmd->add_option("--layer", args.layer, "The layer whose writer and gather kernels to explain (with --checkpoint)");
    cmd->add_option("--family", args.family, "A family of kernels from outside (instead of --checkpoint)");
    cmd->add_option("--spec", args.spec, "A spec fact NAME=VALUE of --family (repeatable)");
    cmd->add_option("--kind", args.kind, "The family's source kind: cuda, nvvm or ptx (default cuda)");
    cmd->add_option("--nearest", args.nearest, "Nearest entries shown per tier (default 3)");
    add_json_flag(cmd, args.json);
  }
}

const Registrar k_registrar(22, register_coverage);

}  // namespace
}  // namespace jitcache::cli
