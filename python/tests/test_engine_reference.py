"""The engine references (engine_reference.py) among themselves, and jitcache's host executor
against them: today's host.quantize/dequantize for b12x-432/368, and the format= API (the
record-formats issue) once it exists."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import engine_reference as er

B12X_LAYOUTS = ((432, False), (368, False), (368, True), (304, True))
FORMAT_OF = {432: "b12x-432", 368: "b12x-368", 304: "b12x-304"}
RCPS = ("down", "up")


def rng_with_seed(tag: str) -> np.random.Generator:
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"{tag}: seed {seed}")
    return np.random.default_rng(seed)


def bf16(x: np.ndarray) -> np.ndarray:
    return er.f32_to_bf16(np.asarray(x, dtype=np.float32))


def random_rows(rng: np.random.Generator, n: int, magnitude: float = 1.0):
    """kv_c / k_pe bf16 bits with per-token magnitudes spread over 2^-8 .. 2^3 times magnitude."""
    spread = np.exp2(rng.uniform(-8, 3, size=(n, 1)))
    kv = rng.standard_normal((n, er.LATENT)) * spread * magnitude
    pe = rng.standard_normal((n, er.ROPE)) * spread
    return bf16(kv), bf16(pe)


def mode_of(layout: int, per_token: bool) -> str:
    return "per-token" if per_token else "identity"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all(a.view(np.uint32) == b.view(np.uint32)))


def nibble_steps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|level(a) - level(b)| per element for two [N, 256] packed-code arrays (signed levels)."""
    def levels(p):
        c = er.unpack_nibbles(p).astype(np.int16)
        mag = c & 7
        return np.where(c & 8, -mag, mag)
    return np.abs(levels(a) - levels(b))


# ---------------------------------------------------------------------------------------
# The number formats

def test_e4m3_codes_round_trip_and_match_torch():
    codes = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
    values = er.e4m3_decode(codes)
    assert np.array_equal(er.e4m3_encode(values), codes)
    assert er.e4m3_decode(np.uint8(0x7E)) == 448 and er.e4m3_decode(np.uint8(0x01)) == 2.0**-9
    torch = pytest.importorskip("torch")
    rng = rng_with_seed("e4m3")
    x = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-12, 9, 200_000))).astype(np.float32)
    x = x[np.abs(x) < 448]  # torch's cast is not satfinite
    ours = er.e4m3_encode(x)
    theirs = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(ours, theirs)


def test_format_edges():
    assert list(er.e4m3_encode(np.float32([np.inf, -np.inf, 1e9, np.nan, -1e-30]))) == [0x7E, 0xFE, 0x7E, 0x7F, 0x80]
    ties = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25])
    assert list(er.e2m1_encode(ties)) == [0, 2, 2, 4, 4, 6, 6, 8]
    assert list(er.e2m1_encode(np.float32([np.nan, np.inf, -7.0]))) == [7, 7, 15]
    assert list(er.f32_to_bf16(np.float32([3.4e38, np.inf]), satfinite=True)) == [0x7F7F, 0x7F7F]
    assert list(er.f32_to_bf16(np.float32([3.4e38, np.nan]))) == [0x7F80, 0x7FFF]


def test_rcp_directed_brackets_the_reciprocal():
    rng = rng_with_seed("rcp")
    x = np.exp2(rng.uniform(-120, 120, 50_000)).astype(np.float32)
    lo, hi = er.rcp_directed(x, "down"), er.rcp_directed(x, "up")
    exact = 1.0 / x.astype(np.float64)
    assert np.all(lo.astype(np.float64) <= exact) and np.all(hi.astype(np.float64) >= exact)
    inexact = lo != hi
    assert np.all(np.nextafter(lo[inexact], np.float32(np.inf)) == hi[inexact])
    assert er.rcp_directed(np.float32(0.25), "down") == er.rcp_directed(np.float32(0.25), "up") == 4.0


def test_flashmla_scale_permutation():
    offsets = er.FLASHMLA_SCALE_OFFSETS
    assert sorted(offsets) == list(range(320, 352))
    for q in range(4):  # FlashMLA thread q's blocks 4c + q sit on contiguous bytes 8q + c
        assert [offsets[4 * c + q] - 320 for c in range(8)] == [8 * q + c for c in range(8)]
    # block s holds 6 * e4m3(0x20 + s): its scale is exactly that E4M3 code, stored at its byte
    sf = er.e4m3_decode(np.arange(0x20, 0x40, dtype=np.uint8))
    kv = np.repeat(6 * sf, 16)[None, :]
    rec = er.vllm_flashmla_write(bf16(kv), bf16(np.zeros((1, 64))))
    for s in range(32):
        assert rec[0, er.flashmla_scale_byte(s)] == 0x20 + s
    assert np.array_equal(er.vllm_flashmla_read(rec)[0, :512], kv[0])


