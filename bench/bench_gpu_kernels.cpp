// GPU timings of the writer and the gather at 64k tokens, against a device-to-device copy
// of the same bytes (the bandwidth a memory-bound kernel can hope for). Needs a GPU;
// without one it says why and exits 0.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include <unistd.h>

#include "jitcache/runtime.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/nvfp4_mla.cuh"
#include "runtime/device/cuda_driver.hpp"

using namespace jitcache;

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "bench_gpu_kernels: %s\n", e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path checkpoint = argc > 1 ? argv[1] : "examples/glm5-mini";
  const std::filesystem::path identity_checkpoint = argc > 2 ? argv[2] : "examples/dsv4-mini";
  auto driver_or = CudaDriver::load();
  if (!driver_or) {
    std::printf("no GPU, nothing to time: %s\n", driver_or.error().message.c_str());
    return 0;
  }
  const auto driver = *driver_or;
  const auto& api = driver->api();
  RuntimeOptions options;
  auto cache_dir = std::filesystem::temp_directory_path() / ("jitcache-bench-" + std::to_string(::getpid()));
  options.cache_dir = cache_dir;
  auto runtime = Runtime::open(options);
  if (!runtime) return fail(runtime.error());
  std::printf("%s (compute capability %d.%d)\n", driver->device().name.c_str(), driver->device().major,
              driver->device().minor);
  std::printf("%-24s %10s %10s %10s %9s\n", "kernel (64k tokens)", "time us", "GB/s", "copy GB/s", "fraction");

  constexpr std::int64_t tokens = 65536;
  // Every format as prepare() binds it (b12x-304 per-token), then b12x-368 per-token.
  std::vector<std::pair<RecordFormat, std::optional<LatentScale>>> models;
  for (const RecordFormatRow& row : k_record_formats.rows) models.emplace_back(row.value, std::nullopt);
  models.emplace_back(RecordFormat::b12x_368, LatentScale::per_token);
  for (const auto& [rope, latent_choice] : models) {
    // An identity-only (page-major) format takes a checkpoint without per-layer scales.
    const bool identity_only = !format_allows(rope, LatentScale::dynamic) && !format_allows(rope, LatentScale::per_token);
    const std::filesystem::path model = identity_only ? identity_checkpoint : checkpoint;
    auto prepared = (*runtime)->prepare(ModelSpec{model, rope, "", std::nullopt, std::nullopt, latent_choice});
    if (!prepared) return fail(prepared.error());
    const std::int64_t rb = record_bytes(rope);
    CUdeviceptr rows = 0, slots64 = 0, slots32 = 0, cache = 0, out = 0, copy_dst = 0;
    const std::size_t rows_bytes = tokens * 576 * 2;
    if (api.cuMemAlloc(&rows, rows_bytes) || api.cuMemAlloc(&slots64, tokens * 8) ||
        api.cuMemAlloc(&slots32, tokens * 4) || api.cuMemAlloc(&cache, tokens * rb) ||
        api.cuMemAlloc(&out, rows_bytes) || api.cuMemAlloc(&copy_dst, rows_bytes)) {
      std::fprintf(stderr, "cuMemAlloc failed\n");
      return 1;
    }
    std::vector<std::int64_t> s64(tokens);
    std::vector<std::int32_t> s32(tokens);
    for (std::int64_t t = 0; t < tokens; ++t) s64[t] = s32[t] = static_cast<std::int32_t>(t);
    std::mt19937 rng(7);
    std::shuffle(s32.begin(), s32.end(), rng);  // gathers read in a scattered order
    std::vector<std::uint16_t> host_rows(tokens * 576);
    std::normal_distribution<float> normal;
    for (auto& h : host_rows) h = jc::float_to_bf16(normal(rng));
    api.cuMemcpyHtoD(rows, host_rows.data(), rows_bytes);
    api.cuMemcpyHtoD(slots64, s64.data(), tokens * 8);
    api.cuMemcpyHtoD(slots32, s32.data(), tokens * 4);

    CUevent start, stop;
    api.cuEventCreate(&start, 0);
    api.cuEventCreate(&stop, 0);
    auto time_us = [&](auto&& launch) {
      for (int i = 0; i < 3; ++i) launch();  // warm up
      constexpr int reps = 50;
      api.cuEventRecord(start, nullptr);
      for (int i = 0; i < reps; ++i) launch();
      api.cuEventRecord(stop, nullptr);
      api.cuEventSynchronize(stop);
      float ms = 0;
      api.cuEventElapsedTime(&ms, start, stop);
      return 1000.0 * ms / reps;
    };
    const WriterLaunch w{rows, 576, rows + 1024, 576, slots64, tokens, cache, tokens, 0};
    const GatherLaunch g{cache, tokens, slots32, tokens, out, 576, 0};
    // A format without RoPE reads 512 values per token and gathers 512.
    const double row_bytes = 2.0 * gathered_row_elems(rope);
    for (int layer : {0, 78}) {
      const char* mode = to_string((*prepared)->layer(layer)->latent_scale);
      const double bytes_w = double(tokens) * (row_bytes + 8 + rb);
      const double bytes_g = double(tokens) * (rb + 4 + row_bytes);
      const double tw = time_us([&] { (void)(*prepared)->launch_writer(layer, w, nullptr); });
      const double tg = time_us([&] { (void)(*prepared)->launch_gather(layer, g, nullptr); });
      // A copy moves each byte twice (read + write): copy bytes/2 of the kernel's traffic.
      const double cw = time_us([&] { api.cuMemcpyDtoDAsync(copy_dst, rows, std::size_t(bytes_w / 2), nullptr); });
      const double cg = time_us([&] { api.cuMemcpyDtoDAsync(copy_dst, rows, std::size_t(bytes_g / 2), nullptr); });
      char name[64];
      std::snprintf(name, sizeof name, "writer %s %s", mode, to_string(rope));
      std::printf("%-24s %10.1f %10.1f %10.1f %8.0f%%\n", name, tw, bytes_w / tw / 1e3, bytes_w / cw / 1e3, 100 * cw / tw);
      std::snprintf(name, sizeof name, "gather %s %s", mode, to_string(rope));
      std::printf("%-24s %10.1f %10.1f %10.1f %8.0f%%\n", name, tg, bytes_g / tg / 1e3, bytes_g / cg / 1e3, 100 * cg / tg);
    }
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
    for (CUdeviceptr p : {rows, slots64, slots32, cache, out, copy_dst}) api.cuMemFree(p);
  }
  std::error_code ec;
  std::filesystem::remove_all(cache_dir, ec);
  return 0;
}
