#include "runtime/compile/source_compiler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "kernel_templates/kernel_spec.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "runtime/compile/nvjitlink_library.hpp"
#include "runtime/compile/nvrtc_library.hpp"
#include "runtime/compile/nvvm_library.hpp"
#include "runtime/compile/source_rules.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "runtime/compile/tool_worker.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"

namespace jitcache {
namespace {

std::string joined(const std::vector<std::string>& options) {
  std::string text;
  for (const auto& o : options) text += (text.empty() ? "" : " ") + o;
  return text;
}

std::vector<const char*> argv_of(const std::vector<std::string>& options) {
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  return argv;
}

// Drops the NUL terminators the C APIs count in their sizes.
void strip_nuls(std::string& text) {
  while (!text.empty() && text.back() == '\0') text.pop_back();
}

// The target field owns the architecture: an option naming another one would make the
// binary disagree with the key that the target is part of.
Status check_options(const SourceInput& input) {
  for (const std::string& o : input.options) {
    for (const char* arch : {"-arch", "--gpu-architecture", "-gpu-name", "--gpu-name"})
      if (o.rfind(arch, 0) == 0)
        return make_error(ErrorCode::invalid_argument, "option '" + o + "' sets the architecture; the target ('" +
                                                           input.target + "') does that");
    // libNVVM would emit LTO IR instead of the PTX the link step reads.
    if (input.kind == SourceKind::nvvm && o.rfind("-gen-lto", 0) == 0)
      return make_error(ErrorCode::invalid_argument, "option '" + o + "' is not supported for nvvm sources (LTO IR output)");
  }
  return {};
}

// ---- NVRTC --------------------------------------------------------------------------

constexpr const char* k_ptxas_verbose = "--ptxas-options=-v";

// The NVRTC that compiled: loaded by then.
std::string nvrtc_version() {
  const auto nvrtc = nvrtc_library();
  return nvrtc ? (*nvrtc)->version() : "unknown";
}

const char* default_name(SourceKind kind);

Result<SourceOutput> compile_cuda(const SourceInput& input, const std::string& name) {
  std::vector<NvrtcHeader> headers;
  for (const auto& [include_name, text] : input.headers) headers.push_back({include_name.c_str(), text.c_str()});
  // -v: ptxas' report of the entry's resources, which changes nothing in the binary. A
  // caller that passes it already keeps it where it put it (the NVRTC back end, whose
  // option list must reach NVRTC unchanged), rather than NVRTC getting it twice.
  std::vector<std::string> options = {"--gpu-architecture=" + input.target};
  if (std::find(input.options.begin(), input.options.end(), k_ptxas_verbose) == input.options.end())
    options.emplace_back(k_ptxas_verbose);
  options.insert(options.end(), input.options.begin(), input.options.end());
  // NVRTC looks for a quoted include beside the program's name: a name with a directory
  // part would point it at that directory. It gets the last component only.
  const std::string program_name = name.substr(name.find_last_of('/') + 1);
  auto compiled = run_nvrtc(program_name.empty() ? default_name(SourceKind::cuda) : program_name, input.text, headers,
                            options, name + " for " + input.target);
  if (!compiled) return std::unexpected(std::move(compiled.error()));
  SourceOutput out;
  out.cubin = std::move(compiled->cubin);
  out.ptx = std::move(compiled->ptx);
  out.usage = parse_ptxas_usage(compiled->log, input.entry);
  out.log = std::string(k_nvrtc_log_heading) + compiled->log;
  out.tools["nvrtc"] = nvrtc_version();
  for (const auto& o : options) out.effective_options.push_back("nvrtc: " + o);
  return out;
}

// Owns a libNVVM program or an nvJitLink handle: destroyed on every path out.
template <class Handle>
class ToolHandle {
 public:
  using Destroy = int (*)(Handle*);  // nvvmDestroyProgram, nvJitLinkDestroy
  explicit ToolHandle(Destroy destroy) : m_destroy(destroy) {}
  ~ToolHandle() {
    if (m_handle != nullptr) m_destroy(&m_handle);
  }
  ToolHandle(const ToolHandle&) = delete;
  ToolHandle& operator=(const ToolHandle&) = delete;
  Handle* out() { return &m_handle; }
  Handle get() const { return m_handle; }

