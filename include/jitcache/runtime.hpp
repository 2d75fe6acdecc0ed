// The runtime a serving engine links: open it once, then prepare() each model. prepare
// resolves the checkpoint's per-layer scales, works out the distinct kernel variants the
// layers need (for a GLM-5.x checkpoint with scales on one target: the dynamic and the
// identity variant of each kernel, not one per layer), takes each from the cache or
// compiles the misses in parallel (once per key across processes), checks each artifact's
// embedded facts against the layers bound to it, and returns per-layer bindings.
//
// Thread safety: a Runtime may be used from many threads at once, and closed while they
// call it (close()). A PreparedModel is
// immutable after prepare(); its accessors and launch functions are safe to call from
// any thread.
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

#include "jitcache/compile.hpp"
#include "jitcache/error.hpp"
#include "jitcache/kernel_types.hpp"
#include "jitcache/log.hpp"
#include "jitcache/scales.hpp"

namespace jitcache {

struct PrepareProgress {
  std::size_t done = 0;   // variants finished so far (this one included)
  std::size_t total = 0;  // variants needed
  std::string variant;    // e.g. "writer/dynamic/bf16/sm_100a"
  bool compiled = false;  // compiled now (else found in the cache)
  double ms = 0.0;        // time this variant took
  bool from_remote = false;  // found in the shared remote tier (and copied to the local cache)
  bool from_provider = false;  // found in an installed cache provider (and copied to the local cache)
};

// What Runtime::open does when the cache directory cannot be used (another owner, group-
// or world-writable, a network filesystem, an unopenable index, ...). A cache is an
// optimisation, so by default an engine still starts.
enum class CacheRequirement {
  from_environment,  // JITCACHE_REQUIRE_CACHE (a boolean; unset: optional)
  optional,          // fall back to memory-only, with one WARNING naming the directory and the fix
  required,          // fail with the store's error
};

// How the runtime's cache is backed.
enum class CacheMode {
  read_write,   // the cache directory: lookups and stores
  read_only,    // a directory this process cannot write (a baked image): lookups only;
                // misses are compiled and kept in memory for the runtime's life
  memory_only,  // no usable directory: everything compiled lives in memory for the runtime's life
};
const char* to_string(CacheMode mode);  // "read-write", "read-only", "memory-only"

struct CacheStatus {
  CacheMode mode = CacheMode::read_write;
  std::filesystem::path dir;  // the directory in use, or the one that was refused
  std::string reason;         // why not read_write; empty when it is
};

enum class DeviceUse {
  automatic,  // use the GPU when a driver and device are present (load modules, allow launches)
  none,       // never touch the driver: compile and cache only
};

struct RuntimeOptions {
  // Absent: the default resolution (JITCACHE_DIR, $XDG_CACHE_HOME/jitcache, ~/.cache/jitcache).
  // An empty path is ErrorCode::invalid_argument, whatever the cache requirement.
  std::optional<std::filesystem::path> cache_dir;
  std::uint64_t cache_max_bytes = 0;  // 0: the store's default cap
  unsigned jobs = 0;                  // parallel compiles; 0: one per core
  LogSink log_sink;                   // set as the process's sink when given
  std::function<void(const PrepareProgress&)> progress;  // called from prepare()'s thread
  DeviceUse device = DeviceUse::automatic;
  int device_ordinal = 0;
  CacheRequirement cache_requirement = CacheRequirement::from_environment;
  // A shared remote cache, redis://[user[:password]@]host[:port][/db]; empty: JITCACHE_REMOTE.
  // Used only with a fleet key (JITCACHE_REMOTE_KEY_FILE); see docs/remote.md. Never
  // required: a remote that cannot be used is one warning, whatever cache_requirement says.
  std::string remote;
  // Shadow verification of spec-keyed lookups: the fraction of hits lookup() answers with
  // LookupOutcome::verify, in [0, 1] (0 never, 1 every hit, 0.01 a sample of one in a
  // hundred). Unset: JITCACHE_VERIFY_SPEC (unset: 0). compile() always verifies.
  std::optional<double> verify_spec;
  // Cache providers (read-only directories of prebuilt kernels made by `jitcache pack`, such
  // as installed cache wheels), asked after the local cache and before the remote, after
  // those JITCACHE_PROVIDERS names. A hit is verified and copied into the local cache; a
  // provider that is missing or fails its checks is a warning, never an error. See
  // docs/cache-wheels.md.
  std::vector<std::filesystem::path> providers;
  // No-compile mode: a kernel missing from every cache tier is ErrorCode::unavailable naming
  // the variant (kernel, format, latent scale, target, key) and every tier it was looked up
  // in, and nothing is compiled; prepare() names every missing variant of the model.
  // Unset: JITCACHE_NO_COMPILE (a boolean; unset: off).
  std::optional<bool> no_compile;
};

struct ModelSpec {
  std::filesystem::path checkpoint;  // the directory holding config.json
  // The KV record the engine reads (docs/record-formats.md).
  RecordFormat format = RecordFormat::b12x_432;
  // "sm_90", "sm_100a", "sm_120f", ...; with a device, one whose cubin runs on it
  // (invalid_argument otherwise: an sm_120a cubin never runs on a 12.1 device). Empty: the
  // most specific target for the device whose every variant the cache holds, else the
  // most specific one, compiled (docs/targets.md); an error without a device.
  std::string target;
  std::optional<std::filesystem::path> scales_override;  // beats VLLM_NVFP4_MLA_SCALES_FILE
  std::optional<std::string> checkpoint_revision;
  // Unset: each layer's mode follows its resolved scale (identity or dynamic), except for a
  // format written only per-token (b12x-304). LatentScale::per_token: every layer
  // per-token, and the checkpoint's scales are not applied (prepare() logs it). identity
  // and dynamic are not choices: they follow from the scales (invalid_argument).
  std::optional<LatentScale> latent_scale;
};

// One compiled variant, as prepared. Owned by its PreparedModel.
struct KernelInfo {
  KernelKind kernel = KernelKind::writer;
  LatentScale latent_scale = LatentScale::identity;
  RecordFormat format = RecordFormat::b12x_432;
  std::string target;
  std::string key;          // the cache key, 32 hex digits
  std::string entry;        // the kernel's symbol
  int registers = -1;
  std::size_t cubin_bytes = 0;
  bool compiled_now = false;  // compiled by this prepare() (else from the cache)
  bool from_remote = false;   // from the cache's shared remote tier (a fleet peer compiled it)
  bool from_provider = false; // from an installed cache provider (a cache wheel)
  bool stored = false;        // in the persistent cache when prepare() returned
  bool loaded = false;        // loaded into the device (a GPU was present)
  bool ptx_fallback = false;  // loaded from PTX because the cubin cannot run on this device
};

class Kernel;  // opaque: a variant's artifact and, with a GPU, its loaded function

struct LayerBinding {
  int layer = 0;
  float scale = 1.0f;  // what its kernels are launched with: 1.0 when per-token
  ScaleMode mode = ScaleMode::identity;
  ScaleSource source = ScaleSource::identity_default;
  const Kernel* writer = nullptr;
  const Kernel* gather = nullptr;
  LatentScale latent_scale = LatentScale::identity;  // its kernels' mode
};

// Launch arguments: raw device addresses, strides in elements, a CUstream (nullptr: the
// default stream). The launch contract, checked on the host before any device work
// unless said otherwise (the complete list is jitcache.h's, "Launches"):
//   - kv_c, k_pe, cache and out are 16-byte aligned, slot_mapping 8 (int64), slots 4
//     (int32), status 4 (uint32); strides are >= the row width and multiples of 8 elements;
//   - no buffer the kernel writes (the writer's cache and status, the gather's out and
//     status) shares a byte with another buffer of the launch, each buffer taken from its
//     base to the end of its last row (row gaps included); buffers only read may overlap
//     (kv_c and k_pe as column slices of one [N, 576] tensor);
//   - a writer launch maps each slot in [0, num_slots) to at most one token (negative
//     slots may repeat). Not checked: slot_mapping is device memory. A duplicate is a
//     caller error that leaves the slot's record undefined (not necessarily either
//     token's record).
struct WriterLaunch {
  std::uint64_t kv_c = 0;      // bf16 [num_tokens, >=512]
  std::int64_t kv_c_stride = 512;
  std::uint64_t k_pe = 0;      // bf16 [num_tokens, >=64]
  std::int64_t k_pe_stride = 64;
  std::uint64_t slot_mapping = 0;  // int64 [num_tokens]; negative = skip
  std::int64_t num_tokens = 0;
  std::uint64_t cache = 0;     // uint8 [num_slots, record_bytes]
  std::int64_t num_slots = 0;
  std::uint64_t status = 0;    // optional uint32 error word (see jc::k_status_*); 0 = none
};

struct GatherLaunch {
  std::uint64_t cache = 0;
  std::int64_t num_slots = 0;
  std::uint64_t slots = 0;     // int32 [num_rows]; negative = zero row
  std::int64_t num_rows = 0;
  std::uint64_t out = 0;       // bf16 [num_rows, >=576]
  std::int64_t out_stride = 576;
  std::uint64_t status = 0;
};

struct PrepareStats {
  std::size_t variants = 0;  // distinct variants the layers need
  std::size_t cached = 0;    // found in the cache (memory, disk or the remote tier)
  std::size_t remote = 0;    // of `cached`, how many came from the remote tier
  std::size_t provider = 0;  // of `cached`, how many came from a cache provider
  std::size_t compiled = 0;  // compiled by this call
  std::size_t stored = 0;    // of `variants`, how many are in the persistent cache afterwards
  double wall_ms = 0.0;
};

class PreparedModel {
 public:
  virtual ~PreparedModel() = default;
  virtual const ResolvedScales& scales() const = 0;
  virtual std::span<const LayerBinding> layers() const = 0;
  // The launch path's lookup: no allocation, no lock. nullptr when out of range.
  const LayerBinding* layer(int index) const {
    const auto all = layers();
    return index >= 0 && static_cast<std::size_t>(index) < all.size() ? &all[static_cast<std::size_t>(index)] : nullptr;
  }
  virtual const KernelInfo& info(const Kernel& kernel) const = 0;
  virtual std::vector<KernelInfo> kernels() const = 0;
  virtual const PrepareStats& stats() const = 0;
  virtual RecordFormat format() const = 0;
  virtual const std::string& target() const = 0;

