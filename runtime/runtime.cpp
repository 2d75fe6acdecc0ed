// Runtime and PreparedModel: the linked entry point of jitcache (include/jitcache/runtime.hpp).
#include "jitcache/runtime.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cache/store.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/binding_guard.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/device/cuda_driver.hpp"
#include "runtime/device_target.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/runtime_stats.hpp"
#include "runtime/compile/source_cache.hpp"
#include "runtime/model_plan.hpp"
#include "runtime/scales/model_config.hpp"
#include "support/call_gate.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"

namespace jitcache {

// One prepared variant: its artifact and, with a GPU, its loaded module.
class Kernel {
 public:
  KernelSpec spec;
  KernelInfo info;
  std::shared_ptr<const CompiledArtifact> artifact;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  std::shared_ptr<CudaDriver> driver;

  ~Kernel() {
    if (module != nullptr && driver) driver->api().cuModuleUnload(module);
  }
};

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class PreparedModelImpl final : public PreparedModel {
 public:
  ResolvedScales m_scales;
  std::vector<std::unique_ptr<Kernel>> m_kernels;
  std::vector<LayerBinding> m_layers;
  PrepareStats m_stats;
  RecordFormat m_format = RecordFormat::b12x_432;
  LatentPolicy m_policy = LatentPolicy::per_layer;
  std::string m_target;

  const ResolvedScales& scales() const override { return m_scales; }
  std::span<const LayerBinding> layers() const override { return m_layers; }
  const KernelInfo& info(const Kernel& kernel) const override { return kernel.info; }
  std::vector<KernelInfo> kernels() const override {
    std::vector<KernelInfo> out;
    for (const auto& k : m_kernels) out.push_back(k->info);
    return out;
  }
  const PrepareStats& stats() const override { return m_stats; }
  RecordFormat format() const override { return m_format; }
  const std::string& target() const override { return m_target; }

  Status launch_writer(int layer, const WriterLaunch& a, void* stream) const override {
    const LayerBinding* b = this->layer(layer);
    if (b == nullptr) return make_error(ErrorCode::invalid_argument, "no layer " + std::to_string(layer));
    jc::WriterParams p{reinterpret_cast<const jc::u16*>(a.kv_c), a.kv_c_stride,
                       reinterpret_cast<const jc::u16*>(a.k_pe), a.k_pe_stride,
                       reinterpret_cast<const jc::i64*>(a.slot_mapping), a.num_tokens,
                       reinterpret_cast<jc::u8*>(a.cache), a.num_slots,
                       reinterpret_cast<jc::u32*>(a.status)};
    JC_TRY(validate(p, m_format));
    return launch(*b->writer, &p, b->scale, a.num_tokens, stream);
  }

  Status launch_gather(int layer, const GatherLaunch& a, void* stream) const override {
    const LayerBinding* b = this->layer(layer);
    if (b == nullptr) return make_error(ErrorCode::invalid_argument, "no layer " + std::to_string(layer));
    jc::GatherParams p{reinterpret_cast<const jc::u8*>(a.cache), a.num_slots,
                       reinterpret_cast<const jc::i32*>(a.slots), a.num_rows,
                       reinterpret_cast<jc::u16*>(a.out), a.out_stride,
                       reinterpret_cast<jc::u32*>(a.status)};
    JC_TRY(validate(p, m_format));
    return launch(*b->gather, &p, b->scale, a.num_rows, stream);
  }

 private:
  // Called after validate(): rows is in [0, k_max_launch_rows], so the grid fits. Without
  // a GPU a launch is unavailable whatever its row count, so that a zero-row warm-up
  // cannot pass where real launches would fail.
  static Status launch(const Kernel& kernel, void* params, float scale, std::int64_t rows, void* stream) {
    if (kernel.function == nullptr)
      return make_error(ErrorCode::unavailable, "kernel " + kernel.spec.label() + " is not loaded (no GPU)");
    if (rows == 0) return {};
    const std::int64_t blocks = (rows + jc::k_tokens_per_cta - 1) / jc::k_tokens_per_cta;
    void* args[] = {params, &scale};
    const auto& api = kernel.driver->api();
    return kernel.driver->check(
        api.cuLaunchKernel(kernel.function, static_cast<unsigned>(blocks), 1, 1, jc::k_threads_per_cta, 1, 1, 0,
                           static_cast<CUstream>(stream), args, nullptr),
        "cuLaunchKernel");
  }
};

// Whether this hit is one of the `fraction` chosen for shadow verification. Each thread
// draws from its own generator, seeded once from the system's entropy: no lock on the
// lookup path, and no two processes of a fleet verifying the same hits in lockstep.
bool chosen_for_verification(double fraction) {
  if (fraction <= 0.0) return false;
  if (fraction >= 1.0) return true;
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator) < fraction;
}

