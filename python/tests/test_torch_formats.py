"""jitcache.torch with the record formats: the ops on models of b12x-304 (no RoPE, 512-wide
rows, per-token) and flashmla-352 against jitcache.host, the ``format`` argument, and the
fake implementations checking shapes with the format's record size and row width."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jitcache  # noqa: E402
import jitcache.host as host  # noqa: E402
import jitcache.torch as jt  # noqa: E402
from conftest import TARGET  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, glm5_mini: Path, repo_root: Path):
    path = tmp_path_factory.mktemp("torch-formats") / "cache"
    path.mkdir(mode=0o700)
    # The page-major formats are identity only: a checkpoint without per-layer scales.
    def checkpoint(name: str) -> Path:
        return repo_root / "examples" / "dsv4-mini" if jitcache.formats.page_size(name) > 1 else glm5_mini

    with jitcache.Runtime(cache_dir=path, device="none") as rt:
        prepared = {name: rt.prepare(checkpoint(name), target=TARGET, format=name) for name in host.FORMATS}
        # the per-token b12x-368 model, in the older spelling (format and latent_scale)
        prepared["b12x-368-per-token"] = rt.prepare(
            glm5_mini, target=TARGET, format="b12x-368", latent_scale="per-token")
    yield prepared
    for model in prepared.values():
        model.close()


def tokens(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** (torch.rand(n, 1, generator=gen) * 4 - 3)
    kv_c = (torch.randn(n, 512, generator=gen) * magnitude).bfloat16()
    k_pe = (torch.randn(n, 64, generator=gen) * magnitude).bfloat16()
    return kv_c, k_pe


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("name", ["b12x-304", "flashmla-352", "b12x-368", "flashinfer-glm-416"])
@pytest.mark.parametrize("layer", [0, 78])
def test_ops_match_host_for_each_format(models, name: str, layer: int, seed: int) -> None:
    model = models[name]
    n = 11
    kv_c, k_pe = tokens(seed, n)
    slot_mapping = torch.randperm(32, generator=torch.Generator().manual_seed(seed))[:n].to(torch.int64)
    kv_cache = jt.new_cache(model, 2, 16)
    assert kv_cache.shape[-1] == host.RECORD_BYTES[name]
    pe = None if name == "b12x-304" else k_pe
    jt.write(model, layer, kv_c, pe, slot_mapping, kv_cache, format=name)
    info = model.layer(layer)
    latent = "per-token" if model.latent_scale == "per-token" else None
    expected = host.quantize(bits(kv_c), bits(k_pe), info.scale, format=name, latent_scale=latent)
    records = kv_cache.view(-1, model.record_bytes).numpy()
    assert np.array_equal(records[slot_mapping.numpy()], expected)

    width = jitcache.formats.row_width(name)
    out = torch.empty(n, width, dtype=torch.bfloat16)
    jt.gather(model, layer, kv_cache, slot_mapping.to(torch.int32), out)
    want = host.dequantize(expected, info.scale, format=name, latent_scale=latent)
    assert np.array_equal(bits(out), (want.view(np.uint32) >> 16).astype(np.uint16))


@pytest.mark.parametrize("name", ["flashinfer-dsv4-384", "flashmla-v41-288"])
def test_ops_write_page_major_caches_as_the_host_does(models, name: str, seed: int) -> None:
    """A page-major cache is [num_pages, 64, R] as its engine shapes it; the writer takes
    kv_c's rows of 512 and no k_pe, and the lowest row of a duplicate slot wins."""
    model = models[name]
    n = 100
    gen = torch.Generator().manual_seed(seed)
    kv_c = (torch.randn(n, 512, generator=gen) * 10.0 ** (torch.rand(n, 1, generator=gen) * 4 - 3)).bfloat16()
    kv_cache = jt.new_cache(model, 2, 64)
    assert tuple(kv_cache.shape) == (2, 64, host.RECORD_BYTES[name])
    jt.write(model, 1, kv_c, None, torch.arange(n, dtype=torch.int64), kv_cache, format=name)
    expected = host.quantize(bits(kv_c), None, format=name)
    assert np.array_equal(kv_cache.numpy(), expected)
    out = torch.empty(128, 512, dtype=torch.bfloat16)
    jt.gather(model, 1, kv_cache, torch.arange(128, dtype=torch.int32), out)
    want = host.dequantize(expected, format=name)
    assert np.array_equal(bits(out), (want.view(np.uint32) >> 16).astype(np.uint16))
    # Rows 3 and 7 both map to slot 9, row 5 is padding: slot 9 holds row 3's record.
    again = jt.new_cache(model, 2, 64)
    jt.write(model, 1, kv_c[:8], None, torch.tensor([0, 1, 2, 9, 4, -1, 6, 9]), again)
    alone = jt.new_cache(model, 2, 64)
    jt.write(model, 1, kv_c[3:4], None, torch.tensor([9]), alone)
    rows9 = torch.empty(1, 512, dtype=torch.bfloat16)
    jt.gather(model, 1, again, torch.tensor([9], dtype=torch.int32), rows9)
    first = torch.empty(1, 512, dtype=torch.bfloat16)
    jt.gather(model, 1, alone, torch.tensor([9], dtype=torch.int32), first)
    assert torch.equal(rows9, first)
    # k_pe, as for b12x-304, is not read: the RoPE (if any) is in kv_c's row.
    with_pe = jt.new_cache(model, 2, 64)
    jt.write(model, 1, kv_c[:8], kv_c[:8, :64].contiguous(), torch.tensor([0, 1, 2, 9, 4, -1, 6, 9]), with_pe)
    assert torch.equal(with_pe, again)
    with pytest.raises(ValueError, match="pages of 64 slots"):
        jt.write(model, 1, kv_c[:2], None, torch.arange(2), jt.new_cache(model, 4, 16))


