#include <nvrtc.h>

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
#include "runtime/compile/nvrtc_library.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "runtime/compile/toolkit_library.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "support/env.hpp"
#include "support/fork_guard.hpp"

namespace jitcache {
namespace {

// Owns an nvrtcProgram: destroyed on every path out of compile().
class Program {
 public:
  Program(const NvrtcLibrary& nvrtc, nvrtcProgram p) : m_nvrtc(nvrtc), m_program(p) {}
  ~Program() {
    if (m_program != nullptr) m_nvrtc.destroy_program(&m_program);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return m_program; }

 private:
  const NvrtcLibrary& m_nvrtc;
  nvrtcProgram m_program;
};

std::string joined(const std::vector<std::string>& options) {
  std::string text;
  for (const auto& o : options) text += (text.empty() ? "" : " ") + o;
  return text;
}

// The NVRTC build a compiler keys with: its version and fingerprint.
struct NvrtcFacts {
  std::string version;
  std::string fingerprint;
};

// The memo's name for the NVRTC file `file` of `version` (told by its builtins' name, when
// the files tell it): the device, inode, size and times of libnvrtc and of the builtins it
// loads, which change whenever their bytes do, so the fingerprint of those bytes is hashed
// once per machine (toolkit_trust.hpp).
std::optional<std::string> memo_identity(const std::filesystem::path& file, const std::optional<std::string>& version) {
  const auto nvrtc = file_stat_identity(file);
  if (!nvrtc) return std::nullopt;
  std::string builtins = "unknown";
  if (version) builtins = file_stat_identity(nvrtc_builtins_file(file, *version)).value_or("none");
  return "nvrtc content " + *nvrtc + "; builtins " + builtins;
}

class NvrtcCompiler final : public Compiler {
 public:
  explicit NvrtcCompiler(NvrtcOptions options) : m_options(std::move(options)) {}

  std::string name() const override { return "nvrtc"; }

  // From the memo when it knows the build, so that a warm process never opens NVRTC.
  std::string version() const override {
    const auto& f = facts();
    return f ? f->version : "unknown";
  }