CompiledKernel to_kernel(const std::string& family, const std::string& target, SourceResult&& result,
                         std::chrono::steady_clock::time_point started) {
  CompiledKernel k;
  k.family = family;
  k.kind = result.kind;
  k.entry = std::move(result.entry);
  k.target = target;
  k.cubin = std::move(result.cubin);
  k.usage = result.usage;
  k.log = std::move(result.log);
  k.key = result.key.to_hex();
  k.from_cache = result.from_cache;
  k.from_remote = result.source == cache::Source::remote;
  k.verified = result.verified;
  k.ms = ms_since(started);
  return k;
}

// The runtimes this thread is inside a call of, or running a progress callback for (on a
// compile worker): close() from there would wait for itself.
thread_local std::vector<const void*> t_inside;

class Inside {
 public:
  explicit Inside(const void* runtime) { t_inside.push_back(runtime); }
  ~Inside() { t_inside.pop_back(); }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

// The runtime's work; ClosableRuntime below is what callers hold.
class RuntimeImpl final {
 public:
  RuntimeImpl(RuntimeOptions options, CacheStatus cache, OpenedKernelCache opened, double verify_fraction)
      : m_options(std::move(options)),
        m_cache(std::move(cache)),
        m_opened(std::move(opened)),
        m_sources(*m_opened.store,
                  source_options(m_families, *m_opened.compiler, tool_memo(m_opened), m_opened.no_compile)),
        m_verify_fraction(verify_fraction) {
    if (m_options.device == DeviceUse::none) {
      m_device.reason = "device use disabled";
      return;
    }
    auto driver = CudaDriver::load(m_options.device_ordinal);
    if (!driver) {
      m_device.reason = driver.error().message;
      return;
    }
    m_driver = *driver;
    m_device.available = true;
    m_device.name = m_driver->device().name;
    const DeviceInfo& info = m_driver->device();
    // The most specific target for the chip: what prepare() compiles when the cache holds
    // none of the others.
    const std::vector<std::string> targets = targets_for_device(info.major, info.minor);
    if (!targets.empty()) m_device.target = targets.front();
  }

  Status declare_family(const SpecSchema& schema) { return m_families.add(schema); }

  Result<CompiledKernel> compile(const KernelRequest& request) {
    const auto started = std::chrono::steady_clock::now();
    SourceResult result = JC_TRY(m_sources.compile(request));
    return to_kernel(request.family, request.target, std::move(result), started);
  }

  Result<KernelLookup> lookup(const std::string& family, const std::map<std::string, std::string>& spec,
                              const std::string& target) {
    const auto started = std::chrono::steady_clock::now();
    auto found = JC_TRY(m_sources.lookup(family, spec, target));
    KernelLookup out;
    if (!found) return out;  // a miss
    if (chosen_for_verification(m_verify_fraction)) {
      out.outcome = LookupOutcome::verify;
      return out;
    }
    out.outcome = LookupOutcome::hit;
    out.kernel = to_kernel(family, target, std::move(*found), started);
    return out;
  }

  // The model's plan as prepare() makes it: a target named must run on the device (no
  // cubin is loaded where NVIDIA's rule says it cannot run; docs/targets.md); without one,
  // the device gets the most specific target the cache's tiers hold for every variant,
  // else its product target, compiled.
  Result<PlannedModel> plan(const ModelSpec& model) {
    if (!model.target.empty() && m_driver) {
      const Target named = JC_TRY(parse_target(model.target));
      const DeviceInfo& info = m_driver->device();
      if (auto runs = check_cubin_runs_on(named.name, info.major, info.minor); !runs)
        return make_error(ErrorCode::invalid_argument,
                          "target " + named.name + " for " + info.name + ": " + runs.error().message);
    }
    TargetChooser choose;
    if (m_driver)
      choose = [this, &model](const ResolvedScales& scales, LatentPolicy policy) {
        const DeviceInfo& info = m_driver->device();
        return target_for_device(m_store, *m_opened.compiler, scales, model.format, policy, info.major, info.minor);
      };
    return plan_model(model, m_device, choose);
  }

