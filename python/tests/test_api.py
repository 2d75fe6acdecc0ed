"""The Python API end to end on examples/glm5-mini, without a device, against the CLI."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import jitcache
from jitcache import _lib
from conftest import TARGET, in_threads, run_cli, scales_show_json

REVISION = "0ea160f27a530ae0f516cee123965851bea7cf86"  # the sidecar's model_revision
PROVENANCE_FIELDS = (
    "source",
    "file",
    "sha256",
    "model_revision",
    "checkpoint_revision",
    "format",
    "checkpoint_form",
    "override_origin",
    "shadowed_checkpoint_file",
    "warnings",
)


def f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def assert_matches_cli(resolved: jitcache.ResolvedScales, doc: dict) -> None:
    """A ResolvedScales holds exactly what `jitcache scales show --json` printed."""
    assert resolved.num_hidden_layers == doc["num_hidden_layers"]
    assert resolved.num_draft_layers == doc["num_draft_layers"]
    assert resolved.latent_dim == doc["latent_dim"]
    assert len(resolved.layers) == len(doc["layers"])
    for got, want in zip(resolved.layers, doc["layers"]):
        assert got == jitcache.LayerInfo(
            layer=want["layer"], scale=f32(want["scale"]), mode=want["mode"], source=want["source"]
        )
    assert resolved.max_abs == [row["max_abs"] for row in doc["layers"]]
    assert resolved.scales == [f32(row["scale"]) for row in doc["layers"]]
    prov = doc["provenance"]
    for name in PROVENANCE_FIELDS:
        assert getattr(resolved.provenance, name) == prov[name], name
    assert resolved.provenance.details == (prov.get("provenance") or {})


def test_versions(cli: Path) -> None:
    assert jitcache.abi_version() == 1
    assert Path(jitcache.library_path()).is_file()
    cli_version = run_cli(cli, "--version").stdout.strip()
    assert jitcache.__version__ == jitcache.library_version() == cli_version
    try:
        from importlib.metadata import PackageNotFoundError, version

        assert version("jitcache") == jitcache.__version__
    except PackageNotFoundError:
        pass  # running from the source tree


def test_resolve_scales_matches_cli(glm5_mini: Path, cli: Path) -> None:
    resolved = jitcache.resolve_scales(glm5_mini)
    doc = scales_show_json(cli, glm5_mini)
    assert_matches_cli(resolved, doc)
    assert resolved.num_layers == 79 and resolved.num_hidden_layers == 78
    assert resolved.provenance.source == "checkpoint"
    assert resolved.provenance.checkpoint_form == "sidecar"
    assert len(resolved.provenance.sha256) == 64
    assert [layer.mode for layer in resolved.layers].count("dynamic") == 78
    assert resolved.layers[78] == jitcache.LayerInfo(78, 1.0, "identity", "draft-identity")
    # str, Path and bytes paths are the same checkpoint
    assert jitcache.resolve_scales(str(glm5_mini)).layers == resolved.layers
    assert jitcache.resolve_scales(os.fsencode(glm5_mini)).layers == resolved.layers


def test_prepare_cold_then_cached(glm5_mini: Path, cache_dir: Path, cli: Path, python_env: dict) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        assert os.path.realpath(rt.cache_dir) == os.path.realpath(cache_dir)
        assert rt.device.available is False and rt.device.reason
        assert rt.device.name == "" and rt.device.target == ""
        assert rt.cache.mode == "read-write" and rt.cache.reason == ""
        assert os.path.realpath(rt.cache.dir) == os.path.realpath(cache_dir)
        model = rt.prepare(glm5_mini, target=TARGET)

    # the model outlives its runtime
    assert model.num_layers == 79
    assert model.target == TARGET and model.rope == "bf16" and model.record_bytes == 432
    stats = model.stats
    assert (stats.variants, stats.cached, stats.compiled, stats.stored) == (4, 0, 4, 4)
    assert stats.wall_ms > 0

    kernels = model.kernels
    assert sorted((k.kernel, k.latent_scale) for k in kernels) == [
        ("gather", "dynamic"),
        ("gather", "identity"),
        ("writer", "dynamic"),
        ("writer", "identity"),
    ]
    for k in kernels:
        assert (k.rope, k.target) == ("bf16", TARGET)
        assert len(k.key) == 32 and int(k.key, 16) >= 0
        assert k.entry.startswith("jc_nvfp4_mla_")
        assert k.registers > 0 and k.cubin_bytes > 0
        assert k.compiled_now and k.stored
        assert not k.loaded  # no device: nothing loaded
        assert not k.ptx_fallback

    # layers, one by one and as a list, equal the CLI's resolution
    doc = scales_show_json(cli, glm5_mini)
    assert_matches_cli(model.scales, doc)
    assert model.layers == model.scales.layers
    assert [model.layer(i) for i in range(79)] == model.layers
    for name in PROVENANCE_FIELDS:
        assert getattr(model.provenance, name) == doc["provenance"][name]
    described = model.describe()
    assert described["target"] == TARGET and described["rope"] == "bf16"
    described["target"] = "changed"  # a copy: the model is immutable
    assert model.describe()["target"] == TARGET

    # the same process, another runtime: everything cached
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        again = rt.prepare(glm5_mini, target=TARGET)
    stats = again.stats
    assert (stats.variants, stats.cached, stats.compiled) == (4, 4, 0)
    assert not any(k.compiled_now for k in again.kernels)
    assert {k.key for k in again.kernels} == {k.key for k in kernels}
    assert again.layers == model.layers

    # another process: cached as well
    code = (
        "import json, sys, jitcache\n"
        "with jitcache.Runtime(cache_dir=sys.argv[1], device='none') as rt:\n"
        "    s = rt.prepare(sys.argv[2], target=sys.argv[3]).stats\n"
        "print(json.dumps([s.variants, s.cached, s.compiled]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(cache_dir), str(glm5_mini), TARGET],
        capture_output=True, text=True, env=python_env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [4, 4, 0]


def test_fp8_rope(glm5_mini: Path, warm_cache: Path) -> None:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        with rt.prepare(glm5_mini, rope="fp8", target=TARGET) as model:
            assert model.rope == "fp8" and model.record_bytes == 368
            assert {k.rope for k in model.kernels} == {"fp8"}
            s = model.stats
            assert (s.variants, s.cached, s.compiled) == (4, 4, 0)


def test_launches_unavailable_without_device(glm5_mini: Path, warm_cache: Path) -> None:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        model = rt.prepare(glm5_mini, target=TARGET)
    for layer in (0, 78):
        with pytest.raises(jitcache.UnavailableError, match="no GPU"):
            model.launch_writer(layer, _lib.WriterLaunch(), 0)
        with pytest.raises(jitcache.UnavailableError):
            model.launch_gather(layer, _lib.GatherLaunch(), 0)
    # arguments are checked before the device: a token with no buffers is refused as such
    with pytest.raises(jitcache.InvalidArgumentError, match="kv_c"):
        model.launch_writer(0, _lib.WriterLaunch(num_tokens=1), 0)
    with pytest.raises(jitcache.InvalidArgumentError):
        model.launch_gather(0, _lib.GatherLaunch(num_rows=1), 0)
    with pytest.raises(jitcache.InvalidArgumentError, match="layer"):
        model.launch_writer(79, _lib.WriterLaunch(), 0)
    with pytest.raises(jitcache.InvalidArgumentError, match="layer"):
        model.launch_writer(2**32, _lib.WriterLaunch(), 0)  # would wrap to layer 0 in ctypes


def test_model_close(glm5_mini: Path, warm_cache: Path) -> None:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        with rt.prepare(glm5_mini, target=TARGET) as model:
            assert not model.closed
            assert model.layer(3).mode == "dynamic"
        assert model.closed
        model.close()  # idempotent
        for use in (
            lambda: model.layers,
            lambda: model.layer(0),
            lambda: model.stats,
            lambda: model.target,
            lambda: model.launch_writer(0, _lib.WriterLaunch(), 0),
            lambda: model.host_gather(0, _lib.GatherLaunch()),
        ):
            with pytest.raises(jitcache.InvalidArgumentError, match="released"):
                use()
    assert rt.closed
    with pytest.raises(jitcache.InvalidArgumentError, match="closed"):
        rt.prepare(glm5_mini, target=TARGET)
    with pytest.raises(jitcache.InvalidArgumentError, match="closed"):
        rt.cache_dir
    rt.close()  # idempotent


def test_runtime_arguments(cache_dir: Path) -> None:
    with pytest.raises(jitcache.InvalidArgumentError, match="device"):
        jitcache.Runtime(cache_dir=cache_dir, device="gpu")
    with pytest.raises(jitcache.InvalidArgumentError, match="jobs"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=5000)  # the library's range
    with pytest.raises(jitcache.InvalidArgumentError, match="jobs"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=-1)  # not a uint32
    with pytest.raises(jitcache.InvalidArgumentError, match="max_bytes|cache_max_bytes"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", max_bytes=1024)  # below 16 MiB
    with pytest.raises(TypeError):
        jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=1.5)
    with jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=2, max_bytes=64 << 20) as rt:
        with pytest.raises(jitcache.InvalidArgumentError, match="rope"):
            rt.prepare("unused", rope="int4", target=TARGET)
        with pytest.raises(jitcache.InvalidArgumentError, match="target"):
            rt.prepare("unused", target="sm_1")
        # no target and no device to detect one from
        with pytest.raises(jitcache.UnavailableError):
            rt.prepare("unused")


def test_an_empty_cache_dir_is_refused_not_the_default(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cache_dir="" is a caller's empty variable: the library refuses it, naming it, even
    when the cache is optional (no memory-only start); None is the default directory."""
    monkeypatch.setenv("JITCACHE_DIR", str(cache_dir))
    for require_cache in (None, False):
        with pytest.raises(jitcache.InvalidArgumentError, match="cache_dir"):
            jitcache.Runtime(cache_dir="", device="none", require_cache=require_cache)
    with jitcache.Runtime(cache_dir=None, device="none") as rt:
        assert os.path.realpath(rt.cache_dir) == os.path.realpath(cache_dir)


