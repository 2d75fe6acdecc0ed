"""jitcache.host against the CLI's `kv quantize` / `kv dequantize`, byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jitcache
from jitcache import _lib, host
from conftest import TARGET, run_cli

ROPES = ("bf16", "fp8")
GLM5_LAYER0_SCALE = float(np.float32(0.02 / 2688))  # a calibrated shallow layer


def f32(x: float) -> float:
    return float(np.float32(x))


def cli_quantize(cli: Path, tmp: Path, rows: np.ndarray, scale: float, rope: str) -> bytes:
    """rows: float32 [T, 576] or [T, 512] -> the CLI's records."""
    assert rows.dtype == np.float32
    src, out = tmp / "x.npy", tmp / "records.bin"
    np.save(src, rows)
    run_cli(cli, "kv", "quantize", "--input", str(src), "--scale", repr(scale), "--rope", rope, "--out", str(out))
    return out.read_bytes()


def cli_dequantize(cli: Path, tmp: Path, records: bytes, scale: float, rope: str) -> np.ndarray:
    src, out = tmp / "in.bin", tmp / "y.npy"
    src.write_bytes(records)
    run_cli(cli, "kv", "dequantize", "--input", str(src), "--scale", repr(scale), "--rope", rope, "--out", str(out))
    y = np.load(out)
    assert y.dtype == np.float32
    return y


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    diff = np.nonzero(a.view(np.uint32) != b.view(np.uint32))
    assert diff[0].size == 0, f"{diff[0].size} values differ, first at {[d[0] for d in diff]}"


def round_trip_matches_cli(cli: Path, tmp: Path, kv_c, k_pe, scale: float, rope: str) -> np.ndarray:
    """host.quantize / dequantize == the CLI's for these rows; returns the host records."""
    records = host.quantize(kv_c, k_pe, scale, rope)
    n = np.asarray(kv_c).shape[0]
    assert records.shape == (n, host.RECORD_BYTES[rope]) and records.dtype == np.uint8
    widen = (lambda a: host.bf16_to_float(a)) if np.asarray(kv_c).dtype == np.uint16 else (lambda a: a)
    rows = widen(kv_c) if k_pe is None else np.concatenate([widen(kv_c), widen(k_pe)], axis=1)
    expected = cli_quantize(cli, tmp, np.ascontiguousarray(rows, dtype=np.float32), scale, rope)
    assert len(expected) == records.nbytes
    if records.tobytes() != expected:
        bad = np.nonzero(records.reshape(-1) != np.frombuffer(expected, np.uint8))[0]
        pytest.fail(f"{bad.size} record bytes differ from the CLI, first at byte {bad[0]} "
                    f"(token {bad[0] // records.shape[1]}, offset {bad[0] % records.shape[1]})")
    assert_same_bits(host.dequantize(records, scale, rope), cli_dequantize(cli, tmp, expected, scale, rope))
    return records


def random_rows(rng: np.random.Generator, n: int, columns: int) -> np.ndarray:
    """Post-RMSNorm-like rows whose magnitude spans the layers' range (0.02 to 5.2 and beyond)."""
    magnitude = np.exp(rng.uniform(np.log(1e-3), np.log(20.0), size=(n, 1)))
    return (rng.standard_normal((n, columns)) * magnitude).astype(np.float32)


@pytest.mark.parametrize("rope", ROPES)
def test_random_rows_match_cli(cli: Path, tmp_path: Path, seed: int, rope: str) -> None:
    rng = np.random.default_rng(seed)
    n = 257
    kv_c, k_pe = random_rows(rng, n, 512), random_rows(rng, n, 64)
    dynamic = f32(float(np.abs(kv_c).max()) / 2688.0)
    for scale in (1.0, dynamic, GLM5_LAYER0_SCALE, f32(rng.uniform(0.01, 4.0))):
        round_trip_matches_cli(cli, tmp_path, kv_c, k_pe, scale, rope)


@pytest.mark.parametrize("rope", ROPES)
def test_bf16_bits_input_matches_cli(cli: Path, tmp_path: Path, seed: int, rope: str) -> None:
    """uint16 input is bf16 as a tensor holds it; the CLI gets the same values widened."""
    rng = np.random.default_rng(seed)
    n = 64
    bits = rng.integers(0, 1 << 16, size=(n, 576), dtype=np.uint32).astype(np.uint16)
    is_nan = ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)
    bits[is_nan] = 0x7FFF  # the CLI (float32 input) can only express the canonical NaN
    kv_c, k_pe = bits[:, :512], bits[:, 512:]
    for scale in (1.0, f32(rng.uniform(1e-5, 1.0))):
        records = round_trip_matches_cli(cli, tmp_path, kv_c, k_pe, scale, rope)
        as_float = host.quantize(host.bf16_to_float(kv_c), host.bf16_to_float(k_pe), scale, rope)
        assert np.array_equal(records, as_float)