  Result<std::vector<VariantCoverage>> coverage(const ModelSpec& model) {
    const PlannedModel planned = JC_TRY(plan(model));
    return model_coverage(m_kernels, planned);
  }

  DeviceStatus device() const { return m_device; }
  const CacheStatus& cache_status() const { return m_cache; }
  std::string stats_json() const { return runtime_stats_json(m_store, m_cache); }

  Result<std::shared_ptr<const PreparedModel>> prepare(const ModelSpec& model) {
    const auto started = std::chrono::steady_clock::now();
    PlannedModel planned = JC_TRY(plan(model));
    auto prepared = std::make_shared<PreparedModelImpl>();
    prepared->m_format = model.format;
    prepared->m_policy = planned.policy;
    prepared->m_target = planned.target.name;
    prepared->m_scales = std::move(planned.scales);
    const VariantPlan& plan = planned.plan;

    if (prepared->m_policy == LatentPolicy::per_token)
      log_info("latent scale: per-token for every layer of " + model.checkpoint.string() + " (" +
               to_string(model.format) + "): each token's scale is in its record; the " +
               std::to_string(prepared->m_scales.layers.size()) + " per-layer scales (" +
               to_string(prepared->m_scales.provenance.source) + ") are not applied");
    JC_TRY(fetch_all(plan.variants, *prepared));
    JC_TRY(bind(plan, *prepared));
    prepared->m_stats.wall_ms = ms_since(started);
    return std::shared_ptr<const PreparedModel>(std::move(prepared));
  }

 private:
  // Gets every variant from the cache, then compiles the misses `jobs` at a time. The
  // warm path (everything cached) starts no thread. Loading needs neither the PTX nor
  // the compiler log, so they are not copied out of the bundles.
  Status fetch_all(const std::vector<KernelSpec>& specs, PreparedModelImpl& prepared) {
    prepared.m_kernels.resize(specs.size());
    std::mutex progress_mutex;
    std::size_t done = 0;
    auto record = [&](std::size_t i, const KernelFetch& fetched, std::chrono::steady_clock::time_point started)
        -> Status {
      auto kernel = std::make_unique<Kernel>();
      kernel->spec = specs[i];
      kernel->artifact = fetched.artifact;
      KernelInfo& info = kernel->info;
      info.kernel = specs[i].kernel;
      info.latent_scale = specs[i].latent_scale;
      info.format = specs[i].format;
      info.target = specs[i].target.name;
      info.key = fetched.key.to_hex();
      info.entry = fetched.artifact->entry;
      info.registers = fetched.artifact->usage.registers;
      info.cubin_bytes = fetched.artifact->cubin.size();
      info.compiled_now = fetched.source == cache::Source::produced;
      info.from_remote = fetched.source == cache::Source::remote;
      info.from_provider = fetched.source == cache::Source::provider;
      // Read from disk means stored; anything else is asked of the index (a compile whose
      // publish failed, or a memory-only or read-only cache, leaves nothing there).
      info.stored = fetched.source == cache::Source::disk || m_store.contains(fetched.key).value_or(false);
      prepared.m_kernels[i] = std::move(kernel);
      if (m_options.progress) {
        const Inside inside(this);
        std::lock_guard lock(progress_mutex);
        m_options.progress(PrepareProgress{++done, specs.size(), specs[i].label(), info.compiled_now,
                                           ms_since(started), info.from_remote, info.from_provider});
      }
      return {};
    };

    JC_TRY(fetch_each(m_kernels, specs, m_options.jobs, BundleText::skip, record));

    prepared.m_stats.variants = specs.size();
    for (const auto& k : prepared.m_kernels) {
      (k->info.compiled_now ? prepared.m_stats.compiled : prepared.m_stats.cached)++;
      if (k->info.stored) ++prepared.m_stats.stored;
      if (k->info.from_remote) ++prepared.m_stats.remote;
      if (k->info.from_provider) ++prepared.m_stats.provider;
    }
    if (m_driver)
      for (auto& k : prepared.m_kernels) JC_TRY(load(*k));
    return {};
  }

