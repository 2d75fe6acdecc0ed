// Measures rcp.approx.ftz.f32 on this GPU for every fp32 significand of [1, 2) and writes
// the 2^23 results as the table runtime/kv/rcp_approx.hpp reads (its header has the file
// format and the rule that extends the table to every input). It also runs the instruction
// on the special inputs (zeros, subnormals, the edges of the normal range, infinities,
// NaNs) and holds each to the rule; exit 1 when one differs.
//
//   rcp_table --out FILE [--json REPORT]
//
// Without a GPU it prints "skipped: no GPU: <why>", writes {"status": "skipped"} to the
// report and exits 0.
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/rcp_table_kernel.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/device/cuda_driver.hpp"
#include "runtime/kv/rcp_approx.hpp"
#include "support/atomic_file.hpp"
#include "support/sha256.hpp"

using namespace jitcache;

namespace {

std::string hex(std::uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", bits);
  return text;
}

bool is_nan_bits(std::uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0; }

// The inputs where the rule's cases meet, both signs.
std::vector<std::uint32_t> special_inputs() {
  const std::uint32_t positive[] = {
      0x00000000u,  // zero
      0x00000001u,  // the smallest subnormal
      0x007fffffu,  // the largest subnormal
      0x00800000u,  // the smallest normal, 2^-126
      0x00c00000u,  // 1.5 * 2^-126
      0x3f800000u,  // 1
      0x3f800001u,  // 1 + 2^-23
      0x3fc00000u,  // 1.5
      0x3fffffffu,  // 2 - 2^-23
      0x40400000u,  // 3
      0x7e800000u,  // 2^126: the result 2^-126 is the smallest normal
      0x7e800001u,  // just above 2^126: the result is below it, flushed
      0x7effffffu,  // just below 2^127
      0x7f000000u,  // 2^127: the result 2^-127 is subnormal, flushed
      0x7f7fffffu,  // the largest finite
      0x7f800000u,  // infinity
      0x7f800001u,  // a signalling NaN
      0x7fc00000u,  // the quiet NaN
      0x7fffffffu,  // the canonical NaN of NVIDIA GPUs
  };
  std::vector<std::uint32_t> out;
  for (std::uint32_t bits : positive) {
    out.push_back(bits);
    out.push_back(bits | 0x80000000u);
  }
  return out;
}

struct Args {
  std::string out;
  std::string json;
};

int usage(const char* message) {
  std::fprintf(stderr, "rcp_table: %s\nusage: rcp_table --out FILE [--json REPORT]\n", message);
  return 2;
}

int write_report(const Args& args, const nlohmann::json& report) {
  if (args.json.empty()) return 0;
  if (auto written = write_text_atomic(args.json, report.dump(2) + "\n"); !written) {
    std::fprintf(stderr, "rcp_table: %s\n", written.error().to_string().c_str());
    return 1;
  }
  return 0;
}

int fail(const Args& args, const std::string& message) {
  std::fprintf(stderr, "rcp_table: %s\n", message.c_str());
  (void)write_report(args, {{"status", "failed"}, {"error", message}});
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--out" || arg == "--json") && i + 1 < argc) {
      (arg == "--out" ? args.out : args.json) = argv[++i];
    } else {
      return usage(("unknown argument '" + arg + "'").c_str());
    }
  }
  if (args.out.empty()) return usage("--out FILE is required");

  auto driver_or = CudaDriver::load();
  if (!driver_or) {
    std::printf("skipped: no GPU: %s\n", driver_or.error().message.c_str());
    return write_report(args, {{"status", "skipped"}, {"reason", driver_or.error().message}});
  }
  const CudaDriver& driver = **driver_or;
  const auto& api = driver.api();
  const DeviceInfo& info = driver.device();
  const std::vector<std::string> targets = targets_for_device(info.major, info.minor);
  if (targets.empty())
    return fail(args, "no target of this build runs on " + info.name + " (compute capability " +
                          std::to_string(info.major) + "." + std::to_string(info.minor) + ")");
  const auto started = std::chrono::steady_clock::now();
  auto artifact = compile_rcp_kernel(targets.front());
  if (!artifact) return fail(args, artifact.error().to_string());
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  if (auto s = driver.check(api.cuModuleLoadDataEx(&module, artifact->cubin.data(), 0, nullptr, nullptr),
                            "cuModuleLoadDataEx");
      !s)
    return fail(args, s.error().to_string());
  if (auto s = driver.check(api.cuModuleGetFunction(&function, module, k_rcp_kernel_entry), "cuModuleGetFunction"); !s)
    return fail(args, s.error().to_string());

  // Runs the kernel on the inputs [first, first + count) into `out` (count words).
  CUdeviceptr device_out = 0;
  if (auto s = driver.check(api.cuMemAlloc(&device_out, k_rcp_table_entries * 4), "cuMemAlloc"); !s)
    return fail(args, s.error().to_string());
  auto run = [&](std::uint32_t first, std::uint64_t count, std::uint32_t* out) -> Status {
    void* params[] = {&first, &count, &device_out};
    const unsigned blocks = static_cast<unsigned>(std::min<std::uint64_t>((count + 255) / 256, 65535));
    JC_TRY(driver.check(api.cuLaunchKernel(function, blocks, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr),
                        "cuLaunchKernel"));
    JC_TRY(driver.check(api.cuCtxSynchronize(), "cuCtxSynchronize"));
    return driver.check(api.cuMemcpyDtoH(out, device_out, count * 4), "cuMemcpyDtoH");
  };

  std::vector<std::uint32_t> words(k_rcp_table_entries);
  if (auto s = run(k_rcp_table_first_input, words.size(), words.data()); !s) return fail(args, s.error().to_string());
  auto table = RcpApproxTable::from_words(words, "rcp.approx.ftz.f32 on " + info.name);
  if (!table) return fail(args, table.error().to_string());

  nlohmann::json cases = nlohmann::json::array();
  int mismatches = 0;
  for (std::uint32_t input : special_inputs()) {
    std::uint32_t gpu = 0;
    if (auto s = run(input, 1, &gpu); !s) return fail(args, s.error().to_string());
    const std::uint32_t rule = table->rcp_bits(input);
    // A NaN's payload is recorded, not required: the rule promises a NaN.
    const bool ok = is_nan_bits(rule) ? is_nan_bits(gpu) : gpu == rule;
    if (!ok) ++mismatches;
    cases.push_back({{"input", hex(input)}, {"gpu", hex(gpu)}, {"rule", hex(rule)}, {"ok", ok}});
  }
  api.cuMemFree(device_out);
  api.cuModuleUnload(module);

  const std::vector<std::uint8_t> bytes = rcp_table_bytes(words);
  const std::span<const std::uint8_t> parts[] = {bytes};
  if (auto s = write_file_atomic(args.out, parts); !s) return fail(args, s.error().to_string());
  const std::string digest =
      sha256_hex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("rcp.approx.ftz.f32 on %s (%s): %zu entries -> %s\n  sha256 %s\n", info.name.c_str(),
              targets.front().c_str(), words.size(), args.out.c_str(), digest.c_str());
  std::printf("  special inputs: %zu, %d differ from the rule\n", cases.size(), mismatches);
  for (const auto& c : cases)
    if (!c["ok"].get<bool>())
      std::printf("  input %s: gpu %s, rule %s\n", c["input"].get<std::string>().c_str(),
                  c["gpu"].get<std::string>().c_str(), c["rule"].get<std::string>().c_str());
  const int written = write_report(args, {{"status", mismatches == 0 ? "ok" : "failed"},
                                          {"device", info.name},
                                          {"target", targets.front()},
                                          {"file", args.out},
                                          {"bytes", bytes.size()},
                                          {"entries", words.size()},
                                          {"sha256", digest},
                                          {"special_cases", cases},
                                          {"special_mismatches", mismatches},
                                          {"seconds", seconds}});
  return mismatches == 0 ? written : 1;
}
