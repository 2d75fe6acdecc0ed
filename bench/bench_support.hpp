// Helpers shared by the bench programs: order statistics of samples, cache facts of the
// shape the kernel cache stores (so that a benchmark's keys and index rows are as large as
// real ones) without generating or compiling anything, and the compile tests' golden
// kernels.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cache/facts.hpp"

namespace jitcache::bench {

// A golden file of the compile tests (tests/runtime/compile/golden), so that a benchmark's
// figures are for exactly what the tests check; `source_dir` is the repository root.
// Exits when the file cannot be read: a figure of nothing would be meaningless.
inline std::string golden_kernel(const std::string& source_dir, const char* name) {
  const std::string path = source_dir + "/tests/runtime/compile/golden/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// The sample below which a fraction `p` of the samples lie (p in [0, 1]).
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Facts of a kernel-cache entry for `target` and `rope`, one distinct key per `id`.
inline cache::Facts sample_kernel_facts(const std::string& id, const std::string& target = "sm_120a",
                                        const std::string& rope = "fp8") {
  return cache::Facts{{"key_schema", "1"},
                      {"kernel_family", "nvfp4_mla"},
                      {"kernel", "kv_write"},
                      {"generator_version", "3"},
                      {"source_hash", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},
                      {"headers_hash", "00112233445566778899aabbccddeeff"},
                      {"latent_scale", "dynamic"},
                      {"rope", rope},
                      {"record_bytes", rope == "fp8" ? "368" : "432"},
                      {"latent_dim", "512"},
                      {"block_size", "64"},
                      {"target", target},
                      {"compiler", "nvrtc"},
                      {"nvrtc_version", "13.0"},
                      {"nvrtc_fingerprint", "a1b2c3d4e5f60718293a4b5c6d7e8f90"},
                      {"options", "--fmad=false -default-device -std=c++17"},
                      {"id", id}};
}

}  // namespace jitcache::bench
