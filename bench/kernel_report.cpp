// kernel_report: the static report of the NVFP4 MLA kernels. For every variant (writer /
// gather x latent-scale mode x record format) and target it compiles the
// kernel through the library's own NVRTC back end (as `jitcache compile` does), reads the
// SASS of the cubin with NVIDIA's disassembler, and reports registers, occupancy,
// instruction counts (all, and those one warp issues for an ordinary token), memory
// instructions by width, bytes per token and a roofline for H200 and B200.
//
//   kernel_report [--json] [--arch A]... [--variant writer/identity/b12x-432]... [--explain]
//                 [--baseline OLD.json] [--dump-sass DIR] [--nvdisasm PATH] [--python-env DIR]
//                 [--smoke]
//
// nvdisasm comes from --nvdisasm, else JCTEST_NVDISASM, else a Python environment given
// by --python-env (the PyPI package nvidia-cuda-nvdisasm puts it in
// lib/python3.X/site-packages/nvidia/cu13/bin/), else PATH. --smoke reports one variant
// on one target and exits 0 with "skipped: no nvdisasm" when there is none.
// Exit codes: 0 done, 1 a variant could not be compiled or analysed, 2 usage or
// environment (no disassembler outside --smoke).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/kernel_model.hpp"
#include "bench/sass_analysis.hpp"
#include "kernel_templates/embedded_headers.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "runtime/compile/compiler.hpp"

extern char** environ;

namespace jitcache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int k_exit_ok = 0;
constexpr int k_exit_findings = 1;
constexpr int k_exit_usage = 2;

struct Options {
  bool json = false;
  bool smoke = false;
  bool explain = false;
  std::vector<std::string> archs;
  std::vector<std::string> variants;
  std::string nvdisasm;
  std::string python_env;
  std::string dump_sass;
  std::string baseline;
};

// ---------------------------------------------------------------------------------------
// Running the disassembler.

struct Captured {
  int exit_code = -1;
  std::string out, err;
};

// Runs argv[0] (a path) with stdout captured and stderr into a file of `scratch`.
Result<Captured> run_capture(const std::vector<std::string>& args, const fs::path& scratch) {
  const fs::path err_file = scratch / "stderr.txt";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(ErrorCode::io, "pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return make_error(ErrorCode::unavailable, "cannot run " + args[0] + ": " + std::strerror(rc));
  }
  Captured c;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    c.out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  c.err.assign(std::istreambuf_iterator<char>(in), {});
  return c;
}

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// nvdisasm inside a Python environment: bin/ (a package that links it there) or where
// the nvidia-cuda-nvdisasm wheels put it, site-packages/nvidia/cu*/bin/.
std::optional<fs::path> nvdisasm_in_python_env(const fs::path& env) {
  if (is_executable_file(env / "bin" / "nvdisasm")) return env / "bin" / "nvdisasm";
  std::error_code ec;
  std::vector<fs::path> found;
  for (const auto& lib : fs::directory_iterator(env / "lib", ec)) {
    const fs::path nvidia = lib.path() / "site-packages" / "nvidia";
    std::error_code ec2;
    for (const auto& cu : fs::directory_iterator(nvidia, ec2))
      if (is_executable_file(cu.path() / "bin" / "nvdisasm")) found.push_back(cu.path() / "bin" / "nvdisasm");
  }
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  return found.back();  // the newest cuNN when several are installed
}

std::optional<fs::path> nvdisasm_on_path() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::string_view rest(path);
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (!dir.empty() && is_executable_file(fs::path(dir) / "nvdisasm")) return fs::path(dir) / "nvdisasm";
  }
  return std::nullopt;
}

// The disassembler to use; nothing when none is found. An explicit path that is not an
// executable file is an error.
Result<std::optional<fs::path>> find_nvdisasm(const Options& options) {
  const auto explicit_path = [](const std::string& p, const char* where) -> Result<std::optional<fs::path>> {
    if (!is_executable_file(p))
      return make_error(ErrorCode::invalid_argument,
                        std::string(where) + ": " + p + " is not an executable file");
    return std::optional<fs::path>(p);
  };
  if (!options.nvdisasm.empty()) return explicit_path(options.nvdisasm, "--nvdisasm");
  if (const char* env = std::getenv("JCTEST_NVDISASM"); env != nullptr && *env != '\0')
    return explicit_path(env, "JCTEST_NVDISASM");
  if (!options.python_env.empty())
    if (auto p = nvdisasm_in_python_env(options.python_env)) return p;
  return nvdisasm_on_path();
}

