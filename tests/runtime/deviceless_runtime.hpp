// What the C++ runtime tests that need no GPU share: a runtime opened without a device and
// a checkpoint's model on sm_90 with nothing else chosen.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "jitcache/runtime.hpp"

namespace jitcache::testing {

// A runtime on `cache_dir` that never looks for a device (DeviceUse::none).
inline Result<std::unique_ptr<Runtime>> open_deviceless_runtime(const std::filesystem::path& cache_dir) {
  RuntimeOptions options;
  options.cache_dir = cache_dir;
  options.device = DeviceUse::none;
  return Runtime::open(options);
}

// The model of `checkpoint` in `format` on sm_90: no scales override, revision or latent policy.
inline ModelSpec sm_90_model(const std::filesystem::path& checkpoint, RecordFormat format) {
  return ModelSpec{checkpoint, format, "sm_90", std::nullopt, std::nullopt, std::nullopt};
}

}  // namespace jitcache::testing
