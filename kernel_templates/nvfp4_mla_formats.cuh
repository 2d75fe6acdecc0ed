// Every NVFP4 MLA KV record format the engines read, as one set of __host__ __device__
// lane bodies over the arithmetic of nvfp4_mla.cuh.
//
// nvfp4_mla.cuh holds the two records jitcache wrote first (b12x 432 and 368 bytes, with
// an identity or a per-layer outer scale) and stays byte for byte as it was: its text is
// hashed into the cache key of every kernel built from it, so caches written before this
// file existed keep hitting. The generator (kernel_templates/generator.cpp) builds those
// four (format, scale) pairs from nvfp4_mla.cuh's own kernel bodies, and every other pair
// from the bodies below, which reuse its conversions, thresholds and dequantization
// unchanged. tests/kernel_templates check that the bodies here, run for the first four
// pairs, write and read exactly what nvfp4_mla.cuh's do.
//
// A format is a row of constants (Layout below; the host's table in
// kernel_templates/variant_dimensions.hpp names each row and static_asserts that it
// agrees with this one), not a branch per engine:
//
//   format        bytes  codes     scales                 RoPE                          [288,304)
//   b12x-432       432   [0,256)   [256,288) linear       [304,432) 64 x bf16           zero
//   b12x-368       368   [0,256)   [256,288) linear       [304,368) 64 x E4M3 / scale   fp32 RoPE scale, s_t*, zero
//   b12x-304       304   [0,256)   [256,288) linear       none                          zero, s_t, zero
//   flashmla-352   352   [0,256)   [320,352) permuted     [256,320) 64 x E4M3, unscaled (no such bytes)
//   flashinfer-glm-416  416  [0,256)  [256,288) linear   [288,416) 64 x bf16           (no such bytes)
//
// (* the per-token scale s_t occupies [292,296) in the per-token mode only.) The
// flashmla-352 scale of block s is byte 320 + 8 * (s & 3) + (s >> 2), and its block scale
// has a floor of 2^-9 (E4M3's smallest subnormal), so it is never 0. flashinfer-glm-416 is
// b12x-432 without its 16 bytes [288,304), the RoPE moved up to 288; the reader's one fp32
// global scale per layer is s_l.
//
// Scaling: identity (no outer scale), dynamic (the layer's s_l, a launch argument: the
// writer stores kv_c / s_l, the reader multiplies by s_l) and per-token (the writer
// computes s_t = rn(min(max|kv_c|, largest bf16) / 2688) for each token, stores it in the
// record and quantizes kv_c / s_t; the reader multiplies by the s_t it reads). A per-token
// kernel takes no outer scale: the launch argument must be exactly 1.0.
//
// The thread mapping, the rounding rules and the argument that the CPU result equals the
// GPU's are nvfp4_mla.cuh's; the only new cross-lane step is the per-token amax, a maximum
// over the warp (exact, so any order gives the host executor's result).
#pragma once

#if defined(__CUDACC_RTC__)
#include "jitcache/nvfp4_mla.cuh"  // the name NVRTC is given it by (embedded_headers.hpp)
#else
#include "kernel_templates/nvfp4_mla.cuh"
#endif

