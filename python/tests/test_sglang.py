"""jitcache.sglang against the real SGLang package (0.5.23, the environment of
scripts/sglang_env.sh): the plugin through SGLang's own loader and server-args parser, the
MLA token-to-KV pool's records against the independent reference (engine_reference.py)
and the host twin, the checkpoint's per-layer scales, the identity guard, bad inputs.

Everything runs on the CPU: the pool is SGLang's MLATokenToKVPool subclass with CPU
tensors, whose writes and reads run jitcache's host executor (bit-identical to the device).
Importing SGLang takes tens of seconds; the loader test runs in one fresh child process
(SGLang's loader and hooks patch module state once per process).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _sglang_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


if _sglang_version() is None:
    pytest.skip(
        "the sglang package is not installed in this interpreter (scripts/sglang_env.sh makes "
        ".venv-sglang, where scripts/test.sh runs this file)",
        allow_module_level=True,
    )

import jitcache  # noqa: E402
import jitcache.host as host  # noqa: E402
import jitcache.sglang as js  # noqa: E402
import engine_reference as ref  # noqa: E402

TARGET = "sm_90"
GROUP = "sglang.srt.plugins"
ENTRY = "jitcache.sglang:register"
CALIBRATED = 0  # glm5-mini's main layers carry calibrated scales
DRAFT = 78  # the draft (MTP) layer: identity
LAYERS = 79


@pytest.fixture(scope="module")
def sgl():
    """SGLang's pool module and runtime context, imported once for the module."""
    import sglang.srt.mem_cache.memory_pool as memory_pool
    from sglang.srt.runtime_context import get_parallel

    from jitcache import _sglang_pool

    return memory_pool, get_parallel, _sglang_pool


@pytest.fixture(scope="module")
def models(warm_cache: Path, glm5_mini: Path):
    """glm5-mini prepared for each format SGLang may take (device "none": the CPU ops)."""
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        prepared = {fmt: rt.prepare(glm5_mini, target=TARGET, format=fmt) for fmt in js.FORMATS}
    yield prepared
    for model in prepared.values():
        model.close()


def new_pool(sgl, model, *, size: int = 96, page_size: int = 16, start_layer: int = 0,
             layer_num: int = LAYERS, checkpoint: Path | None = None, **overrides):
    args = dict(page_size=page_size, dtype=torch.bfloat16, kv_lora_rank=512, qk_rope_head_dim=64,
                layer_num=layer_num, device="cpu", enable_memory_saver=False, start_layer=start_layer,
                end_layer=start_layer + layer_num - 1)
    args.update(overrides)
    return sgl[2].NvfpMLATokenToKVPool(size, jitcache_model=model, checkpoint=checkpoint, **args)


class Layer:
    """What the pool reads of SGLang's RadixAttention: its layer_id."""

    def __init__(self, layer_id: int) -> None:
        self.layer_id = layer_id


