// An independent reference of the NVFP4 MLA numerics, written from the brief's
// definitions (value tables, nearest-value search, the formulas in the order written)
// and not from kernel_templates/. Tests compare the kernels' host execution with it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace jitcache::reference {

// E4M3 value of a code, from its definition (bias 7, 3 mantissa bits, subnormals).
inline double ref_e4m3_value(int code) {
  const int sign = code & 0x80 ? -1 : 1;
  const int e = (code >> 3) & 0xf, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -9);
  return sign * std::ldexp(8 + m, e - 10);
}

// Nearest table entry; ties to the even code; beyond the largest magnitude saturate.
template <int N>
inline int ref_nearest(const double (&table)[N], double a) {
  if (a >= table[N - 1]) return N - 1;  // saturate (infinity included)
  int best = 0;
  for (int c = 1; c < N; ++c) {
    const double d_best = std::fabs(table[best] - a), d = std::fabs(table[c] - a);
    if (d < d_best || (d == d_best && (c % 2 == 0) && (best % 2 == 1))) best = c;
  }
  return best;
}

inline std::uint8_t ref_e4m3(float x) {
  struct Table {
    double v[127];  // codes 0x00..0x7E, non-negative
    Table() {
      for (int c = 0; c < 127; ++c) v[c] = ref_e4m3_value(c);
    }
  };
  static const Table table;
  if (std::isnan(x)) return 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  return static_cast<std::uint8_t>(sign | ref_nearest(table.v, std::fabs(static_cast<double>(x))));
}

inline std::uint8_t ref_e2m1(float x) {
  static const double table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  if (std::isnan(x)) return 0x7;
  const int sign = std::signbit(x) ? 0x8 : 0;
  return static_cast<std::uint8_t>(sign | ref_nearest(table, std::fabs(static_cast<double>(x))));
}


inline float ref_bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest bf16, ties to even, by comparing the two neighbours in double precision.
inline std::uint16_t ref_float_to_bf16(float x) {
  if (std::isnan(x)) return 0x7fff;
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  if ((u & 0xffffu) == 0) return lo;
  const double dl = std::fabs(static_cast<double>(ref_bf16_to_float(lo)) - x);
  const double vh = static_cast<double>(ref_bf16_to_float(hi));
  const double dh = std::isinf(vh) ? std::ldexp(1.0, 128) - std::fabs(static_cast<double>(x))
                                    : std::fabs(vh - x);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

constexpr int k_latent = 512;
constexpr int k_rope = 64;

inline int ref_record_bytes(bool fp8_rope) { return fp8_rope ? 368 : 432; }

// One token's record, following the brief's "Quantization (writer)" step by step.
// The block amax ignores NaN elements (documented in nvfp4_mla.cuh).
inline std::vector<std::uint8_t> ref_write_record(const std::uint16_t* kv, const std::uint16_t* pe,
                                                  float s, bool dynamic, bool fp8_rope) {
  std::vector<std::uint8_t> rec(ref_record_bytes(fp8_rope), 0);
  for (int b = 0; b < 32; ++b) {
    float x[16];
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
      x[i] = ref_bf16_to_float(kv[16 * b + i]);
      if (dynamic) x[i] = x[i] / s;
      if (!std::isnan(x[i]) && std::fabs(x[i]) > amax) amax = std::fabs(x[i]);
    }
    const std::uint8_t sf = ref_e4m3(amax / 6.0f);
    const float sfv = static_cast<float>(ref_e4m3_value(sf));
    rec[256 + b] = sf;
    for (int i = 0; i < 16; ++i) {
      const std::uint8_t q = sfv == 0.0f ? 0 : ref_e2m1(x[i] / sfv);
      const int e = 16 * b + i;
      rec[e / 2] |= static_cast<std::uint8_t>(e % 2 ? q << 4 : q);
    }
  }
  if (!fp8_rope) {
    std::memcpy(rec.data() + 304, pe, 128);
  } else {
    float amax = 0.0f;
    for (int i = 0; i < k_rope; ++i) {
      const float v = ref_bf16_to_float(pe[i]);
      if (!std::isnan(v) && std::fabs(v) > amax) amax = std::fabs(v);
    }
    const float rope_scale = amax / 448.0f;
    std::memcpy(rec.data() + 288, &rope_scale, 4);
    for (int i = 0; i < k_rope; ++i)
      rec[304 + i] = rope_scale == 0.0f ? 0 : ref_e4m3(ref_bf16_to_float(pe[i]) / rope_scale);
  }
  return rec;
}

// One output row of the gather: (float(q) * float(sf)) * s, then bf16; RoPE copied or
// dequantized as float(e4m3) * rope_scale.
inline std::vector<std::uint16_t> ref_gather_row(const std::uint8_t* rec, float s, bool dynamic,
                                                 bool fp8_rope) {
  static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::vector<std::uint16_t> out(576);
  for (int e = 0; e < k_latent; ++e) {
    const int q = e % 2 ? rec[e / 2] >> 4 : rec[e / 2] & 0xf;
    const float qv = q & 8 ? -e2m1[q & 7] : e2m1[q & 7];
    float y = qv * static_cast<float>(ref_e4m3_value(rec[256 + e / 16]));
    if (dynamic) y = y * s;
    out[e] = ref_float_to_bf16(y);
  }
  if (!fp8_rope) {
    std::memcpy(out.data() + k_latent, rec + 304, 128);
  } else {
    float rope_scale;
    std::memcpy(&rope_scale, rec + 288, 4);
    for (int i = 0; i < k_rope; ++i)
      out[k_latent + i] = ref_float_to_bf16(static_cast<float>(ref_e4m3_value(rec[304 + i])) * rope_scale);
  }
  return out;
}

}  // namespace jitcache::reference