# ---------------------------------------------------------------------------------------
# Hand-made records with known values

def test_hand_made_b12x_368_per_token_record():
    rec = np.zeros((1, 368), dtype=np.uint8)
    rec[0, 0] = 0x2F      # element 0 code 0xF (-6), element 1 code 0x2 (1.0)
    rec[0, 256] = 0x38    # block 0 scale 1.0
    rec[0, 257] = 0x01    # block 1 scale 2^-9
    rec[0, 8] = 0x07      # element 16 (block 1) code 7 (6)
    rec[0, 288:292] = er.f32_bytes(np.float32([0.5]))[0]
    rec[0, 292:296] = er.f32_bytes(np.float32([0.25]))[0]
    rec[0, 304] = 0x40    # RoPE element 0 = 2.0
    for read in (lambda r: er.b12x_read(r, 368, True), lambda r: er.exact_read(r, "b12x-368", "per-token")):
        y = read(rec)[0]
        assert (y[0], y[1], y[16]) == (-1.5, 0.25, 6 * 2.0**-9 * 0.25)
        assert y[512] == 1.0 and np.count_nonzero(y) == 4
    # the same bytes read with a layer scale ignore [292, 296)
    assert er.b12x_read(rec, 368, False, s_l=2.0)[0, 0] == -12.0


def test_hand_made_flashmla_record():
    rec = np.zeros((1, 352), dtype=np.uint8)
    rec[0, 8 * 5] = 0x75                       # block 5, elements 80, 81: codes 5 (3.0), 7 (6.0)
    rec[0, er.flashmla_scale_byte(5)] = 0x30   # 0.5
    rec[0, 256 + 63] = 0xB8                    # RoPE element 63 = -1.0
    y = er.vllm_flashmla_read(rec)[0]
    assert (y[80], y[81], y[575]) == (1.5, 3.0, -1.0) and np.count_nonzero(y) == 3


# ---------------------------------------------------------------------------------------
# Writers and readers among themselves

def rel_rms(approx: np.ndarray, exact: np.ndarray) -> float:
    return float(np.sqrt(np.mean((approx.astype(np.float64) - exact) ** 2) / np.mean(exact.astype(np.float64) ** 2)))


@pytest.mark.parametrize("layout,per_token", B12X_LAYOUTS)
def test_b12x_records_read_alike_and_err_little(layout, per_token):
    rng = rng_with_seed(f"b12x {layout} {per_token}")
    kv, pe = random_rows(rng, 400)
    fmt, mode = FORMAT_OF[layout], mode_of(layout, per_token)
    x = er.bf16_to_f32(kv).astype(np.float64)
    exact = er.exact_write(kv, pe, fmt, mode)
    assert exact.shape == (400, layout) and exact.dtype == np.uint8
    errors = {}
    for name, rec in [("exact", exact)] + [(r, er.b12x_write(kv, pe, layout, per_token, rcp=r)) for r in RCPS]:
        assert rec.shape == exact.shape
        y = er.b12x_read(rec, layout, per_token)
        assert same_bits(y, er.exact_read(rec, fmt, mode))
        errors[name] = rel_rms(y[:, :512], x)
        same_scale = np.repeat(rec[:, 256:288] == exact[:, 256:288], 16, axis=1)
        assert nibble_steps(rec[:, :256], exact[:, :256])[same_scale].max(initial=0) <= 1
        # amax / 6 lands exactly on an E4M3 midpoint for a few percent of bf16 blocks (an
        # exact tie); amax * rcp(6) then rounds one way or the other
        print(f"{name}: scale bytes differ {np.mean(~same_scale[:, ::16]):.4f}, "
              f"code nibbles differ {np.mean(nibble_steps(rec[:, :256], exact[:, :256]) != 0):.4f}")
        assert np.mean(~same_scale) < 0.05
        assert np.mean(rec != exact) < 0.05, f"{name}: {np.mean(rec != exact):.4f} of the bytes differ"
        if layout == 432:
            assert np.array_equal(rec[:, 288:], exact[:, 288:])
        else:
            assert not rec[:, 296:304].any()
    print(layout, per_token, errors)
    assert 0.05 < errors["exact"] < 0.2
    for r in RCPS:
        assert abs(errors[r] - errors["exact"]) <= 0.01 * errors["exact"]


