#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "jitcache/log.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/fingerprint_memo.hpp"
#include "runtime/compile/mla_family.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "support/env.hpp"
#include "support/fork_guard.hpp"

namespace jitcache {
namespace {

// Owns an nvrtcProgram: destroyed on every path out of compile().
class Program {
 public:
  explicit Program(nvrtcProgram p) : m_program(p) {}
  ~Program() {
    if (m_program != nullptr) nvrtcDestroyProgram(&m_program);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return m_program; }

 private:
  nvrtcProgram m_program;
};

std::string joined(const std::vector<std::string>& options) {
  std::string text;
  for (const auto& o : options) text += (text.empty() ? "" : " ") + o;
  return text;
}

// What identifies the NVRTC build this process runs, without compiling anything: the
// loaded libnvrtc file and the libnvrtc-builtins it loads from its own directory. A
// reinstalled or upgraded toolkit replaces the files, which changes their identity.
std::optional<std::string> nvrtc_identity() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) == 0 || info.dli_fname == nullptr)
    return std::nullopt;
  // Not NVRTC's own file (a non-PIE program's PLT stub, say): identity unknown.
  if (std::string_view(info.dli_fname).find("nvrtc") == std::string_view::npos) return std::nullopt;
  std::error_code ec;
  const auto library = std::filesystem::canonical(info.dli_fname, ec);
  int major = 0, minor = 0;
  if (ec || nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::nullopt;
  const auto described = describe_file(library);
  if (!described) return std::nullopt;
  const std::string version = std::to_string(major) + "." + std::to_string(minor);
  const auto builtins = describe_file(library.parent_path() / ("libnvrtc-builtins.so." + version));
  return "nvrtc " + version + "; " + *described + "; builtins " + builtins.value_or("absent");
}

class NvrtcCompiler final : public Compiler {
 public:
  explicit NvrtcCompiler(NvrtcOptions options) : m_options(std::move(options)) {}

  std::string name() const override { return "nvrtc"; }

  std::string version() const override {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    return std::to_string(major) + "." + std::to_string(minor);
  }

  Result<std::string> fingerprint() const override {
    std::call_once(m_fingerprint_once, [this] { m_fingerprint = memoized_fingerprint(); });
    return m_fingerprint;
  }

  std::vector<std::string> options(const KernelSpec& spec) const override {
    // IEEE-exact numerics are part of the contract with the host executor: no FMA
    // contraction, correctly rounded division and square root, denormals kept.
    std::vector<std::string> options = {"--gpu-architecture=" + spec.target.arch_option(),
                                        "--std=c++17",
                                        "--fmad=false",
                                        "--prec-div=true",
                                        "--prec-sqrt=true",
                                        "--ftz=false",
                                        "--ptxas-options=-v"};
    // Line information changes the binary, never the numerics; an unparsable value is
    // treated as off (env::get_bool reports it where the registry is checked).
    if (env::get_bool(env::jitcache_lineinfo).value_or(false)) options.push_back("--generate-line-info");
    return options;
  }

  Result<CompiledArtifact> compile(const GeneratedSource& source) const override {
    const auto started = std::chrono::steady_clock::now();
    CompiledArtifact artifact;
    artifact.spec = source.spec;
    artifact.entry = source.entry;
    artifact.facts = source.facts;
    artifact.options = options(source.spec);
    // One compile path: the variant goes through compile_source as the request an outside
    // library would send for it, checked against the family's schema first (a spec the
    // schema does not know is an error here, not a kernel). compile_source puts the target's
    // architecture option first and keeps the caller's -v where options() put it, so NVRTC
    // gets exactly artifact.options, in order (a test holds that).
    const KernelRequest request = mla_request(source, artifact.options);
    JC_TRY(validate_mla_request(request));
    // jitcache's own kernel: trusted, compiled in this process (no tool worker).
    SourceInput input = source_input(request, source.program_name);
    input.trusted = true;
    auto compiled = compile_source(input);
    if (!compiled) return std::unexpected(std::move(compiled.error()));
    artifact.ptx = std::move(compiled->ptx);
    artifact.cubin = std::move(compiled->cubin);
    // The bundle keeps NVRTC's own log, as it did before there was a second tool to label.
    artifact.log = std::move(compiled->log);
    if (artifact.log.starts_with(k_nvrtc_log_heading)) artifact.log.erase(0, k_nvrtc_log_heading.size());
    artifact.usage = compiled->usage;
    artifact.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return artifact;
  }

 private:
  Result<std::string> memoized_fingerprint() const {
    const std::filesystem::path& memo = m_options.fingerprint_memo;
    if (memo.empty()) return compute_fingerprint();
    std::optional<std::string> identity;
    try {
      identity = nvrtc_identity();
      if (!identity) return compute_fingerprint();
      if (const auto known = read_memo(memo, *identity); known && known->version.empty()) return known->fingerprint;
    } catch (const std::exception& e) {
      // The memo is only a shortcut: whatever went wrong, compute.
      log_debug("compiler fingerprint memo " + memo.string() + " not used: " + e.what());
      return compute_fingerprint();
    }
    auto computed = compute_fingerprint();
    if (!computed) return computed;
    try {
      if (auto written = write_memo(memo, *identity, MemoValue{{}, *computed}); !written)
        log_debug("compiler fingerprint memo not written: " + written.error().message);
    } catch (const std::exception& e) {
      log_debug("compiler fingerprint memo not written: " + std::string(e.what()));
    }
    return computed;
  }

