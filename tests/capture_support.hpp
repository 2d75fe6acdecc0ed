// A calibration capture (nvfp4_ds_mla_capture_v1, docs/scales.md) for tests of the
// library and of the CLI: every field valid, GLM-5.x-shaped, of one run on `tp` ranks.
#pragma once

#include <cstdint>
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

}  // namespace jitcache::testing