  // A log the library hands out in two calls, its size then its text (0 is success in
  // both libraries); empty when there is no handle or either call fails.
  template <class SizeFn, class ReadFn>
  std::string text(SizeFn size_of, ReadFn read_into) const {
    static_assert(nvvm::k_success == 0 && nvjitlink::k_success == 0);
    if (m_handle == nullptr) return {};
    std::size_t size = 0;
    if (size_of(m_handle, &size) != 0 || size == 0) return {};
    std::string log(size, '\0');
    if (read_into(m_handle, log.data()) != 0) return {};
    strip_nuls(log);
    return log;
  }

 private:
  Destroy m_destroy;
  Handle m_handle = nullptr;
};

// ---- libNVVM ------------------------------------------------------------------------

class NvvmProgram : public ToolHandle<nvvm::Program> {
 public:
  explicit NvvmProgram(const NvvmLibrary& nvvm) : ToolHandle(nvvm.destroy_program), m_nvvm(nvvm) {}
  std::string log() const { return text(m_nvvm.get_program_log_size, m_nvvm.get_program_log); }

 private:
  const NvvmLibrary& m_nvvm;
};

struct NvvmPtx {
  std::string ptx;
  std::string log;
  std::vector<std::string> options;
};

Result<NvvmPtx> nvvm_to_ptx(const NvvmLibrary& nvvm, const SourceInput& input, const std::string& name) {
  // libNVVM takes the virtual architecture; the "a" suffix carries over (compute_100a).
  // It also picks the IR dialect: LLVM 7 typed pointers up to compute_90a, modern LLVM
  // from compute_100.
  const std::string arch = "compute_" + input.target.substr(3);
  NvvmPtx out;
  out.options = {"-arch=" + arch};
  out.options.insert(out.options.end(), input.options.begin(), input.options.end());
  auto argv = argv_of(out.options);
  const std::string what = name + " for " + input.target + " (" + arch + ")";

  NvvmProgram program(nvvm);
  auto failed = [&](const char* stage, nvvm::Result rc) {
    return make_error(ErrorCode::compile,
                      "libNVVM could not compile " + what + " at " + stage + ": " + nvvm::result_name(rc),
                      "options: " + joined(out.options) + "\nlog:\n" + program.log());
  };
  note_stage("libNVVM", "nvvmCreateProgram");
  if (const auto rc = nvvm.create_program(program.out()); rc != nvvm::k_success)
    return failed("nvvmCreateProgram", rc);
  note_stage("libNVVM", "nvvmAddModuleToProgram");
  if (const auto rc = nvvm.add_module(program.get(), input.text.data(), input.text.size(), name.c_str());
      rc != nvvm::k_success)
    return failed("nvvmAddModuleToProgram", rc);
  // Verify first: nvvmCompileProgram accepts some invalid modules (a 32-bit data layout)
  // and leaves the failure to ptxas, with a message far from its cause.
  note_stage("libNVVM", "nvvmVerifyProgram");
  if (const auto rc = nvvm.verify_program(program.get(), static_cast<int>(argv.size()), argv.data());
      rc != nvvm::k_success)
    return failed("nvvmVerifyProgram", rc);
  note_stage("libNVVM", "nvvmCompileProgram");
  if (const auto rc = nvvm.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
      rc != nvvm::k_success)
    return failed("nvvmCompileProgram", rc);
  note_stage("libNVVM", "nvvmGetCompiledResult");
  std::size_t size = 0;
  if (const auto rc = nvvm.get_compiled_result_size(program.get(), &size); rc != nvvm::k_success)
    return failed("nvvmGetCompiledResultSize", rc);
  out.ptx.assign(size, '\0');
  if (const auto rc = nvvm.get_compiled_result(program.get(), out.ptx.data()); rc != nvvm::k_success)
    return failed("nvvmGetCompiledResult", rc);
  strip_nuls(out.ptx);
  out.log = program.log();
  return out;
}

// ---- nvJitLink ----------------------------------------------------------------------

// A failed nvJitLinkCreate still hands back a handle, whose error log says why.
class JitLinkHandle : public ToolHandle<nvjitlink::Handle> {
 public:
  explicit JitLinkHandle(const NvJitLinkLibrary& jl) : ToolHandle(jl.destroy), m_jl(jl) {}
  std::string error_log() const { return text(m_jl.get_error_log_size, m_jl.get_error_log); }
  std::string info_log() const { return text(m_jl.get_info_log_size, m_jl.get_info_log); }