def test_b12x_rope_scale_constant_vs_division():
    """amax * f32(1/448) is amax / 448 except on some amax values: find one, and show the
    two fp32 RoPE scales land in different bytes at [288, 292)."""
    amax = er.bf16_to_f32(np.arange(0x3F80, 0x4000, dtype=np.uint16))  # bf16 in [1, 2)
    prod = amax * er.B12X_RCP_448
    quot = amax / np.float32(448.0)
    differ = np.nonzero(prod != quot)[0]
    assert differ.size > 0
    pe = np.zeros((1, 64), dtype=np.float32)
    pe[0, 0] = amax[differ[0]]
    kv = np.zeros((1, 512), dtype=np.float32)
    a = er.b12x_write(bf16(kv), bf16(pe), 368, False)
    b = er.exact_write(bf16(kv), bf16(pe), "b12x-368", "identity")
    assert not np.array_equal(a[0, 288:292], b[0, 288:292])
    print(f"{differ.size} of 128 bf16 amax values in [1, 2) give another fp32 RoPE scale")


def test_vllm_flashmla_round_trip_and_exact_rule():
    rng = rng_with_seed("flashmla")
    kv, pe = random_rows(rng, 400)
    rec = er.vllm_flashmla_write(kv, pe)
    assert rec.shape == (400, 352)
    y = er.vllm_flashmla_read(rec)
    assert np.array_equal(y[:, 512:], er.bf16_to_f32(er.f32_to_bf16(er.e4m3_decode(er.e4m3_encode(er.bf16_to_f32(pe))))))
    exact = er.exact_write(kv, pe, "flashmla-352", "identity")
    assert np.array_equal(exact[:, 256:], rec[:, 256:])  # same scales, same RoPE
    assert nibble_steps(exact[:, :256], rec[:, :256]).max() <= 1
    x = er.bf16_to_f32(kv).astype(np.float64)
    e_vllm, e_exact = rel_rms(y[:, :512], x), rel_rms(er.exact_read(exact, "flashmla-352", "identity")[:, :512], x)
    print(f"flashmla rel rms: vllm {e_vllm:.5f} exact {e_exact:.5f}; codes differ {np.mean(exact != rec):.5f}")
    assert abs(e_vllm - e_exact) <= 0.01 * e_exact
    up = er.exact_write(kv, pe, "flashmla-352", "identity", flashmla_round_up=True)
    assert np.all(er.e4m3_decode(up[:, er.FLASHMLA_SCALE_OFFSETS]) >= er.e4m3_decode(rec[:, er.FLASHMLA_SCALE_OFFSETS]))


def test_flashmla_calibrated_scale_fold():
    """A shallow layer (max |kv_c| = 0.02) on flashmla-352: s_l folded outside the kernel
    (write kv_c / s_l, multiply the result by s_l) beats no scale; folding s_l into the
    E4M3 scale byte is worse than no scale at all."""
    rng = rng_with_seed("fold")
    kv = rng.standard_normal((500, 512)) * np.exp2(rng.uniform(-2, 0, (500, 1)))
    kvb = bf16(kv / np.abs(kv).max() * 0.02)
    x = er.bf16_to_f32(kvb).astype(np.float64)
    pe = np.zeros((500, 64), np.uint16)
    s_l = np.float32(np.abs(x).max() / 2688)
    plain = rel_rms(er.vllm_flashmla_read(er.vllm_flashmla_write(kvb, pe))[:, :512], x)
    rec = er.vllm_flashmla_write(bf16(er.bf16_to_f32(kvb) / s_l), pe)
    outside = rel_rms(er.vllm_flashmla_read(rec)[:, :512].astype(np.float64) * s_l, x)
    into_byte = rec.copy()
    into_byte[:, er.FLASHMLA_SCALE_OFFSETS] = er.e4m3_encode(er.e4m3_decode(rec[:, er.FLASHMLA_SCALE_OFFSETS]) * s_l)
    byte = rel_rms(er.vllm_flashmla_read(into_byte)[:, :512], x)
    print(f"flashmla at max 0.02: no scale {plain:.4f}, fold outside {outside:.4f}, into the byte {byte:.4f}")
    assert outside < 0.11 < plain < byte


