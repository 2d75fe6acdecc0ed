// `jitcache audit`: finds stale identity kernels and every other bad entry in a cache;
// with --checkpoint, the per-layer binding report; with --remote, the shared remote tier
// instead of this machine's cache. Exit 0 clean (warnings alone included), 1 findings, 2 error.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/audit/audit.hpp"
#include "runtime/audit/remote_audit.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/device/cuda_driver.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/format_options.hpp"
#include "tools/remote_cli.hpp"

namespace jitcache::cli {
namespace {

struct AuditArgs {
  std::string checkpoint;
  std::string scales;
  std::string arch;
  std::string device_cc;
  FormatArgs format;
  bool remote = false;
  bool json = false;
};

nlohmann::json to_json(const AuditReport& r) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : r.findings) {
    nlohmann::json finding = {{"kind", to_string(f.kind)},
                              {"severity", to_string(f.severity())},
                              {"key", f.key},
                              {"digest", f.digest},
                              {"kernel", f.kernel},
                              {"target", f.target},
                              {"explanation", f.explanation}};
    if (f.kind == FindingKind::incomplete_spec) {
      nlohmann::json entries = nlohmann::json::array();
      for (const SourceEntryRef& e : f.entries) entries.push_back({{"key", e.key}, {"source_xxh3", e.source_xxh3}});
      finding["family"] = f.kernel;
      finding["spec"] = f.spec;
      finding["entries"] = entries;
    }
    if (f.kind == FindingKind::superseded) finding["superseded_by"] = f.superseded_by;
    findings.push_back(std::move(finding));
  }
  nlohmann::json out = {{"clean", r.clean()},
                        {"entries", r.entries},
                        {"warnings", r.count(Severity::warning)},
                        {"findings", findings}};
  if (r.checkpoint) {
    const CheckpointAudit& c = *r.checkpoint;
    nlohmann::json variants = nlohmann::json::array(), layers = nlohmann::json::array();
    for (const auto& v : c.variants)
      variants.push_back({{"variant", v.label}, {"key", v.key}, {"cached", v.cached}, {"layers", v.layers}});
    for (const auto& l : c.layers)
      layers.push_back({{"layer", l.layer},
                        {"scale", l.scale},
                        {"mode", to_string(l.mode)},
                        {"source", to_string(l.source)},
                        {"writer_key", l.writer_key},
                        {"gather_key", l.gather_key},
                        {"writer_cached", l.writer_cached},
                        {"gather_cached", l.gather_cached},
                        {"bound_to_identity", l.bound_to_identity}});
    out["checkpoint"] = {{"path", c.checkpoint},
                         {"target", c.target},
                         {"device_cc", c.device.empty() ? nlohmann::json() : nlohmann::json(c.device)},
                         {"format", c.format},
                         {"latent_scale_policy", c.latent_policy == LatentPolicy::per_token ? "per-token" : "per-layer"},
                         {"scales_source", to_string(c.provenance.source)},
                         {"scales_file", c.provenance.file},
                         {"scales_sha256", c.provenance.sha256},
                         {"dynamic_layers", c.dynamic_layers},
                         {"identity_layers", c.identity_layers},
                         {"variants", variants},
                         {"layers", layers}};
  }
  return out;
}

