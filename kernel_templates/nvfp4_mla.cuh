// NVFP4 MLA KV-cache kernels: the `nvfp4_ds_mla` record writer and the gather/dequant
// reader, as __host__ __device__ code.
//
// This one text is compiled twice:
//   * by NVRTC at run time, after a generated prelude that picks the specialization
//     (kernel_templates/generator.cpp), into the GPU kernels;
//   * by the host compiler into libjitcache's host executor (runtime/host_executor.cpp),
//     which runs the same lane bodies on the CPU.
// Every arithmetic step is a correctly rounded operation (div_rn/mul_rn/add_rn, no FMA
// contraction, no approximate reciprocal; the only FMAs are explicit ones with directed
// rounding), an exact one, or a hardware conversion proven to equal the host's software
// one on every input it can receive (each argued where it is defined), so the CPU result
// is bit-identical to the GPU's. Where the brief's formula divides by the block scale (and,
// dynamic, by the latent scale), the writer compares the inputs with exact thresholds
// instead, which gives the same codes. The file includes no CUDA header, because NVRTC
// compiles it without the host's standard library (only <cstdint> on the host).
//
// Record layout (brief, "The nvfp4_ds_mla KV record"), per token:
//   [0,256)    E2M1 latent, element 2i = low nibble of byte i
//   [256,288)  32 E4M3 block scales, block b covers elements 16b..16b+15
//   bf16 RoPE (432 bytes): [288,304) zero, [304,432) 64 x BF16
//   fp8 RoPE  (368 bytes): [288,292) fp32 rope_scale, [292,304) zero, [304,368) 64 x E4M3
//
// Thread mapping: one warp per token (writer) or output row (gather). The 512 latent
// elements are 64 chunks of 8 (16 bytes of bf16, 4 bytes of E2M1); lane l owns chunks l and
// l + 32, so each 16-byte load (writer) or store (gather) instruction of the warp covers
// 512 contiguous bytes, and each 4-byte E2M1 access 128. Chunk l is half of latent block
// l / 2: lanes l and l ^ 1 hold the two halves of blocks l / 2 and 16 + l / 2, and the
// writer combines their amax with one exact shuffle (the dynamic writer also shares the
// blocks' scales between the two); the host executor runs the lanes one by one and makes
// the same exchanges. Lane l also owns RoPE elements 2l and 2l + 1; lane 0 writes bytes
// [288,304).
#pragma once

#if defined(__CUDACC__)
#define JC_HD __host__ __device__ __forceinline__
#define JC_UNROLL _Pragma("unroll")
#else
#define JC_HD inline
#define JC_UNROLL
#endif

#if !defined(__CUDACC_RTC__)
#include <cstdint>
#endif

namespace jc {

#if defined(__CUDACC_RTC__)
// NVRTC has no standard headers here; these have the same sizes as the <cstdint> types
// the host side uses, so the parameter structs have one layout on both sides.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
#else
typedef std::uint8_t u8;
typedef std::uint16_t u16;
typedef std::uint32_t u32;
typedef std::int32_t i32;
typedef std::int64_t i64;
typedef std::uint64_t u64;
#endif
static_assert(sizeof(i64) == 8 && sizeof(u32) == 4 && sizeof(u16) == 2 && sizeof(void*) == 8,
              "the kernel ABI assumes LP64");

// 16 bytes moved as one vector load/store (ld.global.v4.u32 on the GPU).
struct alignas(16) Vec16 {
  u32 w[4];
};

constexpr int k_latent_dim = 512;
constexpr int k_rope_dim = 64;
constexpr int k_block_elems = 16;
constexpr int k_num_blocks = k_latent_dim / k_block_elems;  // 32
constexpr int k_latent_bytes = k_latent_dim / 2;            // 256
constexpr int k_scales_offset = 256;
constexpr int k_pad_offset = 288;
constexpr int k_rope_offset = 304;
constexpr int k_record_bytes_bf16_rope = 432;
constexpr int k_record_bytes_fp8_rope = 368;
constexpr int k_out_dim = k_latent_dim + k_rope_dim;  // 576
constexpr int k_warp = 32;
constexpr int k_tokens_per_cta = 4;
constexpr int k_threads_per_cta = k_warp * k_tokens_per_cta;
constexpr int k_chunk_elems = 8;                            // 16 bytes of bf16
constexpr int k_rope_elems_per_lane = k_rope_dim / k_warp;  // 2
static_assert(k_latent_dim == 2 * k_warp * k_chunk_elems, "two latent chunks per lane");
static_assert(k_block_elems == 2 * k_chunk_elems, "a block is two chunks, of lanes l and l ^ 1");

// Error bits a kernel reports through its status word (0 = clean).
constexpr u32 k_status_identity_scale_mismatch = 1u;  // identity kernel given a scale != 1
constexpr u32 k_status_slot_out_of_range = 2u;        // slot >= num_slots: record skipped
constexpr u32 k_status_bad_latent_scale = 4u;         // dynamic kernel given a non-finite or <= 0 scale

enum class LatentMode { identity = 0, dynamic = 1 };
enum class RopeMode { bf16 = 0, fp8 = 1 };

JC_HD constexpr int record_bytes(RopeMode rope) {
  return rope == RopeMode::bf16 ? k_record_bytes_bf16_rope : k_record_bytes_fp8_rope;
}

// Launch arguments. The layout is the kernel ABI: identical on host and device.
struct WriterParams {
  const u16* kv_c;      // bf16 bits [num_tokens, >= 512], row stride kv_c_stride elements
  i64 kv_c_stride;
  const u16* k_pe;      // bf16 bits [num_tokens, >= 64], row stride k_pe_stride elements
  i64 k_pe_stride;
  const i64* slot_mapping;  // [num_tokens]; negative = padding, skipped
  i64 num_tokens;
  u8* cache;            // [num_slots, record_bytes] (= [num_blocks, block_size, record_bytes])
  i64 num_slots;
  u32* status;          // optional error bits (k_status_*), may be null
};

struct GatherParams {
  const u8* cache;      // [num_slots, record_bytes]
  i64 num_slots;
  const i32* slots;     // [num_rows]; negative = write a zero row
  i64 num_rows;
  u16* out;             // bf16 bits [num_rows, 576], row stride out_stride elements
  i64 out_stride;
  u32* status;          // optional error bits, may be null
};

// ---------------------------------------------------------------------------------------
// Bit-level helpers and correctly rounded fp32 operations.

JC_HD u32 float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  u32 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

JC_HD float bits_float(u32 u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

JC_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

JC_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

JC_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

JC_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }

JC_HD bool is_nan(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }

// max that ignores a NaN operand, as fmaxf on the GPU: one FMNMX, no branch (PTX max.f32
// returns the other operand when one is NaN; the GPU has no signalling NaNs). Callers pass
// absolute values and a running amax that starts at +0, so the result is never NaN and
// maxNum's freedom for max(-0, +0) never arises. The host spells the same rule out rather
// than calling fmaxf: IEEE 754-2008 maxNum, which the C library implements, returns a quiet
// NaN for a signalling one, and bf16 inputs such as 0x7F81 are signalling NaNs.
JC_HD float max_num(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return is_nan(a) ? b : (is_nan(b) || a > b ? a : b);
#endif
}

JC_HD float bf16_to_float(u16 h) { return bits_float(static_cast<u32>(h) << 16); }

// fp32 -> bf16, round to nearest even; NaN becomes the canonical 0x7FFF (as cvt.rn.bf16.f32
// and cuda_bf16.h's host path do).
JC_HD u16 float_to_bf16(float f) {
  const u32 u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  const u32 rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<u16>(rounded >> 16);
}

// Two fp32 values -> two bf16 (lo in bits 0..15), round to nearest even, NaN -> 0x7FFF:
// float_to_bf16 on each. On the GPU one cvt.rn.bf16x2.f32 (F2FP.BF16.F32.PACK_AB) instead
// of about six integer instructions per element. For every non-NaN input the two agree:
// the instruction rounds the value to the nearest bf16, ties to even, exactly as the
// integer rounding does, and bf16 has fp32's exponent range, so an infinity stays infinite,
// a value beyond the largest bf16 rounds to infinity on both sides (no .satfinite), and fp32
// subnormals round onto bf16's subnormals (cvt has no .ftz here, and the kernels are built
// with --ftz=false). A NaN result is replaced by the canonical 0x7FFF with a select rather
// than trusting the instruction's NaN payload. tests/runtime/test_gpu.cpp runs all 2^32
// fp32 inputs through both on a GPU.
JC_HD u32 bf16x2_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  u32 pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));  // d[31:16] = cvt(a)
  pair = is_nan(lo) ? ((pair & 0xffff0000u) | 0x7fffu) : pair;
  pair = is_nan(hi) ? ((pair & 0x0000ffffu) | 0x7fff0000u) : pair;
  return pair;
