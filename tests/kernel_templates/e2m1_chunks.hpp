// How the packed E2M1 encoder's tests feed it: eight consecutive bf16 patterns, rotated so
// that each pattern passes through every position of a chunk.
#pragma once

#include <cstdint>

#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache::testing {

struct RotatedChunk {
  std::uint32_t h[8];  // the bf16 pattern in each position
  jc::Vec16 chunk;     // the same, packed two to a word as the writer loads them
};

// The patterns base..base+7, position i holding base + (i + rotate) % 8.
inline RotatedChunk rotated_chunk(std::uint32_t base, std::uint32_t rotate) {
  RotatedChunk c;
  for (std::uint32_t i = 0; i < 8; ++i) c.h[i] = base + (i + rotate) % 8;
  for (int w = 0; w < 4; ++w) c.chunk.w[w] = c.h[2 * w] | (c.h[2 * w + 1] << 16);
  return c;
}

}  // namespace jitcache::testing