def test_flashmla_floor_and_zero_tokens():
    zeros = np.zeros((2, 512), dtype=np.uint16), np.zeros((2, 64), dtype=np.uint16)
    rec = er.vllm_flashmla_write(*zeros)
    assert np.all(rec[:, 320:] == 0x01) and not rec[:, :320].any()  # scale never 0
    assert not er.vllm_flashmla_read(rec).any()
    for layout, per_token in B12X_LAYOUTS:
        for r in RCPS:
            assert not er.b12x_write(*zeros, layout, per_token, rcp=r).any()
        assert not er.exact_write(*zeros, FORMAT_OF[layout], mode_of(layout, per_token)).any()


def test_tiny_block_under_the_flashmla_floor_reads_zero():
    kv = np.zeros((1, 512), dtype=np.float32)
    kv[0, :16] = 2.0**-12  # amax/6 far under 2^-9: every code rounds to 0 at sf = 2^-9
    rec = er.vllm_flashmla_write(bf16(kv), np.zeros((1, 64), np.uint16))
    assert not er.vllm_flashmla_read(rec)[0, :16].any()
    b12 = er.exact_write(bf16(kv), np.zeros((1, 64), np.uint16), "b12x-368", "per-token")
    assert np.array_equal(er.exact_read(b12, "b12x-368", "per-token")[0, :16], kv[0, :16])


def test_nan_and_inf_rows():
    kv = np.full((3, 512), 1.5, dtype=np.float32)  # amax / 6 = 0.25 is an E4M3 value
    kv[0, 3] = np.nan            # one NaN element
    kv[1, :] = np.nan            # all NaN
    kv[2, 5] = np.inf            # one infinity
    pe = np.ones((3, 64), dtype=np.float32)
    kvb, peb = bf16(kv), bf16(pe)
    # NaN element -> code 7 (+6) everywhere; the rest of its block is unchanged
    for rec in (er.b12x_write(kvb, peb, 368, False), er.exact_write(kvb, peb, "b12x-368", "identity")):
        assert er.unpack_nibbles(rec[:1, :256])[0, 3] == 7
    # an all-NaN token, per-token: b12x stores a NaN s_t and NaN scales; the exact rule's
    # NaN-ignoring max gives s_t = 0 and an all-zero latent
    b = er.b12x_write(kvb, peb, 368, True)
    e = er.exact_write(kvb, peb, "b12x-368", "per-token")
    assert np.isnan(er.f32_from_bytes(b[1:2, 292:296])[0]) and np.all(b[1, 256:288] == 0x7F)
    assert er.f32_from_bytes(e[1:2, 292:296])[0] == 0 and not e[1, :288].any()
    # one inf, per-token: b12x stores s_t = inf, so every finite element reads as NaN
    # (0 * inf); jitcache's rule saturates the infinity to the largest bf16 first, so s_t is
    # finite, the infinity reads back as the largest bf16 and the token's other elements,
    # tiny against it, as zero: no NaN enters the attention
    assert np.isinf(er.f32_from_bytes(b[2:3, 292:296])[0])
    assert np.isnan(er.b12x_read(b, 368, True)[2, :512]).sum() >= 496
    assert er.f32_from_bytes(e[2:3, 292:296])[0] == er.BF16_MAX / np.float32(2688)
    y = er.exact_read(e, "b12x-368", "per-token")[2, :512]
    assert y[5] == er.BF16_MAX and not np.isnan(y).any() and np.count_nonzero(y) == 1
    # identity: the inf's block saturates to 448 * 6 (bf16 2688), other blocks untouched
    for rec in (er.b12x_write(kvb, peb, 432, False), er.exact_write(kvb, peb, "b12x-432", "identity")):
        y = er.exact_read(rec, "b12x-432", "identity")[2]
        assert y[5] == 2688 and np.all(y[16:512] == 1.5)