  // PTX of a tiny fixed program for a fixed virtual target, plus the architectures this
  // NVRTC supports: what distinguishes builds that report the same version.
  static Result<std::string> compute_fingerprint() {
    const char* source = "extern \"C\" __global__ void jc_fingerprint(float* p, float s) { p[0] = __fdiv_rn(p[1], s); }\n";
    const ToolSection section;  // NVRTC's own locks, held while it compiles (fork_guard.hpp)
    nvrtcProgram raw = nullptr;
    if (nvrtcCreateProgram(&raw, source, "fingerprint.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
      return make_error(ErrorCode::compile, "NVRTC could not create the fingerprint program");
    Program program(raw);
    const char* opts[] = {"--gpu-architecture=compute_90"};
    if (nvrtcCompileProgram(program.get(), 1, opts) != NVRTC_SUCCESS)
      return make_error(ErrorCode::compile, "NVRTC could not compile the fingerprint program");
    std::size_t size = 0;
    nvrtcGetPTXSize(program.get(), &size);
    std::string text(size, '\0');
    nvrtcGetPTX(program.get(), text.data());
    int count = 0;
    if (nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      std::vector<int> archs(static_cast<std::size_t>(count));
      nvrtcGetSupportedArchs(archs.data());
      for (int a : archs) text += " sm" + std::to_string(a);
    }
    return fingerprint_digest(text);
  }

  NvrtcOptions m_options;
  mutable std::once_flag m_fingerprint_once;
  mutable Result<std::string> m_fingerprint = std::string();
};

}  // namespace

Result<NvrtcOutput> run_nvrtc(const std::string& program_name, const std::string& source,
                              std::span<const NvrtcHeader> headers, const std::vector<std::string>& options,
                              const std::string& what) {
  std::vector<const char*> header_texts, header_names;
  for (const NvrtcHeader& h : headers) {
    header_texts.push_back(h.text);
    header_names.push_back(h.name);
  }
  const ToolSection section;  // NVRTC's own locks, held while it compiles (fork_guard.hpp)
  nvrtcProgram raw = nullptr;
  note_stage("NVRTC", "nvrtcCreateProgram");
  nvrtcResult rc = nvrtcCreateProgram(&raw, source.c_str(), program_name.c_str(), static_cast<int>(header_texts.size()),
                                      header_texts.data(), header_names.data());
  if (rc != NVRTC_SUCCESS)
    return make_error(ErrorCode::compile, "nvrtcCreateProgram failed for " + what + ": " + nvrtcGetErrorString(rc));
  Program program(raw);

  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  NvrtcOutput out;
  note_stage("NVRTC", "nvrtcCompileProgram");
  rc = nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  if (nvrtcGetProgramLogSize(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtcGetProgramLog(program.get(), out.log.data());
    // The size counts a terminator, and ptxas' part of the log brings one of its own.
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  }
  if (rc != NVRTC_SUCCESS)
    return make_error(ErrorCode::compile,
                      "NVRTC could not compile " + what + " at nvrtcCompileProgram: " + nvrtcGetErrorString(rc),
                      "options: " + joined(options) + "\nlog:\n" + out.log);

  note_stage("NVRTC", "nvrtcGetCUBIN");
  std::size_t ptx_size = 0;
  if (nvrtcGetPTXSize(program.get(), &ptx_size) == NVRTC_SUCCESS && ptx_size > 0) {
    out.ptx.resize(ptx_size);
    nvrtcGetPTX(program.get(), out.ptx.data());
    out.ptx.resize(ptx_size - 1);
  }
  std::size_t cubin_size = 0;
  rc = nvrtcGetCUBINSize(program.get(), &cubin_size);
  if (rc != NVRTC_SUCCESS || cubin_size == 0)
    return make_error(ErrorCode::compile, "NVRTC produced no cubin for " + what + " (is the target a real architecture?)",
                      "options: " + joined(options));
  out.cubin.resize(cubin_size);
  nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(out.cubin.data()));
  return out;
}

std::unique_ptr<Compiler> make_nvrtc_compiler(NvrtcOptions options) {
  return std::make_unique<NvrtcCompiler>(std::move(options));
}

ResourceUsage parse_ptxas_usage(const std::string& log, const std::string& entry) {
  ResourceUsage usage;
  const std::string marker = "Function properties for " + entry;
  // The marker ends its line: the report of `axpy` is not the one of `axpy2`. (nvJitLink's
  // -verbose adds a summary line "info : Function properties for 'axpy':" after ptxas'
  // own report, which this does not read.)
  std::size_t at = log.find(marker);
  while (at != std::string::npos) {
    const std::size_t after = at + marker.size();
    if (after == log.size() || log[after] == '\n' || log[after] == '\r') break;
    at = log.find(marker, after);
  }
  if (at == std::string::npos) return usage;
  // The entry's block ends at the next "Function properties" (or the end of the log).
  const auto end = log.find("Function properties for ", at + marker.size());
  const std::string block = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::smatch m;
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    usage.stack_frame_bytes = std::stoi(m[1]);
    usage.spill_store_bytes = std::stoi(m[2]);
    usage.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(block, m, std::regex(R"(Used (\d+) registers)")))
    usage.registers = std::stoi(m[1]);
  return usage;
}

}  // namespace jitcache