// ---------------------------------------------------------------------------------------
// One variant.

struct VariantReport {
  KernelSpec spec;
  std::string error;  // empty when everything below is filled in
  ResourceUsage usage;
  double compile_ms = 0.0;
  std::optional<kernel_model::Occupancy> occupancy;
  sass::FunctionAnalysis analysis;
  sass::Listing listing;  // with line annotations
  kernel_model::TokenBytes bytes;
  std::string sass_text;
};

std::string variant_name(const KernelSpec& spec) {
  return std::string(to_string(spec.kernel)) + "/" + to_string(spec.latent_scale) + "/" +
         to_string(spec.format);
}

enum class LineInfo { without, with };

Result<CompiledArtifact> compile(const Compiler& compiler, const KernelSpec& spec, LineInfo line_info) {
  // The library's NVRTC back end adds -lineinfo when JITCACHE_LINEINFO is on; the report
  // sets it both ways so that the user's environment decides neither build.
  const bool lineinfo = line_info == LineInfo::with;
  ::setenv("JITCACHE_LINEINFO", lineinfo ? "1" : "0", 1);
  auto artifact = compiler.compile(generate(spec));
  if (!artifact) return artifact;
  const bool has = std::find(artifact->options.begin(), artifact->options.end(), "--generate-line-info") !=
                   artifact->options.end();
  if (has != lineinfo)
    return make_error(ErrorCode::internal, "the NVRTC options of " + spec.label() +
                                               (lineinfo ? " lack" : " have") + " --generate-line-info");
  return artifact;
}

Result<std::string> disassemble(const fs::path& nvdisasm, const CompiledArtifact& artifact, LineInfo lines,
                                const fs::path& scratch) {
  const fs::path cubin = scratch / "kernel.cubin";
  {
    std::ofstream out(cubin, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(artifact.cubin.data()),
              static_cast<std::streamsize>(artifact.cubin.size()));
    if (!out) return make_error(ErrorCode::io, "cannot write " + cubin.string());
  }
  std::vector<std::string> args = {nvdisasm.string(), "-c"};
  if (lines == LineInfo::with) args.push_back("-g");
  args.push_back(cubin.string());
  const Captured c = JC_TRY(run_capture(args, scratch));
  if (c.exit_code != 0)
    return make_error(ErrorCode::unavailable,
                      nvdisasm.string() + " failed on the cubin of " + artifact.spec.label() + " (exit " +
                          std::to_string(c.exit_code) + ")",
                      c.err);
  return c.out;
}

Status analyse_variant(const Compiler& compiler, const fs::path& nvdisasm, const fs::path& scratch,
                       VariantReport& report) {
  const CompiledArtifact plain = JC_TRY(compile(compiler, report.spec, LineInfo::without));
  const CompiledArtifact with_lines = JC_TRY(compile(compiler, report.spec, LineInfo::with));
  report.usage = plain.usage;
  report.compile_ms = plain.compile_ms;
  const std::string plain_text = JC_TRY(disassemble(nvdisasm, plain, LineInfo::without, scratch));
  report.sass_text = JC_TRY(disassemble(nvdisasm, with_lines, LineInfo::with, scratch));
  const sass::Listing plain_listing = JC_TRY(sass::parse_listing(plain_text));
  report.listing = JC_TRY(sass::parse_listing(report.sass_text));
  // The line table must not change the code, or the lines would describe another kernel.
  std::string difference;
  if (!sass::same_code(plain_listing, report.listing, &difference))
    return make_error(ErrorCode::internal,
                      "-lineinfo changed the SASS of " + report.spec.label() + ": " + difference);
  report.analysis = JC_TRY(sass::analyse(report.listing, plain.entry));
  if (report.analysis.path_has_loop)
    return make_error(ErrorCode::internal, "the ordinary path of " + report.spec.label() +
                                               " has a loop; its count would be per iteration");
  if (const auto limits = kernel_model::arch_limits(report.spec.target.name))
    report.occupancy = kernel_model::occupancy(*limits, plain.usage.registers, jc::k_threads_per_cta);
  report.bytes = kernel_model::bytes_per_token(report.spec.kernel, report.spec.format);
  return {};
}