  Result<std::string> fingerprint() const override {
    const auto& f = facts();
    if (!f) return std::unexpected(f.error());
    return f->fingerprint;
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
    JC_TRY(check_loaded_build());
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
  // The key was made from the files the search found (without loading them); the binary
  // comes from the NVRTC the loader mapped. They must be the same build.
  Status check_loaded_build() const {
    const auto& keyed = facts();
    if (!keyed) return std::unexpected(keyed.error());
    const NvrtcLibrary* nvrtc = JC_TRY(nvrtc_library());
    const auto loaded = nvrtc_file_fingerprint(nvrtc->library.file, nvrtc->version());
    if (loaded && (*loaded != keyed->fingerprint || nvrtc->version() != keyed->version))
      return make_error(ErrorCode::unavailable,
                        "the NVRTC loaded (" + nvrtc->library.file.string() + ", " + nvrtc->version() + ", fingerprint " +
                            *loaded + ") is not the build this compiler keys with (" + keyed->version +
                            ", fingerprint " + keyed->fingerprint + "): nothing is compiled; name one with " +
                            std::string(env::jitcache_nvrtc.name));
    return {};
  }

  const Result<NvrtcFacts>& facts() const {
    std::call_once(m_facts_once, [this] { m_facts = memoized_facts(); });
    return m_facts;
  }

  // The facts, and the memo kept current: an entry for the build found, and that build as
  // the one this cache was last keyed with. When no NVRTC is found at all, the build the
  // memo says this cache was last keyed with keys lookups (see fingerprint_memo.hpp).
  Result<NvrtcFacts> memoized_facts() const {
    const std::filesystem::path& memo = m_options.fingerprint_memo;
    MemoContents known;
    if (!memo.empty()) {
      try {
        known = read_memo_contents(memo);
      } catch (const std::exception& e) {
        // The memo is only a shortcut: whatever went wrong, compute.
        log_debug("compiler fingerprint memo " + memo.string() + " not used: " + e.what());
      }
    }
    bool remembered = false;
    auto facts = found_facts(known, remembered);
    if (facts) {
      const auto last = known.last_keyed.find("nvrtc");
      if (!remembered && !memo.empty() &&
          (last == known.last_keyed.end() || last->second != MemoValue{facts->version, facts->fingerprint}))
        try {
          note_memo_write(write_last_keyed(memo, "nvrtc", MemoValue{facts->version, facts->fingerprint}));
        } catch (const std::exception& e) {
          log_debug("compiler fingerprint memo not written: " + std::string(e.what()));
        }
      return facts;
    }
    return last_keyed_facts(known, facts.error());
  }

  // No NVRTC could be found (or loaded). A cache hit needs only the key, and a kernel in
  // the cache was compiled by the build it is keyed with, whether or not this machine has
  // it: the build this cache was last keyed with keys lookups, and a miss fails at its
  // compile with `missing` (every place searched, the package to install). A compiler named
  // by JITCACHE_NVRTC is never stood in for.
  Result<NvrtcFacts> last_keyed_facts(const MemoContents& known, const Error& missing) const {
    const auto last = known.last_keyed.find("nvrtc");
    if (missing.code != ErrorCode::unavailable || env::get(env::jitcache_nvrtc)) return std::unexpected(missing);
    if (last != known.last_keyed.end()) {
      log_warning(stand_in_warning(ToolkitTool::nvrtc, last->second.version, last->second.fingerprint));
      return NvrtcFacts{last->second.version, last->second.fingerprint};
    }
    // A fresh node given its kernels by a cache wheel: the build the wheel was packed with.
    const auto builds = m_options.provider_builds ? m_options.provider_builds() : std::vector<NvrtcOptions::StandIn>();
    if (builds.empty()) return std::unexpected(missing);
    const NvrtcOptions::StandIn& chosen = builds.front();
    log_warning(stand_in_warning(ToolkitTool::nvrtc, chosen.version, chosen.fingerprint) + " (named by the " +
                chosen.origin + ")");
    if (!m_options.fingerprint_memo.empty()) {
      try {
        note_memo_write(
            write_last_keyed(m_options.fingerprint_memo, "nvrtc", MemoValue{chosen.version, chosen.fingerprint}));
      } catch (const std::exception& e) {
        log_debug("compiler fingerprint memo not written: " + std::string(e.what()));
      }
    }
    return NvrtcFacts{chosen.version, chosen.fingerprint};
  }

  // The memo is keyed by the file that would be loaded, read without loading it: an entry
  // for its device, inode, size and times (and its builtins') holds the version and the
  // digest of its bytes. `remembered`: the memo was written with these facts.
  Result<NvrtcFacts> found_facts(const MemoContents& known, bool& remembered) const {
    const std::filesystem::path& memo = m_options.fingerprint_memo;
    const auto located = locate_toolkit_file(ToolkitTool::nvrtc);
    std::optional<std::string> identity;
    std::optional<std::string> version;
    if (located) {
      // A build's version is told by its builtins' name, so the memo needs no loading.
      version = nvrtc_version_from_files(located->path);
      identity = memo_identity(located->path, version);
      if (!memo.empty() && identity)
        if (const auto entry = known.entries.find(*identity);
            entry != known.entries.end() && !entry->second.version.empty() && version == entry->second.version)
          return NvrtcFacts{entry->second.version, entry->second.fingerprint};
      if (version)
        if (auto digest = nvrtc_file_fingerprint(located->path, *version)) {
          NvrtcFacts facts{*version, std::move(*digest)};
          remembered = !memo.empty() && remember(identity, facts);
          return facts;
        }
    }
    const NvrtcLibrary* nvrtc = JC_TRY(nvrtc_library());
    NvrtcFacts facts{nvrtc->version(), {}};
    auto digest = nvrtc_file_fingerprint(nvrtc->library.file, facts.version);
    if (!digest)
      return make_error(ErrorCode::unavailable, "cannot read the NVRTC " + nvrtc->library.file.string() +
                                                    " whole to fingerprint it: nothing is keyed with it");
    facts.fingerprint = std::move(*digest);
    // Remembered only for the file a later process will find first, which is the one loaded.
    if (!memo.empty() && located && located->path == nvrtc->library.file)
      remembered = remember(memo_identity(located->path, facts.version), facts);
    return facts;
  }

  // Writes the entry of `identity`, as NVRTC's last keyed build too; whether it was written.
  bool remember(const std::optional<std::string>& identity, const NvrtcFacts& facts) const {
    if (!identity) return false;
    try {
      return note_memo_write(
          write_memo(m_options.fingerprint_memo, *identity, MemoValue{facts.version, facts.fingerprint}, "nvrtc"));
    } catch (const std::exception& e) {
      log_debug("compiler fingerprint memo not written: " + std::string(e.what()));
      return false;
    }
  }

  static bool note_memo_write(const Status& written) {
    if (!written) log_debug("compiler fingerprint memo not written: " + written.error().message);
    return written.has_value();
  }

  NvrtcOptions m_options;
  mutable std::once_flag m_facts_once;
  mutable Result<NvrtcFacts> m_facts = NvrtcFacts{};
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
  note_stage("NVRTC", "loading NVRTC");
  const NvrtcLibrary& nvrtc = *JC_TRY(nvrtc_library());
  const ToolSection section;  // NVRTC's own locks, held while it compiles (fork_guard.hpp)
  nvrtcProgram raw = nullptr;
  note_stage("NVRTC", "nvrtcCreateProgram");
  nvrtcResult rc = nvrtc.create_program(&raw, source.c_str(), program_name.c_str(), static_cast<int>(header_texts.size()),
                                      header_texts.data(), header_names.data());
  if (rc != NVRTC_SUCCESS)
    return make_error(ErrorCode::compile, "nvrtcCreateProgram failed for " + what + ": " + nvrtc.get_error_string(rc));
  Program program(nvrtc, raw);

  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  NvrtcOutput out;
  note_stage("NVRTC", "nvrtcCompileProgram");
  rc = nvrtc.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  if (nvrtc.get_program_log_size(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtc.get_program_log(program.get(), out.log.data());
    // The size counts a terminator, and ptxas' part of the log brings one of its own.
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  }
  if (rc != NVRTC_SUCCESS)
    return make_error(ErrorCode::compile,
                      "NVRTC could not compile " + what + " at nvrtcCompileProgram: " + nvrtc.get_error_string(rc),
                      "options: " + joined(options) + "\nlog:\n" + out.log);

  note_stage("NVRTC", "nvrtcGetCUBIN");
  std::size_t ptx_size = 0;
  if (nvrtc.get_ptx_size(program.get(), &ptx_size) == NVRTC_SUCCESS && ptx_size > 0) {
    out.ptx.resize(ptx_size);
    nvrtc.get_ptx(program.get(), out.ptx.data());
    out.ptx.resize(ptx_size - 1);
  }
  std::size_t cubin_size = 0;
  rc = nvrtc.get_cubin_size(program.get(), &cubin_size);
  if (rc != NVRTC_SUCCESS || cubin_size == 0)
    return make_error(ErrorCode::compile, "NVRTC produced no cubin for " + what + " (is the target a real architecture?)",
                      "options: " + joined(options));
  out.cubin.resize(cubin_size);
  nvrtc.get_cubin(program.get(), reinterpret_cast<char*>(out.cubin.data()));
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