  // Launch the layer's kernel with the layer's scale on `stream`. invalid_argument for a
  // bad layer or arguments that break the launch contract above (misaligned, out of
  // bounds, overlapping), checked first; then ErrorCode::unavailable without a GPU.
  virtual Status launch_writer(int layer, const WriterLaunch& args, void* stream) const = 0;
  virtual Status launch_gather(int layer, const GatherLaunch& args, void* stream) const = 0;
};

// Where a variant's kernel is, as Runtime::coverage reports it: the tier that would serve
// it, in lookup order: this process's memory, the local cache directory, a provider
// (prebuilt kernels installed on the node), the remote shared by a fleet.
enum class CoverageTier { memory, local, provider, remote };
const char* to_string(CoverageTier tier);  // "memory", "local", "provider", "remote"

// One variant a model needs and the tier holding its kernel.
struct VariantCoverage {
  std::string label;  // "writer/dynamic/b12x-432/sm_100a"
  KernelKind kernel = KernelKind::writer;
  LatentScale latent_scale = LatentScale::identity;
  RecordFormat format = RecordFormat::b12x_432;
  std::string target;
  std::string key;                  // the cache key a lookup uses, 32 hex digits
  std::optional<CoverageTier> tier;  // none: no tier holds it (prepare would compile it)
  std::string tier_name;            // the tier's own name ("disk", "redis", ...); empty when none
  std::vector<int> layers;          // the layers whose kernels it is
};

struct DeviceStatus {
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string name;    // e.g. "NVIDIA H200"
  // The most specific target for the device, e.g. "sm_90a", "sm_120a"; empty when no
  // target of this build runs on it.
  std::string target;
};

class Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> open(RuntimeOptions options = {});
  virtual ~Runtime() = default;