// ---------------------------------------------------------------------------------------
// Output.

enum class Access { loads, stores };

std::string memory_list(const sass::MemoryTally& tally, Access access) {
  const bool loads = access == Access::loads;
  std::string out;
  for (const auto& [key, n] : tally.by_kind) {
    const std::string family = key.substr(0, key.find('.'));
    const bool is_load = family == "LDG" || family == "LD" || family == "LDS" || family == "LDL";
    const bool is_store = family == "STG" || family == "ST" || family == "STS" || family == "STL";
    if ((loads && !is_load) || (!loads && !is_store)) continue;
    out += (out.empty() ? "" : " ") + key + (n > 1 ? "x" + std::to_string(n) : "");
  }
  return out.empty() ? "-" : out;
}

json tally_json(const sass::MemoryTally& t) {
  return json{{"by_kind", t.by_kind},
              {"global_loads", t.global_loads},
              {"global_stores", t.global_stores},
              {"atomics", t.atomics},
              {"total", t.total}};
}

const kernel_model::Device* device_for(const std::string& target) {
  for (const auto& d : kernel_model::devices())
    if (d.target == target) return &d;
  return nullptr;
}

// Path instructions of an earlier report (its --json output), by "variant target".
using Baseline = std::map<std::string, int>;

std::string baseline_key(const KernelSpec& spec) { return variant_name(spec) + " " + spec.target.name; }

Result<Baseline> read_baseline(const std::string& file) {
  std::ifstream in(file);
  if (!in) return make_error(ErrorCode::not_found, "--baseline: cannot read " + file);
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("variants") || !doc["variants"].is_array())
    return make_error(ErrorCode::invalid_input,
                      "--baseline: " + file + " is not a kernel_report --json document");
  Baseline out;
  for (const auto& v : doc["variants"]) {
    if (!v.is_object() || !v.contains("instructions")) continue;  // a variant that failed there
    const auto& path = v["instructions"].value("path", json());
    if (!path.is_number_integer() || !v.value("variant", json()).is_string() ||
        !v.value("target", json()).is_string())
      return make_error(ErrorCode::invalid_input,
                        "--baseline: " + file + ": a variant lacks variant/target/path");
    out[v["variant"].get<std::string>() + " " + v["target"].get<std::string>()] = path.get<int>();
  }
  return out;
}

std::optional<double> versus_baseline(const Baseline& baseline, const VariantReport& r) {
  const auto it = baseline.find(baseline_key(r.spec));
  if (it == baseline.end() || it->second <= 0) return std::nullopt;
  return static_cast<double>(r.analysis.path_instructions) / it->second;
}