void print_human(const AuditReport& r) {
  const std::size_t errors = r.count(Severity::error), warnings = r.count(Severity::warning);
  std::string summary = errors == 0 ? "no findings" : std::to_string(errors) + " finding(s)";
  if (warnings > 0) summary += ", " + std::to_string(warnings) + " warning(s)";
  std::printf("audited %zu entries: %s\n", r.entries, summary.c_str());
  if (!r.findings.empty()) {
    std::printf("\n%-20s %-12s %-8s %-8s %s\n", "finding", "key", "kernel", "target", "explanation");
    for (const Finding& f : r.findings)
      std::printf("%-20s %-12s %-8s %-8s %s%s\n", to_string(f.kind),
                  (f.key.empty() ? f.digest : f.key).substr(0, 12).c_str(), f.kernel.c_str(), f.target.c_str(),
                  f.severity() == Severity::warning ? "(warning) " : "", f.explanation.c_str());
  }
  if (!r.checkpoint) return;
  const CheckpointAudit& c = *r.checkpoint;
  std::printf("\ncheckpoint %s, %s%s, %s: %zu layers (%zu dynamic, %zu identity); scales from %s %s\n",
              c.checkpoint.c_str(), c.target.c_str(),
              c.device.empty() ? "" : (" for a " + c.device + " device").c_str(), c.format.c_str(), c.layers.size(),
              c.dynamic_layers, c.identity_layers, to_string(c.provenance.source), c.provenance.file.c_str());
  std::printf("\n%-32s %-12s %-7s %s\n", "variant needed", "key", "layers", "cached");
  for (const auto& v : c.variants)
    std::printf("%-32s %-12s %-7zu %s\n", v.label.c_str(), v.key.substr(0, 12).c_str(), v.layers,
                v.cached ? "yes" : "no (warm or prepare compiles it)");
  std::size_t bad = 0;
  for (const auto& l : c.layers)
    if (l.bound_to_identity) {
      if (bad++ == 0) std::printf("\nlayers whose key holds an identity kernel:\n");
      std::printf("  layer %d (scale %g)\n", l.layer, l.scale);
    }
}

nlohmann::json to_json(const RemoteAuditReport& r) {
  nlohmann::json findings = nlohmann::json::array();
  for (const RemoteFinding& f : r.findings)
    findings.push_back({{"kind", to_string(f.kind)},
                        {"name", f.name},
                        {"key", f.key},
                        {"reason", f.reason},
                        {"kernel", f.kernel},
                        {"target", f.target},
                        {"explanation", f.explanation}});
  return {{"remote", r.remote},   {"prefix", r.prefix},           {"clean", r.clean()},
          {"names", r.names},     {"other_names", r.other_names}, {"entries", r.entries},
          {"leases", r.leases},   {"verified", r.verified},       {"findings", findings}};
}

void print_human(const RemoteAuditReport& r) {
  std::printf("audited %zu entries of %s (prefix %s): %zu verified, %s\n", r.entries, r.remote.c_str(),
              r.prefix.c_str(), r.verified,
              r.findings.empty() ? "no findings" : (std::to_string(r.findings.size()) + " finding(s)").c_str());
  for (const RemoteFinding& f : r.findings)
    std::printf("%-15s %s (%s, %s): %s\n", to_string(f.kind), f.name.c_str(), f.kernel.c_str(), f.target.c_str(),
                f.explanation.c_str());
  if (r.other_names > 0)
    std::printf("%zu name(s) starting with %s belong to another prefix or to other software: not audited\n",
                r.other_names, r.prefix.c_str());
}