  // Loads a variant's cubin. prepare() only plans targets whose cubins NVIDIA's rule says
  // run on this device; should the driver still refuse one (a driver older than the
  // cubin), it falls back to the PTX of the device's generic target (sm_90, sm_100,
  // sm_120: the last of targets_for_device), compiled through the cache under its own key.
  Status load(Kernel& kernel) {
    const auto& api = m_driver->api();
    JC_TRY(m_driver->make_current());
    CUresult rc = api.cuModuleLoadDataEx(&kernel.module, kernel.artifact->cubin.data(), 0, nullptr, nullptr);
    if (rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_INVALID_IMAGE ||
        rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      const DeviceInfo& info = m_driver->device();
      const std::vector<std::string> targets = targets_for_device(info.major, info.minor);
      const TargetRow* row = targets.empty() ? nullptr : k_targets.find(targets.back());
      if (row == nullptr || row->reach != TargetReach::generic) return m_driver->check(rc, "cuModuleLoadDataEx");
      const Target generic{row->name};
      KernelSpec fallback = kernel.spec;
      fallback.target = generic;
      const auto fetched = JC_TRY(m_kernels.get(fallback));
      const std::string& ptx = fetched.artifact->ptx;
      rc = api.cuModuleLoadDataEx(&kernel.module, ptx.c_str(), 0, nullptr, nullptr);
      kernel.info.ptx_fallback = true;
      log_warning("the driver refused the " + kernel.spec.target.name + " cubin of " + kernel.spec.label() +
                  " on " + info.name + "; loaded the PTX of " + generic.name + " instead");
    }
    JC_TRY(m_driver->check(rc, "cuModuleLoadDataEx"));
    JC_TRY(m_driver->check(api.cuModuleGetFunction(&kernel.function, kernel.module, kernel.artifact->entry.c_str()),
                           "cuModuleGetFunction"));
    kernel.driver = m_driver;
    kernel.info.loaded = true;
    return {};
  }

  // Binds every layer to its variants (the plan's, fetched in its order) after checking the
  // artifacts' embedded facts.
  static Status bind(const VariantPlan& plan, PreparedModelImpl& prepared) {
    std::vector<FactMap> embedded;
    for (const auto& k : prepared.m_kernels) embedded.push_back(JC_TRY(facts_from_cubin(k->artifact->cubin)));
    prepared.m_layers.reserve(prepared.m_scales.layers.size());
    // A check's outcome depends on the layer only through the latent scale it needs, so
    // each (variant, latent scale) pair is checked once, at the first layer that uses it
    // (that layer is the one an error names): 79 layers bind to 4 variants.
    std::vector<std::array<bool, k_latent_scales.size()>> checked(prepared.m_kernels.size());
    auto check_once = [&](const LayerScale& l, LatentScale latent, std::size_t variant) -> Status {
      bool& done = checked[variant][static_cast<std::size_t>(std::to_underlying(latent))];
      if (!done) JC_TRY(check_binding(l, prepared.m_policy, prepared.m_kernels[variant]->spec, embedded[variant]));
      done = true;
      return {};
    };
    for (std::size_t i = 0; i < plan.layers.size(); ++i) {
      const LayerScale& l = prepared.m_scales.layers[i];
      const LatentScale latent = latent_scale_for(l, prepared.m_policy);
      LayerBinding b{l.layer, latent == LatentScale::per_token ? 1.0f : l.scale, l.mode, l.source, nullptr, nullptr,
                     latent};
      const VariantPlan::Layer& uses = plan.layers[i];
      b.writer = prepared.m_kernels[uses.writer].get();
      b.gather = prepared.m_kernels[uses.gather].get();
      JC_TRY(check_once(l, latent, uses.writer));
      JC_TRY(check_once(l, latent, uses.gather));
      prepared.m_layers.push_back(b);
    }
    return {};
  }

