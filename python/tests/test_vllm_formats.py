"""jitcache.vllm's record formats: which record vLLM's attention backend reads for
kv_cache_dtype="nvfp4_ds_mla", held to the real vLLM classes (upstream vLLM's
FlashMLASparseBackend and the bytes per token its MLA KV-cache spec uses, read from vLLM in a
fresh process), the fork's b12x backend by model, and do_kv_cache_update with a format."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import jitcache  # noqa: E402
import jitcache.host as host  # noqa: E402
import jitcache.torch as jt  # noqa: E402
import jitcache.vllm as jv  # noqa: E402
from conftest import TARGET  # noqa: E402
from test_vllm import needs_vllm  # noqa: E402

# vLLM 0.33's own answer: the KV-cache spec MLAAttention builds for nvfp4_ds_mla (called on
# a stand-in for the layer, with the fields the method reads), the backend class, and
# whether vLLM keeps the dtype for that backend.
FROM_VLLM = """
import json, types
import torch
from vllm.model_executor.layers.attention import mla_attention
from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend
import jitcache.vllm as jv

layer = types.SimpleNamespace(kv_cache_dtype="nvfp4_ds_mla", head_size=576, sliding_window=None,
                              topk_buffer_width=2048, indexer=None,
                              non_causal_multi_token_decode=False)
config = types.SimpleNamespace(cache_config=types.SimpleNamespace(block_size=64), model_config=None)
spec = mla_attention.MLAAttention.get_kv_cache_spec(layer, config)
fmt = jv.record_format("nvfp4_ds_mla", FlashMLASparseBackend)
cache = torch.zeros(3, spec.block_size, spec.state_content_bytes, dtype=torch.uint8)
jv.check_kv_cache(cache, fmt)
try:
    jv.check_kv_cache(cache, "b12x-432")
    refused = None
except ValueError as error:
    refused = str(error)
