// Helpers shared by the scale tests: a valid GLM-5.x-shaped config and v1 scales object
// to mutate and file writing (the environment guard and log capture are test_support's).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace jitcache::testing {

namespace fs = std::filesystem;
using nlohmann::json;

inline json glm_config(int layers = 78, int draft_layers = 1) {
  return json{{"architectures", {"GlmMoeDsaForCausalLM"}},
              {"model_type", "glm_moe_dsa"},
              {"num_hidden_layers", layers},
              {"num_nextn_predict_layers", draft_layers},
              {"kv_lora_rank", 512},
              {"qk_rope_head_dim", 64},
              {"qk_nope_head_dim", 192},
              {"v_head_dim", 256},
              {"num_attention_heads", 64},
              {"index_topk", 2048},
              {"hidden_size", 6144}};
}

// Calibrated-looking values: max_abs log-uniform in [0.02, 5.2], rising with depth.
inline json valid_scales(std::uint64_t seed, int layers = 78) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(std::log(0.02), std::log(5.2));
  std::vector<double> max_abs(static_cast<std::size_t>(layers));
  for (double& m : max_abs) m = std::exp(exponent(rng));
  std::sort(max_abs.begin(), max_abs.end());
  json scales = json::array();
  for (double m : max_abs) scales.push_back(m / 2688.0);
  return json{{"format", "nvfp4_ds_mla_outer_scale_v1"},
              {"num_layers", layers},
              {"latent_dim", 512},
              {"denominator", 2688.0},
              {"scales", scales},
              {"max_abs", max_abs},
              {"model_revision", "0123456789abcdef0123456789abcdef01234567"},
              {"provenance",
               {{"model", "GLM-5.x"},
                {"dataset", "wikitext-2"},
                {"context", 2048},
                {"tp", 4},
                {"notes", "test values"}}}};
}

inline void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace jitcache::testing

// Substring check that prints the whole text on failure.
#define EXPECT_CONTAINS(text, needle)                                                  \
  EXPECT_NE(std::string(text).find(needle), std::string::npos)                         \
      << "expected to find: " << (needle) << "\n              in: " << (text)
