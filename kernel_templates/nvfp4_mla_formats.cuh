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
// The page-major records (Placement::paged) split a record between its page's data part
// and its footer: a page of 64 slots is 64 data parts, then 64 footers (record_byte()).
// Their writer reads one bf16 row of 512 values per token:
//
//   format               bytes  input row         data part                  footer
//   flashinfer-dsv4-384   384   448 NoPE, 64 RoPE  [0,224) codes, 64 bf16 RoPE  28 scales, 4 zero
//   flashmla-v41-288      288   512 dims           [0,256) codes               32 scales (floor 2^-9,
//                                                                               NaN-poisoned)
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

// The page-major formats (flashinfer_dsv4_384, flashmla_v41_288) follow the per-slot ones.
enum class Format {
  b12x_432 = 0,
  b12x_368 = 1,
  b12x_304 = 2,
  flashmla_352 = 3,
  flashinfer_glm_416 = 4,
  flashinfer_dsv4_384 = 5,
  flashmla_v41_288 = 6,
};
enum class Scaling { identity = 0, dynamic = 1, per_token = 2 };
// How a record holds the 64 RoPE values: bf16 as given; E4M3 of k_pe / rope_scale with
// the fp32 rope_scale = rn(amax / 448) at [288,292); E4M3 of k_pe itself; not at all; or,
// page-major, the bf16 bits of the input row's values after the quantized ones (no k_pe).
enum class Rope { bf16 = 0, fp8_scaled = 1, fp8_unscaled = 2, none = 3, bf16_in_row = 4 };
// Where a slot's record lies. per_slot: slot * record_bytes, bytes [0, record_bytes).
// paged: pages of page_size slots; a page holds every slot's data part ([0, data_bytes) of
// the record) one after another, then every slot's footer ([data_bytes, record_bytes)).
enum class Placement { per_slot = 0, paged = 1 };
// How a block's scale byte and codes are made (the amax ignores NaNs everywhere):
//   nearest          sf = e4m3(rn(amax / 6)); codes E2M1(rn(x / sf)); sf 0 zeroes the codes
//   floored          sf = e4m3(max(rn(amax / 6), 2^-9)), never 0; codes as nearest
//   floored_poisoned floored, and a block holding a NaN or an infinity gets sf 0x7F (E4M3
//                    NaN) and codes 0 (FlashMLA's V41_FP4 rule)
//   fast_reciprocal  FlashInfer's -use_fast_math writer: sf = e4m3(rn(amax * k_sixth)), the
//                    multiply ptxas makes of amax / 6.f; codes E2M1(rn(x * r)) with r = 0
//                    for sf 0, else rn(1 / sf) where FlashInfer's MUFU.RCP approximates it
enum class Quant { nearest = 0, floored = 1, floored_poisoned = 2, fast_reciprocal = 3 };

// A per-token kernel was launched with an outer scale other than 1.0: it did nothing.
constexpr u32 k_status_per_token_scale_given = 8u;

struct Layout {
  int record_bytes;
  int scales_offset;      // the first scale byte
  bool scales_permuted;   // block s at scales_offset + 8 * (s & 3) + (s >> 2), else + s
  Rope rope;
  int rope_offset;        // the first RoPE byte (-1: none)
  bool has_pad;           // the 16 bytes [288,304): RoPE scale, s_t, zeros
  Quant quant;
  int out_dim;            // a gathered row: 512 latent values, then the RoPE's 64 (if any)
  Placement placement;
  int page_size;          // slots per page; 1 for per_slot
  int data_bytes;         // the record's bytes in its page's data part; the rest in the footer
  int quant_dim;          // the input row's values that are quantized; paged: the rest is RoPE
};

constexpr int k_pad_rope_scale = k_pad_offset;       // 288: fp32, fp8_scaled RoPE only
constexpr int k_pad_token_scale = k_pad_offset + 4;  // 292: fp32 s_t, per-token only
constexpr float k_scale_floor = 0.001953125f;       // 2^-9
constexpr float k_per_token_denominator = 2688.0f;  // 6 * 448
constexpr float k_bf16_max = 3.38953139e38f;        // 0x7F7F, the largest finite bf16
// 0x3E2AAAAB: the float nearest 1/6, by which ptxas multiplies for amax / 6.f under
// -use_fast_math (FMUL.FTZ R, R, 0.16666667163372039795 for sm_120a, CUDA 13.0).
constexpr float k_sixth = 0.16666667163372039795f;
constexpr int k_paged_page_size = 64;  // vLLM's block size for both page-major engines
constexpr u8 k_e4m3_nan = 0x7f;