// "12.1" as (12, 1), or "device": the compute capability of this machine's GPU 0.
Result<std::pair<int, int>> device_capability(const std::string& text) {
  if (text == "device") {
    auto driver = CudaDriver::load(0);
    if (!driver) return make_error(ErrorCode::unavailable, "'device': no device here (" + driver.error().message + ")");
    return std::pair{(*driver)->device().major, (*driver)->device().minor};
  }
  const auto dot = text.find('.');
  const auto digits = [](std::string_view part) {
    return !part.empty() && part.size() <= 2 && std::ranges::all_of(part, [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos || !digits(std::string_view(text).substr(0, dot)) ||
      !digits(std::string_view(text).substr(dot + 1)))
    return make_error(ErrorCode::invalid_argument,
                      "'" + text + "' is not a compute capability (major.minor, e.g. 12.1) nor 'device'");
  return std::pair{std::stoi(text.substr(0, dot)), std::stoi(text.substr(dot + 1))};
}

int run_remote_audit(const AuditArgs& args, const GlobalOptions& global) {
  if (!args.checkpoint.empty() || !args.scales.empty() || !args.arch.empty() || !args.device_cc.empty()) {
    std::fprintf(stderr, "jitcache: error: audit --remote audits every remote entry; --checkpoint, --scales, "
                         "--arch and --device-cc are for this machine's cache\n");
    return k_exit_usage;
  }
  auto tier = open_remote_tier(global, "audit --remote");
  if (!tier) return k_exit_usage;
  auto r = audit_remote(*tier);
  if (!r) {
    std::fprintf(stderr, "jitcache: error: audit --remote: %s\n", r.error().to_string().c_str());
    return k_exit_usage;
  }
  if (args.json) std::printf("%s\n", to_json(*r).dump(2).c_str());
  else print_human(*r);
  return r->clean() ? k_exit_ok : k_exit_findings;
}

int run_audit(const AuditArgs& args, const GlobalOptions& global) {
  if (args.remote) return run_remote_audit(args, global);
  if (!args.checkpoint.empty() && args.arch.empty()) {
    std::fprintf(stderr, "jitcache: error: audit --checkpoint needs --arch\n");
    return k_exit_usage;
  }
  std::optional<std::pair<int, int>> device;
  if (!args.device_cc.empty()) {
    if (args.checkpoint.empty()) {
      std::fprintf(stderr, "jitcache: error: audit --device-cc holds a checkpoint's plan to a device: it needs "
                           "--checkpoint and --arch\n");
      return k_exit_usage;
    }
    auto cc = device_capability(args.device_cc);
    if (!cc) {
      std::fprintf(stderr, "jitcache: error: audit --device-cc: %s\n", cc.error().message.c_str());
      return k_exit_usage;
    }
    device = *cc;
  }
  auto opened = open_command_cache(global, RemoteUse::off);  // this machine's cache only
  if (!opened) return report(opened.error(), k_exit_usage);
  AuditOptions options;
  if (!args.checkpoint.empty()) options.checkpoint = args.checkpoint;
  if (!args.scales.empty()) options.scales_override = args.scales;
  options.target = args.arch;
  options.device = device;
  options.format = args.format.record_format();
  options.policy = args.format.policy();
  auto r = audit_cache(*opened->store, *opened->compiler, options);
  if (!r) {
    // Findings are exit 1; an audit that could not run is an error (2), whatever the cause.
    report(r.error());
    return k_exit_usage;
  }
  if (args.json) {
    std::printf("%s\n", to_json(*r).dump(2).c_str());
  } else {
    print_human(*r);
  }
  return r->clean() ? k_exit_ok : k_exit_findings;
}

void register_audit(CLI::App& root, Context& context) {
  auto args = std::make_shared<AuditArgs>();
  CLI::App* cmd = root.add_subcommand("audit", "Find stale identity kernels and every other bad cache entry (--remote: in the shared remote tier)");
  cmd->add_option("--checkpoint", args->checkpoint, "Also report what each layer of this checkpoint needs");
  cmd->add_option("--scales", args->scales, "Explicit scales override file (with --checkpoint)");
  cmd->add_option("--arch", args->arch, "Target of the per-layer report (with --checkpoint)");
  cmd->add_option("--device-cc", args->device_cc,
                  "Compute capability of the device the plan is for, e.g. 12.1, or 'device' for this machine's GPU "
                  "(with --checkpoint): each needed variant whose --arch cubin cannot run there is a wrong-device "
                  "finding");
  add_format_options(cmd, args->format);
  cmd->add_flag("--remote", args->remote,
                "Audit the shared remote tier (the global --remote URL, else JITCACHE_REMOTE) instead: every entry's "
                "signature, digest, facts against its name, content, stale identity kernels, unknown schemas");
  add_json_flag(cmd, args->json);
  context.bind(cmd, [args, &context] { return run_audit(*args, context.global); });
}

const Registrar k_registrar(45, register_audit);

}  // namespace
}  // namespace jitcache::cli