def tokens(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k_nope [n, 1, 512] and k_rope [n, 1, 64] in bf16, each row with its own magnitude,
    one zero row, as SGLang's MLA attention hands them to set_mla_kv_buffer."""
    mags = torch.exp(torch.empty(n, 1, 1).uniform_(-9.0, 1.0, generator=gen))
    nope = (torch.randn(n, 1, 512, generator=gen) * mags).bfloat16()
    rope = torch.randn(n, 1, 64, generator=gen).bfloat16()
    nope[n // 2] = 0
    return nope, rope


def bits(t: torch.Tensor, width: int) -> np.ndarray:
    return t.reshape(-1, width).contiguous().view(torch.int16).numpy().view(np.uint16)


def reference_mode(model: jitcache.Model, layer: int) -> tuple[str, float]:
    info = model.layer(layer)
    return ("identity", 1.0) if info.mode == "identity" else ("layer", info.scale)


# ---- the plugin through SGLang's loader and parser ----------------------------------------

CHILD = r"""
import json, os, sys, typing
import pytest
env = pytest.MonkeyPatch()  # this child's environment changes, through the tests' one guard
out = {}
import sglang.srt.plugins as plugins
from sglang.srt.server_args import prepare_server_args, ServerArgs

checkpoint = sys.argv[1]
argv = ["--model-path", checkpoint, "--kv-cache-dtype", "nvfp4_ds_mla"]

def parse():
    try:
        return prepare_server_args(argv).kv_cache_dtype
    except SystemExit as exc:
        return f"exit {exc.code}"

env.setenv("SGLANG_PLUGINS", "someone_else")
plugins.load_plugins()  # the whitelist names another plugin: jitcache is not loaded
out["parsed_without"] = parse()
plugins._plugins_loaded = False
env.setenv("SGLANG_PLUGINS", "jitcache")
plugins.load_plugins()
plugins.load_plugins()  # idempotent
out["parsed_with"] = parse()
out["other_choice"] = prepare_server_args(["--model-path", checkpoint, "--kv-cache-dtype", "fp8_e4m3"]).kv_cache_dtype

from sglang.srt.arg_groups.fields.model import Model as ModelFields
meta = typing.get_type_hints(ModelFields, include_extras=True)["kv_cache_dtype"].__metadata__
out["sglang_list_untouched"] = all("nvfp4_ds_mla" not in (getattr(m, "choices", None) or []) for m in meta)

import jitcache.sglang as js
from sglang.srt.plugins.hook_registry import HookRegistry
out["patched"] = sorted(t for t in js.HOOK_TARGETS if t in HookRegistry._patched)
out["plugin"] = [ep.value for ep in __import__("importlib.metadata").metadata.entry_points(group="sglang.srt.plugins") if ep.name == "jitcache"]

import torch
from sglang.srt.mem_cache import kv_cache_dtype as kcd
common = dict(model=None, is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None)
out["configured"] = [str(x) for x in kcd.configure_kv_cache_dtype(server_args_kv_cache_dtype="nvfp4_ds_mla", model_dtype=torch.bfloat16, **common)]
out["configured_other"] = [str(x) for x in kcd.configure_kv_cache_dtype(server_args_kv_cache_dtype="bf16", model_dtype=torch.bfloat16, **common)]
try:
    kcd.configure_kv_cache_dtype(server_args_kv_cache_dtype="nvfp4_ds_mla", model_dtype=torch.float16, **common)
except ValueError as exc:
    out["fp16_refused"] = str(exc)
env.setenv("JITCACHE_SGLANG_FORMAT", "b12x-304")
try:
    kcd.configure_kv_cache_dtype(server_args_kv_cache_dtype="nvfp4_ds_mla", model_dtype=torch.bfloat16, **common)
except ValueError as exc:
    out["format_refused"] = str(exc)
env.delenv("JITCACHE_SGLANG_FORMAT")

from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
class Fake:
    kv_cache_dtype_str = "nvfp4_ds_mla"
    kv_shard_rank = None
    device = "cpu"
for name in ("_build_dsa_kv_pool", "_build_mla_kv_pool"):
    try:
        getattr(KVCacheConfigurator, name)(Fake(), max_total_num_tokens=64, **({"mla_pool_class": object} if name == "_build_mla_kv_pool" else {"max_running_requests": 1, "dsa_pool_class": object}))
    except ValueError as exc:
        out[name] = str(exc)
print("RESULT " + json.dumps(out))
"""


def _dev_plugin_dist(root: Path) -> Path:
    """An installed-distribution record named jitcache declaring the entry point, for a
    checkout where the package is not pip-installed (importlib.metadata finds it on sys.path
    as it finds an installed one)."""
    dist = root / "jitcache-0.0.0.dev0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jitcache\nVersion: 0.0.0.dev0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\njitcache = {ENTRY}\n")
    return root


def installed_entry_point() -> importlib.metadata.EntryPoint | None:
    for ep in importlib.metadata.entry_points(group=GROUP):
        if ep.name == "jitcache":
            return ep
    return None


def test_plugin_through_sglang_loader_and_parser(tmp_path: Path, glm5_mini: Path, python_env: dict) -> None:
    env = dict(python_env)
    if installed_entry_point() is None:
        env["PYTHONPATH"] = os.pathsep.join([str(_dev_plugin_dist(tmp_path / "dist")), env["PYTHONPATH"]])
    env.pop("JITCACHE_SGLANG_FORMAT", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(glm5_mini)], env=env, capture_output=True,
                          text=True, timeout=480)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["parsed_without"] == "exit 2"  # argparse: invalid choice
    assert "invalid choice: 'nvfp4_ds_mla'" in proc.stderr
    assert out["parsed_with"] == "nvfp4_ds_mla"
    assert out["other_choice"] == "fp8_e4m3"
    assert out["sglang_list_untouched"]
    assert out["patched"] == sorted(js.HOOK_TARGETS)
    assert out["plugin"] == [ENTRY]
    assert out["configured"] == ["nvfp4_ds_mla", "torch.bfloat16"]
    assert out["configured_other"] == ["None", "torch.bfloat16"]
    assert "model runs in torch.float16" in out["fp16_refused"]
    assert "JITCACHE_SGLANG_FORMAT: expected one of b12x-432, b12x-368, flashmla-352, got 'b12x-304'" in out["format_refused"]
    assert "DSATokenToKVPool" in out["_build_dsa_kv_pool"]
    assert "jitcache's kernels run on CUDA devices, the pool's device is 'cpu'" in out["_build_mla_kv_pool"]


