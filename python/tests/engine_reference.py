"""Independent numpy references for the nvfp4_ds_mla record formats the engines read.

Written from the engines' own code (cited per function) and from the number formats'
definitions, not from jitcache's sources, so that the tests can hold jitcache's writer and
reader against them. docs/record-formats.md explains each rule.

Inputs are bf16 bit arrays (uint16) [N, 512] (kv_c) and [N, 64] (k_pe). Writers return
uint8 [N, record_bytes]; readers return float32 [N, 576] holding bf16 values ([N, 512]
for the 304-byte record, which has no RoPE).

Arithmetic: numpy float32 operations are IEEE correctly rounded (round to nearest even,
subnormals kept), which is what the engines' fp32 multiplies and divisions are. Format
conversions are decided by exact comparisons in float64 (every fp32, E4M3 and E2M1 value
and every midpoint between two neighbouring E4M3 or E2M1 values is exact there).
"""

from __future__ import annotations

import numpy as np

LATENT = 512
ROPE = 64
BLOCK = 16
BLOCKS = LATENT // BLOCK

RECORD_BYTES = {"b12x-432": 432, "b12x-368": 368, "b12x-304": 304, "flashmla-352": 352,
                "flashinfer-glm-416": 416}
LAYOUT_BYTES = {432: "b12x-432", 368: "b12x-368", 304: "b12x-304"}

# b12x 1.5.1 kv_cache.py:123 and :129: Python doubles rounded once to fp32 constants.
B12X_RCP_448 = np.float32(1.0 / 448.0)
B12X_RCP_2688 = np.float32(1.0 / (6.0 * 448.0))

_F32 = np.float32
BF16_MAX = np.float32(3.3895313892515355e38)  # 0x7F7F, the largest finite bf16


# ---------------------------------------------------------------------------------------
# bf16

def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"expected bf16 bits as uint16, got {b.dtype}")
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray, satfinite: bool = False) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even; NaN -> 0x7FFF. satfinite: a finite or
    infinite magnitude beyond the largest bf16 becomes +-0x7F7F (cvt.rn.satfinite.bf16x2)."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    nan = np.isnan(x)
    out = np.where(nan, 0x7FFF, rounded)
    if satfinite:
        overflow = ~nan & ((out & 0x7FFF) >= 0x7F80)
        out = np.where(overflow, (out & 0x8000) | 0x7F7F, out)
    return out.astype(np.uint16)


# ---------------------------------------------------------------------------------------
# E4M3 (e4m3fn): bias 7, no infinity, 0x7F/0xFF NaN, max 448, subnormals k * 2^-9.