JC_HD constexpr Layout layout(Format f) {
  switch (f) {
    case Format::b12x_432:
      return Layout{432, k_scales_offset, false, Rope::bf16, k_rope_offset, true, Quant::nearest, k_out_dim,
                    Placement::per_slot, 1, 432, k_latent_dim};
    case Format::b12x_368:
      return Layout{368, k_scales_offset, false, Rope::fp8_scaled, k_rope_offset, true, Quant::nearest, k_out_dim,
                    Placement::per_slot, 1, 368, k_latent_dim};
    case Format::b12x_304:
      return Layout{304, k_scales_offset, false, Rope::none, -1, true, Quant::nearest, k_latent_dim,
                    Placement::per_slot, 1, 304, k_latent_dim};
    case Format::flashmla_352:
      return Layout{352, 320, true, Rope::fp8_unscaled, k_latent_bytes, false, Quant::floored, k_out_dim,
                    Placement::per_slot, 1, 352, k_latent_dim};
    case Format::flashinfer_glm_416:
      return Layout{416, k_scales_offset, false, Rope::bf16, k_pad_offset, false, Quant::nearest, k_out_dim,
                    Placement::per_slot, 1, 416, k_latent_dim};
    // FlashInfer 0.7.2.post1, model/dsv4_nvfp4_layout.cuh: an input row of 448 NoPE + 64
    // RoPE bf16; data 224 code bytes + 128 RoPE bytes, footer 28 scales + 4 zero bytes.
    case Format::flashinfer_dsv4_384:
      return Layout{384, 352, false, Rope::bf16_in_row, 224, false, Quant::fast_reciprocal, k_latent_dim,
                    Placement::paged, k_paged_page_size, 352, 448};
    // FlashInfer 0.7.2.post1, model/dsv41_layout.cuh (Dsv41Fp4Layout): 512 dims, data 256
    // code bytes, footer 32 scales.
    case Format::flashmla_v41_288:
      return Layout{288, 256, false, Rope::none, -1, false, Quant::floored_poisoned, k_latent_dim,
                    Placement::paged, k_paged_page_size, 256, k_latent_dim};
  }
  return Layout{0, 0, false, Rope::none, -1, false, Quant::nearest, 0, Placement::per_slot, 1, 0, 0};
}

// Whether the writer reads k_pe (a separate RoPE input).
JC_HD constexpr bool reads_k_pe(const Layout& l) {
  return l.rope == Rope::bf16 || l.rope == Rope::fp8_scaled || l.rope == Rope::fp8_unscaled;
}