def test_installed_entry_point() -> None:
    ep = installed_entry_point()
    if ep is None:
        pytest.skip("jitcache is not pip-installed here (the loader test uses a dev record)")
    assert ep.value == ENTRY and ep.load() is js.register


# ---- the pool: records, reads, scales ------------------------------------------------------


@pytest.mark.parametrize("fmt", js.FORMATS)
def test_pool_records_match_reference_and_read_back(sgl, models, seed: int, fmt: str) -> None:
    model = models[fmt]
    pool = new_pool(sgl, model)
    assert pool.kv_buffer[0].shape == (96 + 16, model.record_bytes) and pool.kv_buffer[0].dtype == torch.uint8
    gen = torch.Generator().manual_seed(seed)
    n = 20
    loc = (torch.randperm(95, generator=gen)[:n] + 1).to(torch.int64)  # slot 0 is SGLang's dummy
    nope, rope = tokens(gen, n)
    with sgl[1]().override(attn_dcp_size=1):
        for layer in (CALIBRATED, 40, DRAFT):
            pool.set_mla_kv_buffer(Layer(layer), loc, nope, rope)
            records = pool.kv_buffer[layer][loc].numpy()
            mode, s = reference_mode(model, layer)
            expected = ref.exact_write(bits(nope, 512), bits(rope, 64), fmt, mode, s)
            assert np.array_equal(records, expected), f"layer {layer} ({mode}, s={s})"

            want = ref.exact_read(expected, fmt, mode, s)  # float32 holding bf16 values
            twin = host.dequantize(records, model.layer(layer).scale, format=fmt)
            assert np.array_equal(np.nan_to_num(twin), np.nan_to_num(want))

            k_nope, k_rope = pool.get_mla_kv_buffer(Layer(layer), loc)
            assert k_nope.shape == (n, 1, 512) and k_rope.shape == (n, 1, 64) and k_nope.dtype == torch.bfloat16
            got = torch.cat([k_nope, k_rope], dim=-1).reshape(n, 576).float().numpy()
            assert np.array_equal(got, twin)

            key = pool.get_key_buffer(layer)
            assert key.shape == (96 + 16, 1, 576) and key.dtype == torch.bfloat16
            assert np.array_equal(key[loc, 0].float().numpy(), twin)
            untouched = torch.ones(96 + 16, dtype=torch.bool)
            untouched[loc] = False
            assert not key[untouched].any()  # zero records read as zeros
            k, v = pool.get_kv_buffer(layer)
            assert torch.equal(v, k[..., :512]) and torch.equal(pool.get_value_buffer(layer), v)

        # set_kv_buffer takes the row whole ([T, 1, 576]); the same records.
        other = new_pool(sgl, model)
        other.set_kv_buffer(Layer(40), loc, torch.cat([nope, rope], dim=-1), nope)
        assert torch.equal(other.kv_buffer[40], pool.kv_buffer[40])
        # SGLang's own row moves copy records.
        pool.move_kv_cache(torch.tensor([0]), loc[:1])
        assert torch.equal(pool.kv_buffer[40][0], pool.kv_buffer[40][loc[0]])


