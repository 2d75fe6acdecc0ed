"""flashinfer-glm-416 against FlashInfer's GLM NVFP4 reader (engine_reference.py, written from
flashinfer-ai/flashinfer be75a2b19137e93b29618c5c03a36ef2f30e712c: the wrapper
SparseMLAGlmNvfp4Sm120Wrapper, csrc/sparse_mla_sm120/glm_nvfp4_binding.cu and the
shared-memory expansion common/nvfp4_to_fp8.cuh): jitcache's records decode to the values
the reader defines, the reader's FP8 expansion of them stays within E4M3's rounding, and
the per-token mode is refused. The reference itself is checked on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest

import engine_reference as er
from test_engine_reference import bf16, edge_rows, random_rows, rng_with_seed, same_bits

FMT = "flashinfer-glm-416"
# Identity, then calibrated layers from shallow to deep, and a scale far from both.
LAYER_SCALES = (1.0, float(np.float32(0.02 / 2688)), float(np.float32(5.2 / 2688)), 0.37)


def record(codes: np.ndarray, scale_bytes: np.ndarray, rope: np.ndarray | None = None) -> np.ndarray:
    """One 416-byte row from 512 E2M1 nibbles, 32 E4M3 scale bytes and 64 bf16 bits."""
    r = np.zeros((1, 416), dtype=np.uint8)
    r[0, :256] = er.pack_nibbles(np.asarray(codes, dtype=np.uint8)[None, :])[0]
    r[0, 256:288] = scale_bytes
    if rope is not None:
        r[0, 288:] = np.asarray(rope, dtype="<u2").view(np.uint8)
    return r


def test_hand_made_record_expands_as_the_kernel_text_says():
    """Block 0 at E4M3's largest scale (448), block 1 at a subnormal scale (3 * 2^-9), the
    others at 0. max_scale 448: 448 * 6/448 = 6 rounds up to compute_scale 8. Block 0's
    multiplier is 448 / 8 = 56: code 6 gives 336, halfway between E4M3's 320 and 352, and
    the even code (0x7A, 320) wins; code 0.5 gives 28, exact. Block 1's multiplier
    3 * 2^-9 / 8 = 3 * 2^-12: 6 of it is 18 * 2^-12 = 2.25 * 2^-9, below E4M3's normal
    range, where the step is 2^-9: it becomes 2 * 2^-9."""
    codes = np.zeros(512, dtype=np.uint8)
    codes[0], codes[1], codes[2] = 0x7, 0x1, 0xF  # 6, 0.5, -6
    codes[16] = 0x7  # block 1: 6
    scales = np.zeros(32, dtype=np.uint8)
    scales[0], scales[1] = 0x7E, 0x03
    rope = bf16(np.linspace(-1, 1, 64))
    r = record(codes, scales, rope)
    g = 0.25
    fp8, row_scale, values = er.flashinfer_glm_expand(r, g)
    assert row_scale[0] == np.float32(8 * g)
    assert fp8[0, 0] == 0x7A and er.e4m3_decode(fp8[0, :1])[0] == 320
    assert er.e4m3_decode(fp8[0, 1:3]).tolist() == [28.0, -320.0]
    assert fp8[0, 16] == 0x02 and er.e4m3_decode(fp8[0, 16:17])[0] == np.float32(2.0**-8)
    assert values[0, 0] == np.float32(320 * 8 * g)
    nominal = er.flashinfer_glm_values(r, g)
    assert nominal[0, 0] == np.float32(6 * 448 * g) and nominal[0, 16] == np.float32(6 * 3 * 2.0**-9 * g)
    assert same_bits(nominal[0, 512:], er.bf16_to_f32(rope))
    assert not values[0, 3:16].any() and not values[0, 17:].any()


def test_a_row_of_zero_scales_expands_to_zeros():
    r = record(np.full(512, 0x7, dtype=np.uint8), np.zeros(32, dtype=np.uint8))
    fp8, row_scale, values = er.flashinfer_glm_expand(r, 3.0)
    assert row_scale[0] == 0 and not fp8.any() and not values.any()
    assert not er.flashinfer_glm_values(r, 3.0)[0, :512].any()


def test_the_global_scale_must_be_positive_and_finite():
    r = np.zeros((1, 416), dtype=np.uint8)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="kv_global_scale"):
            er.flashinfer_glm_values(r, bad)
    with pytest.raises(ValueError):
        er.flashinfer_glm_values(np.zeros((1, 432), dtype=np.uint8), 1.0)


def host_module():
    try:
        from jitcache import host
    except Exception as error:  # the library is not built here
        pytest.skip(f"jitcache.host unavailable: {error}")
    return host


def glm_rows(rng: np.random.Generator):
    """Random rows (printed seed), the shared edge rows (zeros, E2M1 ties, subnormal
    scales, NaN, infinities, values beyond 448 * 6), and a block at E4M3's largest scale
    beside blocks 2^12 smaller (a row whose expansion has to cover both)."""
    kv, pe = edge_rows(rng)
    more_kv, more_pe = random_rows(rng, 128, magnitude=0.01)
    kv, pe = np.concatenate([kv, more_kv]), np.concatenate([pe, more_pe])
    x = er.bf16_to_f32(kv)
    x[9] = rng.standard_normal(512) * 0.05
    x[9, :16] = 448 * 6 * np.sign(rng.standard_normal(16))
    return bf16(x), pe


def write(host, kv, pe, s):
    latent = "identity" if s == 1.0 else "dynamic"
    records = host.quantize(kv, pe, scale=s, format=FMT, latent_scale=latent)
    back = host.dequantize(records, scale=s, format=FMT, latent_scale=latent)
    return records, back


@pytest.mark.parametrize("s", LAYER_SCALES)
def test_jitcache_writes_what_flashinfer_reads(s):
    """The writer is the exact rule (b12x-432's bytes without [288, 304)); the gather returns
    bf16 of the value FlashInfer's reader defines, E2M1 * E4M3 * kv_global_scale with
    kv_global_scale = s_l (1.0 for identity), and the RoPE bf16 as written."""
    host = host_module()
    kv, pe = glm_rows(rng_with_seed(f"glm416 s={s}"))
    records, back = write(host, kv, pe, s)
    mode = "identity" if s == 1.0 else "layer"
    ref = er.exact_write(kv, pe, FMT, mode, s)
    bad = np.argwhere(records != ref)
    assert bad.size == 0, f"{len(bad)} bytes differ, first (token, byte) {bad[0].tolist()}"
    b12x = er.exact_write(kv, pe, "b12x-432", mode, s)
    assert np.array_equal(records, np.concatenate([b12x[:, :288], b12x[:, 304:]], axis=1))
    values = er.flashinfer_glm_values(records, s)
    assert same_bits(back[:, 512:], values[:, 512:])
    assert same_bits(back[:, :512], er.bf16_to_f32(er.f32_to_bf16(values[:, :512])))


@pytest.mark.parametrize("s", LAYER_SCALES)
def test_the_fp8_expansion_of_jitcache_records_is_one_e4m3_rounding(s):
    """Every value the FP8 MMA sees is the reader's value rounded once to E4M3 on the row's
    power-of-two grid: within half an E4M3 step (2^-4 relative for a normal code, 2^-10
    times the row scale for a subnormal one), exact where the value is on the grid, and
    never saturated (block / compute_scale <= 448 / 6)."""
    host = host_module()
    kv, pe = glm_rows(rng_with_seed(f"glm416 fp8 s={s}"))
    records, _ = write(host, kv, pe, s)
    fp8, row_scale, expanded = er.flashinfer_glm_expand(records, s)
    nominal = er.flashinfer_glm_values(records, s)[:, :512].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # rows of zero scales: row scale 0
        grid = np.where(row_scale[:, None] > 0, nominal / row_scale[:, None].astype(np.float64), 0.0)
    assert np.all(np.abs(grid) <= 448.0)
    err = np.abs(expanded.astype(np.float64) - nominal)
    bound = np.maximum(np.abs(nominal) * 2.0**-4, row_scale[:, None].astype(np.float64) * 2.0**-10)
    assert np.all(err <= bound * (1 + 1e-6)), f"worst {np.max(err / np.maximum(bound, 1e-300))} of the bound"
    on_grid = er.e4m3_decode(er.e4m3_encode(grid.astype(np.float32))).astype(np.float64) == grid
    assert np.all(err[on_grid] == 0)
    # Zero rows stay zero; the expansion keeps signs.
    assert not expanded[0].any()
    assert np.all(np.sign(expanded) * np.sign(nominal) >= 0)


def test_per_token_is_refused_naming_the_reader():
    host = host_module()
    import jitcache

    kv, pe = random_rows(rng_with_seed("glm416 per-token"), 2)
    with pytest.raises(jitcache.InvalidArgumentError,
                       match="flashinfer-glm-416 is not written with a per-token latent scale.*has no per-token scale"):
        host.quantize(kv, pe, scale=1.0, format=FMT, latent_scale="per-token")