out = {
    "backend": FlashMLASparseBackend.get_name(),
    "lists_dtype": "nvfp4_ds_mla" in FlashMLASparseBackend.supported_kv_cache_dtypes,
    "kept": mla_attention._canonicalize_sparse_mla_kv_cache_dtype(FlashMLASparseBackend, "nvfp4_ds_mla"),
    "bytes_per_token": spec.state_content_bytes,
    "page_bytes": spec.page_size_bytes,
    "block_size": spec.block_size,
    "quant_mode": spec.kv_quant_mode.name,
    "format": fmt,
    "refused": refused,
}
print("RESULT " + json.dumps(out))
"""


@needs_vllm
def test_flashmla_sparse_reads_flashmla_352_records(tmp_path: Path, python_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", FROM_VLLM], env=python_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    got = json.loads(line[len("RESULT "):])
    print(got)
    assert got["backend"] == jv.FLASHMLA_SPARSE
    assert got["lists_dtype"] and got["kept"] == "nvfp4_ds_mla"
    assert got["quant_mode"] == "NVFP4_DS_MLA"
    assert got["format"] == "flashmla-352"
    # the bytes per token vLLM allocates are jitcache's record size for that format
    assert got["bytes_per_token"] == host.RECORD_BYTES["flashmla-352"]
    assert got["page_bytes"] == got["block_size"] * host.RECORD_BYTES["flashmla-352"]
    assert got["refused"] == (
        f"kv_cache: its last dimension is {got['bytes_per_token']} bytes per token "
        f"(shape [3, {got['block_size']}, {got['bytes_per_token']}]), but b12x-432 records are 432 bytes"
    )


def test_b12x_backend_by_model() -> None:
    glm52 = types.SimpleNamespace(model_type="glm_moe_dsa", qk_rope_head_dim=64)
    glm53_flash = types.SimpleNamespace(model_type="glm5_next", qk_rope_head_dim=0)
    deepseek = types.SimpleNamespace(model_type="deepseek_v32", qk_rope_head_dim=64)
    nope = types.SimpleNamespace(model_type="some_nope_mla", qk_rope_head_dim=0)
    b12x = jv.B12X_MLA_SPARSE
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="fp8") == "b12x-368"
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52) == "b12x-432"
    assert jv.record_format("nvfp4_ds_mla", b12x, "glm_moe_dsa", rope="bf16") == "b12x-432"
    assert jv.record_format("nvfp4_ds_mla", b12x, glm53_flash) == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, "glm5_next_mtp") == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, nope) == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, deepseek) == "b12x-432"
    assert jv.record_format("nvfp4_ds_mla", b12x) == "b12x-432"
    assert jv.record_format("nvfp4_ds_mla", "FLASHMLA_SPARSE", glm52) == "flashmla-352"

    class Backend:  # an attention backend class as vLLM passes it
        @staticmethod
        def get_name() -> str:
            return "B12X_MLA_SPARSE"

    assert jv.record_format("nvfp4_ds_mla", Backend, glm53_flash) == "b12x-304"
    with pytest.raises(ValueError, match="rope: fp8 RoPE records .* glm_moe_dsa models only.*'deepseek_v32'"):
        jv.record_format("nvfp4_ds_mla", b12x, deepseek, rope="fp8")
    with pytest.raises(ValueError, match="kv_cache_dtype: jitcache writes 'nvfp4_ds_mla' records, got 'fp8_ds_mla'"):
        jv.record_format("fp8_ds_mla", jv.FLASHMLA_SPARSE)
    with pytest.raises(ValueError, match="backend: FLASHINFER_MLA_SPARSE is not a backend"):
        jv.record_format("nvfp4_ds_mla", "FLASHINFER_MLA_SPARSE")
    with pytest.raises(TypeError, match="backend: expected an attention backend class"):
        jv.record_format("nvfp4_ds_mla", 3)
    with pytest.raises(ValueError, match="rope: expected 'bf16' or 'fp8'"):
        jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="e4m3")


def test_b12x_backend_reads_config_dicts_and_text_config(repo_root: Path) -> None:
    """hf_config as json.load gives config.json, and a model nested in text_config: the
    model's fields are read there (GLM-5.3 Flash is b12x-304, not b12x-432)."""
    b12x = jv.B12X_MLA_SPARSE
    glm52 = json.loads((repo_root / "examples" / "glm5-mini" / "config.json").read_text())
    assert glm52["model_type"] == "glm_moe_dsa" and glm52["qk_rope_head_dim"] == 64
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52) == "b12x-432"
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="fp8") == "b12x-368"
    flash = dict(glm52, model_type="glm5_next", qk_rope_head_dim=0)
    assert jv.record_format("nvfp4_ds_mla", b12x, flash) == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, {"qk_rope_head_dim": 0}) == "b12x-304"
    with pytest.raises(ValueError, match="rope: fp8 RoPE records .* glm_moe_dsa models only.*'deepseek_v32'"):
        jv.record_format("nvfp4_ds_mla", b12x, dict(glm52, model_type="deepseek_v32"), rope="fp8")
    # a wrapper whose text model is GLM-5.3 Flash, as an object and as a dict
    nested = types.SimpleNamespace(
        model_type="glm5_next_vl", text_config=types.SimpleNamespace(model_type="glm5_next", qk_rope_head_dim=0))
    assert jv.record_format("nvfp4_ds_mla", b12x, nested) == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, {"model_type": "x", "text_config": flash}) == "b12x-304"
    no_type = types.SimpleNamespace(model_type="glm5_next", text_config=types.SimpleNamespace(hidden_size=6144))
    assert jv.record_format("nvfp4_ds_mla", b12x, no_type) == "b12x-304"  # the outer model type
    # the text model's RoPE width decides, not the wrapper's, and the outer type is a fallback
    wrapped = {"model_type": "glm_moe_dsa", "qk_rope_head_dim": 0, "text_config": {"qk_rope_head_dim": 64}}
    assert jv.record_format("nvfp4_ds_mla", b12x, wrapped, rope="fp8") == "b12x-368"


def test_record_format_refuses_what_has_no_record() -> None:
    b12x, flashmla = jv.B12X_MLA_SPARSE, jv.FLASHMLA_SPARSE
    glm52 = {"model_type": "glm_moe_dsa", "qk_rope_head_dim": 64}
    flash = types.SimpleNamespace(model_type="glm5_next", qk_rope_head_dim=0)
    for rope in ("fp8", "bf16"):  # flashmla-352's RoPE is unscaled fp8 of its own
        with pytest.raises(ValueError, match=f"rope: FLASHMLA_SPARSE reads flashmla-352 records.*rope='{rope}'"):
            jv.record_format("nvfp4_ds_mla", flashmla, glm52, rope=rope)
        # b12x-304 holds no RoPE at all
        with pytest.raises(ValueError, match=f"rope: .*'glm5_next'.* b12x-304 records, which hold no RoPE.*'{rope}'"):
            jv.record_format("nvfp4_ds_mla", b12x, flash, rope=rope)
        with pytest.raises(ValueError, match=f"rope: .*qk_rope_head_dim 0.* b12x-304 .*'{rope}'"):
            jv.record_format("nvfp4_ds_mla", b12x, {"qk_rope_head_dim": 0}, rope=rope)
        with pytest.raises(ValueError, match="rope: .*b12x-304"):
            jv.record_format("nvfp4_ds_mla", b12x, "glm5_next_mtp", rope=rope)
    with pytest.raises(ValueError, match="latent_scale: FLASHMLA_SPARSE reads flashmla-352 records, which have no per-token"):
        jv.record_format("nvfp4_ds_mla", flashmla, glm52, latent_scale="per-token")
    with pytest.raises(ValueError, match="latent_scale: .*b12x-432 records, which have none"):
        jv.record_format("nvfp4_ds_mla", b12x, glm52, latent_scale="per-token")
    with pytest.raises(ValueError, match="latent_scale: .*b12x-432 records, which have none"):
        jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="bf16", latent_scale="per-token")
    with pytest.raises(ValueError, match="latent_scale: .*b12x-304 records, which have per-token scales only"):
        jv.record_format("nvfp4_ds_mla", b12x, flash, latent_scale="per-layer")
    with pytest.raises(ValueError, match="latent_scale: expected 'per-layer' or 'per-token', got 'dynamic'"):
        jv.record_format("nvfp4_ds_mla", b12x, glm52, latent_scale="dynamic")
    # what has a record
    assert jv.record_format("nvfp4_ds_mla", flashmla, glm52, latent_scale="per-layer") == "flashmla-352"
    assert jv.record_format("nvfp4_ds_mla", b12x, flash, latent_scale="per-token") == "b12x-304"
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="fp8", latent_scale="per-layer") == "b12x-368"
    assert jv.record_format("nvfp4_ds_mla", b12x, glm52, rope="fp8", latent_scale="per-token") == "b12x-368-per-token"
    assert jv.record_format("nvfp4_ds_mla", b12x, "glm_moe_dsa", rope="fp8", latent_scale="per-token") == (
        "b12x-368-per-token")