def test_dummy_slot_is_not_written(sgl, models, seed: int) -> None:
    """Padded tokens all write slot 0: those writes are skipped (one slot, many tokens)."""
    pool = new_pool(sgl, models["b12x-432"])
    nope, rope = tokens(torch.Generator().manual_seed(seed), 4)
    with sgl[1]().override(attn_dcp_size=1):
        pool.set_mla_kv_buffer(Layer(3), torch.tensor([5, 0, 0, 7]), nope, rope)
    assert not pool.kv_buffer[3][0].any() and pool.kv_buffer[3][5].any() and pool.kv_buffer[3][7].any()


def test_checkpoint_scales_reach_their_layers(sgl, models, glm5_mini: Path, seed: int) -> None:
    """glm5-mini's sidecar scales (read here, not through jitcache) are the scales the
    pool's layers write with; a pipeline stage (start_layer 40) indexes its buffers from 0
    and writes each with its own global layer's scale."""
    sidecar = json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())["scales"]
    model = models["b12x-432"]
    for i, s in enumerate(sidecar):
        info = model.layer(i)
        assert info.mode == "dynamic" and info.scale == pytest.approx(s, rel=1e-6), i
    assert model.layer(DRAFT).mode == "identity" and model.layer(DRAFT).scale == 1.0

    stage = new_pool(sgl, model, start_layer=40, layer_num=10, checkpoint=glm5_mini)
    assert len(stage.kv_buffer) == 10
    gen = torch.Generator().manual_seed(seed)
    nope, rope = tokens(gen, 8)
    nope = (nope.float() * 1e-3).bfloat16()  # near the calibrated range of these layers
    loc = torch.arange(1, 9)
    with sgl[1]().override(attn_dcp_size=1):
        for layer in (40, 45, 49):
            stage.set_mla_kv_buffer(Layer(layer), loc, nope, rope)
            expected = ref.exact_write(bits(nope, 512), bits(rope, 64), "b12x-432", "layer",
                                       model.layer(layer).scale)
            assert np.array_equal(stage.kv_buffer[layer - 40][loc].numpy(), expected)
    assert not torch.equal(stage.kv_buffer[0], stage.kv_buffer[5])  # two scales, two records