#else
  return static_cast<u32>(float_to_bf16(lo)) | (static_cast<u32>(float_to_bf16(hi)) << 16);
#endif
}

// bf16x2_rn for inputs that are never NaN: the bare conversion, no select.
JC_HD u32 bf16x2_rn_not_nan(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  u32 pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  return pair;
#else
  return bf16x2_rn(lo, hi);
#endif
}

// The bf16 products of two pairs, lo with lo and hi with hi, for operands whose products
// are exact bf16 values (the only use). An exact product needs no rounding, so the GPU's
// mul.rn.bf16x2 (which keeps subnormal operands: bf16 arithmetic has no flush-to-zero
// mode) and the host's fp32 product, itself exact, give the same bits.
JC_HD u32 bf16x2_mul_exact(u32 a, u32 b) {
#if defined(__CUDA_ARCH__)
  u32 product;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(product) : "r"(a), "r"(b));
  return product;
#else
  const float lo = bf16_to_float(static_cast<u16>(a)) * bf16_to_float(static_cast<u16>(b));
  const float hi = bf16_to_float(static_cast<u16>(a >> 16)) * bf16_to_float(static_cast<u16>(b >> 16));
  return bf16x2_rn(lo, hi);
#endif
}

// ---------------------------------------------------------------------------------------
// E4M3 (e4m3fn: bias 7, max 448, min normal 2^-6, min subnormal 2^-9, no infinity,
// NaN = 0x7F/0xFF).

JC_HD float e4m3_to_float(u8 code) {
  const u32 sign = static_cast<u32>(code & 0x80u) << 24;
  const u32 exp = (code >> 3) & 0xfu;
  const u32 man = code & 0x7u;
  if (exp == 0xfu && man == 0x7u) return bits_float(0x7fffffffu);
  if (exp == 0u) {
    // man * 2^-9: an exact product.
    return bits_float(float_bits(mul_rn(static_cast<float>(man), 0.001953125f)) | sign);
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// fp32 -> E4M3, round to nearest even, saturating to +-448. NaN -> 0x7F. The sign of
// a result that rounds to zero is kept (0x80), as in cuda_fp8.h. Both ranges are computed
// and one is selected, so the GPU code has no branches here.
JC_HD u8 float_to_e4m3_satfinite(float x) {
  const u32 xb = float_bits(x);
  const u32 sign = (xb >> 24) & 0x80u;
  const u32 ab = xb & 0x7fffffffu;
  const u32 e = ab >> 23;  // biased fp32 exponent
  // Normal range (|x| >= 2^-6, e >= 121): keep 3 mantissa bits, round half to even; a
  // carry out of the mantissa correctly bumps the exponent.
  u32 normal = ((e - 120u) << 3) | ((ab >> 20) & 0x7u);
  const u32 rem = ab & 0xfffffu;
  normal += static_cast<u32>(rem > 0x80000u || (rem == 0x80000u && (normal & 1u)));
  // Subnormal range (|x| < 2^-6): the code is k = rne(|x| * 2^9) in 0..8 (8 carries into
  // the smallest normal, code 0x08). |x| * 2^9 < 8 is exact, and adding 2^23 rounds it to
  // an integer, half to even, in the low mantissa bits.
  const u32 subnormal = float_bits(add_rn(mul_rn(bits_float(ab), 512.0f), 8388608.0f)) - 0x4b000000u;
  u32 code = e >= 121u ? normal : subnormal;
  code = ab > 0x43e00000u ? 0x7eu : code;  // > 448, infinity included: saturate
  return static_cast<u8>(ab > 0x7f800000u ? 0x7fu : (sign | code));
}

// The block scale's E4M3 code through the GPU's own conversion: one F2FP instead of the
// two dozen integer instructions of float_to_e4m3_satfinite, which the host keeps. Only for
// x that is never negative and never NaN; +inf is allowed. The writer's x = rn(amax / 6)
// qualifies: amax starts at +0 and takes the max of absolute values, NaNs ignored, so it is
// +0, a positive number or +inf, and so is the quotient.
// Why the two agree on that domain (PTX ISA, cvt.rn.satfinite.e4m3x2.f32):
//   * .rn rounds the value to the nearest E4M3 value, ties to the even code, over the whole
//     E4M3 grid: normals (3 mantissa bits) and the subnormals k * 2^-9 below 2^-6;
//     float_to_e4m3_satfinite rounds to the same grid with the same tie rule. A fp32
//     subnormal input is a value like any other (cvt to an fp8 type has no .ftz): it lies
//     far below 2^-10 and becomes +0 on both sides.
//   * .satfinite turns a magnitude beyond MAX_NORM (448), +inf included, into 448 = 0x7E,
//     never into NaN; float_to_e4m3_satfinite saturates to 0x7E as well. (A NaN input
//     would give 0x7F on both sides, but it cannot occur here.)
//   * d[7:0] holds the conversion of the second source operand.
// cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) is this instruction on
// the device and, on the host, the software path that tests/kernel_templates checks
// float_to_e4m3_satfinite against; tests/runtime/test_gpu.cpp runs every non-negative fp32
// bit pattern through both on a GPU.
JC_HD u8 e4m3_encode_nonnegative(float x) {
#if defined(__CUDA_ARCH__)
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
  return static_cast<u8>(pair & 0xffu);
#else
  return float_to_e4m3_satfinite(x);
#endif
}

// Two fp32 values of any sign (the fp8 RoPE's quotients) -> their E4M3 codes, lo in bits
// 0..7: float_to_e4m3_satfinite on each. On the GPU one cvt.rn.satfinite.e4m3x2.f32 and a
// select per NaN. For every non-NaN input the argument of e4m3_encode_nonnegative holds
// for the magnitude, and the instruction treats the sign as IEEE rounding does: it keeps it
// (a negative value that rounds to zero gives -0, 0x80, as float_to_e4m3_satfinite does)
// and saturates to -448 (0xFE) below -448. A NaN becomes 0x7F by the select whatever the
// instruction's NaN code. tests/runtime/test_gpu.cpp runs all 2^32 fp32 inputs through
// both on a GPU.
JC_HD u32 e4m3x2_encode(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));  // d[15:8] = cvt(a)
  u32 codes = pair;
  codes = is_nan(lo) ? ((codes & 0xff00u) | 0x7fu) : codes;
  codes = is_nan(hi) ? ((codes & 0x00ffu) | 0x7f00u) : codes;
  return codes;
#else
  return static_cast<u32>(float_to_e4m3_satfinite(lo)) | (static_cast<u32>(float_to_e4m3_satfinite(hi)) << 8);
#endif
}