def test_bad_arguments_name_the_field():
    kv, pe = np.zeros((1, 512), np.uint16), np.zeros((1, 64), np.uint16)
    with pytest.raises(ValueError, match="kv_c"):
        er.b12x_write(np.zeros((1, 511), np.uint16), pe, 368, False)
    with pytest.raises(ValueError, match="layout"):
        er.b12x_write(kv, pe, 352, False)
    with pytest.raises(ValueError, match="per-token only"):
        er.b12x_write(kv, pe, 304, False)
    with pytest.raises(ValueError, match="mode"):
        er.exact_write(kv, pe, "flashmla-352", "per-token")
    with pytest.raises(ValueError, match="records"):
        er.vllm_flashmla_read(np.zeros((1, 368), np.uint8))
    with pytest.raises(ValueError, match="rcp"):
        er.rcp_directed(np.float32(1), "nearest")


# ---------------------------------------------------------------------------------------
# jitcache's host executor against the references

def edge_rows(rng: np.random.Generator):
    """Random rows plus zeros, exact E2M1/E4M3 ties, subnormal scales, NaN, +-inf, > 448*6."""
    kv, pe = random_rows(rng, 64)
    kv, pe = er.bf16_to_f32(kv), er.bf16_to_f32(pe)
    kv[0] = 0
    pe[0] = 0
    kv[1, :16] = [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, 1, 2, 3, 4, -6, 0]  # sf = 1
    kv[2] = rng.standard_normal(512) * 2.0**-11                 # subnormal E4M3 scales
    kv[3, 7] = np.nan
    kv[4, 9] = np.inf
    kv[5, 100] = -np.inf
    kv[6] *= 4000.0
    pe[7, 3] = np.nan
    pe[8] = 0.3 * (rng.integers(0, 2, 64) * 2 - 1)
    return bf16(kv), bf16(pe)


def host_module():
    try:
        from jitcache import host
    except Exception as error:  # the library is not built here
        pytest.skip(f"jitcache.host unavailable: {error}")
    return host


@pytest.mark.parametrize("rope", ["bf16", "fp8"])
@pytest.mark.parametrize("scale", [1.0, float(np.float32(0.02 / 2688))])
def test_host_today_matches_exact_rule(rope, scale):
    """The older call style, host.quantize(kv_c, k_pe, scale, rope), still writes b12x-432 /
    b12x-368 exactly."""
    host = host_module()
    rng = rng_with_seed(f"host {rope} {scale}")
    kv, pe = edge_rows(rng)
    if scale != 1.0:
        kv = bf16(er.bf16_to_f32(kv) * np.float32(0.01))
    fmt = "b12x-432" if rope == "bf16" else "b12x-368"
    mode = "identity" if scale == 1.0 else "layer"
    ours = host.quantize(kv, pe, scale, rope)
    ref = er.exact_write(kv, pe, fmt, mode, scale)
    bad = np.argwhere(ours != ref)
    assert bad.size == 0, f"{len(bad)} bytes differ, first (token, byte) {bad[0].tolist()}"
    assert same_bits(host.dequantize(ours, scale, rope), er.exact_read(ref, fmt, mode, scale))
    for r in RCPS:
        engine = er.b12x_write(kv, pe, 432 if rope == "bf16" else 368, False, rcp=r)
        finite = np.all(np.isfinite(er.bf16_to_f32(kv)), axis=1)
        layout = 432 if rope == "bf16" else 368
        assert same_bits(host.dequantize(engine, scale, rope)[finite], er.b12x_read(engine, layout, False, scale)[finite])
        assert same_bits(er.b12x_read(ours, layout, False, scale)[finite], host.dequantize(ours, scale, rope)[finite])


FORMAT_CASES = [("b12x-432", "identity"), ("b12x-432", "layer"), ("b12x-368", "identity"),
                ("b12x-368", "layer"), ("b12x-368", "per-token"), ("b12x-304", "per-token"),
                ("flashmla-352", "identity"), ("flashmla-352", "layer")]
LAYER_SCALE = float(np.float32(0.02 / 2688))


def host_with_formats():
    host = host_module()
    assert "format" in inspect.signature(host.quantize).parameters, "jitcache.host.quantize lost format="
    return host


def host_call(host, fmt, mode, kv, pe):
    scale = LAYER_SCALE if mode == "layer" else 1.0
    latent_scale = "per-token" if mode == "per-token" else ("dynamic" if mode == "layer" else "identity")
    rec = host.quantize(kv, pe, scale=scale, format=fmt, latent_scale=latent_scale)
    back = host.dequantize(rec, scale=scale, format=fmt, latent_scale=latent_scale)
    return rec, back, scale


