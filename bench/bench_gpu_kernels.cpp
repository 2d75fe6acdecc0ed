// GPU timings of the writer and the gather of every record format x every latent-scale mode
// it is written with (the variant dimension tables: a new format is timed without an edit
// here), at decode sizes (1, 16, 256 and 4096 tokens) and at 2^20 tokens (1.7 GB of traffic,
// many times an H200's 60 MB L2), launched eagerly and replayed from a CUDA graph, against
// a device-to-device copy of 2 GiB (the bandwidth a memory-bound kernel can hope for).
//
// Each figure is the median of --reps timings by CUDA events of a batch of launches (one
// launch at 2^20 tokens; up to 256 at decode sizes, each launch of a batch on its own
// tokens, slots and output rows, so that a batch does not time the same bytes from L2),
// divided by the batch's launches. GB/s counts the bytes a launch moves (read and written);
// the copy moves 2 x 2 GiB. Every launch passes a status word, checked to be 0 at the end.
//
//   bench_gpu_kernels [CHECKPOINT] [--identity-checkpoint DIR] [--json REPORT] [--summary FILE] [--reps N]
//                     [--cache-dir DIR]
// The identity checkpoint (examples/dsv4-mini) serves the formats written with the identity
// scale alone (the page-major ones).
//
// CHECKPOINT defaults to examples/glm5-mini. Without a GPU it prints "skipped: no GPU: <why>",
// writes {"status": "skipped"} to the report and exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/device/cuda_driver.hpp"
#include "support/atomic_file.hpp"

using namespace jitcache;
using nlohmann::json;

namespace {

constexpr std::int64_t k_max_tokens = std::int64_t{1} << 20;
constexpr std::int64_t k_decode_sizes[] = {1, 16, 256, 4096, k_max_tokens};
// A batch covers at most this many tokens, so that its launches touch distinct bytes.
constexpr std::int64_t k_batch_tokens = std::int64_t{1} << 18;
constexpr std::int64_t k_max_batch = 256;
constexpr std::size_t k_copy_bytes = std::size_t{2} << 30;
constexpr std::size_t k_row_bytes = 576 * 2;  // a bf16 [576] row: the input and output stride

struct Options {
  std::filesystem::path checkpoint = "examples/glm5-mini";
  // For the formats written with the identity scale alone (the page-major ones, whose
  // readers take no per-layer scale): a checkpoint without calibrated layers.
  std::filesystem::path identity_checkpoint = "examples/dsv4-mini";
  std::string json_path;
  std::string summary_path;
  int reps = 20;
  std::filesystem::path cache_dir;
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;  // per launch
  json to_json() const { return {{"median_us", median_us}, {"min_us", min_us}, {"max_us", max_us}}; }
};

Timing summarize(std::vector<double> per_launch_us) {
  std::sort(per_launch_us.begin(), per_launch_us.end());
  const std::size_t n = per_launch_us.size();
  const double median = n % 2 ? per_launch_us[n / 2] : (per_launch_us[n / 2 - 1] + per_launch_us[n / 2]) / 2;
  return {median, per_launch_us.front(), per_launch_us.back()};
}

// What the bench needs of the driver, each call checked (a failed call ends the program
// with its name: the figures after it would mean nothing).
class Gpu {
 public:
  explicit Gpu(const CudaDriver& driver) : m_driver(driver), m_api(driver.api()) {}
  ~Gpu() {
    for (CUdeviceptr p : m_allocations) m_api.cuMemFree(p);
    if (m_start) m_api.cuEventDestroy(m_start);
    if (m_stop) m_api.cuEventDestroy(m_stop);
    if (m_stream) m_api.cuStreamDestroy(m_stream);
  }