// The value of an E4M3 code. On the GPU through cvt.rn.f16x2.e4m3x2 and cvt.f32.f16: every
// E4M3 value, subnormals and -0 included, is exactly an f16 value and every f16 value
// exactly an fp32 one, so both conversions are exact and give e4m3_to_float's bits. Only
// the NaN codes (0x7F, 0xFF) may differ in payload: callers never pass them (the writer's
// codes come from e4m3_encode_nonnegative, at most 0x7E) or replace the result by a select.
JC_HD float e4m3_value(u8 code) {
#if defined(__CUDA_ARCH__)
  unsigned int halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(static_cast<unsigned short>(code)));
  float value;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, lo;\n\t}"
      : "=f"(value)
      : "r"(halves));
  return value;
#else
  return e4m3_to_float(code);
#endif
}

// The values of two E4M3 codes (code pair bits 0..7 and 8..15), as e4m3_value; on the GPU
// one conversion for both. NaN codes decode to some NaN: callers select afterwards.
JC_HD void e4m3x2_values(u32 codes, float* lo, float* hi) {
#if defined(__CUDA_ARCH__)
  unsigned int halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(static_cast<unsigned short>(codes)));
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(*lo), "=f"(*hi)
      : "r"(halves));
#else
  *lo = e4m3_to_float(static_cast<u8>(codes));
  *hi = e4m3_to_float(static_cast<u8>(codes >> 8));
#endif
}

// ---------------------------------------------------------------------------------------
// E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.

JC_HD float e2m1_to_float(u8 code) {
  const u32 sign = static_cast<u32>(code & 0x8u) << 28;
  const u32 exp = (code >> 1) & 0x3u;
  const u32 man = code & 0x1u;
  const u32 mag = exp == 0u ? (man ? 0x3f000000u : 0u) : (((exp + 126u) << 23) | (man << 22));
  return bits_float(sign | mag);
}

// fp32 -> E2M1, round to nearest even, saturating to +-6. NaN -> +6 (0x7) and a result
// that rounds to zero keeps its sign, both as cuda_fp4.h's conversion does. The
// thresholds are the midpoints; at a tie the even code wins (<= vs <).
JC_HD u8 float_to_e2m1_satfinite(float x) {
  const u32 sign = (float_bits(x) >> 28) & 0x8u;
  const float a = abs_f(x);
  const u32 code = static_cast<u32>(a > 0.25f) + static_cast<u32>(a >= 0.75f) +
                   static_cast<u32>(a > 1.25f) + static_cast<u32>(a >= 1.75f) +
                   static_cast<u32>(a > 2.5f) + static_cast<u32>(a >= 3.5f) +
                   static_cast<u32>(a > 5.0f);
  // NaN by one select, not an early return: no branch per element.
  return static_cast<u8>(is_nan(x) ? 0x7u : (sign | code));
}

// The E2M1 code of x / sf for an E4M3 scale value sf > 0, decided by comparing x with the
// seven decision points t * sf instead of dividing. This is exactly
// float_to_e2m1_satfinite(div_rn(x, sf)) for every fp32 x:
//   * c = t * sf is exact in fp32 (t has at most 3 significant bits, sf at most 4).
//   * x > c  =>  x >= c + ulp(c), and ulp(c) / sf > ulp(t) / 2 because sf's significand is
//     below 2, so x / sf lies more than half an ulp above t and rounds above t. x <= c
//     => x / sf <= t. Hence rn(x / sf) > t  <=>  x > c, and likewise with the gap below c,
//     rn(x / sf) >= t  <=>  x >= c. The tie rules of float_to_e2m1_satfinite (> at 0.25,
//     1.25, 2.5, 5; >= at 0.75, 1.75, 3.5) therefore carry over unchanged.
// tests/kernel_templates/test_conversions.cpp checks the equivalence exhaustively around
// every decision point of every scale.
struct E2M1Bounds {
  float c[7];
};

JC_HD E2M1Bounds e2m1_bounds(float sf) {
  return E2M1Bounds{{mul_rn(0.25f, sf), mul_rn(0.75f, sf), mul_rn(1.25f, sf), mul_rn(1.75f, sf),
                     mul_rn(2.5f, sf), mul_rn(3.5f, sf), mul_rn(5.0f, sf)}};
}

