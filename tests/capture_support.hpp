// A calibration capture (nvfp4_ds_mla_capture_v1, docs/scales.md) for tests of the
// library and of the CLI: every field valid, GLM-5.x-shaped, of one run on `tp` ranks; and
// the per-layer maxima such a run sees.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

namespace jitcache::testing {

inline constexpr const char* k_capture_revision = "0123456789abcdef0123456789abcdef01234567";

inline nlohmann::json capture_json(int rank, int tp, const std::vector<double>& max_abs,
                                   std::int64_t tokens = 65536) {
  return nlohmann::json{{"format", "nvfp4_ds_mla_capture_v1"},
                        {"model", "GLM-5.x"},
                        {"model_revision", k_capture_revision},
                        {"dataset", "wikitext-2"},
                        {"context", 2048},
                        {"tp", tp},
                        {"rank", rank},
                        {"tokens", tokens},
                        {"num_layers", static_cast<int>(max_abs.size())},
                        {"latent_dim", 512},
                        {"max_abs", max_abs}};
}

// The per-layer maxima of a run on `tp` ranks, from `seed`: GLM-5.x-shaped (log-uniform in
// [0.02, 5.2]), each rank seeing them within a relative `jitter` (downwards), as replicated
// latents do.
inline std::vector<std::vector<double>> rank_maxima(std::uint64_t seed, int tp, int layers, double jitter) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(std::log(0.02), std::log(5.2));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> base(static_cast<std::size_t>(layers));
  for (double& b : base) b = std::exp(exponent(rng));
  std::vector<std::vector<double>> out(static_cast<std::size_t>(tp), base);
  for (auto& rank : out)
    for (double& v : rank) v *= 1.0 - jitter * unit(rng);
  return out;
}

// Each layer's maximum over the ranks: what a calibration of those maxima must find.
inline std::vector<double> max_over_ranks(const std::vector<std::vector<double>>& values) {
  std::vector<double> out = values.front();
  for (const auto& rank : values)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], rank[i]);
  return out;
}

}  // namespace jitcache::testing