def test_nul_in_a_path_or_text_argument_is_refused(glm5_mini: Path, cache_dir: Path) -> None:
    """ctypes passes a str or bytes with a NUL as a C string cut at the NUL: "ckpt\\0x" would
    resolve "ckpt" without a word. Every path and text argument refuses it, naming itself."""
    cut = f"{glm5_mini}\0ignored"
    with pytest.raises(ValueError, match=r"^checkpoint: .* contains a NUL character"):
        jitcache.resolve_scales(cut)
    with pytest.raises(ValueError, match=r"^checkpoint: .* contains a NUL character"):
        jitcache.resolve_scales(os.fsencode(cut))  # bytes paths too
    with pytest.raises(ValueError, match=r"^scales_override: "):
        jitcache.resolve_scales(glm5_mini, scales_override=Path(f"{glm5_mini}/x.json\0"))
    with pytest.raises(ValueError, match=r"^revision: contains a NUL character \(at index 3\)"):
        jitcache.resolve_scales(glm5_mini, revision="abc\0def")
    with pytest.raises(ValueError, match=r"^cache_dir: "):
        jitcache.Runtime(cache_dir=f"{cache_dir}\0x", device="none")
    with pytest.raises(ValueError, match=r"^remote: contains a NUL character") as refused:
        jitcache.Runtime(cache_dir=cache_dir, device="none", remote="redis://u:secret@h\0")
    assert "secret" not in str(refused.value)  # a URL's password is never echoed
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(ValueError, match=r"^checkpoint: "):
            rt.prepare(cut, target=TARGET)
        with pytest.raises(ValueError, match=r"^scales_override: "):
            rt.prepare(glm5_mini, target=TARGET, scales_override="x\0.json")
        with pytest.raises(ValueError, match=r"^target: "):
            rt.prepare(glm5_mini, target="sm_90\0a")
        with pytest.raises(ValueError, match=r"^revision: "):
            rt.prepare(glm5_mini, target=TARGET, revision="0ea1\0")


