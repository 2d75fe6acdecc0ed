// Compiler back ends: a narrow interface (compile one GeneratedSource into a
// CompiledArtifact) with concrete back ends hidden in their .cpp files. NVRTC now;
// libNVVM or nvcc could follow behind the same interface.
#pragma once

#include <cstdint>
#include <filesystem>
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
  // A digest of what this compiler build emits for a fixed empty program: two builds
  // that share a version number but generate different code get different keys.
  // Computed once per Compiler object (or taken from its memo, see NvrtcOptions).
  virtual Result<std::string> fingerprint() const = 0;
  // The fingerprint an earlier jitcache keyed this very build's kernels with, where it
  // differs from fingerprint(): before fingerprints were derived from build-id notes,
  // NVRTC's was the digest of a test compile's PTX (what compile_fingerprint still does for
  // a library without the note). A kernel cache miss looks the kernel up under that key
  // too and carries a hit over instead of compiling again. Loads the compiler (a miss is
  // about to compile anyway), once per object; std::nullopt when there is no such
  // fingerprint or it cannot be told (no compiler here, or not the build keyed with).
  virtual std::optional<std::string> earlier_fingerprint() const { return std::nullopt; }
  // The normalized options used for a spec (part of the cache key).
  virtual std::vector<std::string> options(const KernelSpec& spec) const = 0;
  // Compiles. A compile error returns ErrorCode::compile with the options and the full
  // log in Error::detail; it never throws.
  virtual Result<CompiledArtifact> compile(const GeneratedSource& source) const = 0;
};

// The file name the runtime gives the fingerprint memo, in the cache root.
inline constexpr const char* k_fingerprint_memo_name = "compiler-fingerprints.json";

struct NvrtcOptions {
  // Remembers the fingerprint of each libnvrtc build this cache has seen, keyed by the
  // loaded library's identity (path, size, mtime, inode, version, and the same for the
  // libnvrtc-builtins beside it), so that a fresh process skips the fingerprint compile
  // (tens of milliseconds, most of a warm prepare). Empty: no memo. Any problem reading
  // it is a miss; a failure to write it is logged at debug level and ignored.
  //
  // Format: a JSON object {"format": "jitcache_compiler_fingerprints_v1",
  // "entries": {"<identity>": "<32 hex digits>", ...}} of at most 16 entries, replaced
  // whole by an atomic rename, mode 0600.
  std::filesystem::path fingerprint_memo;
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