def edge_rows() -> tuple[np.ndarray, np.ndarray]:
    big = np.float32(3.0e38)
    rows = []
    pes = []

    def add(latent, pe=None) -> None:
        row = np.zeros(512, np.float32)
        row[: len(latent)] = latent
        rows.append(row)
        p = np.zeros(64, np.float32)
        if pe is not None:
            p[: len(pe)] = pe
        pes.append(p)

    add([])  # all zeros
    add([np.nan] + [0.5] * 15)  # a NaN among normal values
    add([np.nan, 0.0, np.nan] + [0.0] * 13)  # only NaN and zeros: scale 0
    add([np.inf, 1.0, -2.0, 3.0])  # +inf saturates the block scale
    add([-np.inf] * 16 + [1.0] * 16)
    add([big, -big, 1.0, 1e30])  # beyond bf16's range after rounding: inf
    add([np.finfo(np.float32).max, 1e38, -1e38])
    add([1e-30, -1e-35, 1e-40, 5e-45])  # tiny and subnormal
    add(np.full(512, 6 * 448.0, np.float32))  # the top of the block-scale range
    add(np.full(512, 1e4, np.float32))  # beyond it: clamps
    add(np.linspace(-7.0, 7.0, 512, dtype=np.float32))  # every E2M1 decision region
    add([0.25] * 16, pe=[np.nan, 1.0, 2.0])  # NaN in the RoPE part
    add([0.25] * 16, pe=[np.inf, 1.0, -3.0])  # inf in the RoPE part (fp8: rope_scale inf)
    add([0.25] * 16, pe=[-np.inf, 0.0])
    add([0.25] * 16, pe=np.full(64, 1e38, np.float32))
    add([-0.0] * 16, pe=[-0.0, 1e-40])
    return np.stack(rows), np.stack(pes)


@pytest.mark.parametrize("rope", ROPES)
@pytest.mark.parametrize("scale", [1.0, GLM5_LAYER0_SCALE, f32(5.2 / 2688)])
def test_edge_rows_match_cli(cli: Path, tmp_path: Path, rope: str, scale: float) -> None:
    kv_c, k_pe = edge_rows()
    with np.errstate(all="ignore"):
        round_trip_matches_cli(cli, tmp_path, kv_c, k_pe, scale, rope)


@pytest.mark.parametrize("rope", ROPES)
def test_latent_only_rows_match_cli(cli: Path, tmp_path: Path, seed: int, rope: str) -> None:
    """[N, 512] with k_pe None: zero RoPE, like the CLI's [T, 512] input."""
    rng = np.random.default_rng(seed)
    kv_c = random_rows(rng, 33, 512)
    for scale in (1.0, f32(0.37)):
        records = round_trip_matches_cli(cli, tmp_path, kv_c, None, scale, rope)
        zeros = host.quantize(kv_c, np.zeros((33, 64), np.float32), scale, rope)
        assert np.array_equal(records, zeros)


@pytest.mark.parametrize("rope", ROPES)
def test_arbitrary_records_dequantize_like_cli(cli: Path, tmp_path: Path, seed: int, rope: str) -> None:
    """Any bytes (NaN block scales, NaN/inf fp8 rope scales) dequantize as the CLI does."""
    rng = np.random.default_rng(seed)
    records = rng.integers(0, 256, size=(100, host.RECORD_BYTES[rope]), dtype=np.uint8)
    for scale in (1.0, f32(0.003)):
        with np.errstate(all="ignore"):
            got = host.dequantize(records, scale, rope)
        assert_same_bits(got, cli_dequantize(cli, tmp_path, records.tobytes(), scale, rope))
        # flat bytes-likes work too
        assert_same_bits(host.dequantize(records.tobytes(), scale, rope), got)
        assert_same_bits(host.dequantize(bytearray(records.tobytes()), scale, rope), got)
        assert_same_bits(host.dequantize(records.reshape(-1), scale, rope), got)


def test_bf16_from_float_against_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, size=100_000, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x00000001, 0x7F7FFFFF, 0x3F808000, 0x3F818000]
    x = bits.view(np.float32)
    got = host.bf16_from_float(x)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    want = np.where(np.isnan(x), np.uint16(0x7FFF), rounded)
    assert np.array_equal(got, want)
    assert got.shape == x.shape and got.dtype == np.uint16
    assert np.array_equal(host.bf16_to_float(got).view(np.uint32) >> 16, got.astype(np.uint32))


def test_misaligned_and_strided_inputs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kv_c, k_pe = random_rows(rng, 9, 512), random_rows(rng, 9, 64)
    base = host.quantize(kv_c, k_pe, 0.5)
    buffer = np.zeros(9 * 512 + 1, np.float32)
    shifted = buffer[1:].reshape(9, 512)  # contiguous, 4 bytes past a 16-byte boundary
    shifted[...] = kv_c
    assert shifted.ctypes.data % 16 != 0
    assert np.array_equal(host.quantize(shifted, k_pe, 0.5), base)
    wide = np.zeros((9, 600), np.float32)
    wide[:, :512] = kv_c
    assert np.array_equal(host.quantize(wide[:, :512], k_pe, 0.5), base)
    flat = np.zeros(base.size + 3, np.uint8)
    flat[3:] = base.reshape(-1)
    assert np.array_equal(host.dequantize(flat[3:], 0.5), host.dequantize(base, 0.5))