json report_json(const std::vector<VariantReport>& reports, const std::string& compiler_version,
                 const std::string& disassembler, const Baseline& baseline) {
  json variants = json::array();
  for (const auto& r : reports) {
    json v{{"variant", variant_name(r.spec)},
           {"kernel", to_string(r.spec.kernel)},
           {"latent_scale", to_string(r.spec.latent_scale)},
           {"format", to_string(r.spec.format)},
           {"target", r.spec.target.name}};
    if (!r.error.empty()) {
      v["error"] = r.error;
      variants.push_back(v);
      continue;
    }
    v["compile_ms"] = r.compile_ms;
    v["registers"] = r.usage.registers;
    v["spill_store_bytes"] = r.usage.spill_store_bytes;
    v["spill_load_bytes"] = r.usage.spill_load_bytes;
    v["stack_bytes"] = r.usage.stack_frame_bytes;
    if (r.occupancy)
      v["occupancy"] = {{"ctas_per_sm", r.occupancy->ctas_per_sm},
                        {"warps_per_sm", r.occupancy->warps_per_sm},
                        {"fraction", r.occupancy->fraction},
                        {"limited_by", kernel_model::to_string(r.occupancy->limit)}};
    v["instructions"] = {{"total", r.analysis.total_instructions},
                         {"entry", r.analysis.entry_instructions},
                         {"path", r.analysis.path_instructions},
                         {"path_control", r.analysis.path_control_instructions}};
    if (const auto ratio = versus_baseline(baseline, r)) {
      v["instructions"]["baseline_path"] = baseline.at(baseline_key(r.spec));
      v["instructions"]["path_vs_baseline"] = *ratio;
    }
    v["memory_instructions"] = {{"total", tally_json(r.analysis.memory_total)},
                                {"path", tally_json(r.analysis.memory_path)}};
    v["bytes_per_token"] = {{"read", r.bytes.read}, {"written", r.bytes.written}, {"total", r.bytes.total()}};
    int cut = 0;
    json cuts = json::object();
    for (const auto& b : r.analysis.branches)
      if (b.cold != sass::Cold::none) {
        ++cut;
        cuts[sass::to_string(b.cold)] = cuts.value(sass::to_string(b.cold), 0) + 1;
      }
    v["branches"] = {
        {"conditional", r.analysis.branches.size()}, {"one_side_cut", cut}, {"cut_because", cuts}};
    json rooflines = json::array();
    if (const auto* d = device_for(r.spec.target.name)) {
      const auto rl = kernel_model::roofline(*d, r.analysis.path_instructions, r.bytes.total());
      rooflines.push_back({{"device", d->name},
                           {"issue_tokens_per_s", rl.issue_tokens_per_s},
                           {"memory_tokens_per_s", rl.memory_tokens_per_s},
                           {"bound", rl.issue_bound ? "issue" : "memory"},
                           {"issue_over_memory", rl.issue_over_memory}});
    }
    v["roofline"] = rooflines;
    variants.push_back(v);
  }
  json devices = json::array();
  for (const auto& d : kernel_model::devices())
    devices.push_back({{"name", d.name},
                       {"target", d.target},
                       {"sms", d.sms},
                       {"schedulers_per_sm", d.schedulers_per_sm},
                       {"clock_hz", d.clock_hz},
                       {"dram_bytes_per_s", d.dram_bytes_per_s}});
  return json{{"compiler", "nvrtc " + compiler_version},
              {"nvdisasm", disassembler},
              {"threads_per_cta", jc::k_threads_per_cta},
              {"ordinary_token",
               "finite inputs, no error, slot in range, 32 lanes active, lanes 0..7 doing RoPE work; "
               "path = warp instructions one warp issues for it"},
              {"devices", devices},
              {"variants", variants}};
}

void print_table(const std::vector<VariantReport>& reports, const Baseline& baseline) {
  const bool with_baseline = !baseline.empty();
  std::printf("%-21s %-8s %4s %5s %5s %4s %5s %4s %5s %5s %5s %4s %4s  %-28s %-30s %7s%s\n", "variant",
              "target", "regs", "spill", "stack", "CTAs", "warps", "occ", "total", "entry", "path", "ctrl",
              "gmem", "loads on path", "stores on path", "B/token", with_baseline ? "  vs base" : "");
  for (const auto& r : reports) {
    if (!r.error.empty()) {
      std::printf("%-21s %-8s error: %s\n", variant_name(r.spec).c_str(), r.spec.target.name.c_str(),
                  r.error.c_str());
      continue;
    }
    const auto& a = r.analysis;
    const std::string ctas = r.occupancy ? std::to_string(r.occupancy->ctas_per_sm) : "?";
    const std::string warps = r.occupancy ? std::to_string(r.occupancy->warps_per_sm) : "?";
    const std::string occ =
        r.occupancy ? std::to_string(static_cast<int>(r.occupancy->fraction * 100.0 + 0.5)) + "%" : "?";
    std::string versus;
    if (with_baseline) {
      const auto ratio = versus_baseline(baseline, r);
      char text[32];
      std::snprintf(text, sizeof text, "  %7.2f", ratio ? *ratio : 0.0);
      versus = ratio ? text : "        -";
    }
    std::printf("%-21s %-8s %4d %5d %5d %4s %5s %4s %5d %5d %5d %4d %4d  %-28s %-30s %7d%s\n",
                variant_name(r.spec).c_str(), r.spec.target.name.c_str(), r.usage.registers,
                r.usage.spill_store_bytes + r.usage.spill_load_bytes, r.usage.stack_frame_bytes, ctas.c_str(),
                warps.c_str(), occ.c_str(), a.total_instructions, a.entry_instructions, a.path_instructions,
                a.path_control_instructions,
                a.memory_path.global_loads + a.memory_path.global_stores + a.memory_path.atomics,
                memory_list(a.memory_path, Access::loads).c_str(),
                memory_list(a.memory_path, Access::stores).c_str(), r.bytes.total(), versus.c_str());
  }
}

