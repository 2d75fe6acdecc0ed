"""Record formats from Python: jitcache.formats, host.quantize/dequantize with format= and
latent_scale=, and Runtime.prepare(format=, latent_scale=). The numerics of every format
are held to the engines' references in test_engine_reference.py; this file checks the API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jitcache
from jitcache import _lib, formats, host
from conftest import TARGET, run_cli

ALL = (
    "b12x-432",
    "b12x-368",
    "b12x-304",
    "flashmla-352",
    "flashinfer-glm-416",
    "flashinfer-dsv4-384",
    "flashmla-v41-288",
)
# One record per slot; the page-major formats' own file is test_paged_formats.py.
PER_SLOT = ALL[:5]
PAGE_MAJOR = ALL[5:]


def rows(seed: int, n: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    magnitude = np.exp2(rng.uniform(-8, 3, size=(n, 1)))
    kv_c = (rng.standard_normal((n, 512)) * magnitude).astype(np.float32)
    k_pe = (rng.standard_normal((n, 64)) * magnitude).astype(np.float32)
    return kv_c, k_pe


def test_format_names_sizes_and_aliases() -> None:
    assert formats.FORMATS == ALL == host.FORMATS
    for name in ALL:
        assert host.RECORD_BYTES[name] == _lib.lib.jitcache_format_record_bytes(_lib.FORMATS[name])
        assert formats.record_format(name) == name
    assert [host.RECORD_BYTES[n] for n in ALL] == [432, 368, 304, 352, 416, 384, 288]
    assert (host.RECORD_BYTES["bf16"], host.RECORD_BYTES["fp8"]) == (432, 368)
    assert formats.record_format() == "b12x-432"
    assert formats.record_format(rope="fp8") == formats.record_format("fp8") == "b12x-368"
    assert formats.record_format("b12x-368", rope="fp8") == "b12x-368"
    assert [formats.row_width(n) for n in ALL] == [576, 576, 512, 576, 576, 512, 512]
    assert [formats.page_size(n) for n in ALL] == [1, 1, 1, 1, 1, 64, 64]
    # The C ABI's values are the library's table order, which names them.
    assert _lib.lib.jitcache_format_record_bytes(len(ALL)) == 0
    assert formats.latent_scales("b12x-304") == ("per-token",)
    assert "per-token" in formats.latent_scales("b12x-368")
    assert "per-token" not in formats.latent_scales("flashmla-352")
    assert formats.latent_scales("flashinfer-glm-416") == ("identity", "dynamic")
    with pytest.raises(ValueError, match="format: expected one of b12x-432"):
        formats.record_format("nvfp4_ds_mla")
    with pytest.raises(ValueError, match="rope: expected 'bf16' or 'fp8'"):
        formats.record_format(rope="int4")
    with pytest.raises(ValueError, match="'flashmla-352' and rope 'bf16' name different records"):
        formats.record_format("flashmla-352", rope="bf16")


def test_record_names() -> None:
    """A record is a format and its latent scale: every format's own name, and
    b12x-368-per-token for the per-token b12x-368 records."""
    assert formats.RECORDS == {
        "b12x-432": ("b12x-432", "per-layer"),
        "b12x-368": ("b12x-368", "per-layer"),
        "b12x-368-per-token": ("b12x-368", "per-token"),
        "b12x-304": ("b12x-304", "per-token"),
        "flashmla-352": ("flashmla-352", "per-layer"),
        "flashinfer-glm-416": ("flashinfer-glm-416", "per-layer"),
        "flashinfer-dsv4-384": ("flashinfer-dsv4-384", "per-layer"),
        "flashmla-v41-288": ("flashmla-v41-288", "per-layer"),
    }
    assert host.RECORD_BYTES["b12x-368-per-token"] == 368
    assert formats.record_format("b12x-368-per-token") == "b12x-368"
    assert formats.record_format("b12x-368-per-token", rope="fp8") == "b12x-368"
    assert formats.latent_scales("b12x-368-per-token") == ("per-token",)
    assert formats.row_width("b12x-368-per-token") == 576
    for name, (fmt, latent) in formats.RECORDS.items():
        assert formats.record_name(fmt, latent) == name
        assert formats.record_name(name) == name
    assert formats.record_name("fp8", "per-token") == formats.record_name("b12x-368", "per-token")
    assert formats.record_name("b12x-368", "dynamic") == formats.record_name("fp8") == "b12x-368"
    assert formats.record_latent_scale("b12x-368-per-token") == "per-token"
    assert formats.record_latent_scale("b12x-368", "per-token") == "per-token"
    assert formats.record_latent_scale("b12x-368") is None
    for name in ("b12x-432", "flashmla-352", "flashinfer-glm-416"):
        with pytest.raises(ValueError, match=f"latent_scale: {name} has no per-token records"):
            formats.record_name(name, "per-token")
    with pytest.raises(ValueError, match="latent_scale: b12x-304 has no per-layer records"):
        formats.record_name("b12x-304", "per-layer")
    with pytest.raises(ValueError, match="latent_scale: 'per-layer', but format 'b12x-368-per-token' names per-token"):
        formats.record_name("b12x-368-per-token", "per-layer")
    with pytest.raises(ValueError, match="'b12x-368-per-token' and rope 'bf16' name different records"):
        formats.record_format("b12x-368-per-token", rope="bf16")


def test_host_takes_the_per_token_record_name(seed: int) -> None:
    kv_c, k_pe = rows(seed)
    per_token = host.quantize(kv_c, k_pe, format="b12x-368", latent_scale="per-token")
    assert np.array_equal(host.quantize(kv_c, k_pe, format="b12x-368-per-token"), per_token)
    assert np.array_equal(host.quantize(kv_c, k_pe, format="b12x-368-per-token", latent_scale="per-token"), per_token)
    assert np.array_equal(host.dequantize(per_token, format="b12x-368-per-token"),
                          host.dequantize(per_token, format="b12x-368", latent_scale="per-token"))
    for latent in ("identity", "dynamic", "per-layer"):
        with pytest.raises(ValueError, match=f"latent_scale: '{latent}', but format 'b12x-368-per-token' names per-token"):
            host.quantize(kv_c, k_pe, format="b12x-368-per-token", latent_scale=latent)


@pytest.mark.parametrize("name", PER_SLOT)
def test_latent_scales_are_the_librarys(name: str) -> None:
    """formats.latent_scales (Python's copy of the table) is what the library accepts."""
    kv_c = np.ones((1, 512), np.float32)
    for mode, scale in (("identity", 1.0), ("dynamic", 0.5), ("per-token", 1.0)):
        if mode in formats.latent_scales(name):
            host.quantize(kv_c, None, scale, format=name, latent_scale=mode)
        else:
            with pytest.raises(jitcache.InvalidArgumentError, match=f"{name} is not written with a {mode}"):
                host.quantize(kv_c, None, scale, format=name, latent_scale=mode)


@pytest.mark.parametrize("name", PER_SLOT)
def test_quantize_shapes_and_round_trip(name: str, seed: int) -> None:
    kv_c, k_pe = rows(seed)
    records = host.quantize(kv_c, k_pe, format=name)
    assert records.shape == (9, host.RECORD_BYTES[name]) and records.dtype == np.uint8
    back = host.dequantize(records, format=name)
    assert back.shape == (9, formats.row_width(name)) and back.dtype == np.float32
    error = np.sqrt(np.mean((back[:, :512] - kv_c) ** 2) / np.mean(kv_c**2))
    assert error < 0.2, f"{name}: relative RMS error {error:.3f}"
    if formats.has_rope(name):
        assert np.abs(back[:, 512:] - k_pe).max() <= 0.07 * np.abs(k_pe).max()
    # flat bytes read like the 2-D array
    assert np.array_equal(host.dequantize(records.tobytes(), format=name), back)


def test_old_call_styles_are_the_rope_formats(seed: int) -> None:
    kv_c, k_pe = rows(seed)
    scale = float(np.float32(0.02 / 2688))
    for rope, name in (("bf16", "b12x-432"), ("fp8", "b12x-368")):
        old = host.quantize(kv_c, k_pe, scale, rope)
        assert np.array_equal(old, host.quantize(kv_c, k_pe, scale=scale, format=name))
        assert np.array_equal(old, host.quantize(kv_c, k_pe, scale, format=rope))
        assert np.array_equal(host.dequantize(old, scale, rope), host.dequantize(old, scale, format=name))
    # the defaults: scale 1.0, bf16 RoPE
    assert np.array_equal(host.quantize(kv_c, k_pe), host.quantize(kv_c, k_pe, 1.0, "bf16"))


def test_per_token_records(seed: int) -> None:
    kv_c, k_pe = rows(seed)
    per_token = host.quantize(kv_c, k_pe, format="b12x-368", latent_scale="per-token")
    s_t = per_token[:, 292:296].copy().view(np.float32)[:, 0]
    assert np.array_equal(s_t, (np.abs(host.bf16_to_float(host.bf16_from_float(kv_c))).max(axis=1)
                                / np.float32(2688)).astype(np.float32))
    assert not np.array_equal(per_token, host.quantize(kv_c, k_pe, format="b12x-368"))
    back = host.dequantize(per_token, format="b12x-368", latent_scale="per-token")
    assert back.shape == (9, 576)
    # b12x-304: per-token by default, no RoPE read (None and a given k_pe write the same)
    no_rope = host.quantize(kv_c, None, format="b12x-304")
    assert np.array_equal(no_rope, host.quantize(kv_c, k_pe, format="b12x-304", latent_scale="per-token"))
    # the latent half is b12x-368 per-token's: codes, scales and s_t
    assert np.array_equal(no_rope[:, :288], per_token[:, :288])
    assert np.array_equal(no_rope[:, 292:296], per_token[:, 292:296])
    assert not no_rope[:, 288:292].any() and not no_rope[:, 296:].any()
    assert np.array_equal(host.dequantize(no_rope, format="b12x-304"), back[:, :512])


def test_argument_errors() -> None:
    kv_c = np.zeros((2, 512), np.float32)
    with pytest.raises(jitcache.InvalidArgumentError, match=r"scale is 0\.5.*exactly 1\.0"):
        host.quantize(kv_c, None, 0.5, format="b12x-368", latent_scale="per-token")
    with pytest.raises(jitcache.InvalidArgumentError, match="exactly 1.0"):
        host.dequantize(np.zeros((1, 304), np.uint8), 2.0, format="b12x-304")
    with pytest.raises(jitcache.InvalidArgumentError, match="b12x-304 is not written with a dynamic"):
        host.quantize(kv_c, None, 0.5, format="b12x-304", latent_scale="dynamic")
    with pytest.raises(jitcache.InvalidArgumentError, match="flashmla-352 is not written with a per-token"):
        host.quantize(kv_c, None, format="flashmla-352", latent_scale="per-token")
    with pytest.raises(ValueError, match="latent_scale: 'identity' is the kernel of scale 1.0"):
        host.quantize(kv_c, None, 0.5, latent_scale="identity")
    with pytest.raises(ValueError, match="latent_scale: expected one of"):
        host.quantize(kv_c, None, latent_scale="per-block")
    with pytest.raises(ValueError, match="format: expected one of"):
        host.dequantize(b"", format="b12x-576")
    with pytest.raises(ValueError, match=r"records: expected shape \[N, 352\] for flashmla-352"):
        host.dequantize(np.zeros((1, 368), np.uint8), format="flashmla-352")
    with pytest.raises(ValueError, match="304-byte record"):
        host.dequantize(b"\0" * 305, format="b12x-304")
    with pytest.raises(ValueError, match="different records"):
        host.quantize(kv_c, None, 1.0, "fp8", format="b12x-432")


# ---- Runtime.prepare with a format ----------------------------------------------------------


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("formats") / "cache"
    path.mkdir(mode=0o700)
    with jitcache.Runtime(cache_dir=path, device="none") as rt:
        yield rt


def test_prepare_each_format(runtime, glm5_mini: Path, repo_root: Path) -> None:
    # The page-major formats are identity only: a checkpoint without per-layer scales
    # (examples/dsv4-mini), and glm5-mini's calibrated layers are refused.
    dsv4_mini = repo_root / "examples" / "dsv4-mini"
    for name in PAGE_MAJOR:
        with runtime.prepare(dsv4_mini, target=TARGET, format=name) as model:
            assert model.format == name and model.record_bytes == host.RECORD_BYTES[name]
            assert {(k.kernel, k.latent_scale) for k in model.kernels} == {("writer", "identity"), ("gather", "identity")}
            assert len(model.layers) == 5 and all(layer.scale == 1.0 for layer in model.layers)
        with pytest.raises(jitcache.Error, match=f"format {name} is not written with a dynamic latent scale"):
            runtime.prepare(glm5_mini, target=TARGET, format=name)
    for name in PER_SLOT:
        with runtime.prepare(glm5_mini, target=TARGET, format=name) as model:
            assert model.format == name and model.record_bytes == host.RECORD_BYTES[name]
            assert model.rope == {"b12x-432": "bf16", "b12x-368": "fp8"}.get(name)
            assert {k.format for k in model.kernels} == {name}
            assert name in repr(model)
            if name == "b12x-304":  # its only mode
                assert model.latent_scale == "per-token"
                assert {k.latent_scale for k in model.kernels} == {"per-token"}
                assert all(layer.scale == 1.0 for layer in model.layers)
            else:
                assert model.latent_scale == "per-layer"
                assert {k.latent_scale for k in model.kernels} == {"identity", "dynamic"}


def test_prepare_per_token_and_refusals(runtime, glm5_mini: Path) -> None:
    with runtime.prepare(glm5_mini, target=TARGET, format="b12x-368", latent_scale="per-token") as model:
        assert model.latent_scale == "per-token" and model.rope == "fp8"
        assert all(layer.scale == 1.0 for layer in model.layers)
        kernels = {(k.kernel, k.latent_scale) for k in model.kernels}
        assert kernels == {("writer", "per-token"), ("gather", "per-token")}
    with runtime.prepare(glm5_mini, "fp8", TARGET) as old_style:
        assert old_style.format == "b12x-368" and old_style.latent_scale == "per-layer"
        assert old_style.record == "b12x-368"
    with runtime.prepare(glm5_mini, target=TARGET, format="b12x-368-per-token") as named:
        assert (named.format, named.latent_scale, named.record) == ("b12x-368", "per-token", "b12x-368-per-token")
        assert {k.latent_scale for k in named.kernels} == {"per-token"}
        assert {k.format for k in named.kernels} == {"b12x-368"}
    with pytest.raises(jitcache.InvalidArgumentError,
                       match="latent_scale: 'per-layer', but format 'b12x-368-per-token' names per-token records"):
        runtime.prepare(glm5_mini, target=TARGET, format="b12x-368-per-token", latent_scale="per-layer")
    with pytest.raises(jitcache.InvalidArgumentError, match="flashmla-352 has no per-token records"):
        runtime.prepare(glm5_mini, target=TARGET, format="flashmla-352", latent_scale="per-token")
    with pytest.raises(jitcache.InvalidArgumentError, match="latent_scale: expected 'per-token'"):
        runtime.prepare(glm5_mini, target=TARGET, latent_scale="dynamic")
    with pytest.raises(jitcache.InvalidArgumentError, match="format: expected one of"):
        runtime.prepare(glm5_mini, target=TARGET, format="b12x")
    with pytest.raises(jitcache.InvalidArgumentError, match="different records"):
        runtime.prepare(glm5_mini, "fp8", TARGET, format="b12x-432")
    with pytest.raises(jitcache.InvalidArgumentError, match="rope"):
        runtime.prepare(glm5_mini, "int4", TARGET, format="b12x-432")


# ---- against the CLI's kv tools, format by format --------------------------------------------

FORMAT_MODES = [("b12x-432", None), ("b12x-368", None), ("b12x-368", "per-token"),
                ("b12x-304", "per-token"), ("flashmla-352", None), ("flashinfer-glm-416", None)]


@pytest.fixture(scope="module")
def kv_cli(cli: Path) -> Path:
    """The CLI, when its kv tools take --format (they do once the kv-tools work is merged)."""
    help_text = run_cli(cli, "kv", "quantize", "--help").stdout
    if "--format" not in help_text or "--latent-scale" not in help_text:
        pytest.skip("this CLI's `kv quantize` has no --format / --latent-scale yet")
    return cli


def _cli_mode(scale: float, latent: str | None) -> list[str]:
    return ["--latent-scale", latent] if latent else ["--scale", repr(scale)]


@pytest.mark.parametrize("name,latent", FORMAT_MODES)
def test_host_formats_match_the_cli(kv_cli: Path, tmp_path: Path, seed: int, name: str, latent) -> None:
    rng = np.random.default_rng(seed)
    magnitude = np.exp2(rng.uniform(-12, 4, size=(40, 1)))
    kv_c = (rng.standard_normal((40, 512)) * magnitude).astype(np.float32)
    k_pe = (rng.standard_normal((40, 64)) * magnitude).astype(np.float32)
    kv_c[0] = 0
    kv_c[1, 3] = np.nan
    kv_c[2, :16] = 1e4
    pe = k_pe if formats.has_rope(name) else None
    scales = [1.0] if latent else [1.0, float(np.float32(0.02 / 2688)), float(np.float32(3.5))]
    for scale in scales:
        records = host.quantize(kv_c, pe, scale, format=name, latent_scale=latent)
        src, out, back = tmp_path / "x.npy", tmp_path / "r.bin", tmp_path / "y.npy"
        np.save(src, kv_c if pe is None else np.concatenate([kv_c, pe], axis=1))
        run_cli(kv_cli, "kv", "quantize", "--input", str(src), "--format", name,
                *_cli_mode(scale, latent), "--out", str(out))
        assert out.read_bytes() == records.tobytes(), f"{name} {latent} scale {scale}"
        arbitrary = rng.integers(0, 256, size=(30, host.RECORD_BYTES[name]), dtype=np.uint8)
        if latent == "per-token":  # s_t must be a scale the writer could have stored
            arbitrary[:, 292:296] = records[:30, 292:296]
        for recs in (records, arbitrary):
            out.write_bytes(recs.tobytes())
            run_cli(kv_cli, "kv", "dequantize", "--input", str(out), "--format", name,
                    *_cli_mode(scale, latent), "--out", str(back))
            with np.errstate(all="ignore"):
                ours = host.dequantize(recs, scale, format=name, latent_scale=latent)
            theirs = np.load(back)
            assert ours.shape == theirs.shape == (len(recs), formats.row_width(name))
            assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), f"{name} {latent}"
