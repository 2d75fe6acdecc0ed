// `jitcache compile`, two jobs:
//   without --source  compiles every kernel variant for the given targets (default: the
//                     product's three) and prints a resource table: a smoke test of the
//                     toolchain and of the kernels' register budget; it does not touch the
//                     cache.
//   with --source     compiles one kernel from outside (CUDA C++, NVVM IR or PTX) through
//                     the cache, as a library would with Runtime::compile: the family and
//                     spec facts key it, and a second run is a hit.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "runtime/compiled_kernel_json.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/tool_worker.hpp"
#include "support/atomic_file.hpp"
#include "support/env.hpp"
#include "support/regular_file.hpp"
#include "tools/cli.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

struct CompileArgs {
  std::vector<std::string> archs;
  bool json = false;
  // --source mode
  std::string source;
  std::string kind;  // empty: from the extension
  std::string entry;
  std::string family = "cli";
  std::vector<std::string> facts;    // name=value
  std::vector<std::string> options;
  std::vector<std::string> headers;  // name=file
  std::string cubin_out;
  bool no_compile = false;
};

constexpr std::size_t k_max_source_file_bytes = std::size_t{256} << 20;

Result<SourceKind> kind_of(const CompileArgs& args) {
  if (!args.kind.empty()) {
    if (auto kind = parse_source_kind(args.kind)) return *kind;
    return make_error(ErrorCode::invalid_argument, "--kind " + args.kind + ": expected cuda, nvvm or ptx");
  }
  const std::string ext = std::filesystem::path(args.source).extension().string();
  if (ext == ".cu" || ext == ".cuh") return SourceKind::cuda;
  if (ext == ".ll" || ext == ".bc" || ext == ".nvvm") return SourceKind::nvvm;
  if (ext == ".ptx") return SourceKind::ptx;
  return make_error(ErrorCode::invalid_argument, "--source " + args.source + ": cannot tell the kind from '" + ext +
                                                     "' (.cu, .ll, .bc, .ptx); give --kind cuda|nvvm|ptx");
}

Result<std::pair<std::string, std::string>> split_pair(const std::string& text, const char* flag) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return make_error(ErrorCode::invalid_argument, std::string(flag) + " " + text + ": expected NAME=VALUE");
  return std::pair(text.substr(0, eq), text.substr(eq + 1));
}

int run_compile_source(const CompileArgs& args, const GlobalOptions& global) {
  if (args.entry.empty()) return report(make_error(ErrorCode::invalid_argument, "--source needs --entry").error());
  if (args.archs.size() != 1)
    return report(make_error(ErrorCode::invalid_argument, "--source needs exactly one --arch (an exact target)").error());
  auto kind = kind_of(args);
  if (!kind) return report(kind.error());
  std::vector<std::pair<std::string, std::string>> header_files;  // name, file
  for (const auto& header : args.headers) {
    auto pair = split_pair(header, "--include-header");
    if (!pair) return report(pair.error());
    for (const auto& [known, file] : header_files)
      if (known == pair->first)
        return report(make_error(ErrorCode::invalid_argument, "--include-header " + known + " is given twice").error());
    header_files.push_back(std::move(*pair));
  }
  if (!args.cubin_out.empty()) {
    // The output rule of every command, before anything is read: the cubin never replaces
    // the source, a header, the fleet key or anything but a regular file.
    std::vector<std::filesystem::path> inputs{args.source};
    for (const auto& [name, file] : header_files) inputs.emplace_back(file);
    for (auto& path : environment_inputs()) inputs.push_back(std::move(path));
    if (auto ok = check_output_target(args.cubin_out, inputs); !ok) return report_data(ok.error());
  }
  KernelRequest request;
  request.family = args.family;
  request.kind = *kind;
  request.entry = args.entry;
  request.target = args.archs.front();
  request.options = args.options;
  auto text = read_regular_file(args.source, k_max_source_file_bytes);
  if (!text) return report(text.error());
  request.text = std::move(*text);
  SpecSchema schema{args.family, *kind, {}};
  for (const auto& fact : args.facts) {
    auto pair = split_pair(fact, "--fact");
    if (!pair) return report(pair.error());
    if (!request.spec.emplace(pair->first, pair->second).second)
      return report(make_error(ErrorCode::invalid_argument, "--fact " + pair->first + " is given twice").error());
    // The CLI declares the family from the facts it is given: any value is allowed.
    schema.facts[pair->first] = FactDomain{};
  }
  for (const auto& [name, file] : header_files) {
    auto body = read_regular_file(file, k_max_source_file_bytes);
    if (!body) return report(body.error());
    request.headers.emplace_back(name, std::move(*body));
  }

  // The tool worker's settings are the environment's: checked before any work, exit 2 (the
  // library calls a bad value invalid input, which the table would make a refused source).
  if (auto timeout = tool_timeout(); !timeout) return report(timeout.error(), k_exit_usage);
  if (auto cap = tool_worker_cap(); !cap) return report(cap.error(), k_exit_usage);

  RuntimeOptions options;
  options.cache_dir = global.cache_dir;
  options.remote = global.remote;
  options.device = DeviceUse::none;  // compiling needs no GPU
  // Compiling into the cache is this command's job: an unusable directory is an error.
  options.cache_requirement = CacheRequirement::required;
  if (args.no_compile) options.no_compile = true;  // else JITCACHE_NO_COMPILE decides
  auto runtime = Runtime::open(options);
  if (!runtime) return report(runtime.error(), k_exit_usage);  // the cache, the remote: environment
  if (auto declared = (*runtime)->declare_family(schema); !declared) return report(declared.error());
  auto compiled = (*runtime)->compile(request);
  // A source the tool rejects is refused data, like any other invalid input.
  if (!compiled && compiled.error().code == ErrorCode::compile) return report(compiled.error(), k_exit_findings);
  if (!compiled) return report(compiled.error());
  const CompiledKernel& k = *compiled;
  if (!args.cubin_out.empty()) {
    const std::span<const std::uint8_t> parts[] = {k.cubin};
    if (auto written = write_file_atomic(args.cubin_out, parts); !written) return report(written.error());
  }
  if (args.json) {
    nlohmann::json doc = to_json(k);
    doc["spec"] = request.spec;
    std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s %s for %s: %s, key %s, %zu cubin bytes, %d registers, %d spill bytes, %.1f ms%s\n",
                to_string(k.kind), k.entry.c_str(), k.target.c_str(),
                k.from_cache ? (k.from_remote ? "from the remote cache" : "from the cache") : "compiled",
                k.key.c_str(), k.cubin.size(), k.usage.registers,
                std::max(0, k.usage.spill_store_bytes) + std::max(0, k.usage.spill_load_bytes), k.ms,
                k.verified ? " (source verified against the spec's record)" : "");
  }
  return k_exit_ok;
}