void print_rooflines(const std::vector<VariantReport>& reports) {
  for (const auto& d : kernel_model::devices()) {
    bool any = false;
    for (const auto& r : reports) any = any || (r.error.empty() && r.spec.target.name == d.target);
    if (!any) continue;
    std::printf("\n%s (%s code): %s\n", std::string(d.name).c_str(), std::string(d.target).c_str(),
                std::string(d.source).c_str());
    std::printf("%-21s %5s %7s %12s %13s %6s %12s\n", "variant", "path", "B/token", "issue Mtok/s",
                "memory Mtok/s", "bound", "issue/memory");
    for (const auto& r : reports) {
      if (!r.error.empty() || r.spec.target.name != d.target) continue;
      const auto rl = kernel_model::roofline(d, r.analysis.path_instructions, r.bytes.total());
      std::printf("%-21s %5d %7d %12.0f %13.0f %6s %12.2f\n", variant_name(r.spec).c_str(),
                  r.analysis.path_instructions, r.bytes.total(), rl.issue_tokens_per_s / 1e6,
                  rl.memory_tokens_per_s / 1e6, rl.issue_bound ? "issue" : "memory", rl.issue_over_memory);
    }
  }
}

void print_notes() {
  std::printf(
      "\nOrdinary token: finite inputs, no error, slot in range, all 32 lanes active, lanes 0..7 doing RoPE\n"
      "work; one warp per token, %d-thread CTAs.\n"
      "total: instructions of the kernel and its subroutines (NOP padding left out); entry: those of the\n"
      "kernel's own function. path: warp instructions one warp issues for an ordinary token, each once\n"
      "(a side of a branch that only a rare input takes is cut: status reports, early exits, the zero row,\n"
      "NaN inputs, the slow path of a correctly rounded division, a diverged warp's fallback; both sides\n"
      "of a lane-dependent branch count). ctrl: control instructions on the path (BRA, BSSY, BSYNC,\n"
      "EXIT, ...); gmem: its global memory instructions, listed by width under loads and stores.\n"
      "occ: resident warps per SM over the architecture's maximum (65536 registers per SM, allocated per\n"
      "warp in units of 256; at most 32 CTAs and 64 warps per SM, 48 warps on sm_120).\n"
      "B/token: DRAM bytes per token (writer: kv_c 1024 + k_pe 128 + slot 8 in, the record out; gather:\n"
      "slot 4 + the record in, 576 bf16 = 1152 out).\n"
      "Roofline: issue bound = SMs x 4 schedulers x boost clock / path (one warp instruction per scheduler\n"
      "per clock, perfect latency hiding); memory bound = DRAM bandwidth / B/token. issue/memory below 1:\n"
      "instruction issue caps the kernel at that fraction of the memory roofline.\n",
      jc::k_threads_per_cta);
}

std::string source_line(std::string_view file, int line) {
  for (const auto& h : kernel_templates::embedded_headers()) {
    if (h.include_name.size() < file.size() ||
        h.include_name.substr(h.include_name.size() - file.size()) != file)
      continue;
    std::string_view text = h.text;
    for (int i = 1; i < line && !text.empty(); ++i) {
      const std::size_t eol = text.find('\n');
      text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    }
    std::string_view l = text.substr(0, text.find('\n'));
    while (!l.empty() && l.front() == ' ') l.remove_prefix(1);
    return std::string(l.substr(0, 70));
  }
  return {};
}