def test_override_shadows_checkpoint(glm5_mini: Path, cli: Path, tmp_path: Path) -> None:
    data = json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())
    data["scales"] = [s * 2 for s in data["scales"]]
    data.pop("max_abs", None)
    override = tmp_path / "override.json"
    override.write_text(json.dumps(data))
    resolved = jitcache.resolve_scales(glm5_mini, scales_override=override)
    assert_matches_cli(resolved, scales_show_json(cli, glm5_mini, "--scales", str(override)))
    assert resolved.provenance.source == "override"
    assert resolved.provenance.override_origin == "argument"
    assert resolved.provenance.shadowed_checkpoint_file == "nvfp4_ds_mla_outer_scales.json"
    assert any("shadows" in w for w in resolved.provenance.warnings)
    assert {layer.source for layer in resolved.layers[:78]} == {"override"}
    assert resolved.scales[:78] == [f32(s) for s in data["scales"]]
    assert resolved.max_abs[:78] == [None] * 78


def test_environment_override(glm5_mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    override = tmp_path / "env.json"
    shutil.copy(glm5_mini / "nvfp4_ds_mla_outer_scales.json", override)
    monkeypatch.setenv("VLLM_NVFP4_MLA_SCALES_FILE", str(override))
    prov = jitcache.resolve_scales(glm5_mini).provenance
    assert (prov.source, prov.override_origin) == ("override", "environment")
    # the argument beats the environment
    prov = jitcache.resolve_scales(glm5_mini, scales_override=override).provenance
    assert prov.override_origin == "argument"
    monkeypatch.setenv("VLLM_NVFP4_MLA_SCALES_FILE", "  ")  # whitespace only: unset
    assert jitcache.resolve_scales(glm5_mini).provenance.source == "checkpoint"


def test_identity_default(glm5_mini: Path, tmp_path: Path, cache_dir: Path) -> None:
    """A checkpoint without scales metadata: every layer identity; 2 variants only."""
    ckpt = tmp_path / "plain"
    ckpt.mkdir()
    config = json.loads((glm5_mini / "config.json").read_text())
    del config["nvfp4_ds_mla_outer_scales"]
    (ckpt / "config.json").write_text(json.dumps(config))
    resolved = jitcache.resolve_scales(ckpt)
    assert resolved.provenance.source == "identity-default"
    assert {(l.scale, l.mode) for l in resolved.layers} == {(1.0, "identity")}
    assert [l.source for l in resolved.layers] == ["identity-default"] * 78 + ["draft-identity"]
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        model = rt.prepare(ckpt, target=TARGET)
    assert model.stats.variants == 2
    assert {k.latent_scale for k in model.kernels} == {"identity"}


def test_snapshot_revision(glm5_mini: Path, tmp_path: Path) -> None:
    """A Hugging Face snapshot directory names the revision the sidecar is checked against."""
    good = tmp_path / "models--org--glm" / "snapshots" / REVISION
    shutil.copytree(glm5_mini, good)
    prov = jitcache.resolve_scales(good).provenance
    assert prov.checkpoint_revision == REVISION == prov.model_revision
    assert jitcache.resolve_scales(glm5_mini, revision=REVISION).provenance.checkpoint_revision == REVISION
    bad = tmp_path / "models--org--glm" / "snapshots" / "abc123"
    shutil.copytree(glm5_mini, bad)
    with pytest.raises(jitcache.InvalidInputError, match="model_revision"):
        jitcache.resolve_scales(bad)
    with pytest.raises(jitcache.InvalidInputError, match="deadbeef"):
        jitcache.resolve_scales(glm5_mini, revision="deadbeef")


def test_prepare_from_threads(glm5_mini: Path, warm_cache: Path) -> None:
    """One runtime, several Python threads preparing at once (the GIL is released in C)."""
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:

        def work() -> tuple[int, int]:
            with rt.prepare(glm5_mini, target=TARGET) as m:
                return (m.layers, m.stats.compiled)

        results = in_threads(work, 6)
    assert len(results) == 6
    first = results[0]
    assert not isinstance(first, BaseException), first
    assert all(r == (first[0], 0) for r in results)


def test_model_records_the_runtime_device_ordinal(glm5_mini: Path, warm_cache: Path) -> None:
    """jitcache.torch checks CUDA tensors against the ordinal the model's kernels belong to."""
    with jitcache.Runtime(cache_dir=warm_cache, device="none", device_ordinal=3) as rt:
        with rt.prepare(glm5_mini, target="sm_90") as model:
            assert model.device_ordinal == 3
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        with rt.prepare(glm5_mini, target="sm_90") as model:
            assert model.device_ordinal == 0