def _e4m3_table() -> np.ndarray:
    vals = np.empty(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            vals[code] = np.nan
        elif e == 0:
            vals[code] = sign * m * 2.0**-9
        else:
            vals[code] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return vals


E4M3_VALUES = _e4m3_table()
_E4M3_POS = E4M3_VALUES[:0x7F]  # codes 0..0x7E, increasing


def _nearest_code(a: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """For magnitudes a within the grid `positives` (increasing, one per code), the code of the
    nearest value, a tie going to the even code."""
    hi = np.clip(np.searchsorted(positives, a, side="left"), 1, len(positives) - 1)
    lo = hi - 1
    mid = (positives[lo] + positives[hi]) / 2.0
    return np.where(a > mid, hi, np.where(a < mid, lo, np.where(lo % 2 == 0, lo, hi)))


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)].astype(np.float32)


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """fp32 -> E4M3 code: round to nearest, ties to the even code, |x| > 448 (inf too) ->
    +-448, NaN -> 0x7F, the sign kept on a zero result (as cvt.rn.satfinite.e4m3x2.f32)."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x.astype(np.float64))
    code = _nearest_code(a, _E4M3_POS)
    code = np.where(a <= 0.0, 0, code)
    code = np.where(a >= 448.0, 0x7E, code)
    sign = np.where(np.signbit(x), 0x80, 0)
    code = np.where(np.isnan(x), 0x7F, code | sign)
    return code.astype(np.uint8)


# ---------------------------------------------------------------------------------------
# E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.

E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                       dtype=np.float32)
_E2M1_POS = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def e2m1_decode(nibbles: np.ndarray) -> np.ndarray:
    return E2M1_VALUES[np.asarray(nibbles, dtype=np.uint8) & 0xF]


def e2m1_encode(x: np.ndarray) -> np.ndarray:
    """fp32 -> E2M1 nibble: round to nearest, ties to the even code, saturating to +-6,
    NaN -> 0x7 (+6), the sign kept on a zero result (as cvt.rn.satfinite.e2m1x2.f32)."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x.astype(np.float64))
    code = _nearest_code(a, _E2M1_POS)
    code = np.where(a <= 0.0, 0, np.where(a >= 6.0, 7, code))
    code = code | np.where(np.signbit(x), 0x8, 0)
    return np.where(np.isnan(x), 0x7, code).astype(np.uint8)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[N, 512] nibbles -> [N, 256] bytes, element 2i in the low nibble of byte i."""
    c = np.asarray(codes, dtype=np.uint8)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty((p.shape[0], p.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = p & 0xF
    out[:, 1::2] = p >> 4
    return out


# ---------------------------------------------------------------------------------------
# fp32 helpers

def rcp_directed(x: np.ndarray, rounding: str) -> np.ndarray:
    """1/x rounded to fp32 down ("down") or up ("up"): the two values rcp.approx.f32 can
    return when 1/x is not an fp32 value (its error is below one ulp). With .ftz as
    rcp.approx.ftz.f32: a subnormal input counts as a zero of its sign (-> +-inf), a
    subnormal result is flushed to a zero of its sign. 1/+-0 = +-inf, 1/+-inf = +-0."""
    if rounding not in ("down", "up"):
        raise ValueError(f"rcp: expected 'down' or 'up', got {rounding!r}")
    x = np.asarray(x, dtype=np.float32)
    tiny = np.float32(2.0**-126)
    xf = np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exact = 1.0 / xf.astype(np.float64)  # never an fp32 midpoint tie: see the doc
        near = exact.astype(np.float32)
        near64 = near.astype(np.float64)
        if rounding == "down":
            r = np.where(near64 > exact, np.nextafter(near, np.float32(-np.inf)), near)
        else:
            r = np.where(near64 < exact, np.nextafter(near, np.float32(np.inf)), near)
    r = np.where(np.isinf(exact) | np.isnan(exact), exact.astype(np.float32), r)
    r = np.where((np.abs(r) < tiny) & np.isfinite(r), np.copysign(np.float32(0), r), r)
    return r.astype(np.float32)


def nanmax_abs(x: np.ndarray, axis: int) -> np.ndarray:
    """max |x| along axis with NaNs ignored and +0 as the start (max.f32 / fmaxf)."""
    a = np.abs(np.asarray(x, dtype=np.float32))
    return np.max(np.where(np.isnan(a), _F32(0), a), axis=axis, initial=_F32(0))


def _ptx_max_abs(x: np.ndarray, axis: int) -> np.ndarray:
    """b12x's max_abs_16 / token butterfly: max.f32 chains that start from |x_0|, so a
    block whose values are all NaN gives NaN, any other NaN is ignored."""
    a = np.abs(np.asarray(x, dtype=np.float32))
    all_nan = np.all(np.isnan(a), axis=axis)
    m = np.max(np.where(np.isnan(a), _F32(0), a), axis=axis, initial=_F32(0))
    return np.where(all_nan, _F32(np.nan), m).astype(np.float32)


def _rows(bits: np.ndarray, columns: int, name: str) -> np.ndarray:
    b = np.asarray(bits)
    if b.dtype != np.uint16 or b.ndim != 2 or b.shape[1] != columns:
        raise ValueError(f"{name}: expected uint16 bf16 bits [N, {columns}], got {b.dtype} {list(b.shape)}")
    return bf16_to_f32(b)


def _records(records: np.ndarray, nbytes: int) -> np.ndarray:
    r = np.asarray(records)
    if r.dtype != np.uint8 or r.ndim != 2 or r.shape[1] != nbytes:
        raise ValueError(f"records: expected uint8 [N, {nbytes}], got {r.dtype} {list(r.shape)}")
    return r


def f32_bytes(v: np.ndarray) -> np.ndarray:
    """fp32 [N] -> [N, 4] little-endian bytes."""
    return np.ascontiguousarray(np.asarray(v, dtype="<f4")).view(np.uint8).reshape(-1, 4)


def f32_from_bytes(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f4").reshape(-1).astype(np.float32)


# ---------------------------------------------------------------------------------------
# b12x

def b12x_write(kv_c_bf16_bits, k_pe_bf16_bits, layout: int, per_token: bool, rcp: str = "down"):
    """b12x 1.5.1's record writer, attention/_shared/mla/kv_cache.py
    ConcatAndCacheNvfp4MlaFp8RopeKernel.kernel (lines 301-441), with its rcp.approx.ftz.f32
    (_lib/intrinsics.py:2432) emulated by ``rcp`` = "down" or "up".

    Per 16-element block, static mode (kv_cache.py:359-381): amax = max_abs_16 (intrinsics.py
    :6160, max.f32 chain), sf = cvt.rn.satfinite.e4m3(amax * rcp(6)), and, unless the
    decoded sf is 0, codes = cvt.rn.satfinite.e2m1(x * rcp(decoded sf))
    (quantize_and_pack_16_fast, intrinsics.py:6101). Per-token mode (kv_cache.py:319-357):
    s_t = token_amax * f32(1/2688) stored at [292, 296); s_t == 0 writes zero codes and
    scales; else inv = rcp(s_t), sf = e4m3((amax * inv) * rcp(6)), codes =
    e2m1(x * (rcp(decoded sf) * inv)). fp8 RoPE (kv_cache.py:402-441): rope_scale =
    amax * f32(1/448) at [288, 292), codes e4m3(x * rcp(rope_scale)), all 0 when the scale
    is 0. 304 (has_rope=False, always per-token, kv_cache.py:1086-1099): [288, 292) zero.
    432: b12x 1.5.1 has no 432 writer (its readers take one, traits.py:217); this applies
    the same latent rule and stores the bf16 RoPE bits at [304, 432) unchanged.
    """
    if layout not in LAYOUT_BYTES:
        raise ValueError(f"layout: expected 432, 368 or 304, got {layout!r}")
    if layout == 304 and not per_token:
        raise ValueError("layout 304 (GLM_NEXT) is per-token only (b12x traits.py:273)")
    if layout == 432 and per_token:
        raise ValueError("per_token needs the 368-byte record (b12x traits.py:201)")
    kv = _rows(kv_c_bf16_bits, LATENT, "kv_c")
    n = kv.shape[0]
    blocks = kv.reshape(n, BLOCKS, BLOCK)
    rcp6 = rcp_directed(_F32(6.0), rcp)
    amax = _ptx_max_abs(blocks, axis=2)  # [n, 32]
    out = np.zeros((n, layout), dtype=np.uint8)
    with np.errstate(all="ignore"):
        if per_token:
            token_amax = _ptx_max_abs(amax, axis=1)  # the butterfly over the 32 block maxima
            s_t = (token_amax * B12X_RCP_2688).astype(np.float32)
            inv = rcp_directed(s_t, rcp)[:, None]
            sf_code = e4m3_encode((amax * inv) * rcp6)
            dec = e4m3_decode(sf_code)
            step = rcp_directed(dec, rcp) * inv
            live = (s_t != 0)[:, None] & (dec != 0)
            sf_code = np.where((s_t != 0)[:, None], sf_code, 0).astype(np.uint8)
            out[:, 292:296] = f32_bytes(s_t)
        else:
            sf_code = e4m3_encode(amax * rcp6)
            dec = e4m3_decode(sf_code)
            step = rcp_directed(dec, rcp)
            live = dec != 0
        codes = e2m1_encode(blocks * step[:, :, None])
        codes = np.where(live[:, :, None], codes, 0).reshape(n, LATENT)
    out[:, :256] = pack_nibbles(codes)
    out[:, 256:288] = sf_code
    if layout == 432:
        pe = np.asarray(k_pe_bf16_bits)
        _rows(pe, ROPE, "k_pe")
        out[:, 304:432] = np.ascontiguousarray(pe.astype("<u2")).view(np.uint8).reshape(n, 128)
    elif layout == 368:
        pe = _rows(k_pe_bf16_bits, ROPE, "k_pe")
        rope_amax = nanmax_abs(pe, axis=1)  # starts from 0.0 (kv_cache.py:419)
        with np.errstate(all="ignore"):
            scale = (rope_amax * B12X_RCP_448).astype(np.float32)
            rq = e4m3_encode(pe * rcp_directed(scale, rcp)[:, None])
        out[:, 288:292] = f32_bytes(scale)
        out[:, 304:368] = np.where((scale != 0)[:, None], rq, 0)
    return out


def b12x_read(records, layout: int, per_token: bool, s_l: float = 1.0):
    """b12x 1.5.1's dequantization, attention/_shared/mla/decode_math.py _nvfp4_pair_bfloat2
    (lines 1447-1529) and prefill_mg.py _nvfp4_pair_bfloat2_mg (870-915): the E2M1 value
    (cvt.rn.f16x2.e2m1x2, exact) times the E4M3 scale (cvt_e4m3_to_f32_via_f16, exact),
    then times the outer scale (the launch's s_l, or per-token the record's fp32 at
    [292, 296), gathered by io.py:510-527), then cvt.rn.satfinite.bf16x2.f32
    (intrinsics.py:2753). fp8 RoPE (decode_math.py:1421, prefill_mg.py:498): e4m3 value
    times the fp32 at [288, 292), same conversion. bf16 RoPE (432) is read as stored."""
    if layout not in LAYOUT_BYTES:
        raise ValueError(f"layout: expected 432, 368 or 304, got {layout!r}")
    r = _records(records, layout)
    n = r.shape[0]
    q = e2m1_decode(unpack_nibbles(r[:, :256])).reshape(n, BLOCKS, BLOCK)
    sf = e4m3_decode(r[:, 256:288])[:, :, None]
    outer = f32_from_bytes(r[:, 292:296])[:, None, None] if per_token else _F32(s_l)
    with np.errstate(all="ignore"):
        latent = ((q * sf) * outer).reshape(n, LATENT)
    latent = bf16_to_f32(f32_to_bf16(latent, satfinite=True))
    if layout == 304:
        return latent
    if layout == 432:
        rope = bf16_to_f32(np.ascontiguousarray(r[:, 304:432]).view("<u2").reshape(n, ROPE).astype(np.uint16))
    else:
        scale = f32_from_bytes(r[:, 288:292])[:, None]
        with np.errstate(all="ignore"):
            rope = bf16_to_f32(f32_to_bf16(e4m3_decode(r[:, 304:368]) * scale, satfinite=True))
    return np.concatenate([latent, rope], axis=1).astype(np.float32)


# ---------------------------------------------------------------------------------------
# vLLM 0.33 (FlashMLA sparse, SM100)

def flashmla_scale_byte(block: int) -> int:
    """Offset in the record of block s's scale: 320 + 8*(s & 3) + (s >> 2)
    (vLLM 0.33 flashmla_sparse.py:111-122; FlashMLA's nvfp4_sf_byte)."""
    return 320 + 8 * (block & 3) + (block >> 2)


FLASHMLA_SCALE_OFFSETS = np.array([flashmla_scale_byte(s) for s in range(BLOCKS)])
FLASHMLA_FLOOR = np.float32(2.0**-9)


def vllm_flashmla_write(kv_c_bf16_bits, k_pe_bf16_bits):
    """vLLM 0.33's concat_and_cache_nvfp4_ds_mla_kernel (in _C_stable_libtorch.abi3.so; its
    sm_100f machine code read with cuobjdump -sass): per block amax = fmaxf chain from 0
    (NaN ignored), sf = cvt.rn.satfinite.e4m3(max(amax / 6, 2^-9)) with an IEEE division,
    inv = 1.0f / float(sf) correctly rounded, codes = cvt.rn.satfinite.e2m1(x * inv); scale
    bytes permuted (flashmla_scale_byte); RoPE = cvt.rn.satfinite.e4m3(k_pe) at [256, 320).
    Every step is correctly rounded, so this is the writer's exact output."""
    kv = _rows(kv_c_bf16_bits, LATENT, "kv_c")
    pe = _rows(k_pe_bf16_bits, ROPE, "k_pe")
    n = kv.shape[0]
    blocks = kv.reshape(n, BLOCKS, BLOCK)
    amax = nanmax_abs(blocks, axis=2)
    with np.errstate(all="ignore"):
        sf_code = e4m3_encode(np.maximum(amax / _F32(6.0), FLASHMLA_FLOOR))
        inv = (_F32(1.0) / e4m3_decode(sf_code)).astype(np.float32)
        codes = e2m1_encode(blocks * inv[:, :, None]).reshape(n, LATENT)
    out = np.zeros((n, 352), dtype=np.uint8)
    out[:, :256] = pack_nibbles(codes)
    out[:, 256:320] = e4m3_encode(pe)
    out[:, FLASHMLA_SCALE_OFFSETS] = sf_code
    return out


def vllm_flashmla_read(records):
    """vLLM 0.33's cp_gather_and_upconvert_nvfp4_kv_cache (_custom_ops.py:3150; kernel
    cp_gather_and_upconvert_nvfp4_kv_cache_kernel): e2m1 and e4m3 to f16, one f16 multiply
    (HMUL2, exact: at most 6 significant bits, |q*sf| <= 2688), f16 -> f32 -> bf16 (RN);
    RoPE bf16(e4m3). No outer scale anywhere."""
    r = _records(records, 352)
    n = r.shape[0]
    q = e2m1_decode(unpack_nibbles(r[:, :256])).reshape(n, BLOCKS, BLOCK)
    sf = e4m3_decode(r[:, FLASHMLA_SCALE_OFFSETS])[:, :, None]
    latent = bf16_to_f32(f32_to_bf16((q * sf).reshape(n, LATENT)))
    rope = bf16_to_f32(f32_to_bf16(e4m3_decode(r[:, 256:320])))
    return np.concatenate([latent, rope], axis=1).astype(np.float32)


# ---------------------------------------------------------------------------------------
# FlashInfer main (GLM-5.2 NVFP4 sparse MLA, SM120), commit
# be75a2b19137e93b29618c5c03a36ef2f30e712c of flashinfer-ai/flashinfer:
#   flashinfer/mla/_sparse_mla_glm_nvfp4_sm120.py   SparseMLAGlmNvfp4Sm120Wrapper: 416-byte
#       rows in 64-token pages; "a latent value is E2M1 * E4M3_scale * global_scale", one
#       positive finite fp32 kv_global_scale on the device
#   csrc/sparse_mla_sm120/glm_nvfp4_binding.cu     kv stride 416, page_block_size 64
#   include/flashinfer/attention/sparse_mla_sm120/common/nvfp4_to_fp8.cuh
#       expand_nvfp4_kv_tile: lane b reads bytes [8b, 8b+8) (block b's 16 codes) and scale
#       byte 256 + b; RoPE bf16 at 288; the row is expanded in shared memory to 512 E4M3
#       bytes and four equal fp32 scales, described step by step in flashinfer_glm_expand.

FLASHINFER_GLM_BYTES = 416
FLASHINFER_GLM_SCALES = 256
FLASHINFER_GLM_ROPE = 288
FLASHINFER_GLM_PAGE = 64
_RCP_E4M3_MAX_TIMES_6 = np.float32(6.0) / np.float32(448.0)  # the fp32 constant 6.f / 448.f


def _global_scale(kv_global_scale) -> np.float32:
    g = np.float32(kv_global_scale)
    if not (np.isfinite(g) and g > 0):
        raise ValueError(f"kv_global_scale: expected a positive finite fp32, got {kv_global_scale!r}")
    return g


def flashinfer_glm_values(records, kv_global_scale):
    """The values the wrapper's documentation defines for each row: latent e = E2M1(code e)
    * E4M3(scale byte 256 + e // 16) * kv_global_scale (the first product is exact, the
    second one fp32 multiply), RoPE the bf16 at [288, 416). float32 [N, 576]."""
    r = _records(records, FLASHINFER_GLM_BYTES)
    g = _global_scale(kv_global_scale)
    n = r.shape[0]
    q = e2m1_decode(unpack_nibbles(r[:, :256])).reshape(n, BLOCKS, BLOCK)
    sf = e4m3_decode(r[:, FLASHINFER_GLM_SCALES:FLASHINFER_GLM_SCALES + BLOCKS])[:, :, None]
    with np.errstate(all="ignore"):
        latent = ((q * sf).astype(np.float32) * g).astype(np.float32).reshape(n, LATENT)
    rope = bf16_to_f32(np.ascontiguousarray(r[:, FLASHINFER_GLM_ROPE:]).view("<u2").reshape(n, ROPE))
    return np.concatenate([latent, rope], axis=1).astype(np.float32)


def flashinfer_glm_expand(records, kv_global_scale):
    """expand_nvfp4_kv_tile, one row at a time: (E4M3 codes uint8 [N, 512], the row's fp32
    scale [N], the values the FP8 MMA multiplies, float32 [N, 512]).

      max_scale     = E4M3 value of the largest scale byte of the row (an integer maximum
                      of the bytes: nonnegative E4M3 codes order as their values)
      lower_bound   = fp32(max_scale * fp32(6 / 448))
      compute_scale = lower_bound raised to a power of two (the exponent bits plus one
                      when any mantissa bit is set), 0 when lower_bound is 0
      multiplier    = fp32(block_scale * (1 / compute_scale)) (exact: a power of two), 0
                      when compute_scale is 0, then rounded to f16
      code          = E4M3 round-to-nearest-even, satfinite, of the f16 product
                      f16(E2M1) * f16(multiplier)
      row scale     = fp32(compute_scale * kv_global_scale), stored four times at 512
    """
    r = _records(records, FLASHINFER_GLM_BYTES)
    g = _global_scale(kv_global_scale)
    n = r.shape[0]
    scale_bytes = r[:, FLASHINFER_GLM_SCALES:FLASHINFER_GLM_SCALES + BLOCKS]
    max_scale = e4m3_decode(scale_bytes.max(axis=1))
    lower = (max_scale * _RCP_E4M3_MAX_TIMES_6).astype(np.float32)
    bits = lower.view(np.uint32)
    bits = np.where(bits & 0x007FFFFF, (bits + 0x00800000) & 0x7F800000, bits).astype(np.uint32)
    compute = bits.view(np.float32)
    block = e4m3_decode(scale_bytes)
    with np.errstate(all="ignore"):
        multiplier = np.where(compute[:, None] > 0, block / compute[:, None], np.float32(0)).astype(np.float32)
    multiplier_h = multiplier.astype(np.float16)
    q = e2m1_decode(unpack_nibbles(r[:, :256])).astype(np.float16).reshape(n, BLOCKS, BLOCK)
    product = (q * multiplier_h[:, :, None]).astype(np.float16).reshape(n, LATENT)
    codes = e4m3_encode(product.astype(np.float32))
    row_scale = (compute * g).astype(np.float32)
    with np.errstate(all="ignore"):
        values = (e4m3_decode(codes) * row_scale[:, None]).astype(np.float32)
    return codes, row_scale, values


# ---------------------------------------------------------------------------------------
# jitcache's exact rule, written from the table

MODES = ("identity", "layer", "per-token")


def _check_format_mode(fmt: str, mode: str) -> None:
    if fmt not in RECORD_BYTES:
        raise ValueError(f"format: expected one of {sorted(RECORD_BYTES)}, got {fmt!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    allowed = {"b12x-432": ("identity", "layer"), "b12x-368": MODES,
               "b12x-304": ("per-token",), "flashmla-352": ("identity", "layer"),
               "flashinfer-glm-416": ("identity", "layer")}[fmt]
    if mode not in allowed:
        raise ValueError(f"mode: {fmt} takes {allowed}, got {mode!r}")


def exact_write(kv_c, k_pe, fmt: str, mode: str, s: float = 1.0, flashmla_round_up: bool = False):
    """jitcache's exact writer: x = kv_c / s (identity: x = kv_c; per-token s = s_t =
    rn(min(max|kv_c|, largest bf16) / 2688), NaN ignored), per block amax = max|x| (NaN ignored), sf =
    e4m3(amax / 6) [flashmla-352: e4m3(max(amax / 6, 2^-9))], codes = e2m1(x / float(sf))
    (sf == 0: zeros). fp8 RoPE: scale = rn(amax(k_pe) / 448), codes e4m3(k_pe / scale)
    (scale 0: zeros); flashmla RoPE e4m3(k_pe). Every division correctly rounded.
    flashmla_round_up: the block scale is the smallest E4M3 value >= max(amax/6, 2^-9)
    instead (the rule of an earlier vLLM writer, kept to measure it)."""
    _check_format_mode(fmt, mode)
    kv = _rows(kv_c, LATENT, "kv_c")
    n = kv.shape[0]
    nbytes = RECORD_BYTES[fmt]
    out = np.zeros((n, nbytes), dtype=np.uint8)
    with np.errstate(all="ignore"):
        if mode == "identity":
            x, s_t = kv, None
        elif mode == "layer":
            if not (np.isfinite(s) and s > 0):
                raise ValueError(f"s: expected a finite scale > 0, got {s!r}")
            x, s_t = (kv / _F32(s)).astype(np.float32), None
        else:
            # An infinity saturates to the largest finite bf16 first, so s_t is finite
            # (jitcache's kernel text: nvfp4_mla_formats.cuh, per_token_scale).
            token_amax = np.minimum(nanmax_abs(kv, axis=1), BF16_MAX)
            s_t = (token_amax / _F32(2688.0)).astype(np.float32)
            x = np.where((s_t != 0)[:, None], kv / s_t[:, None], _F32(0)).astype(np.float32)
        blocks = x.reshape(n, BLOCKS, BLOCK)
        amax = nanmax_abs(blocks, axis=2)
        target = (amax / _F32(6.0)).astype(np.float32)
        if fmt == "flashmla-352":
            target = np.maximum(target, FLASHMLA_FLOOR)
        sf_code = e4m3_encode(target)
        if fmt == "flashmla-352" and flashmla_round_up:
            low = (e4m3_decode(sf_code) < target) & (sf_code < 0x7E)
            sf_code = (sf_code + low).astype(np.uint8)
        sf = e4m3_decode(sf_code)[:, :, None]
        codes = np.where(sf != 0, e2m1_encode(blocks / sf), 0).reshape(n, LATENT)
    out[:, :256] = pack_nibbles(codes)
    if fmt == "flashmla-352":
        out[:, FLASHMLA_SCALE_OFFSETS] = sf_code
        out[:, 256:320] = e4m3_encode(_rows(k_pe, ROPE, "k_pe"))
        return out
    out[:, 256:288] = sf_code
    if s_t is not None:
        out[:, 292:296] = f32_bytes(s_t)
    if fmt in ("b12x-432", "flashinfer-glm-416"):
        pe = np.asarray(k_pe)
        _rows(pe, ROPE, "k_pe")
        at = FLASHINFER_GLM_ROPE if fmt == "flashinfer-glm-416" else 304
        out[:, at:at + 128] = np.ascontiguousarray(pe.astype("<u2")).view(np.uint8).reshape(n, 128)
    elif fmt == "b12x-368":
        pe = _rows(k_pe, ROPE, "k_pe")
        with np.errstate(all="ignore"):
            scale = (nanmax_abs(pe, axis=1) / _F32(448.0)).astype(np.float32)
            rq = e4m3_encode(pe / scale[:, None])
        out[:, 288:292] = f32_bytes(scale)
        out[:, 304:368] = np.where((scale != 0)[:, None], rq, 0)
    return out


def exact_read(records, fmt: str, mode: str, s: float = 1.0):
    """jitcache's exact reader: bf16(rn(rn(float(q) * float(sf)) * s)) with s = 1
    (identity), s_l (layer) or the record's s_t (per-token); bf16 round to nearest even,
    overflow to infinity (no satfinite), NaN -> 0x7FFF. fp8 RoPE bf16(e4m3 * scale)."""
    _check_format_mode(fmt, mode)
    if fmt == "flashmla-352":
        read = vllm_flashmla_read(records)
        if mode == "identity":
            return read
        # Reader-side restore of a record written with kv_c / s_l (jitcache's dynamic
        # flashmla-352 gather; FlashMLA itself applies no scale): the same exact product
        # q * sf, times s_l, rounded once to bf16.
        r = _records(records, RECORD_BYTES[fmt])
        n = r.shape[0]
        q = e2m1_decode(unpack_nibbles(r[:, :256])).reshape(n, BLOCKS, BLOCK)
        sf = e4m3_decode(r[:, FLASHMLA_SCALE_OFFSETS])[:, :, None]
        with np.errstate(all="ignore"):
            product = ((q * sf).astype(np.float32) * _F32(s)).astype(np.float32)
        read[:, :LATENT] = bf16_to_f32(f32_to_bf16(product.reshape(n, LATENT)))
        return read
    if fmt == "flashinfer-glm-416":
        # The values FlashInfer's wrapper defines, rounded once to bf16: the gather's output.
        values = flashinfer_glm_values(records, s if mode == "layer" else 1.0)
        values[:, :LATENT] = bf16_to_f32(f32_to_bf16(values[:, :LATENT]))
        return values
    nbytes = RECORD_BYTES[fmt]
    r = _records(records, nbytes)
    n = r.shape[0]
    q = e2m1_decode(unpack_nibbles(r[:, :256])).reshape(n, BLOCKS, BLOCK)
    sf = e4m3_decode(r[:, 256:288])[:, :, None]
    with np.errstate(all="ignore"):
        product = (q * sf).astype(np.float32)
        if mode == "per-token":
            product = product * f32_from_bytes(r[:, 292:296])[:, None, None]
        elif mode == "layer":
            product = product * _F32(s)
    latent = bf16_to_f32(f32_to_bf16(product.reshape(n, LATENT)))
    if fmt == "b12x-304":
        return latent
    if fmt == "b12x-432":
        rope = bf16_to_f32(np.ascontiguousarray(r[:, 304:432]).view("<u2").reshape(n, ROPE).astype(np.uint16))
    else:
        with np.errstate(all="ignore"):
            rope = bf16_to_f32(f32_to_bf16(e4m3_decode(r[:, 304:368]) * f32_from_bytes(r[:, 288:292])[:, None]))
    return np.concatenate([latent, rope], axis=1).astype(np.float32)