void print_explanation(const VariantReport& r) {
  const auto& a = r.analysis;
  const sass::Function* fn = r.listing.find(a.name);
  if (fn == nullptr) return;
  std::printf("\n== %s %s: %d instructions, %d on the ordinary path\n", variant_name(r.spec).c_str(),
              r.spec.target.name.c_str(), a.total_instructions, a.path_instructions);
  std::printf("conditional branches (own code of each side in instructions; the guard's definition):\n");
  for (const auto& b : a.branches) {
    const auto& ins = fn->instructions[b.instruction];
    const char* side = b.cold == sass::Cold::none ? "" : (b.taken_is_cold ? "cut taken" : "cut fall-through");
    std::printf("  %04x  %-30s %-14s %-17s taken %3d fall %3d  %s\n", ins.address, ins.text().c_str(),
                sass::to_string(b.cold), side, b.taken_region_instructions, b.fall_region_instructions,
                b.predicate_source.c_str());
  }
  std::printf("instructions off the path:\n");
  for (std::size_t b = 0; b < a.blocks.size(); ++b) {
    if (a.on_path[b]) continue;
    for (std::size_t i = a.blocks[b].begin; i < a.blocks[b].end; ++i) {
      const auto& ins = fn->instructions[i];
      if (ins.family() == "NOP") continue;
      std::printf("  %04x  %s\n", ins.address, ins.text().c_str());
    }
  }
  if (!a.called.empty()) {
    std::printf("calls on the path:");
    for (const auto& c : a.called) std::printf(" %s", c.c_str());
    std::printf("\n");
  }
  std::printf("source lines of the path, most instructions first:\n");
  const auto lines = sass::path_lines(r.listing, a);
  for (std::size_t i = 0; i < lines.size() && i < 25; ++i) {
    const auto& [where, n] = lines[i];
    const std::size_t colon = where.rfind(':');
    const std::string text = colon == std::string::npos
                                 ? ""
                                 : source_line(where.substr(0, colon), std::atoi(where.c_str() + colon + 1));
    std::printf("  %4d  %-22s %s\n", n, where.c_str(), text.c_str());
  }
}

// ---------------------------------------------------------------------------------------

// A scratch directory for cubins and stderr, removed on every way out.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (fs::temp_directory_path() / "jc_kernel_report.XXXXXX").string();
    if (::mkdtemp(templ.data()) != nullptr) m_path = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!m_path.empty()) fs::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

// "13.5 (V13.5.37)" from nvdisasm --version's "Cuda compilation tools, release 13.5, V13.5.37".
std::string nvdisasm_version(const std::string& text) {
  const std::size_t at = text.find("release ");
  if (at == std::string::npos) return {};
  const std::size_t eol = std::min(text.find('\n', at), text.size());
  std::string rest = text.substr(at + 8, eol - at - 8);
  const std::size_t comma = rest.find(", ");
  if (comma != std::string::npos) rest = rest.substr(0, comma) + " (" + rest.substr(comma + 2) + ")";
  return rest;
}

// ---------------------------------------------------------------------------------------
// The formats' budget: each variant built from nvfp4_mla_formats.cuh issues at most
// k_format_budget times the path instructions of the first text's variant it is measured
// against: the same kernel and target, the dynamic mode for per-token (both divide by a
// scale), and b12x-368 for a format with E4M3 RoPE (flashmla-352), b12x-432 otherwise.

constexpr double k_format_budget = 1.2;

KernelSpec budget_baseline(const KernelSpec& spec) {
  KernelSpec base = spec;
  if (base.latent_scale == LatentScale::per_token) base.latent_scale = LatentScale::dynamic;
  base.format = spec.format == RecordFormat::flashmla_352 || spec.format == RecordFormat::b12x_368
                    ? RecordFormat::b12x_368
                    : RecordFormat::b12x_432;
  return base;
}

struct BudgetRow {
  const VariantReport* variant;
  const VariantReport* baseline;
  double ratio;
};

std::vector<BudgetRow> format_budget(const std::vector<VariantReport>& reports) {
  std::vector<BudgetRow> rows;
  for (const auto& r : reports) {
    if (!r.error.empty() || built_from_first_text(r.spec)) continue;
    const KernelSpec base = budget_baseline(r.spec);
    for (const auto& b : reports)
      if (b.spec == base && b.error.empty() && b.analysis.path_instructions > 0)
        rows.push_back({&r, &b, static_cast<double>(r.analysis.path_instructions) / b.analysis.path_instructions});
  }
  return rows;
}

