// Compiler back ends: a narrow interface (compile one GeneratedSource into a
// CompiledArtifact) with concrete back ends hidden in their .cpp files. NVRTC now;
// libNVVM or nvcc could follow behind the same interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jitcache/compile.hpp"  // ResourceUsage
#include "jitcache/error.hpp"
#include "kernel_templates/generator.hpp"

namespace jitcache {

struct CompiledArtifact {
  KernelSpec spec;
  std::string entry;
  std::vector<std::uint8_t> cubin;  // SASS for spec.target
  std::string ptx;                  // the PTX it was assembled from (for audits and fallback)
  std::string log;                  // the compiler's full log
  std::vector<std::string> options;
  ResourceUsage usage;
  double compile_ms = 0.0;
  std::map<std::string, std::string> facts;  // the generator's specialization facts
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  // "nvrtc"
  virtual std::string name() const = 0;
  // Exact version, e.g. "13.0".
  virtual std::string version() const = 0;
  // What this compiler build is: for NVRTC a digest of its version and of the bytes of its
  // library files (nvrtc_library.hpp), so two builds that share a version number, or a copy
  // patched under the same GNU build-id, get different keys. Computed once per Compiler
  // object (or taken from its memo, see NvrtcOptions).
  virtual Result<std::string> fingerprint() const = 0;
  // The normalized options used for a spec (part of the cache key).
  virtual std::vector<std::string> options(const KernelSpec& spec) const = 0;
  // Compiles. A compile error returns ErrorCode::compile with the options and the full
  // log in Error::detail; it never throws.
  virtual Result<CompiledArtifact> compile(const GeneratedSource& source) const = 0;
};

// The file name the runtime gives the fingerprint memo, in the cache root.
inline constexpr const char* k_fingerprint_memo_name = "compiler-fingerprints.json";

struct NvrtcOptions {
  // Remembers the fingerprint of each libnvrtc file this cache has seen, keyed by the
  // file's device, inode, size and times (and its builtins'), so that a fresh process does
  // not hash NVRTC's ~100 MB again (fingerprint_memo.hpp has the format). Empty: no memo.
  // Any problem reading it is a miss; a failure to write it is logged at debug level and
  // ignored.
  std::filesystem::path fingerprint_memo;
  // When no NVRTC is found anywhere and the memo names no build this cache was last keyed
  // with: the NVRTC builds that installed cache providers were packed with, as (version,
  // fingerprint, who says so), the one most of their kernels name first. The first keys
  // lookups (a stand-in, never used to compile) and is remembered as last keyed, as an
  // import's builds are. Asked at most once, and only then.
  struct StandIn {
    std::string version;
    std::string fingerprint;
    std::string origin;  // "cache provider <dir>"
  };
  std::function<std::vector<StandIn>()> provider_builds;
};

std::unique_ptr<Compiler> make_nvrtc_compiler(NvrtcOptions options = {});

// One NVRTC compile of a translation unit with named headers: the building block of the
// NVRTC back end and of compile_source (source_compiler.hpp). Errors are
// ErrorCode::compile naming `what` and the failing call, with the options and the full
// log in Error::detail.
struct NvrtcHeader {
  const char* name;  // as the source #includes it; NUL-terminated
  const char* text;  // NUL-terminated
};
struct NvrtcOutput {
  std::string ptx;
  std::vector<std::uint8_t> cubin;
  std::string log;
};
Result<NvrtcOutput> run_nvrtc(const std::string& program_name, const std::string& source,
                              std::span<const NvrtcHeader> headers, const std::vector<std::string>& options,
                              const std::string& what);

// Parses ptxas' "-v" report in a compiler log for one entry function.
ResourceUsage parse_ptxas_usage(const std::string& log, const std::string& entry);

}  // namespace jitcache