int run_compile(const CompileArgs& args, const GlobalOptions& global) {
  if (!args.source.empty()) return run_compile_source(args, global);
  for (const auto* given : {&args.entry, &args.kind, &args.cubin_out})
    if (!given->empty())
      return report(make_error(ErrorCode::invalid_argument, "--entry, --kind and --cubin-out need --source").error());
  if (!args.facts.empty() || !args.options.empty() || !args.headers.empty())
    return report(make_error(ErrorCode::invalid_argument, "--fact, --option and --include-header need --source").error());
  // Every variant through NVRTC, bypassing the cache: there is nothing to find, so in
  // no-compile mode the command has nothing to do but refuse (the environment's choice: 2).
  const auto no_compile = args.no_compile ? Result<bool>(true) : env::get_bool(env::jitcache_no_compile);
  if (!no_compile) return report(no_compile.error(), k_exit_usage);
  if (*no_compile)
    return report(make_error(ErrorCode::unavailable,
                             "no-compile mode (--no-compile or JITCACHE_NO_COMPILE): `jitcache compile` without "
                             "--source compiles every variant with NVRTC and uses no cache; nothing was compiled")
                      .error(),
                  k_exit_usage);
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
  // The variant column fits the longest label the tables make.
  const auto label = [](const KernelSpec& spec) {
    return std::string(to_string(spec.kernel)) + "/" + to_string(spec.latent_scale) + "/" + to_string(spec.format);
  };
  int width = 30;
  for (const Target& target : targets)
    for (const KernelSpec& spec : all_variants(target)) width = std::max(width, static_cast<int>(label(spec).size()));
  if (!args.json) {
    std::printf("Compiling with %s %s\n\n", compiler->name().c_str(), compiler->version().c_str());
    std::printf("%-*s %-8s %10s %11s %9s %7s\n", width, "variant", "target", "compile ms", "cubin bytes",
                "registers", "spills");
  }
  int failures = 0;
  for (const Target& target : targets) {
    for (const KernelSpec& spec : all_variants(target)) {
      auto artifact = compiler->compile(generate(spec));
      // No compiler (or one that cannot be used) is the environment's problem, for every
      // variant alike: exit 2 at the first, not a report of each as a refused kernel.
      if (!artifact && artifact.error().code != ErrorCode::compile) return report(artifact.error(), k_exit_usage);
      if (!artifact) {
        ++failures;
        std::fprintf(stderr, "jitcache: error: %s\n", artifact.error().to_string().c_str());
        continue;
      }
      const std::string variant = label(spec);
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
        std::printf("%-*s %-8s %10.1f %11zu %9d %7d\n", width, variant.c_str(), target.name.c_str(),
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
  auto [cmd, args] = add_subcommand(
      root, context, "compile",
      "Compile every kernel variant with NVRTC and print registers, spills, sizes; or, with --source, "
      "compile one kernel from outside (CUDA C++, NVVM IR, PTX) through the cache",
      run_compile);
  cmd->add_option("--arch", args.archs, "Target(s), e.g. sm_90 sm_100a sm_120a (default: those three)");
  add_json_flag(cmd, args.json);
  cmd->add_option("--source", args.source, "A kernel from outside: a .cu, .ll/.bc (NVVM IR) or .ptx file");
  cmd->add_option("--kind", args.kind, "cuda, nvvm or ptx (default: from --source's extension)");
  cmd->add_option("--entry", args.entry, "The kernel's symbol (with --source)");
  cmd->add_option("--family", args.family, "The kernel's family (default: cli)");
  cmd->add_option("--fact", args.facts, "A spec fact NAME=VALUE (repeatable)");
  cmd->add_option("--option", args.options, "An option for the tool that reads the source (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--include-header", args.headers, "NAME=FILE: a header the CUDA source includes (repeatable)");
  cmd->add_option("--cubin-out", args.cubin_out, "Also write the cubin to this file");
  cmd->add_flag("--no-compile", args.no_compile,
                "Compile nothing: with --source, a kernel missing from every cache tier is an error (exit 2); "
                "JITCACHE_NO_COMPILE=1 does the same");
}

const Registrar k_registrar(90, register_compile);

}  // namespace
}  // namespace jitcache::cli