void print_budget(const std::vector<BudgetRow>& rows) {
  if (rows.empty()) return;
  std::printf("\nFormats' budget: path instructions against the first text's variant (at most %.1fx)\n",
              k_format_budget);
  std::printf("%-30s %-8s %5s   %-28s %5s %6s\n", "variant", "target", "path", "measured against", "path", "ratio");
  for (const BudgetRow& row : rows)
    std::printf("%-30s %-8s %5d   %-28s %5d %5.2fx%s\n", variant_name(row.variant->spec).c_str(),
                row.variant->spec.target.name.c_str(), row.variant->analysis.path_instructions,
                variant_name(row.baseline->spec).c_str(), row.baseline->analysis.path_instructions, row.ratio,
                row.ratio > k_format_budget ? "  OVER BUDGET" : "");
}

int run(const Options& options) {
  std::vector<Target> targets;
  std::vector<std::string> archs = options.archs;
  if (options.smoke && archs.empty()) archs = {"sm_90"};
  if (archs.empty())
    for (auto t : default_targets()) archs.emplace_back(t);
  for (const auto& a : archs) {
    auto t = parse_target(a);
    if (!t) {
      std::fprintf(stderr, "kernel_report: error: %s\n", t.error().message.c_str());
      return k_exit_usage;
    }
    if (!kernel_model::arch_limits(t->name)) {
      std::fprintf(stderr, "kernel_report: error: no SM limits known for %s\n", t->name.c_str());
      return k_exit_usage;
    }
    targets.push_back(*t);
  }
  std::vector<std::string> wanted = options.variants;
  // The smoke test takes the variant with the most kinds of branch (divisions, NaN tests,
  // the RoPE shuffle, both status reports).
  if (options.smoke && wanted.empty()) wanted = {"writer/dynamic/b12x-368"};
  for (const auto& w : wanted) {
    bool known = false;
    for (const auto& s : all_variants(targets.front())) known = known || variant_name(s) == w;
    if (!known) {
      std::fprintf(stderr, "kernel_report: error: unknown variant '%s' (e.g. writer/identity/b12x-432)\n",
                   w.c_str());
      return k_exit_usage;
    }
  }

  auto found = find_nvdisasm(options);
  if (!found) {
    std::fprintf(stderr, "kernel_report: error: %s\n", found.error().message.c_str());
    return k_exit_usage;
  }
  if (!*found) {
    const char* how =
        "no nvdisasm (give --nvdisasm PATH, set JCTEST_NVDISASM, or pip install nvidia-cuda-nvdisasm into "
        "the "
        "project's .venv)";
    if (options.smoke) {
      std::printf("kernel_report: skipped: %s\n", how);
      return k_exit_ok;
    }
    std::fprintf(stderr, "kernel_report: error: %s\n", how);
    return k_exit_usage;
  }
  const fs::path nvdisasm = **found;
  Baseline baseline;
  if (!options.baseline.empty()) {
    auto read = read_baseline(options.baseline);
    if (!read) {
      std::fprintf(stderr, "kernel_report: error: %s\n", read.error().message.c_str());
      return k_exit_usage;
    }
    baseline = std::move(*read);
  }
  ScratchDir scratch;
  if (scratch.path().empty()) {
    std::fprintf(stderr, "kernel_report: error: cannot make a temporary directory\n");
    return k_exit_usage;
  }
  std::string disassembler_version;
  if (auto v = run_capture({nvdisasm.string(), "--version"}, scratch.path()); v && v->exit_code == 0)
    disassembler_version = nvdisasm_version(v->out);
  const auto compiler = make_nvrtc_compiler();

  std::vector<VariantReport> reports;
  int failures = 0;
  for (const Target& target : targets) {
    for (const KernelSpec& spec : all_variants(target)) {
      if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), variant_name(spec)) == wanted.end())
        continue;
      VariantReport r;
      r.spec = spec;
      if (auto done = analyse_variant(*compiler, nvdisasm, scratch.path(), r); !done) {
        r.error = done.error().message;
        ++failures;
        std::fprintf(stderr, "kernel_report: error: %s\n", done.error().to_string().c_str());
      }
      if (!options.dump_sass.empty() && !r.sass_text.empty()) {
        std::error_code ec;
        fs::create_directories(options.dump_sass, ec);
        const fs::path file = fs::path(options.dump_sass) /
                              (std::string(to_string(spec.kernel)) + "_" + to_string(spec.latent_scale) +
                               "_" + to_string(spec.format) + "_" + spec.target.name + ".sass");
        std::ofstream(file) << r.sass_text;
      }
      reports.push_back(std::move(r));
    }
  }

  if (options.json) {
    std::printf("%s\n",
                report_json(reports, compiler->version(), disassembler_version, baseline).dump(2).c_str());
  } else {
    std::printf("Kernel report: NVRTC %s, nvdisasm %s\n\n", compiler->version().c_str(),
                disassembler_version.empty() ? "(version unknown)" : disassembler_version.c_str());
    print_table(reports, baseline);
    print_rooflines(reports);
    print_budget(format_budget(reports));
    print_notes();
    if (options.explain)
      for (const auto& r : reports)
        if (r.error.empty()) print_explanation(r);
  }
  if (options.smoke && failures == 0) {
    // The smoke test's own checks: on every target asked for, registers known and no
    // spills, a path found, shorter than the kernel, with the latent stores on it.
    for (const auto& r : reports) {
      if (r.usage.registers <= 0 || r.usage.spill_store_bytes != 0 || r.usage.spill_load_bytes != 0) {
        std::fprintf(stderr, "kernel_report: error: %s: %d registers, %d bytes spilled, %d reloaded\n",
                     r.spec.label().c_str(), r.usage.registers, r.usage.spill_store_bytes, r.usage.spill_load_bytes);
        ++failures;
      }
      const auto& a = r.analysis;
      if (a.path_instructions <= 0 || a.path_instructions >= a.total_instructions ||
          a.memory_path.global_stores == 0 || a.memory_path.atomics != 0) {
        std::fprintf(stderr, "kernel_report: error: implausible path for %s: %d of %d instructions\n",
                     r.spec.label().c_str(), a.path_instructions, a.total_instructions);
        ++failures;
      }
    }
  }
  for (const BudgetRow& row : format_budget(reports))
    if (row.ratio > k_format_budget) {
      std::fprintf(stderr, "kernel_report: error: %s on %s issues %.2fx the path instructions of %s\n",
                   variant_name(row.variant->spec).c_str(), row.variant->spec.target.name.c_str(), row.ratio,
                   variant_name(row.baseline->spec).c_str());
      ++failures;
    }
  return failures == 0 ? k_exit_ok : k_exit_findings;
}

}  // namespace
}  // namespace jitcache