def test_b12x_304_takes_no_rope_and_gathers_512(models, seed: int) -> None:
    model = models["b12x-304"]
    kv_c, k_pe = tokens(seed, 4)
    slots = torch.arange(4, dtype=torch.int64)
    a, b = jt.new_cache(model, 1, 4), jt.new_cache(model, 1, 4)
    jt.write(model, 3, kv_c, None, slots, a)
    jt.write(model, 3, kv_c, k_pe, slots, b)  # given, and not read
    assert torch.equal(a, b) and a.any()
    with pytest.raises(ValueError, match=r"out: expected shape \[N, 512\]"):
        jt.gather(model, 3, a, slots.to(torch.int32), torch.empty(4, 576, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="k_pe: None, but flashmla-352 records hold the RoPE key"):
        jt.write(models["flashmla-352"], 3, kv_c, None, slots, jt.new_cache(models["flashmla-352"], 1, 4))


def test_format_argument_must_name_the_models_format(models, seed: int) -> None:
    model = models["flashmla-352"]
    kv_c, k_pe = tokens(seed, 2)
    slots = torch.arange(2, dtype=torch.int64)
    cache = jt.new_cache(model, 1, 2)
    jt.write(model, 0, kv_c, k_pe, slots, cache, format="flashmla-352")
    with pytest.raises(ValueError, match="format: the call says 'b12x-432', but the model writes and reads flashmla-352"):
        jt.write(model, 0, kv_c, k_pe, slots, cache, format="b12x-432")
    with pytest.raises(ValueError, match="format: expected one of"):
        torch.ops.jitcache.nvfp4_mla_gather(
            cache, slots.to(torch.int32), torch.empty(2, 576, dtype=torch.bfloat16), jt.model_id(model), 0,
            format="nvfp4_ds_mla")
    with pytest.raises(TypeError, match="format: expected a format name"):
        jt.write(model, 0, kv_c, k_pe, slots, cache, format=352)
    # the RoPE aliases name the first two formats
    fp8 = models["b12x-368"]
    jt.write(fp8, 0, kv_c, k_pe, slots, jt.new_cache(fp8, 1, 2), format="fp8")
    with pytest.raises(ValueError, match=r"kv_cache: expected shape \[num_slots, 368\] .* for b12x-368 records"):
        jt.write(fp8, 0, kv_c, k_pe, slots, cache)


def test_per_token_368_records_have_their_own_name(models, seed: int) -> None:
    """b12x-368 records written with per-token scales and with the per-layer scale read as
    noise for each other, so they are two records: a per-token model takes
    format="b12x-368-per-token" and refuses "b12x-368" (the per-layer records), and the
    other way round. The issue's case: a cache written by the per-token model and gathered
    by the per-layer model of the same checkpoint, both calls saying "b12x-368"."""
    per_layer, per_token = models["b12x-368"], models["b12x-368-per-token"]
    assert (per_layer.format, per_layer.latent_scale, per_layer.record) == ("b12x-368", "per-layer", "b12x-368")
    assert (per_token.format, per_token.latent_scale, per_token.record) == (
        "b12x-368", "per-token", "b12x-368-per-token")
    assert [models[n].record for n in ("b12x-432", "b12x-304", "flashmla-352")] == [
        "b12x-432", "b12x-304", "flashmla-352"]
    n, layer = 16, 3
    kv_c, k_pe = tokens(seed, n)
    slots, rows = torch.arange(n, dtype=torch.int64), torch.arange(n, dtype=torch.int32)
    out = torch.empty(n, 576, dtype=torch.bfloat16)
    cache = jt.new_cache(per_token, 1, n)
    says = "format: the call says '{}', but the model writes and reads {} records"
    with pytest.raises(ValueError, match=says.format("b12x-368", "b12x-368-per-token")):
        jt.write(per_token, layer, kv_c, k_pe, slots, cache, format="b12x-368")
    assert not cache.any()  # refused before anything was written
    jt.write(per_token, layer, kv_c, k_pe, slots, cache, format="b12x-368-per-token")
    with pytest.raises(ValueError, match=says.format("b12x-368", "b12x-368-per-token")):
        jt.gather(per_token, layer, cache, rows, out, format="b12x-368")
    with pytest.raises(ValueError, match=says.format("b12x-368-per-token", "b12x-368")):
        jt.gather(per_layer, layer, cache, rows, out, format="b12x-368-per-token")
    with pytest.raises(ValueError, match=says.format("fp8", "b12x-368-per-token")):
        torch.ops.jitcache.nvfp4_mla_gather(cache, rows, out, jt.model_id(per_token), layer, format="fp8")
    jt.gather(per_token, layer, cache, rows, out, format="b12x-368-per-token")
    records = cache.view(-1, 368).numpy()
    assert np.array_equal(records, host.quantize(bits(kv_c), bits(k_pe), format="b12x-368-per-token"))
    want = host.dequantize(records, format="b12x-368-per-token")
    assert np.array_equal(bits(out), (want.view(np.uint32) >> 16).astype(np.uint16))

    # the per-layer records keep their names, "b12x-368" and "fp8"
    scale = per_layer.layer(layer).scale
    for name in ("b12x-368", "fp8"):
        plain = jt.new_cache(per_layer, 1, n)
        jt.write(per_layer, layer, kv_c, k_pe, slots, plain, format=name)
        assert np.array_equal(plain.view(-1, 368).numpy(), host.quantize(bits(kv_c), bits(k_pe), scale, format=name))
        jt.gather(per_layer, layer, plain, rows, out, format=name)
    with pytest.raises(ValueError, match=says.format("b12x-368-per-token", "b12x-368")):
        jt.write(per_layer, layer, kv_c, k_pe, slots, plain, format="b12x-368-per-token")
    # b12x-304 has per-token records only, under its own name
    flash = models["b12x-304"]
    jt.write(flash, layer, kv_c, None, slots, jt.new_cache(flash, 1, n), format="b12x-304")

    from torch._subclasses.fake_tensor import FakeTensorMode

    mid = jt.model_id(per_token)
    with FakeTensorMode():
        fake_kv_c, fake_pe = torch.empty(3, 512, dtype=torch.bfloat16), torch.empty(3, 64, dtype=torch.bfloat16)
        fake_slots, fake_cache = torch.empty(3, dtype=torch.int64), torch.empty(4, 16, 368, dtype=torch.uint8)
        torch.ops.jitcache.nvfp4_mla_write(
            fake_kv_c, fake_pe, fake_slots, fake_cache, mid, 0, format="b12x-368-per-token")
        with pytest.raises(ValueError, match=says.format("b12x-368", "b12x-368-per-token")):
            torch.ops.jitcache.nvfp4_mla_write(fake_kv_c, fake_pe, fake_slots, fake_cache, mid, 0, format="b12x-368")


def test_fake_tensors_use_the_formats_sizes(models) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    mid = jt.model_id(models["b12x-304"])
    with FakeTensorMode():
        kv_c = torch.empty(3, 512, dtype=torch.bfloat16)
        slots = torch.empty(3, dtype=torch.int64)
        cache = torch.empty(4, 16, 304, dtype=torch.uint8)
        torch.ops.jitcache.nvfp4_mla_write(kv_c, None, slots, cache, mid, 0, format="b12x-304")
        torch.ops.jitcache.nvfp4_mla_gather(
            cache, torch.empty(3, dtype=torch.int32), torch.empty(3, 512, dtype=torch.bfloat16), mid, 0)
        with pytest.raises(ValueError, match=r"kv_cache: expected shape \[num_slots, 304\]"):
            torch.ops.jitcache.nvfp4_mla_write(
                kv_c, None, slots, torch.empty(4, 16, 352, dtype=torch.uint8), mid, 0)
        with pytest.raises(ValueError, match=r"out: expected shape \[N, 512\]"):
            torch.ops.jitcache.nvfp4_mla_gather(
                cache, torch.empty(3, dtype=torch.int32), torch.empty(3, 576, dtype=torch.bfloat16), mid, 0,
                format="b12x-304")
        with pytest.raises(ValueError, match="model writes and reads b12x-304"):
            torch.ops.jitcache.nvfp4_mla_write(kv_c, None, slots, cache, mid, 0, format="flashmla-352")


def test_opcheck_and_compile_with_a_format(models, seed: int) -> None:
    model = models["b12x-304"]
    mid = jt.model_id(model)
    kv_c, _ = tokens(seed, 8)
    slot_mapping = torch.arange(8, dtype=torch.int64)
    cache = jt.new_cache(model, 1, 8)
    out = torch.empty(8, 512, dtype=torch.bfloat16)
    write_op = torch.ops.jitcache.nvfp4_mla_write.default
    gather_op = torch.ops.jitcache.nvfp4_mla_gather.default
    for op, args, kwargs in [
        (write_op, (kv_c, None, slot_mapping, cache, mid, 2), {"format": "b12x-304"}),
        (gather_op, (cache, slot_mapping.to(torch.int32), out, mid, 2), {"format": "b12x-304"}),
    ]:
        result = torch.library.opcheck(op, args, kwargs)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)

    torch._dynamo.reset()

    def step(kv_c, slot_mapping, cache, out):
        torch.ops.jitcache.nvfp4_mla_write(kv_c, None, slot_mapping, cache, mid, 5, format="b12x-304")
        torch.ops.jitcache.nvfp4_mla_gather(cache, slot_mapping.to(torch.int32), out, mid, 5)
        return out.float() * 2

    eager_cache, eager_out = jt.new_cache(model, 1, 8), torch.empty(8, 512, dtype=torch.bfloat16)
    compiled_cache, compiled_out = jt.new_cache(model, 1, 8), torch.empty(8, 512, dtype=torch.bfloat16)
    eager = step(kv_c, slot_mapping, eager_cache, eager_out)
    got = torch.compile(step, fullgraph=True)(kv_c, slot_mapping, compiled_cache, compiled_out)
    assert torch.equal(eager_cache, compiled_cache) and torch.equal(eager.view(torch.int32), got.view(torch.int32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("name", ["b12x-304", "flashmla-352", "b12x-368", "flashinfer-glm-416"])
def test_cuda_ops_match_cpu_for_each_format(cache_dir: Path, glm5_mini: Path, name: str, seed: int) -> None:
    """The device kernels of each format write and gather what the host executor does
    (dense 512-wide rows for b12x-304: the launch's default row stride is the format's)."""
    with jitcache.Runtime(cache_dir=cache_dir, device="auto") as rt:
        if not rt.device.available:
            pytest.skip(f"jitcache has no device: {rt.device.reason}")
        model = rt.prepare(glm5_mini, format=name)
    try:
        n, width = 48, jitcache.formats.row_width(name)
        kv_c, k_pe = tokens(seed, n)
        pe = None if name == "b12x-304" else k_pe
        slot_mapping = torch.randperm(64, generator=torch.Generator().manual_seed(seed))[:n].to(torch.int64)
        for layer in (0, 78):
            cpu_cache, cpu_out = jt.new_cache(model, 4, 16), torch.empty(n, width, dtype=torch.bfloat16)
            jt.write(model, layer, kv_c, pe, slot_mapping, cpu_cache)
            jt.gather(model, layer, cpu_cache, slot_mapping.to(torch.int32), cpu_out)
            dev = torch.device("cuda")
            g_cache = jt.new_cache(model, 4, 16, device=dev)
            g_out = torch.empty(n, width, dtype=torch.bfloat16, device=dev)
            g_pe = None if pe is None else pe.to(dev)
            jt.write(model, layer, kv_c.to(dev), g_pe, slot_mapping.to(dev), g_cache)
            jt.gather(model, layer, g_cache, slot_mapping.to(dev, torch.int32), g_out)
            torch.cuda.synchronize()
            assert torch.equal(g_cache.cpu(), cpu_cache), (name, layer)
            assert np.array_equal(bits(g_out.cpu()), bits(cpu_out)), (name, layer)
    finally:
        model.close()


def test_kv_global_scale_is_each_layers_s_l_as_flashinfer_takes_it(models) -> None:
    """FlashInfer's GLM reader takes one fp32 element per layer: s_l for a dynamic layer,
    1.0 for an identity one (the draft layer 78 of the example), the scale the layer's
    records were written with; the writer's records, times it, read back as the gather."""
    import jitcache.vllm as jv

    model = models["flashinfer-glm-416"]
    for layer in (0, 40, 77, 78):
        info = model.layer(layer)
        g = jt.kv_global_scale(model, layer)
        assert g.dtype == torch.float32 and g.shape == (1,) and g.device.type == "cpu"
        want = 1.0 if info.mode == "identity" else info.scale
        assert g.item() == np.float32(want) and g.item() > 0
        assert torch.equal(jv.kv_global_scale(model, f"model.layers.{layer}.self_attn.attn"), g)
    assert model.layer(0).mode == "dynamic" and jt.kv_global_scale(model, 0).item() != 1.0
    assert jt.kv_global_scale(model, 78).item() == 1.0, "the draft layer is identity"
    assert jt.kv_global_scale(model, 3, device="meta").device.type == "meta"


def test_kv_global_scale_refuses_other_formats_and_bad_layers(models) -> None:
    with pytest.raises(jitcache.InvalidArgumentError, match="writes b12x-432 records; only flashinfer-glm-416"):
        jt.kv_global_scale(models["b12x-432"], 0)
    with pytest.raises(TypeError, match="layer: expected an int"):
        jt.kv_global_scale(models["flashinfer-glm-416"], "0")
    with pytest.raises(jitcache.InvalidArgumentError):
        jt.kv_global_scale(models["flashinfer-glm-416"], 500)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_kv_global_scale_lands_on_the_gpu(models) -> None:
    g = jt.kv_global_scale(models["flashinfer-glm-416"], 0, device="cuda")
    assert g.is_cuda and g.dtype == torch.float32 and g.numel() == 1
