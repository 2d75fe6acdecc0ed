#include <nvrtc.h>

#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "runtime/compiler.hpp"
#include "support/env.hpp"

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

class NvrtcCompiler final : public Compiler {
 public:
  std::string name() const override { return "nvrtc"; }

  std::string version() const override {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    return std::to_string(major) + "." + std::to_string(minor);
  }

  Result<std::string> fingerprint() const override {
    std::call_once(m_fingerprint_once, [this] { m_fingerprint = compute_fingerprint(); });
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
    std::vector<const char*> header_texts, header_names;
    for (const auto& h : source.headers) {
      // NVRTC wants NUL-terminated strings; the embedded views are literals, so they are.
      header_texts.push_back(h.text.data());
      header_names.push_back(h.include_name.data());
    }
    nvrtcProgram raw = nullptr;
    nvrtcResult rc = nvrtcCreateProgram(&raw, source.source.c_str(), source.program_name.c_str(),
                                        static_cast<int>(header_texts.size()), header_texts.data(),
                                        header_names.data());
    if (rc != NVRTC_SUCCESS)
      return make_error(ErrorCode::compile, "nvrtcCreateProgram failed for " + source.spec.label() +
                                                ": " + nvrtcGetErrorString(rc));
    Program program(raw);

    CompiledArtifact artifact;
    artifact.spec = source.spec;
    artifact.entry = source.entry;
    artifact.facts = source.facts;
    artifact.options = options(source.spec);
    std::vector<const char*> argv;
    for (const auto& o : artifact.options) argv.push_back(o.c_str());

    rc = nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
    std::size_t log_size = 0;
    if (nvrtcGetProgramLogSize(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
      artifact.log.resize(log_size);
      nvrtcGetProgramLog(program.get(), artifact.log.data());
      artifact.log.resize(log_size - 1);
    }
    if (rc != NVRTC_SUCCESS) {
      return make_error(ErrorCode::compile,
                        "NVRTC could not compile " + source.program_name + " (" +
                            source.spec.label() + "): " + nvrtcGetErrorString(rc),
                        "options: " + joined(artifact.options) + "\nlog:\n" + artifact.log);
    }

    std::size_t ptx_size = 0;
    if (nvrtcGetPTXSize(program.get(), &ptx_size) == NVRTC_SUCCESS && ptx_size > 0) {
      artifact.ptx.resize(ptx_size);
      nvrtcGetPTX(program.get(), artifact.ptx.data());
      artifact.ptx.resize(ptx_size - 1);
    }
    std::size_t cubin_size = 0;
    rc = nvrtcGetCUBINSize(program.get(), &cubin_size);
    if (rc != NVRTC_SUCCESS || cubin_size == 0)
      return make_error(ErrorCode::compile,
                        "NVRTC produced no cubin for " + source.spec.label() +
                            " (is the target a real architecture?)",
                        "options: " + joined(artifact.options));
    artifact.cubin.resize(cubin_size);
    nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(artifact.cubin.data()));

    artifact.usage = parse_ptxas_usage(artifact.log, artifact.entry);
    artifact.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return artifact;
  }

 private:
  // PTX of a tiny fixed program for a fixed virtual target, plus the architectures this
  // NVRTC supports: what distinguishes builds that report the same version.
  static Result<std::string> compute_fingerprint() {
    const char* source = "extern \"C\" __global__ void jc_fingerprint(float* p, float s) { p[0] = __fdiv_rn(p[1], s); }\n";
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
    const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return std::string(hex);
  }

  mutable std::once_flag m_fingerprint_once;
  mutable Result<std::string> m_fingerprint = std::string();
};

}  // namespace

std::unique_ptr<Compiler> make_nvrtc_compiler() { return std::make_unique<NvrtcCompiler>(); }

ResourceUsage parse_ptxas_usage(const std::string& log, const std::string& entry) {
  ResourceUsage usage;
  const std::string marker = "Function properties for " + entry;
  const auto at = log.find(marker);
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