int main(int argc, char** argv) {
  jitcache::Options options;
  CLI::App app{
      "Static report of the NVFP4 MLA kernels: registers, occupancy, SASS instruction counts, "
      "memory instructions, bytes per token, roofline"};
  app.add_flag("--json", options.json, "One JSON document on stdout");
  app.add_flag("--smoke", options.smoke,
               "One variant (writer/dynamic/b12x-368) on sm_90 unless --variant/--arch say otherwise, "
               "checked (registers, no spills, a plausible path); exits 0 with a note when there is no nvdisasm");
  app.add_flag("--explain", options.explain,
               "Also print each variant's branches, the instructions off the path and its source lines");
  app.add_option("--arch", options.archs, "Target(s) (default: sm_90 sm_100a sm_120a)");
  app.add_option("--variant", options.variants, "Variant(s), e.g. writer/identity/b12x-432 (default: all)");
  app.add_option("--nvdisasm", options.nvdisasm,
                 "The disassembler (else JCTEST_NVDISASM, --python-env, PATH)");
  app.add_option("--python-env", options.python_env,
                 "A Python environment with the nvidia-cuda-nvdisasm package, searched for nvdisasm");
  app.add_option("--baseline", options.baseline,
                 "An earlier --json report: show each variant's path instructions relative to it");
  app.add_option("--dump-sass", options.dump_sass, "Write each variant's annotated SASS into this directory");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : jitcache::k_exit_usage;
  }
  return jitcache::run(options);
}
