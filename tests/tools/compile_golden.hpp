// The golden sources of the compile tests (tests/runtime/compile/golden: a CUDA C++
// kernel, its NVVM IR and PTX), which the CLI tests of `compile` hand to the binary.
#pragma once

#include <filesystem>

#include "test_support.hpp"

namespace jitcache::testing {

inline const std::filesystem::path k_golden = source_dir() / "tests" / "runtime" / "compile" / "golden";

}  // namespace jitcache::testing