 private:
  const NvJitLinkLibrary& m_jl;
};

struct Linked {
  std::vector<std::uint8_t> cubin;
  std::string info_log;
  std::vector<std::string> options;
};

Result<Linked> link_ptx(const NvJitLinkLibrary& jl, const std::string& ptx, const std::string& name,
                        const std::string& target, const std::vector<std::string>& extra) {
  Linked out;
  // -verbose: ptxas' resource report in the info log; it changes nothing in the binary.
  out.options = {"-arch=" + target, "-verbose"};
  out.options.insert(out.options.end(), extra.begin(), extra.end());
  auto argv = argv_of(out.options);

  JitLinkHandle link(jl);
  auto failed = [&](const char* stage, nvjitlink::Result rc) {
    return make_error(ErrorCode::compile,
                      "nvJitLink could not link " + name + " for " + target + " at " + stage + ": " +
                          nvjitlink::result_name(rc),
                      "options: " + joined(out.options) + "\nerror log:\n" + link.error_log() + "\ninfo log:\n" +
                          link.info_log());
  };
  note_stage("nvJitLink", "nvJitLinkCreate");
  if (const auto rc = jl.create(link.out(), static_cast<std::uint32_t>(argv.size()), argv.data());
      rc != nvjitlink::k_success)
    return failed("nvJitLinkCreate", rc);
  // For PTX the assembly happens here, so ptxas' errors come from this call.
  note_stage("nvJitLink", "nvJitLinkAddData");
  if (const auto rc = jl.add_data(link.get(), nvjitlink::k_input_ptx, ptx.data(), ptx.size(), name.c_str());
      rc != nvjitlink::k_success)
    return failed("nvJitLinkAddData", rc);
  note_stage("nvJitLink", "nvJitLinkComplete");
  if (const auto rc = jl.complete(link.get()); rc != nvjitlink::k_success) return failed("nvJitLinkComplete", rc);
  note_stage("nvJitLink", "nvJitLinkGetLinkedCubin");
  std::size_t size = 0;
  if (const auto rc = jl.get_linked_cubin_size(link.get(), &size); rc != nvjitlink::k_success)
    return failed("nvJitLinkGetLinkedCubinSize", rc);
  out.cubin.resize(size);
  if (const auto rc = jl.get_linked_cubin(link.get(), out.cubin.data()); rc != nvjitlink::k_success)
    return failed("nvJitLinkGetLinkedCubin", rc);
  out.info_log = link.info_log();
  return out;
}

Result<SourceOutput> compile_nvvm(const SourceInput& input, const std::string& name, const NvvmLibrary& nvvm,
                                  const NvJitLinkLibrary& jl) {
  auto ptx = nvvm_to_ptx(nvvm, input, name);
  if (!ptx) return std::unexpected(std::move(ptx.error()));
  auto linked = link_ptx(jl, ptx->ptx, name + ".ptx", input.target, {});
  if (!linked) return std::unexpected(std::move(linked.error()));
  SourceOutput out;
  out.cubin = std::move(linked->cubin);
  out.usage = parse_ptxas_usage(linked->info_log, input.entry);
  out.ptx = std::move(ptx->ptx);
  out.log = "== libNVVM ==\n" + ptx->log + "\n== nvJitLink ==\n" + linked->info_log;
  out.tools["libnvvm"] = nvvm.version();
  out.tools["nvjitlink"] = jl.version();
  for (const auto& o : ptx->options) out.effective_options.push_back("libnvvm: " + o);
  for (const auto& o : linked->options) out.effective_options.push_back("nvjitlink: " + o);
  return out;
}

Result<SourceOutput> compile_ptx(const SourceInput& input, const std::string& name, const NvJitLinkLibrary& jl) {
  auto linked = link_ptx(jl, input.text, name, input.target, input.options);
  if (!linked) return std::unexpected(std::move(linked.error()));
  SourceOutput out;
  out.cubin = std::move(linked->cubin);
  out.usage = parse_ptxas_usage(linked->info_log, input.entry);
  out.ptx = input.text;
  out.log = "== nvJitLink ==\n" + linked->info_log;
  out.tools["nvjitlink"] = jl.version();
  for (const auto& o : linked->options) out.effective_options.push_back("nvjitlink: " + o);
  return out;
}

const char* default_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::cuda: return "input.cu";
    case SourceKind::nvvm: return "input.ll";
    case SourceKind::ptx: return "input.ptx";
  }
  return "input";
}

}  // namespace

