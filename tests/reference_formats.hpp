// An independent reference of every record format jitcache writes (docs/record-formats.md),
// written from the formats' byte maps and the brief's quantization rule, step by step in
// plain float arithmetic with no shortcut of the kernels' (no thresholds, no packed bf16):
//   x = kv / s (s: 1 identity, s_l dynamic, s_t per-token), amax over the block (NaN
//   ignored), sf = E4M3(amax / 6) (flashmla-352: E4M3(max(amax / 6, 2^-9))), q = E2M1(x / sf)
//   (sf == 0: 0); s_t = rn(min(max|kv|, largest bf16) / 2688), 0 for a token of zeros.
// Reader: bf16((q * sf) * s), s read from the record when per-token.
// flashinfer-glm-416's byte map is FlashInfer's reader's (csrc/sparse_mla_sm120/
// glm_nvfp4_binding.cu and include/flashinfer/attention/sparse_mla_sm120/common/
// nvfp4_to_fp8.cuh at flashinfer-ai/flashinfer be75a2b19137e93b29618c5c03a36ef2f30e712c):
// 416-byte rows, codes [0,256), block b's scale byte 256 + b, 64 bf16 RoPE at 288.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference_nvfp4.hpp"

namespace jitcache::reference {

enum class RefFormat { b12x_432, b12x_368, b12x_304, flashmla_352, flashinfer_glm_416 };
enum class RefMode { identity, dynamic, per_token };

inline int ref_bytes(RefFormat f) {
  switch (f) {
    case RefFormat::b12x_432: return 432;
    case RefFormat::b12x_368: return 368;
    case RefFormat::b12x_304: return 304;
    case RefFormat::flashmla_352: return 352;
    case RefFormat::flashinfer_glm_416: return 416;
  }
  return 0;
}

// Where block b's scale byte lives: linear at 256 + b, or vLLM's permuted order at 320.
inline int ref_scale_byte(RefFormat f, int b) {
  return f == RefFormat::flashmla_352 ? 320 + 8 * (b % 4) + b / 4 : 256 + b;
}

inline float ref_token_scale(const std::uint16_t* kv) {
  float amax = 0.0f;
  for (int i = 0; i < k_latent; ++i) {
    const float v = std::fabs(ref_bf16_to_float(kv[i]));
    if (!std::isnan(v) && v > amax) amax = v;
  }
  const float largest_bf16 = ref_bf16_to_float(0x7f7f);
  if (amax > largest_bf16) amax = largest_bf16;
  return amax / 2688.0f;
}

inline std::vector<std::uint8_t> ref_write(RefFormat f, RefMode mode, const std::uint16_t* kv,
                                           const std::uint16_t* pe, float s_l) {
  std::vector<std::uint8_t> rec(static_cast<std::size_t>(ref_bytes(f)), 0);
  const float s = mode == RefMode::identity ? 1.0f : mode == RefMode::dynamic ? s_l : ref_token_scale(kv);
  const bool zero_token = mode == RefMode::per_token && s == 0.0f;
  for (int b = 0; b < 32; ++b) {
    float x[16];
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
      x[i] = ref_bf16_to_float(kv[16 * b + i]);
      if (mode != RefMode::identity && !zero_token) x[i] = x[i] / s;
      if (!std::isnan(x[i]) && std::fabs(x[i]) > amax) amax = std::fabs(x[i]);
    }
    float scale = amax / 6.0f;
    if (f == RefFormat::flashmla_352 && !(scale >= 0x1p-9f)) scale = 0x1p-9f;
    const std::uint8_t sf = zero_token ? 0 : ref_e4m3(scale);
    const float sfv = static_cast<float>(ref_e4m3_value(sf));
    rec[static_cast<std::size_t>(ref_scale_byte(f, b))] = sf;
    for (int i = 0; i < 16; ++i) {
      const std::uint8_t q = sfv == 0.0f ? 0 : ref_e2m1(x[i] / sfv);
      const int e = 16 * b + i;
      rec[static_cast<std::size_t>(e / 2)] |= static_cast<std::uint8_t>(e % 2 ? q << 4 : q);
    }
  }
  switch (f) {
    case RefFormat::b12x_432: std::memcpy(rec.data() + 304, pe, 128); break;
    case RefFormat::b12x_368: {
      float amax = 0.0f;
      for (int i = 0; i < k_rope; ++i) {
        const float v = std::fabs(ref_bf16_to_float(pe[i]));
        if (!std::isnan(v) && v > amax) amax = v;
      }
      const float rope_scale = amax / 448.0f;
      std::memcpy(rec.data() + 288, &rope_scale, 4);
      for (int i = 0; i < k_rope; ++i)
        rec[static_cast<std::size_t>(304 + i)] = rope_scale == 0.0f ? 0 : ref_e4m3(ref_bf16_to_float(pe[i]) / rope_scale);
      break;
    }
    case RefFormat::b12x_304: break;
    case RefFormat::flashmla_352:
      for (int i = 0; i < k_rope; ++i) rec[static_cast<std::size_t>(256 + i)] = ref_e4m3(ref_bf16_to_float(pe[i]));
      break;
    case RefFormat::flashinfer_glm_416: std::memcpy(rec.data() + 288, pe, 128); break;
  }
  if (mode == RefMode::per_token) std::memcpy(rec.data() + 292, &s, 4);
  return rec;
}

// One gathered row: 576 values, 512 for b12x-304.
inline std::vector<std::uint16_t> ref_read(RefFormat f, RefMode mode, const std::uint8_t* rec, float s_l) {
  static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  const bool has_rope = f != RefFormat::b12x_304;
  std::vector<std::uint16_t> out(has_rope ? 576 : 512);
  float s = s_l;
  if (mode == RefMode::per_token) std::memcpy(&s, rec + 292, 4);
  const bool bad = mode == RefMode::per_token && !(s >= 0.0f && std::isfinite(s));
  for (int e = 0; e < k_latent; ++e) {
    const int q = e % 2 ? rec[e / 2] >> 4 : rec[e / 2] & 0xf;
    const float qv = q & 8 ? -e2m1[q & 7] : e2m1[q & 7];
    float y = qv * static_cast<float>(ref_e4m3_value(rec[ref_scale_byte(f, e / 16)]));
    if (mode != RefMode::identity) y = y * s;
    out[static_cast<std::size_t>(e)] = bad ? 0x7fff : ref_float_to_bf16(y);
  }
  switch (f) {
    case RefFormat::b12x_432: std::memcpy(out.data() + k_latent, rec + 304, 128); break;
    case RefFormat::b12x_368: {
      float rope_scale;
      std::memcpy(&rope_scale, rec + 288, 4);
      for (int i = 0; i < k_rope; ++i)
        out[static_cast<std::size_t>(k_latent + i)] =
            ref_float_to_bf16(static_cast<float>(ref_e4m3_value(rec[304 + i])) * rope_scale);
      break;
    }
    case RefFormat::b12x_304: break;
    case RefFormat::flashmla_352:
      for (int i = 0; i < k_rope; ++i)
        out[static_cast<std::size_t>(k_latent + i)] = ref_float_to_bf16(static_cast<float>(ref_e4m3_value(rec[256 + i])));
      break;
    case RefFormat::flashinfer_glm_416: std::memcpy(out.data() + k_latent, rec + 288, 128); break;
  }
  return out;
}

}  // namespace jitcache::reference
