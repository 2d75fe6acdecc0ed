"""jitcache.vllm against the real vLLM package: the plugin through vLLM's own loader, the
environment check with and without it, the scales helper on a Hugging Face snapshot, and the
do_kv_cache_update-shaped write.

Importing vLLM takes seconds, so everything that needs it runs in two fresh child processes
(which also keeps vLLM's module state clean); the rest runs here without importing vLLM.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import jitcache  # noqa: E402
import jitcache.torch as jt  # noqa: E402
import jitcache.vllm as jv  # noqa: E402

from conftest import scales_show_json  # noqa: E402

GROUP = "vllm.general_plugins"
ENTRY = "jitcache.vllm:register"
SCALES_VAR = "VLLM_NVFP4_MLA_SCALES_FILE"
REPO_ID = "zai/glm5-mini"
TARGET = "sm_90"


def _has_vllm() -> bool:
    try:
        return importlib.metadata.version("vllm") is not None
    except importlib.metadata.PackageNotFoundError:
        return False


needs_vllm = pytest.mark.skipif(not _has_vllm(), reason="the vllm package is not installed")


def installed_entry_point() -> importlib.metadata.EntryPoint | None:
    for ep in importlib.metadata.entry_points(group=GROUP):
        if ep.name == "jitcache":
            return ep
    return None


def sidecar(glm5_mini: Path) -> dict:
    return json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())


@pytest.fixture(scope="module", params=["blob-symlinks", "copied-files"])
def hf_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, glm5_mini: Path
) -> Path:
    """A Hugging Face hub cache holding glm5-mini at the sidecar's model_revision, laid out
    as huggingface_hub downloads (blobs named by sha256, snapshots/<rev>/ with symlinks into
    them, refs/main) or with the files copied into the snapshot directory."""
    revision = sidecar(glm5_mini)["model_revision"]
    root = tmp_path_factory.mktemp("hf") / "hub"
    repo = root / ("models--" + REPO_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snapshot.mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    for f in sorted(glm5_mini.iterdir()):
        if request.param == "copied-files":
            shutil.copyfile(f, snapshot / f.name)
            continue
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, repo / "blobs" / digest)
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", digest))
    return root


def snapshot_of(hf_cache: Path, glm5_mini: Path) -> Path:
    repo = hf_cache / ("models--" + REPO_ID.replace("/", "--"))
    return repo / "snapshots" / sidecar(glm5_mini)["model_revision"]


# ---- vLLM's loader and environment check, in fresh processes -----------------------------

WITHOUT = """
import sys
from vllm.plugins import load_general_plugins
from vllm.platforms import current_platform
load_general_plugins()  # VLLM_PLUGINS="" allows no plugin
try:
    current_platform.validate_environ(hard_fail=True)
except ValueError as exc:
    print(exc)
    sys.exit(3)
"""

WITH = """
import inspect, json, sys, importlib.metadata
import vllm.envs as envs
from vllm.platforms import current_platform
from vllm.plugins import load_general_plugins

table = envs.environment_variables
out = {"registered_before": "VLLM_NVFP4_MLA_SCALES_FILE" in table}
load_general_plugins()
current_platform.validate_environ(hard_fail=True)  # raises without the plugin
out["validated"] = True

import jitcache.vllm as jv
mine = {name: table.get(name) for name in jv.ENVIRONMENT_VARIABLES}
out["registered"] = sorted(name for name, getter in mine.items() if getter is not None)
out["plugin"] = [ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")
                 if ep.name == "jitcache"]
jv.register()
jv.register()
load_general_plugins()
out["idempotent"] = all(table[name] is getter for name, getter in mine.items())
out["size_stable"] = len(table)
jv.register()
out["size_stable"] = out["size_stable"] == len(table)
out["value"] = envs.VLLM_NVFP4_MLA_SCALES_FILE
out["is_set"] = envs.is_set("VLLM_NVFP4_MLA_SCALES_FILE")
envs.enable_envs_cache()  # evaluates every getter, ours included
out["factor"] = envs.compile_factors().get("VLLM_NVFP4_MLA_SCALES_FILE")