const char* source_tool_name(SourceKind kind) { return enum_name(kind, {"NVRTC", "libNVVM", "nvJitLink"}); }

const char* to_string(SourceKind kind) { return enum_name(kind, {"cuda", "nvvm", "ptx"}); }

std::optional<SourceKind> parse_source_kind(std::string_view text) {
  for (SourceKind kind : {SourceKind::cuda, SourceKind::nvvm, SourceKind::ptx})
    if (text == to_string(kind)) return kind;
  return std::nullopt;
}

namespace {

std::atomic<StageObserver> g_stage_observer{nullptr};

// Everything a request can get wrong, refused before a library is loaded or a tool runs.
Status check_input(const SourceInput& input, const std::string& name) {
  // Everything a request can get wrong is refused before a library is loaded or a tool runs.
  if (auto target = parse_target(input.target); !target)
    return make_error(ErrorCode::invalid_argument, name + ": " + target.error().message);
  if (input.text.empty())
    return make_error(ErrorCode::invalid_argument,
                      name + ": the " + std::string(to_string(input.kind)) + " source is empty; " + source_tool_name(input.kind) +
                          " was not run");
  if (input.entry.empty()) return make_error(ErrorCode::invalid_argument, name + ": no entry symbol given");
  if (input.kind != SourceKind::cuda && !input.headers.empty())
    return make_error(ErrorCode::invalid_argument,
                      name + ": headers are for cuda sources only, not " + std::string(to_string(input.kind)));
  JC_TRY(check_options(input));
  if (input.kind == SourceKind::cuda) JC_TRY(check_cuda_input(input.text, input.headers, input.options, name));
  return {};
}

Result<SourceOutput> compile_checked(const SourceInput& input, const std::string& name);
Result<std::filesystem::path> loaded_tool_file(const std::string& tool);
Status check_worker_tools(const SourceOutput& out, const std::string& name, const std::string& target);

// The file a tool (nvrtc, libnvvm, nvjitlink) would be loaded from in this process, when a path
// candidate tells it (the first that exists, as the loader takes the first that loads);
// std::nullopt when only the soname is left, which cannot be told without loading.
std::optional<std::filesystem::path> expected_library_file(const std::string& tool) {
  const auto located = locate_toolkit_file(tool == "nvrtc"      ? ToolkitTool::nvrtc
                                           : tool == "libnvvm" ? ToolkitTool::nvvm
                                                               : ToolkitTool::nvjitlink);
  if (!located) return std::nullopt;
  return std::filesystem::path(located->path);
}

}  // namespace

std::optional<std::string> tool_build(const std::string& tool, const std::filesystem::path& file,
                                      const std::string& version) {
  if (tool == "nvrtc") {
    if (const auto built = nvrtc_file_fingerprint(file, version)) return "nvrtc " + version + " build " + *built;
  } else if (const auto digest = file_content_digest(file)) {
    return tool + " content xxh3-128 " + *digest;
  }
  return describe_file(file);
}

void set_stage_observer(StageObserver observer) { g_stage_observer.store(observer); }

void note_stage(const char* tool, const char* stage) {
  if (const StageObserver observer = g_stage_observer.load()) observer(tool, stage);
}

Result<SourceOutput> compile_source(const SourceInput& input) {
  const std::string name = input.name.empty() ? default_name(input.kind) : input.name;
  JC_TRY(check_input(input, name));
  if (input.trusted) return compile_checked(input, name);
  auto out = compile_in_worker(input);
  if (out) JC_TRY(check_worker_tools(*out, name, input.target));
  return out;
}

Result<SourceOutput> compile_source_in_process(const SourceInput& input) {
  const std::string name = input.name.empty() ? default_name(input.kind) : input.name;
  JC_TRY(check_input(input, name));
  return compile_checked(input, name);
}