def test_check_kv_cache() -> None:
    for name in jitcache.formats.RECORDS:
        jv.check_kv_cache(torch.zeros(2, 16, host.RECORD_BYTES[name], dtype=torch.uint8), name)
    with pytest.raises(ValueError, match=r"last dimension is 432 bytes .* but b12x-368-per-token records are 368 bytes"):
        jv.check_kv_cache(torch.zeros(2, 16, 432, dtype=torch.uint8), "b12x-368-per-token")
    with pytest.raises(ValueError, match="format: expected one of b12x-432, .*, got 'nvfp4_ds_mla'"):
        jv.check_kv_cache(torch.zeros(2, 16, 432, dtype=torch.uint8), "nvfp4_ds_mla")
    with pytest.raises(ValueError, match=r"last dimension is 368 bytes .* but b12x-304 records are 304 bytes"):
        jv.check_kv_cache(torch.zeros(2, 16, 368, dtype=torch.uint8), "b12x-304")
    with pytest.raises(TypeError, match="kv_cache: expected dtype torch.uint8"):
        jv.check_kv_cache(torch.zeros(2, 16, 304, dtype=torch.bfloat16), "b12x-304")


@pytest.fixture(scope="module")
def glm53_flash_model(tmp_path_factory: pytest.TempPathFactory, glm5_mini: Path):
    path = tmp_path_factory.mktemp("vllm-formats") / "cache"
    path.mkdir(mode=0o700)
    with jitcache.Runtime(cache_dir=path, device="none") as rt:
        model = jv.prepare_model(glm5_mini, runtime=rt, target=TARGET, format="b12x-304")
    yield model
    model.close()


def test_do_kv_cache_update_without_rope(glm53_flash_model, seed: int) -> None:
    """A NoPE model's write: vLLM's k_pe is empty ([T, 1, 0]) or None; the records equal
    jitcache.torch.write's, and a cache of another record size is refused naming both."""
    model = glm53_flash_model
    assert model.format == "b12x-304" and model.latent_scale == "per-token"
    gen = torch.Generator().manual_seed(seed)
    kv_c = (torch.randn(12, 512, generator=gen) * 0.3).bfloat16()
    slot_mapping = torch.randperm(32, generator=gen)[:10].to(torch.int64)
    layer = 9
    via_vllm = torch.zeros(2, 16, 304, dtype=torch.uint8)
    jv.KVCacheWriter(model, layer).do_kv_cache_update(
        kv_c, torch.empty(12, 1, 0, dtype=torch.bfloat16), via_vllm, slot_mapping, "nvfp4_ds_mla",
        torch.tensor(1.0))
    direct = torch.zeros_like(via_vllm)
    jt.write(model, layer, kv_c[:10], None, slot_mapping, direct)
    assert torch.equal(via_vllm, direct) and direct.any()
    also = torch.zeros_like(via_vllm)
    jv.do_kv_cache_update(jt.model_id(model), layer, kv_c, None, also, slot_mapping)
    assert torch.equal(also, direct)
    with pytest.raises(ValueError, match=r"last dimension is 352 bytes .* but b12x-304 records are 304 bytes"):
        jv.do_kv_cache_update(model, layer, kv_c, None, torch.zeros(2, 16, 352, dtype=torch.uint8),
                              slot_mapping)