@pytest.mark.parametrize("fmt,mode", FORMAT_CASES)
def test_host_formats_writer_is_the_exact_rule(fmt, mode):
    host = host_with_formats()
    kv, pe = edge_rows(rng_with_seed(f"host {fmt} {mode}"))
    rec, back, scale = host_call(host, fmt, mode, kv, pe)
    ref = er.exact_write(kv, pe, fmt, mode, scale)
    bad = np.argwhere(rec != ref)
    assert bad.size == 0, f"{len(bad)} bytes differ, first (token, byte) {bad[0].tolist()}"
    assert same_bits(back, er.exact_read(ref, fmt, mode, scale))


# The engines' readers restore what they restore: FlashMLA applies no outer scale, so a
# flashmla-352 record written with s_l is checked by test_flashmla_layer_record_as_flashmla_reads_it.
ENGINE_READ_CASES = [case for case in FORMAT_CASES if case != ("flashmla-352", "layer")]


@pytest.mark.parametrize("fmt,mode", ENGINE_READ_CASES)
def test_host_formats_readers_agree_with_engines(fmt, mode):
    host = host_with_formats()
    rng = rng_with_seed(f"readers {fmt} {mode}")
    kv, pe = random_rows(rng, 200)
    scale = LAYER_SCALE if mode == "layer" else 1.0
    latent_scale = "per-token" if mode == "per-token" else ("dynamic" if mode == "layer" else "identity")
    rec, back, _ = host_call(host, fmt, mode, kv, pe)
    if fmt == "flashmla-352":
        engine_recs = [er.vllm_flashmla_write(kv, pe)]
        engine_read = er.vllm_flashmla_read
    else:
        layout, per_token = er.RECORD_BYTES[fmt], mode == "per-token"
        engine_recs = [er.b12x_write(kv, pe, layout, per_token, rcp=r) for r in RCPS]
        def engine_read(r):
            return er.b12x_read(r, layout, per_token, scale)
    assert same_bits(engine_read(rec), back)
    for erec in engine_recs:
        ours = host.dequantize(erec, scale=scale, format=fmt, latent_scale=latent_scale)
        assert same_bits(ours, engine_read(erec))


@pytest.mark.parametrize("fmt,mode", [c for c in FORMAT_CASES if c[1] != "layer"])
def test_host_formats_error_within_one_percent_of_engines(fmt, mode):
    host = host_with_formats()
    kv, pe = random_rows(rng_with_seed(f"error {fmt} {mode}"), 400)
    x = er.bf16_to_f32(kv).astype(np.float64)
    _, back, _ = host_call(host, fmt, mode, kv, pe)
    ours = rel_rms(back[:, :512], x)
    if fmt == "flashmla-352":
        theirs = [rel_rms(er.vllm_flashmla_read(er.vllm_flashmla_write(kv, pe))[:, :512], x)]
    else:
        layout, per_token = er.RECORD_BYTES[fmt], mode == "per-token"
        theirs = [rel_rms(er.b12x_read(er.b12x_write(kv, pe, layout, per_token, rcp=r), layout, per_token)[:, :512], x)
                  for r in RCPS]
    for t in theirs:
        assert abs(ours - t) <= 0.01 * t, f"{fmt} {mode}: jitcache {ours:.5f}, engine {t:.5f}"


def test_flashmla_layer_record_as_flashmla_reads_it():
    """A flashmla-352 record written with kv_c / s_l: FlashMLA (vLLM's reader) reads exactly
    jitcache's identity gather of it, kv_c / s_l as quantized, and jitcache's dynamic gather
    is that read times s_l, rounded once to bf16 (reader-side restore)."""
    host = host_with_formats()
    rng = rng_with_seed("flashmla layer record")
    kv, pe = random_rows(rng, 200)
    rec = host.quantize(kv, pe, scale=LAYER_SCALE, format="flashmla-352")
    unrestored = host.dequantize(rec, format="flashmla-352")
    assert same_bits(er.vllm_flashmla_read(rec), unrestored)
    restored = host.dequantize(rec, scale=LAYER_SCALE, format="flashmla-352")
    with np.errstate(all="ignore"):
        expected = er.bf16_to_f32(er.f32_to_bf16((unrestored[:, :512] * np.float32(LAYER_SCALE)).astype(np.float32)))
    assert same_bits(restored[:, :512], expected)
    assert same_bits(restored[:, 512:], unrestored[:, 512:])