namespace {

Result<SourceOutput> compile_checked(const SourceInput& input, const std::string& name) {
  // Loaded before the clock starts: compile_ms is the compile, not the one-time load.
  const NvvmLibrary* nvvm = nullptr;
  const NvJitLinkLibrary* jl = nullptr;
  if (input.kind == SourceKind::nvvm) {
    note_stage("libNVVM", "loading libNVVM");
    nvvm = JC_TRY(nvvm_library());
  }
  if (input.kind != SourceKind::cuda) {
    note_stage("nvJitLink", "loading nvJitLink");
    jl = JC_TRY(nvjitlink_library());
  }

  const auto started = std::chrono::steady_clock::now();
  Result<SourceOutput> out = make_error(ErrorCode::internal, "unhandled source kind");
  switch (input.kind) {
    case SourceKind::cuda: out = compile_cuda(input, name); break;
    case SourceKind::nvvm: out = compile_nvvm(input, name, *nvvm, *jl); break;
    case SourceKind::ptx: out = compile_ptx(input, name, *jl); break;
  }
  if (!out) return out;

  const std::string what = std::string(input.kind == SourceKind::cuda ? "NVRTC" : "nvJitLink") + "'s cubin of " +
                           name + " for " + input.target;
  auto info = read_cubin_info(out->cubin);
  if (!info)
    return make_error(ErrorCode::compile, what + " is unreadable: " + info.error().message, out->log);
  if (info->sm != target_sm(input.target))
    return make_error(ErrorCode::compile,
                      what + " is for sm " + std::to_string(info->sm) + ", not " + input.target, out->log);
  if (auto entry = check_entry(*info, input.entry, what); !entry)
    return make_error(ErrorCode::compile, entry.error().message, out->log);
  out->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  for (const auto& [tool, version] : out->tools) {
    const std::filesystem::path file = JC_TRY(loaded_tool_file(tool));
    auto described = describe_file(file);
    auto build = tool_build(tool, file, version);
    if (!described || !build)
      return make_error(ErrorCode::unavailable, "cannot stat the " + tool + " library " + file.string());
    out->tool_files[tool] = std::move(*described);
    out->tool_builds[tool] = std::move(*build);
  }
  return out;
}

// The library file `tool` ran from in this process.
Result<std::filesystem::path> loaded_tool_file(const std::string& tool) {
  if (tool == "nvrtc") return JC_TRY(nvrtc_library())->library.file;
  if (tool == "libnvvm") return JC_TRY(nvvm_library())->library.file;
  if (tool == "nvjitlink") return JC_TRY(nvjitlink_library())->library.file;
  return make_error(ErrorCode::internal, "unknown tool " + tool);
}

// The tools a worker ran must be the builds this process keys requests with: the worker
// finds its own copies (its own search path, environment and libnvrtc), and a key made
// from one build must never hold another build's binary. The same build in another place
// is the same compiler, as it is for the keys (tool_build). The file this process would
// key with is the one it loaded, or for libNVVM and nvJitLink the one it would load (loaded
// here only when a path candidate cannot tell).
Status check_worker_tools(const SourceOutput& out, const std::string& name, const std::string& target) {
  for (const auto& [tool, version] : out.tools) {
    const auto ran = out.tool_files.find(tool);
    if (ran == out.tool_files.end())
      return make_error(ErrorCode::compile, "the tool worker did not say which " + tool + " library compiled " + name);
    std::optional<std::filesystem::path> file = expected_library_file(tool);
    if (!file) file = JC_TRY(loaded_tool_file(tool));
    const auto ran_build = out.tool_builds.find(tool);
    const bool by_build = ran_build != out.tool_builds.end();
    const std::optional<std::string> ours = by_build ? tool_build(tool, *file, version) : describe_file(*file);
    if (!ours) return make_error(ErrorCode::unavailable, "cannot stat the " + tool + " library " + file->string());
    if (*ours != (by_build ? ran_build->second : ran->second))
      return make_error(ErrorCode::unavailable,
                        "the tool worker compiled " + name + " for " + target + " with another " + tool + " (" +
                            ran->second + (by_build ? ", " + ran_build->second : std::string()) +
                            ") than the one this process keys its requests with (" +
                            describe_file(*file).value_or(file->string()) + (by_build ? ", " + *ours : std::string()) +
                            "): nothing was stored. Give both the same compilers (" +
                            std::string(env::jitcache_nvrtc.name) + ", " + std::string(env::jitcache_nvjitlink.name) +
                            ", " + std::string(env::jitcache_nvvm.name) + ", " +
                            std::string(env::jitcache_tool_worker.name) + ")");
  }
  return {};
}

}  // namespace

}  // namespace jitcache
