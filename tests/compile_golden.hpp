// The golden sources of the compile tests (tests/runtime/compile/golden: a CUDA C++
// kernel, its NVVM IR and PTX), which the runtime and CLI tests of `compile` read.
#pragma once

#include <filesystem>

#include "test_support.hpp"

namespace jitcache::testing {

inline const std::filesystem::path k_golden = source_dir() / "tests" / "runtime" / "compile" / "golden";

}  // namespace jitcache::testing