  virtual Result<std::shared_ptr<const PreparedModel>> prepare(const ModelSpec& model) = 0;
  // Which tier holds each variant prepare(model) would need, without preparing: nothing is
  // compiled, loaded, counted (hits and misses stay as they were) or copied between tiers.
  // The model's errors are prepare()'s.
  virtual Result<std::vector<VariantCoverage>> coverage(const ModelSpec& model) = 0;

  // Kernels from outside (jitcache/compile.hpp). A family is declared once per runtime,
  // before its first compile or lookup; declaring it again with the same schema is fine,
  // with another one an error (invalid_argument).
  virtual Status declare_family(const SpecSchema& schema) = 0;
  // The request's cubin: its spec checked against the family (not_found for an undeclared
  // family; invalid_argument naming a missing, unknown or out-of-range fact, or another
  // kind), its source checked against the spec's record when there is one (invalid_input
  // when they differ: the spec is incomplete, and nothing is served), then from the cache or
  // compiled once per key across processes (ErrorCode::compile with the tool's full log
  // when the tool refuses it). No GPU needed.
  virtual Result<CompiledKernel> compile(const KernelRequest& request) = 0;
  // The kernel of a spec without its source: a hit, a miss (generate the source and
  // compile()), or a hit chosen for verification (see RuntimeOptions::verify_spec).
  virtual Result<KernelLookup> lookup(const std::string& family, const std::map<std::string, std::string>& spec,
                                      const std::string& target) = 0;

  // Closes the runtime: calls that start afterwards fail with invalid_argument ("runtime
  // closed"); close waits for the calls already inside (a prepare that compiles) to return,
  // then releases the cache, the compiler and the device. Idempotent; the destructor closes.
  // Models it prepared stay usable. From inside a call on this runtime (its progress
  // callback, on that call's thread) it would wait for itself: invalid_argument there.
  //
  // A Runtime belongs to the process that opened it. In a child made by fork() every call
  // fails with invalid_argument naming both processes, and close() only marks it closed
  // (the parent's threads and locks did not come along); the child opens its own Runtime,
  // which works, compiles included.
  virtual Status close() = 0;

  virtual DeviceStatus device() const = 0;
  virtual const std::filesystem::path& cache_dir() const = 0;
  virtual const CacheStatus& cache_status() const = 0;
  // The figures of this runtime's cache as one JSON object (the document of
  // jitcache_runtime_stats in jitcache.h): what its store did since the runtime opened
  // (this process only), the cache directory's size now, and both as Prometheus metric
  // families (docs/metrics.md). invalid_argument once closed.
  virtual Result<std::string> stats_json() = 0;
};

}  // namespace jitcache