namespace jc {
namespace fmt {

enum class Format { b12x_432 = 0, b12x_368 = 1, b12x_304 = 2, flashmla_352 = 3, flashinfer_glm_416 = 4 };
enum class Scaling { identity = 0, dynamic = 1, per_token = 2 };
// How a record holds the 64 RoPE values: bf16 as given; E4M3 of k_pe / rope_scale with
// the fp32 rope_scale = rn(amax / 448) at [288,292); E4M3 of k_pe itself; or not at all.
enum class Rope { bf16 = 0, fp8_scaled = 1, fp8_unscaled = 2, none = 3 };

// A per-token kernel was launched with an outer scale other than 1.0: it did nothing.
constexpr u32 k_status_per_token_scale_given = 8u;

struct Layout {
  int record_bytes;
  int scales_offset;      // the first scale byte
  bool scales_permuted;   // block s at scales_offset + 8 * (s & 3) + (s >> 2), else + s
  Rope rope;
  int rope_offset;        // the first RoPE byte (-1: none)
  bool has_pad;           // the 16 bytes [288,304): RoPE scale, s_t, zeros
  bool floor_scale;       // block scale e4m3(max(amax / 6, 2^-9)): never 0
  int out_dim;            // a gathered row: 512 latent values, then the RoPE's 64
};

constexpr int k_pad_rope_scale = k_pad_offset;       // 288: fp32, fp8_scaled RoPE only
constexpr int k_pad_token_scale = k_pad_offset + 4;  // 292: fp32 s_t, per-token only
constexpr float k_scale_floor = 0.001953125f;       // 2^-9
constexpr float k_per_token_denominator = 2688.0f;  // 6 * 448
constexpr float k_bf16_max = 3.38953139e38f;        // 0x7F7F, the largest finite bf16

JC_HD constexpr Layout layout(Format f) {
  switch (f) {
    case Format::b12x_432: return Layout{432, k_scales_offset, false, Rope::bf16, k_rope_offset, true, false, k_out_dim};
    case Format::b12x_368: return Layout{368, k_scales_offset, false, Rope::fp8_scaled, k_rope_offset, true, false, k_out_dim};
    case Format::b12x_304: return Layout{304, k_scales_offset, false, Rope::none, -1, true, false, k_latent_dim};
    case Format::flashmla_352: return Layout{352, 320, true, Rope::fp8_unscaled, k_latent_bytes, false, true, k_out_dim};
    case Format::flashinfer_glm_416: return Layout{416, k_scales_offset, false, Rope::bf16, k_pad_offset, false, false, k_out_dim};
  }
  return Layout{0, 0, false, Rope::none, -1, false, false, 0};
}

// The record's byte holding block s's scale.
JC_HD constexpr int scale_position(const Layout& l, int s) {
  return l.scales_offset + (l.scales_permuted ? 8 * (s & 3) + (s >> 2) : s);
}

// The latent arithmetic of a scaling, in nvfp4_mla.cuh's terms: identity has none, the
// two others divide by (write) and multiply by (read) a scale, s_l or s_t.
template <Scaling S>
JC_HD constexpr LatentMode latent_mode() {
  return S == Scaling::identity ? LatentMode::identity : LatentMode::dynamic;
}

template <Scaling S>
JC_HD bool outer_scale_ok(float latent_scale) {
  if constexpr (S == Scaling::per_token) {
    return latent_scale == 1.0f;
  } else {
    return latent_scale_ok<latent_mode<S>()>(latent_scale);
  }
}

template <Scaling S>
JC_HD u32 outer_scale_error_bit() {
  if constexpr (S == Scaling::per_token) {
    return k_status_per_token_scale_given;
  } else {
    return latent_scale_error_bit<latent_mode<S>()>();
  }
}

// s_t from the token's amax over its 512 latent values (NaNs ignored, so +0 when all are
// NaN or zero). An infinity saturates to the largest finite bf16 first, as the E4M3 and
// E2M1 conversions saturate, so s_t is always finite: 0, or in [2^-144, 1.27e35]. The
// division is correctly rounded; s_t is a normal or subnormal fp32, and the dynamic
// arithmetic handles both (e2m1_bounds_scaled's argument covers every s > 0).
JC_HD float per_token_scale(float token_amax) {
  const float a = token_amax > k_bf16_max ? k_bf16_max : token_amax;
  return div_rn(a, k_per_token_denominator);
}

// A block's scale byte and thresholds under scale s (1.0 for identity). Per-token with
// s_t = 0 (a token of zeros): scale byte 0, every code 0, as in nvfp4_mla.cuh's "sf == 0".
// The floored formats (flashmla-352) compute the scale as block_scale does, then raise
// rn(amax / 6) to 2^-9 before encoding: the byte is never 0, so every code is encoded.
template <Scaling S, Format F>
JC_HD BlockScale block_scale_of(float block_amax, float s) {
  constexpr LatentMode LM = latent_mode<S>();
  if constexpr (S == Scaling::per_token) {
    if (s == 0.0f) {
      BlockScale zero;
      zero.sf = 0u;
      JC_UNROLL
      for (int k = 0; k < 7; ++k) zero.th.t[k] = 0u;
      return zero;
    }
  }
  if constexpr (layout(F).floor_scale) {
    float amax = block_amax;
    if constexpr (LM == LatentMode::dynamic) amax = div_rn(amax, s);
    BlockScale b;
    b.sf = e4m3_encode_nonnegative(max_num(div_rn(amax, 6.0f), k_scale_floor));
    b.th = e2m1_thresholds<LM>(static_cast<u8>(b.sf), s);
    return b;
  } else {
    return block_scale<LM>(block_amax, s);
  }
}

// Everything one writer lane reads for one token: nvfp4_mla.cuh's WriterLoads, without
// the RoPE read for a format that stores none (k_pe may then be null).
template <Format F>
JC_HD WriterLoads writer_load(const WriterParams& p, i64 token, int lane) {
  const u16* kv_c = p.kv_c + token * p.kv_c_stride;
  WriterLoads in;
  in.slot = load_input8(p.slot_mapping + token);
  in.latent[0] = load_input16(kv_c + k_chunk_elems * lane);
  in.latent[1] = load_input16(kv_c + k_latent_dim / 2 + k_chunk_elems * lane);
  in.rope = 0u;
  if constexpr (layout(F).rope != Rope::none)
    in.rope = load_input4(p.k_pe + token * p.k_pe_stride + k_rope_elems_per_lane * lane);
  return in;
}

template <Format F>
JC_HD WriterPartials writer_partials(const WriterLoads& in) {
  if constexpr (layout(F).rope == Rope::fp8_scaled) {
    return jc::writer_partials<RopeMode::fp8>(in);
  } else {
    return jc::writer_partials<RopeMode::bf16>(in);  // the latent amaxes only
  }
}

// The dynamic and per-token writers split a block's scale between the two lanes holding
// its chunks, as nvfp4_mla.cuh's dynamic writer does.
template <Scaling S>
JC_HD constexpr bool shares_block_scales() {
  return S != Scaling::identity;
}

// Writer: everything one lane stores for one token. scales[j] is the scale of the block
// chunk j belongs to; rope_amax is amax(|k_pe|) over the token (fp8_scaled RoPE only);
// token_scale is s_t (per-token only).
template <Scaling S, Format F>
JC_HD void writer_lane(const WriterParams& p, int lane, const WriterLoads& in, const BlockScale* scales,
                       float rope_amax, float token_scale) {
  constexpr Layout L = layout(F);
  if (in.slot < 0) return;
  if (in.slot >= p.num_slots) {
    if (lane == 0) report(p.status, k_status_slot_out_of_range);
    return;
  }
  u8* __restrict__ record = p.cache + in.slot * L.record_bytes;
  store_as<u32>(record + 4 * lane, quantize_chunk(in.latent[0], scales[0]));
  store_as<u32>(record + k_latent_bytes / 2 + 4 * lane, quantize_chunk(in.latent[1], scales[1]));
  record[scale_position(L, scale_byte_of_lane(lane))] = static_cast<u8>(lane % 2 == 0 ? scales[0].sf : scales[1].sf);

  float rope_scale = 0.0f;
  if constexpr (L.rope == Rope::bf16) {
    store_as<u32>(record + L.rope_offset + 4 * lane, in.rope);
  } else if constexpr (L.rope == Rope::fp8_scaled) {
    rope_scale = div_rn(rope_amax, 448.0f);
    u32 codes = 0u;
    if (rope_scale != 0.0f) {
      codes = e4m3x2_encode(div_rn(bits_float(in.rope << 16), rope_scale),
                            div_rn(bits_float(in.rope & 0xffff0000u), rope_scale));
    }
    store_as<u16>(record + L.rope_offset + 2 * lane, static_cast<u16>(codes));
  } else if constexpr (L.rope == Rope::fp8_unscaled) {
    const u32 codes = e4m3x2_encode(bits_float(in.rope << 16), bits_float(in.rope & 0xffff0000u));
    store_as<u16>(record + L.rope_offset + 2 * lane, static_cast<u16>(codes));
  }
  if constexpr (L.has_pad) {
    const u32 token_word = S == Scaling::per_token ? float_bits(token_scale) : 0u;
    if (lane == 0) store16(record + k_pad_offset, Vec16{{float_bits(rope_scale), token_word, 0u, 0u}});
  } else {
    (void)token_scale;
  }
}

// Gather: everything one lane stores for one output row of L.out_dim values (the latent,
// then the RoPE unless the format has none). A per-token record's s_t is read from the
// record; one that is negative, infinite or NaN (never written by a writer) makes the row's
// latent NaN (0x7FFF), so no hardware NaN payload or overflow can show.
template <Scaling S, Format F>
JC_HD void gather_lane(const GatherParams& p, i64 row, int lane, float latent_scale) {
  constexpr Layout L = layout(F);
  constexpr LatentMode LM = latent_mode<S>();
  u16* __restrict__ dst = p.out + row * p.out_stride;
  const i32 slot = p.slots[row];
  const bool out_of_range = slot >= 0 && slot >= p.num_slots;
  if (out_of_range && lane == 0) report(p.status, k_status_slot_out_of_range);
  u16* latent_dst = dst + k_chunk_elems * lane;
  u16* rope_dst = dst + k_latent_dim + k_rope_elems_per_lane * lane;
  if (slot < 0 || out_of_range) {
    const Vec16 zero{{0u, 0u, 0u, 0u}};
    store16(latent_dst, zero);
    store16(latent_dst + k_latent_dim / 2, zero);
    if constexpr (L.rope != Rope::none) store_as<u32>(rope_dst, 0u);
    return;
  }
  const u8* __restrict__ record = p.cache + static_cast<i64>(slot) * L.record_bytes;
  const u32 q0 = load_as<u32>(record + 4 * lane);
  const u32 q1 = load_as<u32>(record + k_latent_bytes / 2 + 4 * lane);
  const u8 sf0 = record[scale_position(L, lane / 2)];
  const u8 sf1 = record[scale_position(L, k_num_blocks / 2 + lane / 2)];
  u32 rope_in = 0u;
  float rope_scale = 0.0f;
  if constexpr (L.rope == Rope::bf16) {
    rope_in = load_as<u32>(record + L.rope_offset + 4 * lane);
  } else if constexpr (L.rope == Rope::fp8_scaled) {
    rope_in = load_as<u16>(record + L.rope_offset + 2 * lane);
    rope_scale = bits_float(load_as<u32>(record + k_pad_rope_scale));
  } else if constexpr (L.rope == Rope::fp8_unscaled) {
    rope_in = load_as<u16>(record + L.rope_offset + 2 * lane);
  }
  float s = latent_scale;
  bool bad_scale = false;
  if constexpr (S == Scaling::per_token) {
    s = bits_float(load_as<u32>(record + k_pad_token_scale));
    bad_scale = !(s >= 0.0f && s <= 3.402823466e38f);
    s = bad_scale ? 0.0f : s;
  }

  Vec16 out[2];
  dequantize8<LM>(q0, sf0, s, &out[0].w[0]);
  dequantize8<LM>(q1, sf1, s, &out[1].w[0]);
  if constexpr (S == Scaling::per_token) {
    JC_UNROLL
    for (int k = 0; k < 4; ++k) {
      out[0].w[k] = bad_scale ? 0x7fff7fffu : out[0].w[k];
      out[1].w[k] = bad_scale ? 0x7fff7fffu : out[1].w[k];
    }
  }
  store16(latent_dst, out[0]);
  store16(latent_dst + k_latent_dim / 2, out[1]);
  if constexpr (L.rope == Rope::bf16) {
    store_as<u32>(rope_dst, rope_in);
  } else if constexpr (L.rope == Rope::fp8_scaled || L.rope == Rope::fp8_unscaled) {
    float value[2];
    e4m3x2_values(rope_in, &value[0], &value[1]);
    if constexpr (L.rope == Rope::fp8_scaled) {
      value[0] = mul_rn(value[0], rope_scale);
      value[1] = mul_rn(value[1], rope_scale);
    }
    store_as<u32>(rope_dst, bf16x2_rn(value[0], value[1]));  // unscaled: exact; NaN codes -> 0x7FFF
  }
}

// ---------------------------------------------------------------------------------------
// GPU kernel bodies: one warp per token (writer) or output row (gather), as nvfp4_mla.cuh.

#if defined(__CUDACC__)
template <Scaling S, Format F>
__device__ __forceinline__ void writer_kernel(const WriterParams& p, float latent_scale) {
  if (!outer_scale_ok<S>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, outer_scale_error_bit<S>());
    return;
  }
  const i64 token = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  const int lane = static_cast<int>(threadIdx.x % k_warp);
  if (token >= p.num_tokens) return;  // uniform across the warp
  const WriterLoads in = writer_load<F>(p, token, lane);
  const WriterPartials part = writer_partials<F>(in);
  const float block_amax[2] = {max_num(part.latent_amax[0], __shfl_xor_sync(0xffffffffu, part.latent_amax[0], 1)),
                               max_num(part.latent_amax[1], __shfl_xor_sync(0xffffffffu, part.latent_amax[1], 1))};
  float rope_amax = 0.0f;
  if constexpr (layout(F).rope == Rope::fp8_scaled)
    rope_amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(part.rope_amax)));
  // Per-token: the token's amax over the warp, reduced as unsigned integers (never-NaN,
  // non-negative floats order as their bits do).
  float s = latent_scale;
  float token_scale = 0.0f;
  if constexpr (S == Scaling::per_token) {
    const float lane_amax = max_num(block_amax[0], block_amax[1]);
    token_scale = per_token_scale(__uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(lane_amax))));
    s = token_scale;
  }
  BlockScale scales[2];
  if constexpr (shares_block_scales<S>()) {
    const int own = lane % 2;
    const BlockScale mine = block_scale_of<S, F>(own == 0 ? block_amax[0] : block_amax[1], s);
    BlockScale theirs;
    theirs.sf = __shfl_xor_sync(0xffffffffu, mine.sf, 1);
    JC_UNROLL
    for (int k = 0; k < 7; ++k) theirs.th.t[k] = __shfl_xor_sync(0xffffffffu, mine.th.t[k], 1);
    scales[0] = own == 0 ? mine : theirs;
    scales[1] = own == 0 ? theirs : mine;
  } else {
    scales[0] = block_scale_of<S, F>(block_amax[0], s);
    scales[1] = block_scale_of<S, F>(block_amax[1], s);
  }
  writer_lane<S, F>(p, lane, in, scales, rope_amax, token_scale);
}

template <Scaling S, Format F>
__device__ __forceinline__ void gather_kernel(const GatherParams& p, float latent_scale) {
  if (!outer_scale_ok<S>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, outer_scale_error_bit<S>());
    return;
  }
  const i64 row = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  if (row >= p.num_rows) return;
  gather_lane<S, F>(p, row, static_cast<int>(threadIdx.x % k_warp), latent_scale);
}
#endif

}  // namespace fmt
}  // namespace jc