def test_empty_input() -> None:
    assert host.quantize(np.zeros((0, 512), np.float32), None, 1.0).shape == (0, 432)
    assert host.quantize(np.zeros((0, 512), np.uint16), None, 2.0, rope="fp8").shape == (0, 368)
    assert host.dequantize(b"", 1.0).shape == (0, 576)


def test_argument_errors() -> None:
    rows = np.zeros((2, 512), np.float32)
    with pytest.raises(TypeError, match="float32"):
        host.quantize(rows.astype(np.float64), None, 1.0)
    with pytest.raises(ValueError, match=r"\[N, 512\]"):
        host.quantize(np.zeros((2, 576), np.float32), None, 1.0)
    with pytest.raises(ValueError, match="rows"):
        host.quantize(rows, np.zeros((3, 64), np.float32), 1.0)
    with pytest.raises(TypeError, match="k_pe"):
        host.quantize(rows, np.zeros((2, 64), np.uint16), 1.0)
    with pytest.raises(ValueError, match="rope"):
        host.quantize(rows, None, 1.0, rope="fp4")
    with pytest.raises(ValueError, match="multiple"):
        host.dequantize(b"\0" * 433, 1.0)
    with pytest.raises(ValueError, match="368"):
        host.dequantize(np.zeros((1, 432), np.uint8), 1.0, rope="fp8")
    with pytest.raises(TypeError):
        host.dequantize(np.zeros((1, 432), np.int8), 1.0)
    with pytest.raises(TypeError):
        host.bf16_from_float(np.zeros(4, np.float64))
    # scales the kernels refuse, refused by the library
    for bad in (float("nan"), float("inf"), 0.0, -1.0, 1e-40, 1e300):
        with pytest.raises(jitcache.InvalidArgumentError, match="scale"):
            host.quantize(rows, None, bad)
        with pytest.raises(jitcache.InvalidArgumentError, match="scale"):
            host.dequantize(np.zeros((1, 432), np.uint8), bad)


@pytest.mark.parametrize("rope", ROPES)
def test_model_host_ops_use_the_layer_binding(glm5_mini: Path, warm_cache: Path, seed: int, rope: str) -> None:
    """A prepared model's CPU writer/gather apply the layer's scale and variant."""
    rng = np.random.default_rng(seed)
    n = 17
    kv_c = host.bf16_from_float(random_rows(rng, n, 512))
    k_pe = host.bf16_from_float(random_rows(rng, n, 64))
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        model = rt.prepare(glm5_mini, rope=rope, target=TARGET)
    rb = model.record_bytes
    # a paged cache with more slots than tokens, tokens scattered, one padding token (-1)
    slots = rng.permutation(3 * n)[:n].astype(np.int64)
    slots[5] = -1
    for layer in (0, 40, 77, 78):
        info = model.layer(layer)
        assert model.layer(np.int64(layer)) == info == model.layers[layer]
        cache = np.zeros((3 * n, rb), np.uint8)
        status = np.zeros(1, np.uint32)
        model.host_write(layer, _lib.WriterLaunch(
            kv_c=kv_c.ctypes.data, kv_c_stride=0, k_pe=k_pe.ctypes.data, k_pe_stride=0,
            slot_mapping=slots.ctypes.data, num_tokens=n, cache=cache.ctypes.data,
            num_slots=3 * n, status=status.ctypes.data))
        assert status[0] == 0
        expected = host.quantize(kv_c, k_pe, info.scale, rope)
        written = slots >= 0
        assert np.array_equal(cache[slots[written]], expected[written])
        untouched = np.ones(3 * n, bool)
        untouched[slots[written]] = False
        assert not cache[untouched].any()

        gather_slots = np.concatenate([slots[written], [-1]]).astype(np.int32)
        out = np.full((gather_slots.size, 576), 0xABCD, np.uint16)
        model.host_gather(layer, _lib.GatherLaunch(
            cache=cache.ctypes.data, num_slots=3 * n, slots=gather_slots.ctypes.data,
            num_rows=gather_slots.size, out=out.ctypes.data, out_stride=0, status=status.ctypes.data))
        assert status[0] == 0
        want = host.bf16_from_float(host.dequantize(expected[written], info.scale, rope))
        assert np.array_equal(out[:-1], want)
        assert not out[-1].any()  # a negative slot gives a zero row
        if layer == 78:
            assert (info.mode, info.scale) == ("identity", 1.0)
        else:
            assert info.mode == "dynamic" and info.scale != 1.0