  Status open() {
    JC_TRY(m_driver.check(m_api.cuEventCreate(&m_start, CU_EVENT_DEFAULT), "cuEventCreate"));
    JC_TRY(m_driver.check(m_api.cuEventCreate(&m_stop, CU_EVENT_DEFAULT), "cuEventCreate"));
    // Stream capture needs a stream other than the legacy default stream.
    if (m_api.cuStreamCreate) JC_TRY(m_driver.check(m_api.cuStreamCreate(&m_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    return {};
  }
  Result<CUdeviceptr> alloc(std::size_t bytes) {
    CUdeviceptr p = 0;
    JC_TRY(m_driver.check(m_api.cuMemAlloc(&p, bytes), "cuMemAlloc"));
    m_allocations.push_back(p);
    return p;
  }
  void free(CUdeviceptr p) {
    m_allocations.erase(std::remove(m_allocations.begin(), m_allocations.end(), p), m_allocations.end());
    m_api.cuMemFree(p);
  }
  CUstream stream() const { return m_stream; }
  const CudaDriver& driver() const { return m_driver; }
  const CudaDriverApi& api() const { return m_api; }

  // The milliseconds between two events around `work` on the stream.
  Result<double> time_ms(const std::function<Status()>& work) {
    JC_TRY(m_driver.check(m_api.cuEventRecord(m_start, m_stream), "cuEventRecord"));
    JC_TRY(work());
    JC_TRY(m_driver.check(m_api.cuEventRecord(m_stop, m_stream), "cuEventRecord"));
    JC_TRY(m_driver.check(m_api.cuEventSynchronize(m_stop), "cuEventSynchronize"));
    float ms = 0;
    JC_TRY(m_driver.check(m_api.cuEventElapsedTime(&ms, m_start, m_stop), "cuEventElapsedTime"));
    return double(ms);
  }

  // `reps` timings of `work` (after one untimed run), each divided by `launches`.
  Result<Timing> time(int reps, int launches, const std::function<Status()>& work) {
    JC_TRY(time_ms(work));  // warm up
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
      auto ms = time_ms(work);
      if (!ms) return std::unexpected(ms.error());
      us.push_back(1000.0 * *ms / launches);
    }
    return summarize(std::move(us));
  }

  // The same for a CUDA graph captured from `work` on the stream and replayed.
  Result<Timing> time_graph(int reps, int launches, const std::function<Status()>& work) {
    CUgraph graph = nullptr;
    JC_TRY(m_driver.check(m_api.cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                          "cuStreamBeginCapture"));
    const Status captured = work();
    // End the capture whatever happened, so that the stream is usable again.
    const Status ended = m_driver.check(m_api.cuStreamEndCapture(m_stream, &graph), "cuStreamEndCapture");
    JC_TRY(captured);
    JC_TRY(ended);
    CUgraphExec exec = nullptr;
    const Status instantiated = m_driver.check(m_api.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    m_api.cuGraphDestroy(graph);
    JC_TRY(instantiated);
    auto timing = time(reps, launches, [&] { return m_driver.check(m_api.cuGraphLaunch(exec, m_stream), "cuGraphLaunch"); });
    m_api.cuGraphExecDestroy(exec);
    return timing;
  }

 private:
  const CudaDriver& m_driver;
  const CudaDriverApi& m_api;
  CUevent m_start = nullptr, m_stop = nullptr;
  CUstream m_stream = nullptr;
  std::vector<CUdeviceptr> m_allocations;
};

int usage(const std::string& message) {
  std::fprintf(stderr,
               "bench_gpu_kernels: %s\nusage: bench_gpu_kernels [CHECKPOINT] [--identity-checkpoint DIR] "
               "[--json REPORT] [--summary FILE] [--reps N] [--cache-dir DIR]\n",
               message.c_str());
  return 2;
}

Status write_text(const std::string& path, const std::string& text) {
  if (path.empty()) return {};
  return write_text_atomic(path, text);
}

struct Buffers {
  CUdeviceptr rows = 0, out = 0, cache = 0, slots64 = 0, slots32 = 0, status = 0;
};

// The kernels' bytes per launch of `tokens`: what the writer reads (a row: 512 latent values
// and 64 RoPE values unless the format has none, and its int64 slot) and writes (a record),
// and what the gather reads (a record, an int32 slot) and writes (a row).
double writer_bytes(RecordFormat format, std::int64_t tokens) {
  return double(tokens) * (2.0 * gathered_row_elems(format) + 8 + record_bytes(format));
}
double gather_bytes(RecordFormat format, std::int64_t tokens) {
  return double(tokens) * (record_bytes(format) + 4 + 2.0 * gathered_row_elems(format));
}

std::string tokens_text(std::int64_t tokens) {
  return tokens == k_max_tokens ? std::string("1M") : std::to_string(tokens);
}

int run(const Options& options) {
  auto driver_or = CudaDriver::load();
  if (!driver_or) {
    std::printf("skipped: no GPU: %s\n", driver_or.error().message.c_str());
    const json report = {{"status", "skipped"}, {"reason", driver_or.error().message}};
    if (auto s = write_text(options.json_path, report.dump(2) + "\n"); !s) {
      std::fprintf(stderr, "bench_gpu_kernels: %s\n", s.error().to_string().c_str());
      return 1;
    }
    return 0;
  }
  const CudaDriver& driver = **driver_or;
  const auto& api = driver.api();
  auto fail = [&](const Error& e) {
    std::fprintf(stderr, "bench_gpu_kernels: %s\n", e.to_string().c_str());
    const json report = {{"status", "failed"}, {"error", e.to_string()}};
    (void)write_text(options.json_path, report.dump(2) + "\n");
    return 1;
  };
#define BENCH_TRY(expr)                                \
  do {                                                 \
    if (auto jc_bench_s = (expr); !jc_bench_s) return fail(jc_bench_s.error()); \
  } while (0)

  RuntimeOptions runtime_options;
  const bool own_cache = options.cache_dir.empty();
  runtime_options.cache_dir = own_cache ? std::filesystem::temp_directory_path() /
                                              ("jitcache-bench-" + std::to_string(::getpid()))
                                        : options.cache_dir;
  auto runtime = Runtime::open(runtime_options);
  if (!runtime) return fail(runtime.error());
  const DeviceInfo& info = driver.device();
  std::printf("%s (compute capability %d.%d, driver %d), %d reps, medians per launch\n", info.name.c_str(), info.major,
              info.minor, info.driver_version, options.reps);

  Gpu gpu(driver);
  BENCH_TRY(gpu.open());
  const bool graphs = api.has_graphs() && gpu.stream() != nullptr;
  if (!graphs) std::printf("this driver lacks stream capture or graphs: eager launches only\n");
  int max_record = 0;
  for (const RecordFormatRow& row : k_record_formats.rows) max_record = std::max(max_record, row.record_bytes);
  const std::size_t kernel_bytes = 2 * k_max_tokens * k_row_bytes + std::size_t(k_max_tokens) * max_record +
                                   std::size_t(k_max_tokens) * 12 + 16;
  if (api.cuMemGetInfo) {
    std::size_t free_bytes = 0, total_bytes = 0;
    BENCH_TRY(driver.check(api.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo"));
    const std::size_t need = kernel_bytes + 2 * k_copy_bytes + (std::size_t{256} << 20);
    if (free_bytes < need)
      return fail(Error{ErrorCode::unavailable,
                        "the bench needs " + std::to_string(need >> 20) + " MiB of device memory, " +
                            std::to_string(free_bytes >> 20) + " MiB are free",
                        {}});
  }

  // The copy baseline first, then its 4 GiB are given back.
  Timing copy{};
  {
    auto src = gpu.alloc(k_copy_bytes);
    if (!src) return fail(src.error());
    auto dst = gpu.alloc(k_copy_bytes);
    if (!dst) return fail(dst.error());
    BENCH_TRY(driver.check(api.cuMemsetD8(*src, 0x5a, k_copy_bytes), "cuMemsetD8"));
    auto t = gpu.time(options.reps, 1, [&] {
      return driver.check(api.cuMemcpyDtoDAsync(*dst, *src, k_copy_bytes, gpu.stream()), "cuMemcpyDtoDAsync");
    });
    if (!t) return fail(t.error());
    copy = *t;
    gpu.free(*src);
    gpu.free(*dst);
  }
  const double copy_gb_s = 2.0 * double(k_copy_bytes) / copy.median_us / 1e3;
  std::printf("copy of 2 GiB device to device: %.1f us, %.1f GB/s (read + write)\n\n", copy.median_us, copy_gb_s);

  Buffers b;
  for (auto [slot, bytes] : {std::pair{&b.rows, std::size_t(k_max_tokens) * k_row_bytes},
                             std::pair{&b.out, std::size_t(k_max_tokens) * k_row_bytes},
                             std::pair{&b.cache, std::size_t(k_max_tokens) * max_record},
                             std::pair{&b.slots64, std::size_t(k_max_tokens) * 8},
                             std::pair{&b.slots32, std::size_t(k_max_tokens) * 4}, std::pair{&b.status, std::size_t{16}}}) {
    auto p = gpu.alloc(bytes);
    if (!p) return fail(p.error());
    *slot = *p;
  }
  {
    // 2^16 rows of normal values at a spread of magnitudes, repeated to 2^20 (drawing all
    // of them would cost seconds and change no timing); the writer's slots in order, the
    // gather's a random permutation of the cache (a gather reads scattered records).
    std::mt19937_64 rng(20260401);
    constexpr std::size_t distinct = 1 << 16;
    std::vector<std::uint16_t> rows(std::size_t(k_max_tokens) * 576);
    std::normal_distribution<float> normal;
    for (std::size_t t = 0; t < distinct; ++t) {
      const float mag = std::ldexp(1.0f, int(t % 11) - 8);
      for (std::size_t i = 0; i < 576; ++i) rows[t * 576 + i] = jc::float_to_bf16(mag * normal(rng));
    }
    for (std::size_t t = distinct; t < std::size_t(k_max_tokens); ++t)
      std::copy_n(rows.begin() + std::ptrdiff_t((t % distinct) * 576), 576, rows.begin() + std::ptrdiff_t(t * 576));
    std::vector<std::int64_t> s64(k_max_tokens);
    std::iota(s64.begin(), s64.end(), 0);
    std::vector<std::int32_t> s32(k_max_tokens);
    std::iota(s32.begin(), s32.end(), 0);
    std::shuffle(s32.begin(), s32.end(), rng);
    BENCH_TRY(driver.check(api.cuMemcpyHtoD(b.rows, rows.data(), rows.size() * 2), "cuMemcpyHtoD"));
    BENCH_TRY(driver.check(api.cuMemcpyHtoD(b.slots64, s64.data(), s64.size() * 8), "cuMemcpyHtoD"));
    BENCH_TRY(driver.check(api.cuMemcpyHtoD(b.slots32, s32.data(), s32.size() * 4), "cuMemcpyHtoD"));
    BENCH_TRY(driver.check(api.cuMemsetD8(b.status, 0, 16), "cuMemsetD8"));
  }

  json results = json::array();
  json skipped = json::array();
  std::printf("%-8s %-13s %-9s %6s %5s %11s %11s %9s %7s\n", "kernel", "format", "latent", "tokens", "batch",
              "eager us", "graph us", "GB/s", "of copy");
  // Every format x every mode its row says it is written with.
  for (const RecordFormatRow& format : k_record_formats.rows) {
    for (const LatentScaleRow& mode : k_latent_scales.rows) {
      if ((format.latent_scales & latent_bit(mode.value)) == 0) continue;
      const bool identity_only = format.latent_scales == latent_bit(LatentScale::identity);
      ModelSpec spec{identity_only ? options.identity_checkpoint : options.checkpoint, format.value, "", std::nullopt,
                     std::nullopt, std::nullopt};
      if (mode.value == LatentScale::per_token) spec.latent_scale = LatentScale::per_token;
      auto prepared = (*runtime)->prepare(spec);
      if (!prepared) return fail(prepared.error());
      // Identity and dynamic follow from the checkpoint's scales: the first layer bound so.
      int layer = -1;
      for (const LayerBinding& binding : (*prepared)->layers())
        if (binding.latent_scale == mode.value) {
          layer = binding.layer;
          break;
        }
      if (layer < 0) {
        std::printf("%-8s %-13s %-9s skipped: no layer of the checkpoint is bound %s\n", "both", format.name,
                    mode.name, mode.name);
        skipped.push_back({{"format", format.name}, {"latent_scale", mode.name}, {"reason", "no layer bound so"}});
        continue;
      }
      const PreparedModel& model = **prepared;
      // The whole cache holds this variant's records before the gather reads it.
      const WriterLaunch fill{b.rows, 576, b.rows + 1024, 576, b.slots64, k_max_tokens, b.cache, k_max_tokens, b.status};
      BENCH_TRY(model.launch_writer(layer, fill, gpu.stream()));
      for (const KernelKindRow& kernel : k_kernel_kinds.rows) {
        for (std::int64_t tokens : k_decode_sizes) {
          const int batch = int(std::clamp(k_batch_tokens / tokens, std::int64_t{1}, k_max_batch));
          auto launches = [&]() -> Status {
            for (int k = 0; k < batch; ++k) {
              const std::int64_t first = std::int64_t(k) * tokens;
              switch (kernel.value) {
                case KernelKind::writer: {
                  const std::uint64_t row = b.rows + first * k_row_bytes;
                  const WriterLaunch w{row, 576, row + 1024, 576, b.slots64 + first * 8, tokens, b.cache, k_max_tokens,
                                       b.status};
                  JC_TRY(model.launch_writer(layer, w, gpu.stream()));
                  break;
                }
                case KernelKind::gather: {
                  const GatherLaunch g{b.cache, k_max_tokens, b.slots32 + first * 4, tokens,
                                       b.out + first * k_row_bytes, 576, b.status};
                  JC_TRY(model.launch_gather(layer, g, gpu.stream()));
                  break;
                }
              }
            }
            return {};
          };
          auto eager = gpu.time(options.reps, batch, launches);
          if (!eager) return fail(eager.error());
          std::optional<Timing> graph;
          if (graphs) {
            auto t = gpu.time_graph(options.reps, batch, launches);
            if (!t) return fail(t.error());
            graph = *t;
          }
          const double bytes = kernel.value == KernelKind::writer ? writer_bytes(format.value, tokens)
                                                                  : gather_bytes(format.value, tokens);
          const double best_us = graph ? graph->median_us : eager->median_us;
          const double gb_s = bytes / best_us / 1e3;
          char graph_text[32] = "-";
          if (graph) std::snprintf(graph_text, sizeof graph_text, "%.2f", graph->median_us);
          std::printf("%-8s %-13s %-9s %6s %5d %11.2f %11s %9.1f %6.0f%%\n", kernel.name, format.name, mode.name,
                      tokens_text(tokens).c_str(), batch, eager->median_us, graph_text, gb_s, 100.0 * gb_s / copy_gb_s);
          results.push_back({{"kernel", kernel.name},
                             {"format", format.name},
                             {"latent_scale", mode.name},
                             {"layer", layer},
                             {"tokens", tokens},
                             {"launches_per_timing", batch},
                             {"bytes_per_launch", bytes},
                             {"eager", eager->to_json()},
                             {"graph", graph ? graph->to_json() : json(nullptr)},
                             {"gb_s", gb_s},
                             {"fraction_of_copy", gb_s / copy_gb_s}});
        }
      }
    }
  }
  BENCH_TRY(driver.check(api.cuStreamSynchronize(gpu.stream()), "cuStreamSynchronize"));
  std::uint32_t status_word = 0;
  BENCH_TRY(driver.check(api.cuMemcpyDtoH(&status_word, b.status, 4), "cuMemcpyDtoH"));

  // The short summary: per kernel, the range over the variants at 2^20 tokens and at one
  // token (graph replays when there are graphs).
  std::string summary;
  char line[256];
  std::snprintf(line, sizeof line, "copy 2 GiB: %.0f GB/s\n", copy_gb_s);
  summary += line;
  for (const KernelKindRow& kernel : k_kernel_kinds.rows) {
    double lo = 1e300, hi = 0, lat_lo = 1e300, lat_hi = 0;
    for (const json& r : results) {
      if (r["kernel"] != kernel.name) continue;
      const double us = r["graph"].is_null() ? r["eager"]["median_us"].get<double>() : r["graph"]["median_us"].get<double>();
      if (r["tokens"] == k_max_tokens) lo = std::min(lo, r["gb_s"].get<double>()), hi = std::max(hi, r["gb_s"].get<double>());
      if (r["tokens"] == 1) lat_lo = std::min(lat_lo, us), lat_hi = std::max(lat_hi, us);
    }
    if (hi == 0) continue;
    std::snprintf(line, sizeof line, "%s 1M tokens: %.0f-%.0f GB/s (%.0f-%.0f%% of copy); 1 token: %.1f-%.1f us (%s)\n",
                  kernel.name, lo, hi, 100 * lo / copy_gb_s, 100 * hi / copy_gb_s, lat_lo, lat_hi,
                  graphs ? "graph" : "eager");
    summary += line;
  }
  if (status_word != 0) {
    std::snprintf(line, sizeof line, "status word 0x%x: a launch reported an error (jc::k_status_*)\n", status_word);
    summary += line;
  }
  std::printf("\n%s", summary.c_str());

  const json report = {{"status", status_word == 0 ? "ok" : "failed"},
                       {"device", {{"name", info.name},
                                   {"compute_capability", std::to_string(info.major) + "." + std::to_string(info.minor)},
                                   {"driver_version", info.driver_version}}},
                       {"checkpoint", options.checkpoint.string()},
                       {"identity_checkpoint", options.identity_checkpoint.string()},
                       {"reps", options.reps},
                       {"graphs", graphs},
                       {"copy", {{"bytes", k_copy_bytes}, {"timing", copy.to_json()}, {"gb_s", copy_gb_s}}},
                       {"results", results},
                       {"skipped", skipped},
                       {"status_word", status_word}};
  BENCH_TRY(write_text(options.json_path, report.dump(2) + "\n"));
  BENCH_TRY(write_text(options.summary_path, summary));
  if (own_cache) {
    std::error_code ec;
    std::filesystem::remove_all(*runtime_options.cache_dir, ec);
  }
  return status_word == 0 ? 0 : 1;
#undef BENCH_TRY
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  bool checkpoint_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json" && has_value) {
      options.json_path = argv[++i];
    } else if (arg == "--summary" && has_value) {
      options.summary_path = argv[++i];
    } else if (arg == "--cache-dir" && has_value) {
      options.cache_dir = argv[++i];
    } else if (arg == "--reps" && has_value) {
      const std::string value = argv[++i];
      char* end = nullptr;
      const long reps = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || reps < 1 || reps > 10000)
        return usage("--reps: expected a count in [1, 10000], got '" + value + "'");
      options.reps = int(reps);
    } else if (arg == "--identity-checkpoint" && has_value) {
      options.identity_checkpoint = argv[++i];
    } else if (!arg.starts_with("--") && !checkpoint_given) {
      options.checkpoint = arg;
      checkpoint_given = true;
    } else {
      return usage("unknown argument '" + arg + "'");
    }
  }
  return run(options);
}