  // The runtime's NVRTC fingerprint is the kernel cache's, remembered in the cache
  // directory: a fresh process's first CUDA request compiles no fingerprint program. The
  // same memo keeps libNVVM's and nvJitLink's versions, so that a lookup by spec in a fresh
  // process loads neither.
  static SourceCacheOptions source_options(const SpecRegistry& families, const Compiler& nvrtc,
                                           std::filesystem::path memo, NoCompile no_compile) {
    SourceCacheOptions options;
    options.registry = &families;
    options.no_compile = no_compile;
    options.tools = [&nvrtc, memo](SourceKind kind) { return probe_tools(kind, &nvrtc, memo); };
    options.loaded_tools = [&nvrtc](SourceKind kind) { return probe_tools(kind, &nvrtc); };
    return options;
  }

  // The fingerprint memo NVRTC's fingerprint uses (open_kernel_cache); none without a
  // usable cache directory.
  static std::filesystem::path tool_memo(const OpenedKernelCache& opened) {
    if (opened.unusable || opened.dir.empty()) return {};
    return opened.dir / k_fingerprint_memo_name;
  }

  RuntimeOptions m_options;
  CacheStatus m_cache;
  OpenedKernelCache m_opened;  // the store, the compiler and the kernel cache over them
  cache::Store& m_store = *m_opened.store;
  KernelCache& m_kernels = *m_opened.kernels;
  SpecRegistry m_families;  // this runtime's declared families (kernels from outside)
  SourceCache m_sources;    // their cache, in the same store as jitcache's own kernels
  double m_verify_fraction = 0.0;
  std::shared_ptr<CudaDriver> m_driver;
  DeviceStatus m_device;
};

// A RuntimeImpl behind a CallGate, tied to the process that opened it. close() refuses new
// calls, waits for the ones in flight, then releases the work; a forked child is refused
// every call (the parent's threads, locks and connections did not come along) and must
// open its own runtime.
class ClosableRuntime final : public Runtime {
 public:
  explicit ClosableRuntime(std::unique_ptr<RuntimeImpl> impl)
      : m_impl(std::move(impl)),
        m_identity(m_impl.get()),
        m_device(m_impl->device()),
        m_cache(m_impl->cache_status()),
        m_pid(::getpid()) {}

  ~ClosableRuntime() override { (void)close(); }

  Result<std::shared_ptr<const PreparedModel>> prepare(const ModelSpec& model) override {
    return call([&](RuntimeImpl& impl) { return impl.prepare(model); });
  }
  Status declare_family(const SpecSchema& schema) override {
    return call([&](RuntimeImpl& impl) { return impl.declare_family(schema); });
  }
  Result<CompiledKernel> compile(const KernelRequest& request) override {
    return call([&](RuntimeImpl& impl) { return impl.compile(request); });
  }
  Result<std::vector<VariantCoverage>> coverage(const ModelSpec& model) override {
    return call([&](RuntimeImpl& impl) { return impl.coverage(model); });
  }
  Result<KernelLookup> lookup(const std::string& family, const std::map<std::string, std::string>& spec,
                              const std::string& target) override {
    return call([&](RuntimeImpl& impl) { return impl.lookup(family, spec, target); });
  }

  Status close() override {
    if (std::find(t_inside.begin(), t_inside.end(), m_identity) != t_inside.end())
      return make_error(ErrorCode::invalid_argument,
                        "runtime close: called from inside a call on this runtime (a progress or log callback), "
                        "which it would wait for; close it after that call returns");
    if (::getpid() != m_pid) {
      // The parent's threads may have been inside it at fork(): waiting for them, or
      // destroying what they held, could hang the child. Left as it is.
      m_gate.close();
      std::lock_guard lock(m_release_mutex);
      (void)m_impl.release();
      return {};
    }
    m_gate.close_and_drain();
    std::lock_guard lock(m_release_mutex);
    m_impl.reset();
    return {};
  }

  Result<std::string> stats_json() override {
    return call([&](RuntimeImpl& impl) -> Result<std::string> { return impl.stats_json(); });
  }

  DeviceStatus device() const override { return m_device; }
  const std::filesystem::path& cache_dir() const override { return m_cache.dir; }
  const CacheStatus& cache_status() const override { return m_cache; }