JC_HD u8 e2m1_encode_scaled(float x, const E2M1Bounds& b) {
  const u32 sign = (float_bits(x) >> 28) & 0x8u;
  const float a = abs_f(x);
  const u32 code = static_cast<u32>(a > b.c[0]) + static_cast<u32>(a >= b.c[1]) +
                   static_cast<u32>(a > b.c[2]) + static_cast<u32>(a >= b.c[3]) +
                   static_cast<u32>(a > b.c[4]) + static_cast<u32>(a >= b.c[5]) +
                   static_cast<u32>(a > b.c[6]);
  return static_cast<u8>(is_nan(x) ? 0x7u : (sign | code));
}

// The dynamic writer's codes without dividing by the latent scale. The brief's code of an
// input kv is E2M1(rn(x / sf)) with x = rn(kv / s); e2m1_encode_scaled decides it by
// comparing x with the seven decision points c = t * sf. Each comparison of x = rn(kv / s)
// with c is again a comparison of kv itself with one number:
//   * c has at most 7 significant bits (above), so it is an "even" float (its last
//     significand bit is 0) and its neighbours are odd; c >= 2^-11 is normal.
//   * rn(y) > c  <=>  y > m+ = c + ulp(c)/2, the midpoint to the next float: above it y
//     rounds to the neighbour or beyond (to +inf on overflow, still > c); at it the tie goes
//     to the even c; below it rn(y) <= c.
//   * rn(y) >= c  <=>  y >= m- = c - ulp(c)/2, the midpoint to the previous float: at it the
//     tie goes to the even c. This needs the previous float to be c - ulp(c), i.e. c not a
//     power of two. It is not: the >= points are 0.75, 1.75 and 3.5 times sf, i.e. 3 or 7
//     times a power of two times sf's 4-bit significand, never a power of two.
//   * With y = kv / s and s > 0: x > c <=> kv > m+ * s and x >= c <=> kv >= m- * s, for the
//     real products. kv = NaN compares false here as there; e2m1_encode_scaled's NaN select
//     gives 0x7 on both paths. kv = +-0 or +-inf: x keeps kv's sign and class, and so do the
//     comparisons.
//   * For a float kv and a real R: kv > R <=> kv > RD(R) and kv >= R <=> kv >= RU(R), RD/RU
//     rounding R down/up to fp32 (overflow: RD gives FLT_MAX, RU +inf, which keeps both
//     statements true). So the thresholds are RD(m+ * s) and RU(m- * s), and the codes come
//     from the very same comparisons as the identity writer's.
// m+- has at most 25 significant bits and s 24, so m+- * s is exact in double: the host
// rounds that product down/up to fp32 directly. The GPU (FP64 is slow on sm_120) gets the
// same numbers from fp32 FMAs with directed rounding: c * s' +- h * s' rounded once by
// fma.rm/fma.rp, h = ulp(c)/2 a power of two >= 2^-35, s' = s, or s * 2^100 when s < 2^-64
// so that h * s' is an exact normal product; the scaled result is rounded again by
// multiplying with 2^-100 in the same direction, and rounding down (up) to the 24-bit grid
// and then down (up) to fp32's coarser subnormal grid is rounding down (up) to the latter
// once. tests/kernel_templates/test_e2m1_dynamic.cpp checks the host thresholds against
// the division for every bf16 kv, every scale code and hundreds of scales, and the GPU's
// steps emulated on the CPU; tests/runtime/test_gpu.cpp compares the kernels on a GPU.
JC_HD float e2m1_half_ulp(float c) {  // ulp(c) / 2 for a normal c >= 2^-11
  return bits_float((float_bits(c) & 0x7f800000u) - (24u << 23));
}

// The thresholds on kv for scale value sf > 0 and latent scale s: e2m1_encode_scaled(kv,
// e2m1_bounds_scaled(sf, s)) == float_to_e2m1_satfinite(div_rn(div_rn(kv, s), sf)): the >
// points (even k) RD((c + ulp(c)/2) * s), the >= points (odd k) RU((c - ulp(c)/2) * s).
JC_HD E2M1Bounds e2m1_bounds_scaled(float sf, float s) {
  const E2M1Bounds c = e2m1_bounds(sf);
  E2M1Bounds t;
#if defined(__CUDA_ARCH__)
  const bool tiny = s < 0x1p-64f;
  const float s_up = tiny ? __fmul_rn(s, 0x1p100f) : s;
  JC_UNROLL
  for (int k = 0; k < 7; ++k) {
    const float hs = __fmul_rn(e2m1_half_ulp(c.c[k]), s_up);
    if (k % 2 == 0) {
      const float v = __fmaf_rd(c.c[k], s_up, hs);
      t.c[k] = tiny ? __fmul_rd(v, 0x1p-100f) : v;
    } else {
      const float v = __fmaf_ru(c.c[k], s_up, -hs);
      t.c[k] = tiny ? __fmul_ru(v, 0x1p-100f) : v;
    }
  }
#else
  for (int k = 0; k < 7; ++k) {
    const double h = e2m1_half_ulp(c.c[k]);
    const double product = (static_cast<double>(c.c[k]) + (k % 2 == 0 ? h : -h)) * static_cast<double>(s);
    float v = static_cast<float>(product);
    if (k % 2 == 0 && static_cast<double>(v) > product) v = __builtin_nextafterf(v, -__builtin_inff());
    if (k % 2 == 1 && static_cast<double>(v) < product) v = __builtin_nextafterf(v, __builtin_inff());
    t.c[k] = v;
  }
#endif
  return t;
}

// ---------------------------------------------------------------------------------------
// Packed bf16 comparisons and max: two elements per instruction on the GPU (HSET2/HMNMX2
// with .BF16_V2), per half on the host. Comparisons and max select, never round, so both
// sides agree on every input; the masks are 0xFFFF per true half, as cuda_bf16.h's
// __hgt2_mask documents for set.gt.u32.bf16x2.

JC_HD u32 half_mask(bool lo, bool hi) { return (lo ? 0x0000ffffu : 0u) | (hi ? 0xffff0000u : 0u); }

// Bits of a where mask is set, of b elsewhere (one LOP3).
JC_HD u32 select_bits(u32 mask, u32 a, u32 b) { return (a & mask) | (b & ~mask); }