def test_prepare_model_takes_the_format_and_the_checkpoint_scales(
    warm_cache: Path, glm5_mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pool builder prepares: the chosen per-layer format, each layer's scale."""
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        default = js.prepare_model(glm5_mini, target=TARGET, runtime=rt)
        monkeypatch.setenv("JITCACHE_SGLANG_FORMAT", "b12x-368")
        chosen = js.prepare_model(glm5_mini, target=TARGET, runtime=rt)
        explicit = js.prepare_model(glm5_mini, target=TARGET, runtime=rt, format="flashmla-352")
    try:
        assert (default.record, chosen.record, explicit.record) == ("b12x-432", "b12x-368", "flashmla-352")
        assert default.layers == chosen.layers == jitcache.resolve_scales(glm5_mini).layers
        assert default.stats.compiled == 0  # the warm cache served it
    finally:
        for model in (default, chosen, explicit):
            model.close()


# ---- the identity guard ------------------------------------------------------------------


@pytest.fixture(scope="module")
def uncalibrated(tmp_path_factory: pytest.TempPathFactory, glm5_mini: Path) -> Path:
    """glm5-mini without its scales metadata: every layer identity."""
    path = tmp_path_factory.mktemp("uncalibrated") / "glm5-mini"
    path.mkdir()
    config = json.loads((glm5_mini / "config.json").read_text())
    del config["nvfp4_ds_mla_outer_scales"]
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def test_identity_guard_refuses_a_mismatch(sgl, models, warm_cache: Path, glm5_mini: Path,
                                           uncalibrated: Path) -> None:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        identity_model = rt.prepare(uncalibrated, target=TARGET, format="b12x-432")
    try:
        assert {l.mode for l in identity_model.layers} == {"identity"}
        guard = sgl[2].ScaleMismatchError
        # The identity kernel (compiled for scale 1.0) for glm5-mini's calibrated layers.
        with pytest.raises(guard, match=r"layer 0: the prepared model binds the identity kernel with "
                                        r"scale 1\.0, but the checkpoint's scale is 7\.44"):
            new_pool(sgl, identity_model, checkpoint=glm5_mini)
        # The other way round: calibrated kernels for a checkpoint without scales.
        with pytest.raises(guard, match=r"layer 0: the prepared model binds the dynamic kernel"):
            new_pool(sgl, models["b12x-432"], checkpoint=uncalibrated)
        # A stage whose layers agree is accepted: only the draft layer is identity in both.
        new_pool(sgl, identity_model, start_layer=DRAFT, layer_num=1, checkpoint=glm5_mini)
        new_pool(sgl, models["b12x-432"], checkpoint=glm5_mini)
    finally:
        identity_model.close()


# ---- bad inputs ------------------------------------------------------------------------------


def test_bad_inputs_give_clear_errors(sgl, models, warm_cache: Path, glm5_mini: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model = models["b12x-432"]
    with pytest.raises(TypeError, match="jitcache_model: expected a jitcache.Model, got str"):
        new_pool(sgl, "glm5-mini")
    with pytest.raises(ValueError, match="dtype: jitcache's gather writes torch.bfloat16, the pool was asked for torch.float16"):
        new_pool(sgl, model, dtype=torch.float16)
    with pytest.raises(ValueError, match="the model has 256 / 64"):
        new_pool(sgl, model, kv_lora_rank=256)
    with pytest.raises(ValueError, match=r"layer_num: the pool's layers 70\.\.79 are not all layers of the prepared model \(0\.\.78\)"):
        new_pool(sgl, model, start_layer=70, layer_num=10)
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        per_token = rt.prepare(glm5_mini, target=TARGET, format="b12x-368-per-token")
    try:
        with pytest.raises(ValueError, match="its records are b12x-368-per-token; nvfp4_ds_mla in SGLang takes a per-layer format"):
            new_pool(sgl, per_token)
    finally:
        per_token.close()

    pool = new_pool(sgl, model, layer_num=4)
    nope, rope = tokens(torch.Generator().manual_seed(1), 2)
    with sgl[1]().override(attn_dcp_size=2):
        with pytest.raises(NotImplementedError, match="--dcp-size > 1"):
            pool.set_mla_kv_buffer(Layer(1), torch.tensor([1, 2]), nope, rope)
    with sgl[1]().override(attn_dcp_size=1):
        with pytest.raises(ValueError, match="cache_k_rope is None, but b12x-432 records hold the RoPE key"):
            pool.set_mla_kv_buffer(Layer(1), torch.tensor([1, 2]), nope, None)
        with pytest.raises(ValueError, match="cache_k's last dimension is 512, expected 576"):
            pool.set_kv_buffer(Layer(1), torch.tensor([1, 2]), nope, nope)

    monkeypatch.setenv("JITCACHE_SGLANG_FORMAT", " b12x-368 ")
    assert js.record_format() == "b12x-368"
    monkeypatch.setenv("JITCACHE_SGLANG_FORMAT", "b12x-368-per-token")
    with pytest.raises(ValueError, match=r"JITCACHE_SGLANG_FORMAT: expected one of .*\(per-token records are not served"):
        js.record_format()
    monkeypatch.delenv("JITCACHE_SGLANG_FORMAT")
    assert js.record_format() == "b12x-432"
    with pytest.raises(ValueError, match="format: expected one of b12x-432, b12x-368, flashmla-352, got 'fp4'"):
        js.record_format("fp4")