// The cache byte holding byte `offset` of slot `slot`'s record: slot * record_bytes +
// offset for a per-slot format; in a page, the data part or the footer.
JC_HD constexpr i64 record_byte(const Layout& l, i64 slot, int offset) {
  const i64 page = slot / l.page_size;
  const i64 entry = slot - page * l.page_size;
  const i64 page_base = page * l.page_size * l.record_bytes;
  return offset < l.data_bytes
             ? page_base + entry * l.data_bytes + offset
             : page_base + static_cast<i64>(l.page_size) * l.data_bytes + entry * (l.record_bytes - l.data_bytes) +
                   (offset - l.data_bytes);
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
  if constexpr (layout(F).quant == Quant::floored) {
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
  if constexpr (reads_k_pe(layout(F)))
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
// Page-major formats (Placement::paged). The writer's input is one bf16 row of 512 values
// per token, read through kv_c (k_pe is not read): quant_dim values to quantize, then the
// RoPE kept as bf16 (flashinfer-dsv4-384: 448 + 64; flashmla-v41-288: 512 + 0). The thread
// mapping is nvfp4_mla.cuh's: lane l holds chunks l and l + 32 of 8 values, a block of 16
// is chunks 2b and 2b + 1 (lanes l and l ^ 1), and a chunk at or past quant_dim is RoPE.
// A chunk's 8 codes are at data byte 4c, block b's scale at scales_offset + b (the
// footer), RoPE chunk c at rope_offset + 16 * (c - quant_dim / 8). Only identity: neither
// engine's reader takes a per-layer KV scale (docs/record-formats.md).
//
// Duplicate slots: the lowest input row that maps to a slot writes it and later ones write
// nothing, as FlashInfer's writers do (dsv4_nvfp4_cache_ops.cu, dsv41_fp4_cache_ops.cu);
// the GPU warp scans the earlier rows' slots, the host executor remembers them.

struct PagedScale {
  u32 sf;             // the scale byte
  float inverse;      // fast_reciprocal: 0 for sf 0, else rn(1 / value(sf))
  E2M1Thresholds th;  // floored_poisoned: the identity thresholds of sf (unused when poisoned)
};

// amax(|x|) of a quantized chunk, NaNs ignored; floored_poisoned: +inf when any value is
// NaN or infinite, so that the block's amax (the max with the partner chunk's) is +inf
// exactly when the block is poisoned (a finite bf16 is at most 0x7F7F < inf).
template <Format F>
JC_HD float paged_chunk_amax(const Vec16& x) {
  const float amax = chunk_amax(x);
  if constexpr (layout(F).quant == Quant::floored_poisoned) {
    bool non_finite = false;
    JC_UNROLL
    for (int k = 0; k < 4; ++k) {
      const u32 e = x.w[k] & 0x7f807f80u;
      non_finite = non_finite || (e & 0xffffu) == 0x7f80u || (e >> 16) == 0x7f80u;
    }
    return non_finite ? bits_float(0x7f800000u) : amax;
  } else {
    return amax;
  }
}

// A block's scale from its amax.
//   floored_poisoned: FlashInfer's e4m3(min(max(__fdiv_rn(amax, 6), 2^-9), 448)): the
//     satfinite conversion already saturates above 448. Its -use_fast_math flushes
//     subnormal amaxes and quotients to 0, which the floor raises to 2^-9 as it raises ours.
//   fast_reciprocal: e4m3(rn(amax * k_sixth)). FMUL.FTZ flushes a subnormal product to 0
//     where mul_rn keeps it; both encode to 0 (far below 2^-10), as does a subnormal amax
//     that FMNMX.FTZ flushed. r = rn(1 / sf): exact for the powers of two; for the other
//     seven significands MUFU.RCP may differ from it by an ulp (docs/record-formats.md).
template <Format F>
JC_HD PagedScale paged_scale(float block_amax) {
  PagedScale b;
  b.inverse = 0.0f;
  if constexpr (layout(F).quant == Quant::floored_poisoned) {
    const bool poisoned = block_amax == bits_float(0x7f800000u);
    b.sf = poisoned ? k_e4m3_nan : e4m3_encode_nonnegative(max_num(div_rn(block_amax, 6.0f), k_scale_floor));
    b.th = e2m1_thresholds<LatentMode::identity>(static_cast<u8>(poisoned ? 1u : b.sf), 1.0f);
  } else {
    static_assert(layout(F).quant == Quant::fast_reciprocal, "a paged format's scale rule");
    b.sf = e4m3_encode_nonnegative(mul_rn(block_amax, k_sixth));
    b.inverse = b.sf == 0u ? 0.0f : div_rn(1.0f, e4m3_value(static_cast<u8>(b.sf)));
    JC_UNROLL
    for (int k = 0; k < 7; ++k) b.th.t[k] = 0u;
  }
  return b;
}

// A quantized chunk's 8 codes, code i in bits 4i..4i+3.
//   floored_poisoned: E2M1(rn(x / sf)) (FlashInfer's __fdiv_rn and cvt.rn.satfinite.e2m1x2)
//     by nvfp4_mla.cuh's exact thresholds (sf >= 2^-9, so never 0); 0 when poisoned.
//     A subnormal x that -use_fast_math flushes to a signed zero codes as its sign either way.
//   fast_reciprocal: E2M1(rn(x * r)) per element, in software on both sides (the
//     conversion rounds to nearest even, saturates to 6, keeps the sign of a zero result and
//     turns NaN into +6, 0x7, as cuda_fp4.h does); with r = 0 a NaN still gives 0x7 and
//     every other value its signed zero.
template <Format F>
JC_HD u32 paged_codes(const Vec16& x, const PagedScale& b) {
  if constexpr (layout(F).quant == Quant::floored_poisoned) {
    const u32 codes = e2m1_encode8(x, b.th);
    return b.sf == k_e4m3_nan ? 0u : codes;
  } else {
    u32 codes = 0u;
    JC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const u16 h = static_cast<u16>(x.w[i / 2] >> (16 * (i % 2)));
      codes |= static_cast<u32>(float_to_e2m1_satfinite(mul_rn(bf16_to_float(h), b.inverse))) << (4 * i);
    }
    return codes;
  }
}

// Writer: everything one lane stores for one token that is its slot's first row.
template <Format F>
JC_HD void paged_writer_lane(const WriterParams& p, int lane, const WriterLoads& in, const PagedScale* scales) {
  constexpr Layout L = layout(F);
  if (in.slot < 0) return;
  if (in.slot >= p.num_slots) {
    if (lane == 0) report(p.status, k_status_slot_out_of_range);
    return;
  }
  u8* __restrict__ cache = p.cache;
  JC_UNROLL
  for (int j = 0; j < 2; ++j) {
    const int c = lane + k_warp * j;
    if (k_chunk_elems * c < L.quant_dim) {
      store_as<u32>(cache + record_byte(L, in.slot, 4 * c), paged_codes<F>(in.latent[j], scales[j]));
    } else {
      store16(cache + record_byte(L, in.slot, L.rope_offset + 16 * (c - L.quant_dim / k_chunk_elems)), in.latent[j]);
    }
  }
  const int block = scale_byte_of_lane(lane);
  if (block * k_block_elems < L.quant_dim)
    cache[record_byte(L, in.slot, L.scales_offset + block)] = static_cast<u8>(lane % 2 == 0 ? scales[0].sf : scales[1].sf);
  constexpr int scales_end = L.scales_offset + L.quant_dim / k_block_elems;
  if constexpr (scales_end < L.record_bytes) {
    static_assert(L.record_bytes - scales_end == 4, "one zero word after the scales");
    if (lane == 0) store_as<u32>(cache + record_byte(L, in.slot, scales_end), 0u);
  }
}

// Gather: one lane's 16 values of an output row of 512: chunks l and l + 32, dequantized
// as nvfp4_mla.cuh's identity gather does (bf16(e2m1 * e4m3), exact; a NaN scale byte, a
// poisoned block, gives 0x7FFF), RoPE chunks copied. A negative or out-of-range slot
// gives a zero row (the latter also the status bit).
template <Format F>
JC_HD void paged_gather_lane(const GatherParams& p, i64 row, int lane) {
  constexpr Layout L = layout(F);
  u16* __restrict__ dst = p.out + row * p.out_stride;
  const i32 slot = p.slots[row];
  const bool out_of_range = slot >= 0 && slot >= p.num_slots;
  if (out_of_range && lane == 0) report(p.status, k_status_slot_out_of_range);
  JC_UNROLL
  for (int j = 0; j < 2; ++j) {
    const int c = lane + k_warp * j;
    u16* out = dst + k_chunk_elems * c;
    if (slot < 0 || out_of_range) {
      store16(out, Vec16{{0u, 0u, 0u, 0u}});
    } else if (k_chunk_elems * c < L.quant_dim) {
      const u32 q = load_as<u32>(p.cache + record_byte(L, slot, 4 * c));
      const u8 sf = p.cache[record_byte(L, slot, L.scales_offset + c / 2)];
      Vec16 v;
      dequantize8<LatentMode::identity>(q, sf, 1.0f, &v.w[0]);
      store16(out, v);
    } else {
      store16(out, load16(p.cache + record_byte(L, slot, L.rope_offset + 16 * (c - L.quant_dim / k_chunk_elems))));
    }
  }
}

// ---------------------------------------------------------------------------------------
// GPU kernel bodies: one warp per token (writer) or output row (gather), as nvfp4_mla.cuh.

#if defined(__CUDACC__)
template <Scaling S, Format F>
__device__ __forceinline__ void paged_writer_kernel(const WriterParams& p, i64 token, int lane) {
  const WriterLoads in = writer_load<F>(p, token, lane);
  // The lowest row of a slot writes it: a row whose in-range slot an earlier row maps
  // to writes nothing (the warp shares one slot, so the vote is uniform).
  bool earlier = false;
  if (in.slot >= 0 && in.slot < p.num_slots)
    for (i64 prior = lane; prior < token; prior += k_warp) earlier = earlier || p.slot_mapping[prior] == in.slot;
  if (__any_sync(0xffffffffu, earlier)) return;
  const float amax[2] = {paged_chunk_amax<F>(in.latent[0]), paged_chunk_amax<F>(in.latent[1])};
  const PagedScale scales[2] = {
      paged_scale<F>(max_num(amax[0], __shfl_xor_sync(0xffffffffu, amax[0], 1))),
      paged_scale<F>(max_num(amax[1], __shfl_xor_sync(0xffffffffu, amax[1], 1)))};
  paged_writer_lane<F>(p, lane, in, scales);
}

template <Scaling S, Format F>
__device__ __forceinline__ void writer_kernel(const WriterParams& p, float latent_scale) {
  if (!outer_scale_ok<S>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, outer_scale_error_bit<S>());
    return;
  }
  const i64 token = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  const int lane = static_cast<int>(threadIdx.x % k_warp);
  if (token >= p.num_tokens) return;  // uniform across the warp
  if constexpr (layout(F).placement == Placement::paged) {
    paged_writer_kernel<S, F>(p, token, lane);
  } else {
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
}

template <Scaling S, Format F>
__device__ __forceinline__ void gather_kernel(const GatherParams& p, float latent_scale) {
  if (!outer_scale_ok<S>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, outer_scale_error_bit<S>());
    return;
  }
  const i64 row = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  if (row >= p.num_rows) return;
  if constexpr (layout(F).placement == Placement::paged) {
    paged_gather_lane<F>(p, row, static_cast<int>(threadIdx.x % k_warp));
  } else {
    gather_lane<S, F>(p, row, static_cast<int>(threadIdx.x % k_warp), latent_scale);
  }
}
#endif

}  // namespace fmt
}  // namespace jc