// PRMT / __byte_perm in its default mode: byte i of the result is byte ((selector >> 4i) &
// 7) of the eight bytes b:a (a = bytes 0..3).
JC_HD u32 byte_perm(u32 a, u32 b, u32 selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, selector);
#else
  const unsigned long long bytes = (static_cast<unsigned long long>(b) << 32) | a;
  u32 r = 0u;
  for (int i = 0; i < 4; ++i) r |= static_cast<u32>((bytes >> (8 * ((selector >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
#endif
}

// a > b or unordered (either NaN), per half.
JC_HD u32 bf16x2_gtu_mask(u32 a, u32 b) {
#if defined(__CUDA_ARCH__)
  u32 mask;
  asm("set.gtu.u32.bf16x2 %0, %1, %2;" : "=r"(mask) : "r"(a), "r"(b));
  return mask;
#else
  return half_mask(!(bf16_to_float(static_cast<u16>(a)) <= bf16_to_float(static_cast<u16>(b))),
                   !(bf16_to_float(static_cast<u16>(a >> 16)) <= bf16_to_float(static_cast<u16>(b >> 16))));
#endif
}

// a >= b or unordered, per half.
JC_HD u32 bf16x2_geu_mask(u32 a, u32 b) {
#if defined(__CUDA_ARCH__)
  u32 mask;
  asm("set.geu.u32.bf16x2 %0, %1, %2;" : "=r"(mask) : "r"(a), "r"(b));
  return mask;
#else
  return half_mask(!(bf16_to_float(static_cast<u16>(a)) < bf16_to_float(static_cast<u16>(b))),
                   !(bf16_to_float(static_cast<u16>(a >> 16)) < bf16_to_float(static_cast<u16>(b >> 16))));
#endif
}

// a is NaN, per half.
JC_HD u32 bf16x2_nan_mask(u32 a) {
#if defined(__CUDA_ARCH__)
  u32 mask;
  asm("set.nan.u32.bf16x2 %0, %1, %1;" : "=r"(mask) : "r"(a));
  return mask;
#else
  return half_mask(is_nan(bf16_to_float(static_cast<u16>(a))), is_nan(bf16_to_float(static_cast<u16>(a >> 16))));
#endif
}

// max per half that ignores a NaN operand (PTX max.bf16x2: the other operand; both NaN: the
// canonical NaN, 0x7FFF on the host). Only for operands with the sign bit clear, so
// max(-0, +0) never arises.
JC_HD u32 bf16x2_max_num(u32 a, u32 b) {
#if defined(__CUDA_ARCH__)
  u32 m;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
#else
  auto one = [](u16 x, u16 y) -> u32 {
    const float fx = bf16_to_float(x), fy = bf16_to_float(y);
    if (is_nan(fx)) return is_nan(fy) ? 0x7fffu : y;
    if (is_nan(fy)) return x;
    return fx > fy ? x : y;
  };
  return one(static_cast<u16>(a), static_cast<u16>(b)) | (one(static_cast<u16>(a >> 16), static_cast<u16>(b >> 16)) << 16);
#endif
}

// ---------------------------------------------------------------------------------------
// Quantization (brief, "Quantization (writer)"), one 8-element chunk at a time: a latent
// block of 16 elements is two chunks, held by two lanes (see the thread mapping above).

// amax(|x|) of a chunk of 8 bf16 as fp32: NaN elements ignored, +0 when all are NaN.
JC_HD float chunk_amax(const Vec16& x) {
  const u32 pair = bf16x2_max_num(bf16x2_max_num(x.w[0] & 0x7fff7fffu, x.w[1] & 0x7fff7fffu),
                                  bf16x2_max_num(x.w[2] & 0x7fff7fffu, x.w[3] & 0x7fff7fffu));
  return max_num(max_num(0.0f, bits_float(pair << 16)), bits_float(pair & 0xffff0000u));
}

// The seven thresholds a chunk's elements are compared with, as bf16 pairs (both halves
// equal). An element's E2M1 magnitude code is the number of thresholds its |kv| exceeds:
// > for t[0], t[2], t[4], t[6], >= for t[1], t[3], t[5] (e2m1_encode_scaled's rule).
struct E2M1Thresholds {
  u32 t[7];
};

// For a bf16 kv and a float T >= 0: kv > T <=> kv > RD_bf16(T), and kv >= T <=> kv >=
// RU_bf16(T), rounding T down/up onto the bf16 grid, a subset of fp32's (T = +inf stays
// +inf). Down is dropping T's low 16 bits, up is adding 0xFFFF first.
JC_HD u32 bf16_pair_down(float t) { return byte_perm(float_bits(t), 0u, 0x3232u); }
JC_HD u32 bf16_pair_up(float t) { return byte_perm(float_bits(t) + 0xffffu, 0u, 0x3232u); }

// The decision points t * 2^120 as bf16 pairs (t = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5:
// at most 3 significant bits, so exact), for e2m1_thresholds<identity>.
constexpr u32 k_e2m1_points_2p120[7] = {0x7a807a80u, 0x7b407b40u, 0x7ba07ba0u, 0x7be07be0u,
                                        0x7c207c20u, 0x7c607c60u, 0x7ca07ca0u};

// Identity: the decision points t * sf themselves, exact in bf16 (at most 7 significant
// bits, normal). Straight from the scale code: a positive E4M3 code shifted left by 4 is
// the bf16 number sf * 2^-120 (the 4-bit exponent field becomes bf16's with a bias 120
// apart, and codes 1..7, E4M3's subnormals m * 2^-9, become bf16's subnormals m * 2^-129),
// and one exact bf16 product per point gives t * sf. Dynamic: e2m1_bounds_scaled's fp32
// thresholds, rounded onto the bf16 grid in the direction of their comparison. sf must
// not be 0 (the caller zeroes such a block's codes) or NaN (never: sf <= 0x7E).
template <LatentMode LM>
JC_HD E2M1Thresholds e2m1_thresholds(u8 sf, float latent_scale) {
  E2M1Thresholds th;
  if constexpr (LM == LatentMode::dynamic) {
    const E2M1Bounds b = e2m1_bounds_scaled(e4m3_value(sf), latent_scale);
    JC_UNROLL
    for (int k = 0; k < 7; ++k) th.t[k] = k % 2 == 0 ? bf16_pair_down(b.c[k]) : bf16_pair_up(b.c[k]);
  } else {
    (void)latent_scale;
    const u32 sf_pair = static_cast<u32>(sf) * 0x00100010u;  // sf * 2^-120 in both halves
    JC_UNROLL
    for (int k = 0; k < 7; ++k) th.t[k] = bf16x2_mul_exact(sf_pair, k_e2m1_points_2p120[k]);
  }
  return th;
}

// 8 bf16 (element 2k in the low half of word k) -> their 8 E2M1 codes, code i in bits
// 4i..4i+3: e2m1_encode_scaled on each element, two elements per instruction.
//   * Elements i and i+4 share a word, so that code i lands in bits 4i..4i+3 of the low
//     half and code i+4 in the same bits of the high half: no shifting of results.
//   * The magnitude code is the number of thresholds |kv| exceeds, and exceeding t[k+1]
//     implies exceeding t[k] (the real thresholds these bf16 ones stand for increase
//     strictly, and each comparison is exact). So its bits come from a binary search, three
//     comparisons instead of seven: bit 2 = exceeds t[3]; bit 1 = exceeds t[1], or t[5]
//     when bit 2 is set; bit 0 = exceeds t[0], t[2], t[4] or t[6] as bits 2..1 say. The
//     thresholds are picked per half by select_bits on the masks; t[1], t[3], t[5] are
//     all >= comparisons and t[0], t[2], t[4], t[6] all >, as the search needs.
//   * The comparisons are unordered-or (gtu, geu): a NaN passes all three, code 7, and its
//     sign is dropped by the NaN mask (NaN -> +6, 0x7). Otherwise the sign is kv's sign
//     bit, so -0 and values that round to zero keep it.
JC_HD u32 e2m1_encode8(const Vec16& x, const E2M1Thresholds& th) {
  u32 codes = 0u;
  JC_UNROLL
  for (int i = 0; i < 4; ++i) {
    const u32 pair = byte_perm(x.w[i / 2], x.w[2 + i / 2], i % 2 == 0 ? 0x5410u : 0x7632u);
    const u32 a = pair & 0x7fff7fffu;
    const u32 b2 = bf16x2_geu_mask(a, th.t[3]);
    const u32 b1 = bf16x2_geu_mask(a, select_bits(b2, th.t[5], th.t[1]));
    const u32 t0 = select_bits(b2, select_bits(b1, th.t[6], th.t[4]), select_bits(b1, th.t[2], th.t[0]));
    const u32 b0 = bf16x2_gtu_mask(a, t0);
    const u32 sign = (pair & ~bf16x2_nan_mask(a) & 0x80008000u) >> 12;
    const u32 nibbles = (b0 & 0x00010001u) | (b1 & 0x00020002u) | (b2 & 0x00040004u) | sign;
    codes |= nibbles << (4 * i);
  }
  return codes;
}

// A block's quantization: its scale byte and its thresholds, from amax(|kv|) over its 16
// elements. The brief divides every input by the latent scale s first (dynamic); nothing is
// divided per element here:
//   * amax: max_i |rn(kv_i / s)| = rn(max_i |kv_i| / s), because rn(. / s) is symmetric and,
//     for s > 0, monotone; NaNs are skipped on both sides and an infinity gives +inf on
//     both. One division per block.
//   * codes: compared on kv with e2m1_bounds_scaled's thresholds (argued there).
struct BlockScale {
  u32 sf;             // the scale byte; 0 makes every code of the block 0
  E2M1Thresholds th;  // meaningless when sf is 0
};

template <LatentMode LM>
JC_HD BlockScale block_scale(float block_amax, float latent_scale) {
  float amax = block_amax;
  if constexpr (LM == LatentMode::dynamic) amax = div_rn(amax, latent_scale);
  BlockScale b;
  b.sf = e4m3_encode_nonnegative(div_rn(amax, 6.0f));  // amax is +0, positive or +inf: sf <= 0x7E
  b.th = e2m1_thresholds<LM>(static_cast<u8>(b.sf), latent_scale);
  return b;
}

// A chunk's 8 codes under its block's scale. A scale of 0 (every |kv| below 2^-10, or all
// NaN) makes every code 0, sign and NaN included, as the brief's "if sf == 0" does.
JC_HD u32 quantize_chunk(const Vec16& x, const BlockScale& b) {
  const u32 codes = e2m1_encode8(x, b.th);
  return b.sf != 0u ? codes : 0u;
}

// A whole block (16 bf16 as 8 u32 words) -> its scale byte and 8 E2M1 bytes (two u32
// words): the two chunks as two lanes quantize them. For tests and tools.
template <LatentMode LM>
JC_HD u8 quantize_block(const u32* x_words, float latent_scale, u32* q_words) {
  const Vec16 first{{x_words[0], x_words[1], x_words[2], x_words[3]}};
  const Vec16 second{{x_words[4], x_words[5], x_words[6], x_words[7]}};
  const BlockScale b = block_scale<LM>(max_num(chunk_amax(first), chunk_amax(second)), latent_scale);
  q_words[0] = quantize_chunk(first, b);
  q_words[1] = quantize_chunk(second, b);
  return static_cast<u8>(b.sf);
}

// Dequantization: 8 E2M1 codes (one u32, code i in bits 4i..4i+3) of a block with scale
// byte sf -> 8 bf16 (4 u32 words, element 2k in the low half of word k), as the brief
// writes it: bf16(float(q) * float(sf)), times the latent scale s first when dynamic,
// i.e. bf16(rn(float(q) * float(sf) * s)). In packed bf16, two elements per instruction:
//   * float(q) * float(sf) is exact in bf16: E2M1 values have at most 2 significant bits
//     and E4M3 values at most 4, so the product has at most 6 of bf16's 8, and its
//     magnitude, 0 or within [2^-10, 2688], is a normal bf16. Rounding never happens; the
//     identity gather's output is this product.
//   * The code's magnitude bits m (exponent 2 bits, mantissa 1) placed at bf16 bits 6..8
//     are the bf16 number |q| * 2^-126: exponent field e >= 1 reads 2^(e-127) * (1 + m/2),
//     and code 1 (0.5) is the subnormal 0x40 = 0.5 * 2^-126. So |q| * sf is this number
//     times (sf * 2^64) times 2^62, two exact bf16 products (the intermediate lies within
//     [2^-72, 2^-50], normal); the code's sign is then xored in, which is the sign rule of a
//     product, zeros included. Negative scale bytes flow through the multiply's sign.
//   * Dynamic: that exact product in fp32 (a shift), times s rounded in fp32, then to bf16:
//     the brief's two roundings, never NaN (a finite product times a finite s), so the bare
//     cvt.rn.bf16x2.f32 is enough.
//   * A NaN scale byte (0x7F, 0xFF) makes every element NaN, 0x7FFF after the brief's
//     rounding: one select per word, so no NaN payload from the hardware ever shows.
template <LatentMode LM>
JC_HD void dequantize8(u32 q, u8 sf, float latent_scale, u32* out_words) {
  // sf * 2^64 as a bf16 pair (exact: every E4M3 value is a bf16 value, and so is this).
  const u32 sf_scaled = float_bits(mul_rn(e4m3_value(sf), 0x1p64f)) >> 16;
  const u32 sf_pair = sf_scaled | (sf_scaled << 16);
  const u32 two_pow_62_pair = 0x5e805e80u;
  const bool sf_is_nan = (sf & 0x7fu) == 0x7fu;
  JC_UNROLL
  for (int k = 0; k < 4; ++k) {
    const u32 pair_codes = (q >> (8 * k)) & 0xffu;                  // codes 2k (low), 2k+1
    const u32 magnitude = (pair_codes * 0x40040u) & 0x01c001c0u;     // bits 0..2 -> 6..8, 4..6 -> 22..24
    const u32 sign = (pair_codes * 0x01001000u) & 0x80008000u;      // bit 3 -> 15, bit 7 -> 31
    u32 product = bf16x2_mul_exact(bf16x2_mul_exact(magnitude, sf_pair), two_pow_62_pair) ^ sign;
    if constexpr (LM == LatentMode::dynamic) {
      const float lo = mul_rn(bits_float(product << 16), latent_scale);
      const float hi = mul_rn(bits_float(product & 0xffff0000u), latent_scale);
      product = bf16x2_rn_not_nan(lo, hi);
    } else {
      (void)latent_scale;
    }
    out_words[k] = sf_is_nan ? 0x7fff7fffu : product;
  }
}

// ---------------------------------------------------------------------------------------
// Lane bodies. The GPU kernel and the host executor call exactly these.

JC_HD void report(u32* status, u32 bits) {
  if (status == nullptr) return;
#if defined(__CUDA_ARCH__)
  atomicOr(status, bits);
#else
  *status |= bits;
#endif
}

// The launch-wide check of the latent scale: false means the kernel must do nothing.
// The identity kernel refuses any scale but exactly 1.0 instead of silently skipping the
// restore multiply; the dynamic kernel refuses scales that cannot be a calibration.
template <LatentMode LM>
JC_HD bool latent_scale_ok(float latent_scale) {
  if constexpr (LM == LatentMode::identity) {
    return latent_scale == 1.0f;
  } else {
    return latent_scale > 0.0f && latent_scale <= 3.402823466e38f;
  }
}

template <LatentMode LM>
JC_HD u32 latent_scale_error_bit() {
  return LM == LatentMode::identity ? k_status_identity_scale_mismatch : k_status_bad_latent_scale;
}

// Typed access to raw buffers. On the GPU a plain dereference (so 16-byte accesses become
// one vector instruction); on the host memcpy, which is what the aliasing rules allow.
template <class T>
JC_HD T load_as(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const T*>(p);
#else
  T v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <class T>
JC_HD void store_as(void* p, const T& v) {
#if defined(__CUDA_ARCH__)
  *static_cast<T*>(p) = v;
#else
  __builtin_memcpy(p, &v, sizeof v);
#endif
}

JC_HD Vec16 load16(const void* p) { return load_as<Vec16>(p); }
JC_HD void store16(void* p, const Vec16& v) { store_as<Vec16>(p, v); }

// Reads of the writer's inputs, issued where they stand in the source. On the GPU an asm
// volatile ld.global.nc: the compiler may neither drop it nor sink it into the branch that
// uses its value (it otherwise moves the bf16 RoPE load, whose value is only stored, behind
// the slot checks, i.e. behind the slot's memory round trip). The read-only data path
// (.nc) is valid because the launch contract keeps every input apart from the cache.
JC_HD Vec16 load_input16(const void* p) {
#if defined(__CUDA_ARCH__)
  Vec16 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
#else
  return load16(p);
#endif
}

// The RoPE word. ptxas sinks even an asm ld.global.nc past the slot checks when its value
// is only stored (bf16 RoPE); a relaxed gpu-scope load it keeps where it is. The word is
// read once, so bypassing L1 costs nothing.
JC_HD u32 load_input4(const void* p) {
#if defined(__CUDA_ARCH__)
  u32 v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
#else
  return load_as<u32>(p);
#endif
}

JC_HD i64 load_input8(const void* p) {
#if defined(__CUDA_ARCH__)
  i64 v;
  asm volatile("ld.global.nc.s64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
#else
  return load_as<i64>(p);
#endif
}

// Everything one writer lane reads for one token, all issued before anything depends on
// them: the slot, the two latent chunks and the two RoPE elements (no dependent round
// trips; the slot is read by every lane, one broadcast transaction).
struct WriterLoads {
  i64 slot;
  Vec16 latent[2];  // elements 8 * lane .. +7 and 256 + 8 * lane .. +7
  u32 rope;         // k_pe elements 2 * lane (low half) and 2 * lane + 1
};

JC_HD WriterLoads writer_load(const WriterParams& p, i64 token, int lane) {
  const u16* kv_c = p.kv_c + token * p.kv_c_stride;
  WriterLoads in;
  in.slot = load_input8(p.slot_mapping + token);
  in.latent[0] = load_input16(kv_c + k_chunk_elems * lane);
  in.latent[1] = load_input16(kv_c + k_latent_dim / 2 + k_chunk_elems * lane);
  in.rope = load_input4(p.k_pe + token * p.k_pe_stride + k_rope_elems_per_lane * lane);
  return in;
}

// What a lane contributes to the warp's reductions: amax(|kv|) of each of its latent
// chunks, and (fp8 RoPE only) of its RoPE elements.
struct WriterPartials {
  float latent_amax[2];
  float rope_amax;
};

template <RopeMode RM>
JC_HD WriterPartials writer_partials(const WriterLoads& in) {
  WriterPartials part{{chunk_amax(in.latent[0]), chunk_amax(in.latent[1])}, 0.0f};
  if constexpr (RM == RopeMode::fp8) {
    part.rope_amax = max_num(max_num(0.0f, abs_f(bits_float(in.rope << 16))),
                             abs_f(bits_float(in.rope & 0xffff0000u)));
  }
  return part;
}

// The dynamic writer's block scale costs two divisions and seven threshold computations,
// so the two lanes that hold a block's chunks split the work: lane l computes the scale of
// its chunk l & 1's block (block l / 2 for an even lane, 16 + l / 2 for an odd one) and
// takes the other block's from its partner, which computed exactly that one (an exchange
// of values, so the host executor's copy gives the same bits). The identity scale is a
// division and seven products: each lane computes both.
template <LatentMode LM>
JC_HD constexpr bool shares_block_scales() {
  return LM == LatentMode::dynamic;
}

// The scale byte a lane stores: the one of the block its chunk lane & 1 belongs to, so the
// even lanes store blocks 0..15 and the odd ones 16..31, all 32 in one 32-byte store.
JC_HD int scale_byte_of_lane(int lane) { return lane % 2 == 0 ? lane / 2 : k_num_blocks / 2 + lane / 2; }

// Writer: everything one lane stores for one token, given the warp's reductions and block
// scales: scales[j] is the scale of the block chunk j belongs to, rope_amax amax(|k_pe|)
// over the whole token (fp8 RoPE only).
template <LatentMode LM, RopeMode RM>
JC_HD void writer_lane(const WriterParams& p, int lane, const WriterLoads& in, const BlockScale* scales,
                       float rope_amax) {
  if (in.slot < 0) return;
  if (in.slot >= p.num_slots) {
    if (lane == 0) report(p.status, k_status_slot_out_of_range);
    return;
  }
  u8* __restrict__ record = p.cache + in.slot * record_bytes(RM);
  const u32 codes0 = quantize_chunk(in.latent[0], scales[0]);
  const u32 codes1 = quantize_chunk(in.latent[1], scales[1]);
  // E2M1 bytes 4 * lane.. and 128 + 4 * lane..: each store instruction covers 128
  // contiguous bytes.
  store_as<u32>(record + 4 * lane, codes0);
  store_as<u32>(record + k_latent_bytes / 2 + 4 * lane, codes1);
  record[k_scales_offset + scale_byte_of_lane(lane)] = static_cast<u8>(lane % 2 == 0 ? scales[0].sf : scales[1].sf);

  u8* rope = record + k_rope_offset;
  if constexpr (RM == RopeMode::bf16) {
    store_as<u32>(rope + 4 * lane, in.rope);
    if (lane == 0) store16(record + k_pad_offset, Vec16{{0u, 0u, 0u, 0u}});
  } else {
    const float rope_scale = div_rn(rope_amax, 448.0f);
    u32 codes = 0u;
    if (rope_scale != 0.0f) {
      codes = e4m3x2_encode(div_rn(bits_float(in.rope << 16), rope_scale),
                            div_rn(bits_float(in.rope & 0xffff0000u), rope_scale));
    }
    store_as<u16>(rope + 2 * lane, static_cast<u16>(codes));
    if (lane == 0) store16(record + k_pad_offset, Vec16{{float_bits(rope_scale), 0u, 0u, 0u}});
  }
}

// Gather: everything one lane stores for one output row. Lane l produces elements 8l..8l+7
// and 256+8l..256+8l+7 (two 16-byte stores, each instruction covering 512 contiguous bytes)
// and RoPE elements 2l, 2l+1. All of a lane's loads come before its first store.
template <LatentMode LM, RopeMode RM>
JC_HD void gather_lane(const GatherParams& p, i64 row, int lane, float latent_scale) {
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
    store_as<u32>(rope_dst, 0u);
    return;
  }
  const u8* __restrict__ record = p.cache + static_cast<i64>(slot) * record_bytes(RM);
  const u32 q0 = load_as<u32>(record + 4 * lane);
  const u32 q1 = load_as<u32>(record + k_latent_bytes / 2 + 4 * lane);
  const u8 sf0 = record[k_scales_offset + lane / 2];
  const u8 sf1 = record[k_scales_offset + k_num_blocks / 2 + lane / 2];
  u32 rope_in;
  float rope_scale = 0.0f;
  if constexpr (RM == RopeMode::bf16) {
    rope_in = load_as<u32>(record + k_rope_offset + 4 * lane);
  } else {
    rope_in = load_as<u16>(record + k_rope_offset + 2 * lane);
    rope_scale = bits_float(load_as<u32>(record + k_pad_offset));
  }

  Vec16 out[2];
  dequantize8<LM>(q0, sf0, latent_scale, &out[0].w[0]);
  dequantize8<LM>(q1, sf1, latent_scale, &out[1].w[0]);
  u32 rope_out = rope_in;
  if constexpr (RM == RopeMode::fp8) {
    float value[2];
    e4m3x2_values(rope_in, &value[0], &value[1]);
    rope_out = bf16x2_rn(mul_rn(value[0], rope_scale), mul_rn(value[1], rope_scale));
  }
  store16(latent_dst, out[0]);
  store16(latent_dst + k_latent_dim / 2, out[1]);
  store_as<u32>(rope_dst, rope_out);
}

// ---------------------------------------------------------------------------------------
// GPU kernel bodies: one warp per token (writer) or output row (gather).

#if defined(__CUDACC__)
template <LatentMode LM, RopeMode RM>
__device__ __forceinline__ void writer_kernel(const WriterParams& p, float latent_scale) {
  if (!latent_scale_ok<LM>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, latent_scale_error_bit<LM>());
    return;
  }
  const i64 token = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  const int lane = static_cast<int>(threadIdx.x % k_warp);
  if (token >= p.num_tokens) return;  // uniform across the warp
  const WriterLoads in = writer_load(p, token, lane);
  const WriterPartials part = writer_partials<RM>(in);
  // Lanes l and l ^ 1 hold the two chunks of the same blocks; the RoPE amax spans the warp,
  // reduced as unsigned integers (a non-negative float's bits order as its value does; the
  // partial maxima are never NaN). max is exact, so any order of combining gives the host
  // executor's result.
  const float block_amax[2] = {max_num(part.latent_amax[0], __shfl_xor_sync(0xffffffffu, part.latent_amax[0], 1)),
                               max_num(part.latent_amax[1], __shfl_xor_sync(0xffffffffu, part.latent_amax[1], 1))};
  float rope_amax = 0.0f;
  if constexpr (RM == RopeMode::fp8) rope_amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(part.rope_amax)));
  BlockScale scales[2];
  if constexpr (shares_block_scales<LM>()) {
    const int own = lane % 2;
    const BlockScale mine = block_scale<LM>(own == 0 ? block_amax[0] : block_amax[1], latent_scale);
    BlockScale theirs;
    theirs.sf = __shfl_xor_sync(0xffffffffu, mine.sf, 1);
    JC_UNROLL
    for (int k = 0; k < 7; ++k) theirs.th.t[k] = __shfl_xor_sync(0xffffffffu, mine.th.t[k], 1);
    scales[0] = own == 0 ? mine : theirs;
    scales[1] = own == 0 ? theirs : mine;
  } else {
    scales[0] = block_scale<LM>(block_amax[0], latent_scale);
    scales[1] = block_scale<LM>(block_amax[1], latent_scale);
  }
  writer_lane<LM, RM>(p, lane, in, scales, rope_amax);
}

template <LatentMode LM, RopeMode RM>
__device__ __forceinline__ void gather_kernel(const GatherParams& p, float latent_scale) {
  if (!latent_scale_ok<LM>(latent_scale)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(p.status, latent_scale_error_bit<LM>());
    return;
  }
  const i64 row = static_cast<i64>(blockIdx.x) * k_tokens_per_cta + threadIdx.x / k_warp;
  if (row >= p.num_rows) return;
  gather_lane<LM, RM>(p, row, static_cast<int>(threadIdx.x % k_warp), latent_scale);
}
#endif

}  // namespace jc
