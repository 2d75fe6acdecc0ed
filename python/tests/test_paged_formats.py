"""The page-major records (flashinfer-dsv4-384, flashmla-v41-288) through jitcache.host and
the CLI's `kv quantize` / `kv dequantize`, against references written here from FlashInfer
0.7.2.post1's writers and readers:

- csrc/sparse_mla_sm120/dsv4_nvfp4_cache_ops.cu (quantize_token) and
  include/flashinfer/attention/sparse_mla_sm120/compute/nvfp4_quantization.cuh
  (quantize_fp32_group16_to_nvfp4_regs), built with -use_fast_math: amax / 6.f becomes a
  multiply by float32(1/6) = 0x3E2AAAAB, every operation flushes subnormals, and 1 / scale
  is MUFU.RCP, for which the reference takes the correctly rounded reciprocal;
- csrc/sparse_mla_sm120/dsv41_fp4_cache_ops.cu (quantize_dsv41_group16): exact division,
  the scale clamped to [2^-9, 448], a group with a NaN or an infinity poisoned (codes 0,
  scale 0x7F);
- model/kv_storage.cuh (FooterScaleLayout) for where a slot's bytes lie in its page.

numpy only, nearest-value searches over the E4M3 and E2M1 grids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jitcache import formats, host
from conftest import run_cli

PAGE = 64
FORMATS = ("flashinfer-dsv4-384", "flashmla-v41-288")

_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def _e4m3_values() -> np.ndarray:
    codes = np.arange(0x7F)
    e, m = (codes >> 3) & 15, codes & 7
    return np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e - 7))


_E4M3 = _e4m3_values()  # codes 0..0x7E, increasing


def nearest_code(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index of the grid value nearest x >= 0, ties to the even index, saturating at the top."""
    hi = np.clip(np.searchsorted(grid, x), 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = x - grid[lo], grid[hi] - x
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(x >= grid[-1], len(grid) - 1, pick)


def ftz(x: np.ndarray) -> np.ndarray:
    """-use_fast_math's flush: a subnormal float32 becomes a zero of its sign."""
    tiny = (np.abs(x) < np.float32(2.0**-126)) & (x != 0)
    return np.where(tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def e2m1_codes(x: np.ndarray) -> np.ndarray:
    """cvt.rn.satfinite.e2m1x2.f32: nearest, ties even, saturating, NaN -> 0x7, sign kept."""
    with np.errstate(invalid="ignore"):
        mag = nearest_code(np.nan_to_num(np.abs(x.astype(np.float64)), nan=0.0), _E2M1)
    code = mag | np.where(np.signbit(x), 8, 0)
    return np.where(np.isnan(x), 7, code).astype(np.uint8)


def reference_write(fmt: str, bits: np.ndarray) -> np.ndarray:
    """bf16 bits [N, 512] -> the cache's bytes, [pages, 64, record bytes], slot t = row t."""
    n = bits.shape[0]
    x = (bits.astype(np.uint32) << 16).view(np.float32)
    groups = 28 if fmt == "flashinfer-dsv4-384" else 32
    g = x[:, : 16 * groups].reshape(n, groups, 16)
    if fmt == "flashinfer-dsv4-384":
        with np.errstate(invalid="ignore"):
            amax = np.nanmax(np.where(np.isnan(g), 0, np.abs(ftz(g))), axis=2)
        scaled = ftz((amax * np.float32(np.uint32(0x3E2AAAAB).view(np.float32))).astype(np.float32))
        sf = nearest_code(scaled.astype(np.float64), _E4M3)
        value = _E4M3[sf]
        inv = np.where(value == 0, 0, (1.0 / np.where(value == 0, 1, value))).astype(np.float32)
        with np.errstate(invalid="ignore"):
            q = ftz((ftz(g) * inv[:, :, None]).astype(np.float32))
        poisoned = np.zeros((n, groups), dtype=bool)
    else:
        poisoned = ~np.isfinite(g).all(axis=2)
        safe = np.where(np.isfinite(g), g, 0).astype(np.float32)
        amax = np.abs(ftz(safe)).max(axis=2)
        quotient = ftz((amax / np.float32(6)).astype(np.float32))
        sf = nearest_code(np.clip(quotient, 2.0**-9, 448).astype(np.float64), _E4M3)
        q = ftz((ftz(safe).astype(np.float64) / _E4M3[sf][:, :, None]).astype(np.float32))
    codes = e2m1_codes(q)
    codes = np.where(poisoned[:, :, None], 0, codes)
    sf = np.where(poisoned, 0x7F, sf).astype(np.uint8)
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).reshape(n, 8 * groups).astype(np.uint8)
    data_bytes = 352 if fmt == "flashinfer-dsv4-384" else 256
    record = data_bytes + 32
    pages = -(-n // PAGE)
    cache = np.zeros((pages, PAGE * record), dtype=np.uint8)
    for t in range(n):
        page, entry = divmod(t, PAGE)
        data = packed[t]
        if fmt == "flashinfer-dsv4-384":
            data = np.concatenate([data, bits[t, 448:].view(np.uint8)])  # the RoPE's bf16 bits
        cache[page, entry * data_bytes : (entry + 1) * data_bytes] = data
        footer = PAGE * data_bytes + entry * 32
        cache[page, footer : footer + groups] = sf[t]  # 384: bytes 28..31 stay 0
    return cache.reshape(pages, PAGE, record)


def reference_read(fmt: str, cache: np.ndarray) -> np.ndarray:
    """The readers: E2M1 x E4M3 (exact in bf16), a NaN scale a NaN group; the RoPE as stored."""
    pages, _, record = cache.shape
    data_bytes = record - 32
    flat = cache.reshape(pages, PAGE * record)
    data = flat[:, : PAGE * data_bytes].reshape(pages * PAGE, data_bytes)
    footer = flat[:, PAGE * data_bytes :].reshape(pages * PAGE, 32)
    quantized = 448 if fmt == "flashinfer-dsv4-384" else 512
    codes = np.stack([data[:, : quantized // 2] & 15, data[:, : quantized // 2] >> 4], axis=2).reshape(-1, quantized)
    sf = np.repeat(footer[:, : quantized // 16], 16, axis=1)
    value = np.where(codes & 8, -1, 1) * _E2M1[codes & 7] * _E4M3[np.minimum(sf & 0x7F, 0x7E)]
    bf16 = (value.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact: no rounding
    bf16 = np.where((sf & 0x7F) == 0x7F, np.uint16(0x7FFF), bf16)
    if fmt == "flashinfer-dsv4-384":
        bf16 = np.concatenate([bf16, data[:, 224:352].copy().view(np.uint16)], axis=1)
    return bf16


def make_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """bf16 bits [n + 8, 512]: random groups over 1e-4..3000, some arbitrary finite bits,
    then zeros and -0, NaN/inf among values, huge values, subnormals, E2M1 ties, tiny groups."""
    mags = np.exp(rng.uniform(np.log(1e-4), np.log(3000), size=(n, 32, 1)))
    x = (rng.standard_normal((n, 32, 16)) * mags).astype(np.float32).reshape(n, 512)
    bits = ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
    wild = rng.integers(0, 0x10000, size=(n, 512), dtype=np.uint16)
    wild = np.where((wild & 0x7F80) == 0x7F80, wild & 0xBFFF, wild)  # finite
    bits[::5] = wild[::5]
    edge = np.zeros((8, 512), dtype=np.uint16)
    edge[0, ::3] = 0x8000
    edge[1] = rng.integers(0x3C00, 0x4100, size=512)
    edge[1, [5, 77, 150, 470]] = [0x7FC0, 0x7F80, 0xFF80, 0x7F81]
    edge[1, 256:272] = 0xFFC1
    edge[2] = 0x4F00 + np.arange(512) % 0x70  # ~2e9 and more: beyond 448 * 6
    edge[2, 33], edge[2, 300] = 0x7F7F, 0xFF7F
    edge[3] = (np.arange(512) * 37 % 0x7F + 1) | np.where(np.arange(512) % 3 == 0, 0x8000, 0)  # subnormals
    ties = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, 0.5])
    for g in range(32):
        scale = 2.0 ** (g % 12 - 6) * (1.0, 1.5, 1.125)[g % 3]
        edge[4, 16 * g : 16 * g + 16] = (np.float32(ties * scale).view(np.uint32) >> 16).astype(np.uint16)
    tiny = np.float32(2.0 ** (-8 - np.arange(512) // 16 % 8) * (np.arange(512) % 5 - 2) * 1.5)
    edge[5] = (tiny.view(np.uint32) >> 16).astype(np.uint16)
    edge[6] = np.where(np.arange(512) % 16 == 3, 0x7FC0, 0x3A83)
    edge[7] = (np.float32(2.0 ** (np.arange(512) % 60 - 30)).view(np.uint32) >> 16).astype(np.uint16)
    return np.concatenate([bits, edge])


@pytest.mark.parametrize("fmt", FORMATS)
def test_host_writes_the_engine_writers_bytes_and_reads_its_readers_values(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    bits = make_rows(rng, 100)  # 108 rows: two pages, the second part empty
    records = host.quantize(bits, None, format=fmt)
    assert records.shape == (2, PAGE, formats.RECORD_BYTES[fmt]) and records.dtype == np.uint8
    want = reference_write(fmt, bits)
    mismatch = np.flatnonzero(records.reshape(-1) != want.reshape(-1))
    assert mismatch.size == 0, f"{fmt}: {mismatch.size} bytes differ, first at {mismatch[:5]}"
    rows = host.dequantize(records, format=fmt)
    assert rows.shape == (2 * PAGE, 512)
    got = (rows.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal(got, reference_read(fmt, want))


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_kv_tools_write_the_same_bytes(fmt: str, seed: int, cli: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    bits = make_rows(rng, 60)
    values = (bits.astype(np.uint32) << 16).view(np.float32)  # exactly the bf16 values
    src, out, back = tmp_path / "x.npy", tmp_path / "records.bin", tmp_path / "y.npy"
    np.save(src, values)
    run_cli(cli, "kv", "quantize", "--input", str(src), "--format", fmt, "--out", str(out))
    # The CLI reads float32 and rounds it to bf16 as a bf16 tensor would hold it: a NaN
    # becomes the canonical 0x7FFF (docs/cli.md), which the 384's RoPE then stores.
    bits = np.where(np.isnan(values), np.uint16(0x7FFF), bits)
    assert out.read_bytes() == reference_write(fmt, bits).tobytes()
    run_cli(cli, "kv", "dequantize", "--input", str(out), "--format", fmt, "--out", str(back))
    y = np.load(back)
    assert y.shape == (2 * PAGE, 512)
    want = reference_read(fmt, reference_write(fmt, bits))
    assert np.array_equal((y.view(np.uint32) >> 16).astype(np.uint16), want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_what_a_page_major_format_refuses(fmt: str, cli: Path, tmp_path: Path) -> None:
    assert formats.latent_scales(fmt) == ("identity",)
    assert formats.page_size(fmt) == PAGE and not formats.has_rope(fmt) and formats.row_width(fmt) == 512
    kv = np.zeros((3, 512), dtype=np.float32)
    with pytest.raises(ValueError, match="k_pe"):
        host.quantize(kv, np.zeros((3, 64), dtype=np.float32), format=fmt)
    with pytest.raises(Exception, match="identity"):
        host.quantize(kv, None, 0.5, format=fmt)
    one_record = np.zeros(formats.RECORD_BYTES[fmt] * 3, dtype=np.uint8)
    with pytest.raises(ValueError, match="64-slot pages"):
        host.dequantize(one_record, format=fmt)
    src = tmp_path / "x.npy"
    np.save(src, np.zeros((3, 576), dtype=np.float32))
    proc = run_cli(cli, "kv", "quantize", "--input", str(src), "--format", fmt, "--out", str(tmp_path / "r"), check=False)
    assert proc.returncode != 0 and "(T, 512)" in proc.stderr, proc.stderr