 private:
  template <class Body>
  auto call(Body&& body) -> decltype(body(std::declval<RuntimeImpl&>())) {
    const pid_t pid = ::getpid();
    if (pid != m_pid)
      return make_error(ErrorCode::invalid_argument,
                        "runtime created in process " + std::to_string(m_pid) + " used in process " +
                            std::to_string(pid) + ": a forked child must open its own Runtime");
    const auto pass = m_gate.enter();
    if (!pass) return make_error(ErrorCode::invalid_argument, "runtime closed (close() was called)");
    const Inside inside(m_identity);
    return body(*m_impl);
  }

  std::unique_ptr<RuntimeImpl> m_impl;
  const void* m_identity;  // m_impl's address, which progress callbacks are marked with
  CallGate m_gate;
  std::mutex m_release_mutex;
  DeviceStatus m_device;
  CacheStatus m_cache;
  pid_t m_pid;
};

}  // namespace

const char* to_string(LookupOutcome outcome) { return enum_name(outcome, {"hit", "miss", "verify"}); }

const char* to_string(CacheMode mode) { return enum_name(mode, {"read-write", "read-only", "memory-only"}); }

namespace {

Result<bool> cache_required(CacheRequirement requirement) {
  switch (requirement) {
    case CacheRequirement::optional: return false;
    case CacheRequirement::required: return true;
    case CacheRequirement::from_environment: break;
  }
  return env::get_bool(env::jitcache_require_cache);
}

// A cache is an optimisation: a directory that cannot be used costs compile time, never
// the engine's start, unless the caller asked for a cache.
Result<std::pair<CacheStatus, OpenedKernelCache>> open_cache(const RuntimeOptions& options) {
  const bool required = JC_TRY(cache_required(options.cache_requirement));
  KernelCacheOptions cache_options;
  cache_options.cache_dir = options.cache_dir;
  if (options.cache_max_bytes != 0) cache_options.store.max_bytes = options.cache_max_bytes;
  cache_options.unusable = required ? UnusableCache::fail : UnusableCache::memory_only;
  cache_options.no_compile = options.no_compile;
  if (!options.remote.empty()) {
    cache_options.remote_url = options.remote;
    cache_options.remote_url_source = "the remote option (--remote, RuntimeOptions::remote, Runtime(remote=))";
  }
  cache_options.providers = options.providers;
  OpenedKernelCache opened = JC_TRY(open_kernel_cache(cache_options));
  CacheStatus status;
  status.dir = opened.dir;
  if (!opened.unusable) {
    if (opened.store->mode() == cache::StoreMode::read_only) {
      status.mode = CacheMode::read_only;
      status.reason = opened.store->mode_reason();
    }
    return std::pair(std::move(status), std::move(opened));
  }
  status.mode = CacheMode::memory_only;
  status.reason = opened.unusable->message;
  log_warning("cache: not using " + (status.dir.empty() ? std::string("a cache directory") : status.dir.string()) +
              ": " + opened.unusable->message +
              "; running memory-only: compiled kernels are kept for this runtime's life and compiled again "
              "by the next process. Fix the directory or point JITCACHE_DIR (or the cache_dir option) at a "
              "private directory on a local disk; JITCACHE_REQUIRE_CACHE=1 makes this an error");
  return std::pair(std::move(status), std::move(opened));
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::open(RuntimeOptions options) {
  if (options.log_sink) set_log_sink(options.log_sink);
  JC_TRY(env::check_startup());
  double verify = 0.0;
  if (options.verify_spec) {
    verify = *options.verify_spec;
    if (!(verify >= 0.0 && verify <= 1.0))
      return make_error(ErrorCode::invalid_argument, "the verify_spec option must be a fraction from 0 to 1, got " +
                                                         std::to_string(verify));
  } else {
    verify = JC_TRY(env::get_fraction(env::jitcache_verify_spec));
  }
  auto [status, opened] = JC_TRY(open_cache(options));
  return std::unique_ptr<Runtime>(new ClosableRuntime(
      std::make_unique<RuntimeImpl>(std::move(options), std::move(status), std::move(opened), verify)));
}

}  // namespace jitcache