from vllm.v1.attention.backend import MLAAttentionImpl
def params(fn):
    return [(p.name, None if p.default is inspect.Parameter.empty else repr(p.default))
            for p in inspect.signature(fn).parameters.values()]
out["vllm_signature"] = params(MLAAttentionImpl.do_kv_cache_update)
out["our_signature"] = params(jv.KVCacheWriter.do_kv_cache_update)

resolved = jv.layer_scales(sys.argv[1])  # the override in the environment wins
out["source"] = resolved.provenance.source
out["override_file"] = resolved.provenance.file
print("RESULT " + json.dumps(out))
"""


def _dev_plugin_dist(root: Path) -> Path:
    """A minimal installed-distribution record named jitcache declaring the entry point, for
    a checkout where the package is not pip-installed: importlib.metadata finds it on sys.path
    exactly as it finds an installed one (and, first on the path, in place of one)."""
    dist = root / "jitcache-0.0.0.dev0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jitcache\nVersion: 0.0.0.dev0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\njitcache = {ENTRY}\n")
    return root


@needs_vllm
def test_vllm_environment_check_with_and_without_plugin(
    tmp_path: Path, glm5_mini: Path, python_env: dict[str, str]
) -> None:
    scales_file = str(glm5_mini / "nvfp4_ds_mla_outer_scales.json")
    env = dict(python_env)
    env[SCALES_VAR] = scales_file
    for name in ("VLLM_PLUGINS", "JITCACHE_STRICT"):
        env.pop(name, None)
    if installed_entry_point() is None or os.environ.get("JCTEST_DEV_PLUGIN") == "1":
        source = "a dev dist-info (the package is not pip-installed, or JCTEST_DEV_PLUGIN=1)"
        dev = _dev_plugin_dist(tmp_path / "site")
        env["PYTHONPATH"] = os.pathsep.join([str(dev), env.get("PYTHONPATH", "")])
    else:
        source = "the installed package's entry point"
    print(f"plugin found through {source}")
    without_env = dict(env, VLLM_PLUGINS="")
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    # Both children at once: each spends its time importing vLLM.
    without = subprocess.Popen([sys.executable, "-c", WITHOUT], env=without_env, **pipes)
    with_ = subprocess.Popen([sys.executable, "-c", WITH, str(glm5_mini)], env=env, **pipes)
    out_without, err_without = without.communicate(timeout=240)
    out_with, err_with = with_.communicate(timeout=240)

    assert without.returncode == 3, (
        f"without the plugin: rc {without.returncode}\n{err_without[-3000:]}"
    )
    assert f"Unknown vLLM environment variable detected: {SCALES_VAR}" in out_without

    assert with_.returncode == 0, f"with the plugin: rc {with_.returncode}\n{err_with[-3000:]}"
    line = next(l for l in out_with.splitlines() if l.startswith("RESULT "))
    got = json.loads(line[len("RESULT "):])
    assert got["registered_before"] is False
    assert got["validated"] is True
    assert got["plugin"] == [ENTRY]
    assert got["registered"] == sorted(jv.ENVIRONMENT_VARIABLES)
    assert got["idempotent"] and got["size_stable"]
    assert got["value"] == scales_file and got["is_set"] is True
    assert got["factor"] == scales_file
    assert got["our_signature"] == got["vllm_signature"], got
    assert got["source"] == "override" and got["override_file"] == scales_file


def test_installed_entry_point() -> None:
    ep = installed_entry_point()
    if ep is None:
        pytest.skip(
            f"no '{GROUP}' entry point named jitcache: the package is not pip-installed into "
            "this interpreter (the plugin is still tested through a dev dist-info)"
        )
    assert ep.value == ENTRY
    assert ep.load() is jv.register


# ---- register() without vLLM: the getters -----------------------------------------------


def test_getters_follow_the_library_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    get = jv.ENVIRONMENT_VARIABLES
    monkeypatch.setenv(SCALES_VAR, "   ")
    assert get[SCALES_VAR]() is None  # whitespace only: unset, as the resolver reads it
    monkeypatch.setenv(SCALES_VAR, " /x/scales.json\t")
    assert get[SCALES_VAR]() == "/x/scales.json"
    monkeypatch.setenv("JITCACHE_STRICT", "maybe")
    assert get["JITCACHE_STRICT"]() == "maybe"  # never raises: the library validates it
    monkeypatch.delenv("JITCACHE_LINEINFO", raising=False)
    assert get["JITCACHE_LINEINFO"]() is None


def test_every_variable_the_cli_lists_is_registered_or_left_out_on_purpose(cli: Path) -> None:
    """Each JITCACHE_* / VLLM_* variable `jitcache env` documents is either registered with
    vLLM or named in NOT_REGISTERED (location and verbosity only), so a new variable forces a
    decision; the behaviour-changing ones and the scales override are registered."""
    from conftest import run_cli

    listed = {line.split("=", 1)[0] for line in run_cli(cli, "env").stdout.splitlines()
              if line[:1].isupper() and "=" in line}
    ours = {n for n in listed if n.startswith(("JITCACHE_", "VLLM_"))}
    registered, left_out = set(jv.ENVIRONMENT_VARIABLES), set(jv.NOT_REGISTERED)
    assert not registered & left_out
    assert ours <= registered | left_out, ours - registered - left_out
    assert {"VLLM_NVFP4_MLA_SCALES_FILE", "JITCACHE_STRICT", "JITCACHE_REQUIRE_CACHE",
            "JITCACHE_NO_COMPILE", "JITCACHE_LINEINFO"} <= registered


# ---- the scales helper on a Hugging Face snapshot ----------------------------------------


def test_layer_scales_from_hf_snapshot(
    hf_cache: Path, glm5_mini: Path, cli: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SCALES_VAR, raising=False)
    meta = sidecar(glm5_mini)
    revision = meta["model_revision"]
    snapshot = snapshot_of(hf_cache, glm5_mini)
    assert jv.snapshot_revision(snapshot) == revision
    assert jv.snapshot_revision(glm5_mini) is None

    by_dir = jv.layer_scales(snapshot)
    by_repo = jv.layer_scales(REPO_ID, download_dir=hf_cache)
    by_rev = jv.layer_scales(REPO_ID, revision=revision, download_dir=hf_cache)
    assert jv.model_dir(REPO_ID, download_dir=hf_cache) == snapshot

    reference = scales_show_json(cli, snapshot)
    for got in (by_dir, by_repo, by_rev):
        assert got.num_hidden_layers == 78 and got.num_draft_layers == 1 and len(got.layers) == 79
        # The checkpoint's values (float32, as the kernels hold them); the draft layer at 1.0.
        want = torch.tensor(meta["scales"], dtype=torch.float32).tolist()
        assert got.scales[:78] == want
        assert got.layers[78].scale == 1.0 and got.layers[78].source == "draft-identity"
        assert all(l.source == "checkpoint" for l in got.layers[:78])
        assert [l.mode for l in got.layers] == [r["mode"] for r in reference["layers"]]
        cli_scales = [r["scale"] for r in reference["layers"]]
        assert got.scales == torch.tensor(cli_scales, dtype=torch.float32).tolist()
        p = got.provenance
        assert p.source == "checkpoint" and p.checkpoint_form == "sidecar"
        assert p.checkpoint_revision == revision and p.model_revision == revision
        assert p.sha256 == reference["provenance"]["sha256"]
        assert p.details == meta["provenance"]

    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache"):
        jv.layer_scales("zai/not-downloaded", download_dir=hf_cache)
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        jv.layer_scales(hf_cache / "no-such-dir")


def test_prepare_model_binds_the_snapshot(
    hf_cache: Path, glm5_mini: Path, warm_cache: Path
) -> None:
    snapshot = snapshot_of(hf_cache, glm5_mini)
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        model = jv.prepare_model(REPO_ID, download_dir=hf_cache, runtime=rt, target=TARGET)
    try:
        assert jt.get_model(jt.model_id(model)) is model
        assert model.provenance.checkpoint_revision == snapshot.name
        assert model.layers == jv.layer_scales(snapshot).layers
        assert model.stats.compiled == 0  # the warm cache served every variant
    finally:
        model.close()


def test_layer_index() -> None:
    assert jv.layer_index("model.layers.17.self_attn.attn") == 17
    assert jv.layer_index("model.layers.78.mtp_block.attn") == 78
    with pytest.raises(ValueError, match="layer_name"):
        jv.layer_index("model.embed_tokens")


# ---- do_kv_cache_update ------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(warm_cache: Path, glm5_mini: Path) -> jitcache.Model:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        prepared = rt.prepare(glm5_mini, target=TARGET)
    yield prepared
    prepared.close()


def test_do_kv_cache_update_writes_through_the_op(model, seed: int) -> None:
    """vLLM's call shape: k_pe [T, 1, 64], inputs padded past the slot mapping for CUDA
    graphs, a 3-D paged cache; the result equals jitcache.torch.write of the real rows."""
    gen = torch.Generator().manual_seed(seed)
    padded, real = 24, 19
    kv_c = (torch.randn(padded, 512, generator=gen) * 0.1).bfloat16()
    k_pe = torch.randn(padded, 1, 64, generator=gen).bfloat16()
    slot_mapping = torch.randperm(64, generator=gen)[:real].to(torch.int64)
    slot_mapping[-1] = -1
    k_scale = torch.tensor(1.0)
    layer = 7

    via_vllm = torch.zeros(4, 16, model.record_bytes, dtype=torch.uint8)
    writer = jv.KVCacheWriter(model, layer)
    writer.do_kv_cache_update(kv_c, k_pe, via_vllm, slot_mapping, "nvfp4_ds_mla", k_scale)
    direct = torch.zeros_like(via_vllm)
    jt.write(model, layer, kv_c[:real], k_pe[:real, 0], slot_mapping, direct)
    assert torch.equal(via_vllm, direct) and direct.any()

    also = torch.zeros_like(via_vllm)
    jv.do_kv_cache_update(model, layer, kv_c, k_pe, also, slot_mapping, "nvfp4_ds_mla", k_scale)
    assert torch.equal(also, direct)

    class Impl(jv.KVCacheWriter):  # the mixin use: an impl that sets the two attributes
        def __init__(self) -> None:
            self.jitcache_model, self.jitcache_layer = model, layer

    mixed = torch.zeros_like(via_vllm)
    Impl().do_kv_cache_update(kv_c, k_pe, mixed, slot_mapping, "nvfp4_ds_mla", k_scale, True)
    assert torch.equal(mixed, direct)

    writer.do_kv_cache_update(kv_c, k_pe, torch.empty(0, 16, model.record_bytes, dtype=torch.uint8),
                              slot_mapping, "nvfp4_ds_mla", k_scale)  # profiling run: nothing
    with pytest.raises(ValueError, match="slot_mapping: 30 slots for 24 rows"):
        too_many = torch.zeros(30, dtype=torch.int64)
        writer.do_kv_cache_update(kv_c, k_pe, via_vllm, too_many, "nvfp4_ds_mla", k_scale)
    with pytest.raises(TypeError, match="kv_cache: expected dtype torch.uint8"):
        writer.do_kv_cache_update(kv_c, k_pe, torch.zeros(4, 16, 576, dtype=torch.bfloat16),
                                  slot_mapping, "auto", k_scale)


def test_signature_matches_without_vllm() -> None:
    """The parameter names vLLM passes (checked against vLLM's own class in the child above)."""
    names = list(inspect.signature(jv.KVCacheWriter.do_kv_cache_update).parameters)
    assert names == ["self", "kv_c_normed", "k_pe", "kv_cache", "slot_mapping", "kv_cache_dtype",
                     "k_scale", "skip_scale"]
