"""jitcache.torch: the ops on CPU tensors against the host executor, opcheck, torch.compile,
and the argument checks."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jitcache  # noqa: E402
import jitcache.host as host  # noqa: E402
import jitcache.torch as jt  # noqa: E402

TARGET = "sm_90"
DYNAMIC_LAYER = 0  # calibrated in glm5-mini
IDENTITY_LAYER = 78  # the draft (MTP) layer: always identity


@pytest.fixture(scope="module")
def models(warm_cache: Path, glm5_mini: Path) -> dict[str, jitcache.Model]:
    """glm5-mini prepared for each RoPE format (device "none": the CPU ops only)."""
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        prepared = {r: rt.prepare(glm5_mini, rope=r, target=TARGET) for r in ("bf16", "fp8")}
    yield prepared
    for model in prepared.values():
        model.close()


@pytest.fixture(scope="module")
def model(models: dict[str, jitcache.Model]) -> jitcache.Model:
    return models["bf16"]


def random_tokens(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_c [n, 512], k_pe [n, 64] in bf16, each row with its own magnitude (1e-3 .. 10),
    a zero row and a large row (beyond E4M3's range once divided by a small scale)."""
    magnitude = 10.0 ** (torch.rand(n, 1, generator=gen) * 4 - 3)
    kv_c = (torch.randn(n, 512, generator=gen) * magnitude).bfloat16()
    k_pe = (torch.randn(n, 64, generator=gen) * magnitude).bfloat16()
    if n >= 3:
        kv_c[1] = 0
        k_pe[1] = 0
        kv_c[2, :16] = 3.0e4
    return kv_c, k_pe


def bits(t: torch.Tensor) -> np.ndarray:
    """A bf16 tensor's bit patterns as uint16."""
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def host_out_bits(records: np.ndarray, scale: float, rope: str) -> np.ndarray:
    """What the gather must write, as bf16 bits, from jitcache.host.dequantize."""
    widened = host.dequantize(records, scale, rope=rope)
    return (widened.view(np.uint32) >> 16).astype(np.uint16)


# ---- bit-exactness with jitcache.host ----------------------------------------------------


@pytest.mark.parametrize("rope", ["bf16", "fp8"])
@pytest.mark.parametrize("layer", [DYNAMIC_LAYER, 40, IDENTITY_LAYER])
def test_ops_match_host_executor(models, rope: str, layer: int, seed: int) -> None:
    model = models[rope]
    info = model.layer(layer)
    assert info.mode == ("identity" if layer == IDENTITY_LAYER else "dynamic")
    gen = torch.Generator().manual_seed(seed)
    n, blocks, block_size = 37, 5, 16
    kv_c, k_pe = random_tokens(gen, n)
    slot_mapping = torch.randperm(blocks * block_size, generator=gen)[:n].to(torch.int64)
    slot_mapping[5] = -1  # padding: skipped
    kv_cache = jt.new_cache(model, blocks, block_size)
    assert kv_cache.shape == (blocks, block_size, model.record_bytes)

    jt.write(model, layer, kv_c, k_pe, slot_mapping, kv_cache)

    expected = host.quantize(bits(kv_c), bits(k_pe), info.scale, rope=rope)
    flat = kv_cache.view(-1, model.record_bytes).numpy()
    written = slot_mapping >= 0
    assert np.array_equal(flat[slot_mapping[written].numpy()], expected[written.numpy()])
    untouched = np.ones(blocks * block_size, dtype=bool)
    untouched[slot_mapping[written].numpy()] = False
    assert not flat[untouched].any(), "the writer touched a slot it was not given"

    # Gather every written slot, a padding slot (-1: a zero row) and a repeated slot.
    extra = torch.tensor([-1, int(slot_mapping[0])])
    slots = torch.cat([slot_mapping[written], extra]).to(torch.int32)
    out = torch.full((slots.shape[0], 576), float("nan"), dtype=torch.bfloat16)
    jt.gather(model, layer, kv_cache, slots, out)
    want = host_out_bits(flat[slots[:-2].numpy()], info.scale, rope)
    got = bits(out)
    assert np.array_equal(got[:-2], want)
    assert not got[-2].any(), "a negative slot must give a zero row"
    assert np.array_equal(got[-1], want[0])


def test_strided_inputs_and_outputs(model, seed: int) -> None:
    """kv_c and k_pe as column slices of one [N, 576] tensor (how an engine holds them), and
    an out with a row stride larger than 576: the strides reach the kernels."""
    gen = torch.Generator().manual_seed(seed)
    n = 9
    kv_c, k_pe = random_tokens(gen, n)
    joined = torch.cat([kv_c, k_pe], dim=1)
    kv_view, pe_view = joined[:, :512], joined[:, 512:]
    assert kv_view.stride(0) == 576 and pe_view.stride(0) == 576
    cache_a = torch.zeros(n, model.record_bytes, dtype=torch.uint8)
    cache_b = torch.zeros_like(cache_a)
    slots64 = torch.arange(n, dtype=torch.int64)
    jt.write(model, 3, kv_view, pe_view, slots64, cache_a)
    jt.write(model, 3, kv_c, k_pe, slots64, cache_b)
    assert torch.equal(cache_a, cache_b)

    wide = torch.zeros(n, 640, dtype=torch.bfloat16)
    out = wide[:, :576]
    jt.gather(model, 3, cache_a, slots64.to(torch.int32), out)
    dense = torch.empty(n, 576, dtype=torch.bfloat16)
    jt.gather(model, 3, cache_a, slots64.to(torch.int32), dense)
    assert np.array_equal(bits(out), bits(dense))
    assert not bits(wide[:, 576:]).any(), "the gather wrote past the row"


def test_status_word_reports_out_of_range_slots(model) -> None:
    n = 4
    kv_c = torch.ones(n, 512, dtype=torch.bfloat16)
    k_pe = torch.ones(n, 64, dtype=torch.bfloat16)
    kv_cache = torch.zeros(2, 8, model.record_bytes, dtype=torch.uint8)
    status = torch.zeros(1, dtype=torch.int32)
    jt.write(model, 0, kv_c, k_pe, torch.tensor([0, 1, 2, 3], dtype=torch.int64), kv_cache, status)
    assert int(status) == 0
    bad_slots = torch.tensor([0, 16, -1, 99], dtype=torch.int64)
    jt.write(model, 0, kv_c, k_pe, bad_slots, kv_cache, status)
    assert int(status) == jt.STATUS_SLOT_OUT_OF_RANGE
    status.zero_()
    out = torch.ones(2, 576, dtype=torch.bfloat16)
    jt.gather(model, 0, kv_cache, torch.tensor([1, 16], dtype=torch.int32), out, status)
    assert int(status) == jt.STATUS_SLOT_OUT_OF_RANGE
    assert out[0].ne(0).any() and not out[1].ne(0).any()


def test_empty_batches_do_nothing(model) -> None:
    kv_cache = torch.zeros(4, model.record_bytes, dtype=torch.uint8)
    none = dict(dtype=torch.bfloat16)
    jt.write(model, 0, torch.empty(0, 512, **none), torch.empty(0, 64, **none),
             torch.empty(0, dtype=torch.int64), kv_cache)
    assert not kv_cache.any()
    jt.gather(model, 0, kv_cache, torch.empty(0, dtype=torch.int32), torch.empty(0, 576, **none))


# ---- the model registry ------------------------------------------------------------------


def test_model_ids(models, warm_cache: Path, glm5_mini: Path) -> None:
    a, b = models["bf16"], models["fp8"]
    assert jt.model_id(a) == jt.model_id(a)
    assert jt.model_id(a) != jt.model_id(b)
    assert jt.get_model(jt.model_id(b)) is b
    assert jt.model_id(jt.model_id(a)) == jt.model_id(a)
    with pytest.raises(TypeError, match="model"):
        jt.model_id("glm5-mini")
    with pytest.raises(jitcache.InvalidArgumentError, match="not registered"):
        jt.get_model(10**9)

    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        temp = rt.prepare(glm5_mini, target=TARGET)
    ident = jt.model_id(temp)
    temp.close()
    kv_cache = torch.zeros(4, 432, dtype=torch.uint8)
    args = (torch.zeros(1, 512, dtype=torch.bfloat16), torch.zeros(1, 64, dtype=torch.bfloat16),
            torch.zeros(1, dtype=torch.int64), kv_cache)
    with pytest.raises(jitcache.InvalidArgumentError, match="released"):
        jt.write(temp, 0, *args)
    del temp
    gc.collect()
    with pytest.raises(jitcache.InvalidArgumentError, match="not registered"):
        torch.ops.jitcache.nvfp4_mla_write(*args, ident, 0)


# ---- torch.library: opcheck, fake tensors, torch.compile ----------------------------------


def test_opcheck(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    kv_c, k_pe = random_tokens(gen, 8)
    slot_mapping = torch.tensor([3, 0, -1, 7, 9, 1, 2, 4], dtype=torch.int64)
    kv_cache = torch.zeros(2, 8, model.record_bytes, dtype=torch.uint8)
    slots = torch.tensor([0, 1, 2, -1, 3, 4, 7, 9], dtype=torch.int32)
    out = torch.empty(8, 576, dtype=torch.bfloat16)
    mid = jt.model_id(model)
    status = torch.zeros(1, dtype=torch.int32)
    write_op = torch.ops.jitcache.nvfp4_mla_write.default
    gather_op = torch.ops.jitcache.nvfp4_mla_gather.default
    for op, args in [
        (write_op, (kv_c, k_pe, slot_mapping, kv_cache, mid, 5)),
        (write_op, (kv_c, k_pe, slot_mapping, kv_cache, mid, 5, status)),
        (gather_op, (kv_cache, slots, out, mid, 5)),
        (gather_op, (kv_cache, slots, out, mid, 5, status)),
    ]:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


def test_fake_tensors_check_arguments(model) -> None:
    """The fake implementations apply the same checks, so a trace fails where a run would."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mid = jt.model_id(model)
    with FakeTensorMode():
        kv_cache = torch.empty(4, 16, model.record_bytes, dtype=torch.uint8)
        torch.ops.jitcache.nvfp4_mla_write(
            torch.empty(3, 512, dtype=torch.bfloat16), torch.empty(3, 64, dtype=torch.bfloat16),
            torch.empty(3, dtype=torch.int64), kv_cache, mid, 0,
        )
        with pytest.raises(TypeError, match="kv_c"):
            torch.ops.jitcache.nvfp4_mla_write(
                torch.empty(3, 512), torch.empty(3, 64, dtype=torch.bfloat16),
                torch.empty(3, dtype=torch.int64), kv_cache, mid, 0,
            )
        with pytest.raises(ValueError, match="out"):
            torch.ops.jitcache.nvfp4_mla_gather(
                kv_cache, torch.empty(3, dtype=torch.int32),
                torch.empty(3, 512, dtype=torch.bfloat16), mid, 0,
            )


def test_torch_compile_fullgraph(model, seed: int) -> None:
    """One compiled graph (inductor) calling the wrapper with the Model and the raw ops with
    its id gives exactly the eager results."""
    torch._dynamo.reset()
    mid = jt.model_id(model)

    def step(kv_c, k_pe, slot_mapping, kv_cache, slots, out, out2):
        jt.write(model, 0, kv_c, k_pe, slot_mapping, kv_cache)
        torch.ops.jitcache.nvfp4_mla_write(kv_c * 2, k_pe, slot_mapping + 16, kv_cache, mid, 40)
        jt.gather(model, 0, kv_cache, slots, out)
        torch.ops.jitcache.nvfp4_mla_gather(kv_cache, slots + 16, out2, mid, 40)
        return out.float() + out2.float()

    compiled = torch.compile(step, fullgraph=True)
    gen = torch.Generator().manual_seed(seed)
    kv_c, k_pe = random_tokens(gen, 16)

    def run(fn):
        kv_cache = jt.new_cache(model, 2, 16)
        out = torch.empty(16, 576, dtype=torch.bfloat16)
        out2 = torch.empty(16, 576, dtype=torch.bfloat16)
        result = fn(kv_c, k_pe, torch.arange(16, dtype=torch.int64), kv_cache,
                    torch.arange(16, dtype=torch.int32), out, out2)
        return result, kv_cache, out, out2

    eager = run(step)
    got = run(compiled)
    for a, b in zip(eager, got):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


# ---- argument errors ----------------------------------------------------------------------


def _misaligned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A dense tensor whose data starts 2 bytes (bf16) or 1 byte (uint8) off 16-byte alignment."""
    count = int(np.prod(shape))
    buf = torch.zeros(count + 16, dtype=dtype)
    offset = 1 if buf.data_ptr() % 16 == 0 else 0
    t = buf[offset : offset + count].view(shape)
    assert t.data_ptr() % 16 != 0
    return t


N = 4


def _good(model) -> dict:
    return dict(
        kv_c=torch.zeros(N, 512, dtype=torch.bfloat16),
        k_pe=torch.zeros(N, 64, dtype=torch.bfloat16),
        slot_mapping=torch.arange(N, dtype=torch.int64),
        kv_cache=torch.zeros(2, 8, model.record_bytes, dtype=torch.uint8),
        slots=torch.arange(N, dtype=torch.int32),
        out=torch.zeros(N, 576, dtype=torch.bfloat16),
    )


WRITE_ERRORS = [
    # (what is replaced, how, error, message fragment)
    pytest.param("kv_c", lambda m: torch.zeros(N, 512), TypeError, r"kv_c: expected dtype torch.bfloat16", id="kv_c-dtype"),
    pytest.param("k_pe", lambda m: torch.zeros(N, 64, dtype=torch.float16), TypeError, r"k_pe: expected dtype", id="k_pe-dtype"),
    pytest.param("slot_mapping", lambda m: torch.arange(N, dtype=torch.int32), TypeError, r"slot_mapping: expected dtype torch.int64", id="slot_mapping-dtype"),
    pytest.param("kv_cache", lambda m: torch.zeros(16, m.record_bytes, dtype=torch.int8), TypeError, r"kv_cache: expected dtype torch.uint8", id="kv_cache-dtype"),
    pytest.param("kv_c", lambda m: np.zeros((N, 512), dtype=np.float32), TypeError, r"kv_c: expected a torch.Tensor", id="kv_c-not-a-tensor"),
    pytest.param("kv_c", lambda m: torch.zeros(N, 511, dtype=torch.bfloat16), ValueError, r"kv_c: expected shape \[N, 512\]", id="kv_c-width"),
    pytest.param("kv_c", lambda m: torch.zeros(N, 1, 512, dtype=torch.bfloat16), ValueError, r"kv_c: expected shape", id="kv_c-3d"),
    pytest.param("k_pe", lambda m: torch.zeros(N + 1, 64, dtype=torch.bfloat16), ValueError, r"k_pe: 5 rows, but kv_c has 4", id="k_pe-rows"),
    pytest.param("slot_mapping", lambda m: torch.arange(N + 2, dtype=torch.int64), ValueError, r"slot_mapping: expected 4 elements", id="slot_mapping-length"),
    pytest.param("slot_mapping", lambda m: torch.arange(2 * N, dtype=torch.int64)[::2], ValueError, r"slot_mapping: must be contiguous", id="slot_mapping-strided"),
    pytest.param("kv_cache", lambda m: torch.zeros(16, 368, dtype=torch.uint8), ValueError, r"kv_cache: expected shape \[num_slots, 432\]", id="kv_cache-record-bytes"),
    pytest.param("kv_cache", lambda m: torch.zeros(2, 8, 16, 432, dtype=torch.uint8), ValueError, r"kv_cache: expected shape", id="kv_cache-4d"),
    pytest.param("kv_cache", lambda m: torch.zeros(8, 2, m.record_bytes, dtype=torch.uint8).transpose(0, 1), ValueError, r"kv_cache: records must be packed densely", id="kv_cache-transposed"),
    pytest.param("kv_cache", lambda m: torch.zeros(4, 8, 440, dtype=torch.uint8)[:, :, :432], ValueError, r"kv_cache: records must be packed densely", id="kv_cache-padded-rows"),
    pytest.param("kv_c", lambda m: torch.zeros(N, 516, dtype=torch.bfloat16)[:, :512], ValueError, r"kv_c: row stride 516 elements must be >= 512 and a multiple of 8", id="kv_c-row-stride"),
    pytest.param("kv_c", lambda m: torch.zeros(N, 1024, dtype=torch.bfloat16)[:, ::2], ValueError, r"kv_c: each row must be contiguous", id="kv_c-column-stride"),
    pytest.param("kv_cache", lambda m: torch.zeros(2, 8, m.record_bytes, dtype=torch.uint8, device="meta"), ValueError, r"kv_cache: on meta, but kv_c is on cpu", id="kv_cache-device"),
    pytest.param("k_pe", lambda m: torch.zeros(N, 64, dtype=torch.bfloat16, device="meta"), ValueError, r"k_pe: on meta, but kv_c is on cpu", id="k_pe-device"),
    pytest.param("kv_c", lambda m: _misaligned((N, 512), torch.bfloat16), ValueError, r"kv_c: data at 0x[0-9a-f]+ is not 16-byte aligned", id="kv_c-alignment"),
    pytest.param("k_pe", lambda m: _misaligned((N, 64), torch.bfloat16), ValueError, r"k_pe: data at .* is not 16-byte aligned", id="k_pe-alignment"),
    pytest.param("kv_cache", lambda m: _misaligned((16, m.record_bytes), torch.uint8), ValueError, r"kv_cache: data at .* is not 16-byte aligned", id="kv_cache-alignment"),
]


@pytest.mark.parametrize("name,make,error,message", WRITE_ERRORS)
def test_write_rejects(model, name, make, error, message) -> None:
    a = _good(model)
    a[name] = make(model)
    before = a["kv_cache"].clone() if a["kv_cache"].device.type == "cpu" else None
    with pytest.raises(error, match=message):
        jt.write(model, 0, a["kv_c"], a["k_pe"], a["slot_mapping"], a["kv_cache"])
    if before is not None:
        assert torch.equal(a["kv_cache"], before), "a refused call must not write"


GATHER_ERRORS = [
    pytest.param("slots", lambda m: torch.arange(N, dtype=torch.int64), TypeError, r"slots: expected dtype torch.int32", id="slots-dtype"),
    pytest.param("out", lambda m: torch.zeros(N, 576), TypeError, r"out: expected dtype torch.bfloat16", id="out-dtype"),
    pytest.param("kv_cache", lambda m: torch.zeros(16, m.record_bytes), TypeError, r"kv_cache: expected dtype torch.uint8", id="kv_cache-dtype"),
    pytest.param("slots", lambda m: [0, 1, 2, 3], TypeError, r"slots: expected a torch.Tensor", id="slots-not-a-tensor"),
    pytest.param("out", lambda m: torch.zeros(N, 512, dtype=torch.bfloat16), ValueError, r"out: expected shape \[N, 576\]", id="out-width"),
    pytest.param("out", lambda m: torch.zeros(N + 1, 576, dtype=torch.bfloat16), ValueError, r"out: 5 rows, but slots has 4", id="out-rows"),
    pytest.param("slots", lambda m: torch.zeros(N, 1, dtype=torch.int32), ValueError, r"slots: expected a 1-D tensor", id="slots-2d"),
    pytest.param("out", lambda m: torch.zeros(N, 580, dtype=torch.bfloat16)[:, :576], ValueError, r"out: row stride 580", id="out-row-stride"),
    pytest.param("out", lambda m: torch.zeros(N, 576, dtype=torch.bfloat16, device="meta"), ValueError, r"out: on meta, but kv_cache is on cpu", id="out-device"),
    pytest.param("out", lambda m: _misaligned((N, 576), torch.bfloat16), ValueError, r"out: data at .* is not 16-byte aligned", id="out-alignment"),
]


@pytest.mark.parametrize("name,make,error,message", GATHER_ERRORS)
def test_gather_rejects(model, name, make, error, message) -> None:
    a = _good(model)
    a[name] = make(model)
    with pytest.raises(error, match=message):
        jt.gather(model, 0, a["kv_cache"], a["slots"], a["out"])


def test_bad_layer_model_and_status(model) -> None:
    a = _good(model)
    write_args = (a["kv_c"], a["k_pe"], a["slot_mapping"], a["kv_cache"])
    message = r"layer: 79 is out of range \(the model has 79 layers\)"
    with pytest.raises(jitcache.InvalidArgumentError, match=message):
        jt.write(model, 79, *write_args)
    with pytest.raises(jitcache.InvalidArgumentError, match="layer: -1 is out of range"):
        jt.gather(model, -1, a["kv_cache"], a["slots"], a["out"])
    with pytest.raises(TypeError, match="layer: expected an int"):
        jt.write(model, 1.0, *write_args)
    with pytest.raises(TypeError, match="model: expected a jitcache.Model"):
        jt.write("examples/glm5-mini", 0, *write_args)
    with pytest.raises(TypeError, match="status: expected dtype torch.int32 or torch.uint32"):
        jt.write(model, 0, *write_args, torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="status: expected one element"):
        jt.gather(model, 0, a["kv_cache"], a["slots"], a["out"], torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="status: on meta"):
        jt.write(model, 0, *write_args, torch.zeros(1, dtype=torch.int32, device="meta"))
    # The raw op takes the same checks (and an unknown id).
    with pytest.raises(TypeError, match="kv_c: expected dtype"):
        torch.ops.jitcache.nvfp4_mla_write(
            a["kv_c"].float(), *write_args[1:], jt.model_id(model), 0
        )
    with pytest.raises(jitcache.InvalidArgumentError, match="model id 123456789 is not registered"):
        torch.ops.jitcache.nvfp4_mla_gather(a["kv_cache"], a["slots"], a["out"], 123456789, 0)


# ---- the launch contract: no written tensor overlaps another, no slot written twice -------


def test_written_tensors_may_not_overlap_other_arguments(model) -> None:
    """kv_cache/status of the write and out/status of the gather are checked against every
    other argument, to the byte, naming both tensors; a refused call writes nothing."""
    rb = model.record_bytes
    a = _good(model)
    joined = torch.zeros(N, 576, dtype=torch.bfloat16)
    kv_c, k_pe = joined[:, :512], joined[:, 512:]  # read twice: may overlap
    jt.write(model, 0, kv_c, k_pe, a["slot_mapping"], a["kv_cache"])

    # A cache whose first record starts on kv_c's last 16 bytes: 4 rows of 1152 bytes, of
    # which the last holds kv_c's bytes 3456..4479, then k_pe's.
    arena = torch.zeros(N * 1152 + 16 * rb, dtype=torch.uint8)
    assert arena.data_ptr() % 16 == 0
    rows = arena[: N * 1152].view(torch.bfloat16).view(N, 576)
    cache = arena[4480 - 16 :][: 16 * rb].view(16, rb)
    before = arena.clone()
    with pytest.raises(
        ValueError,
        match=rf"kv_cache: \[0x[0-9a-f]+, \+{16 * rb} bytes\) overlaps kv_c \[0x[0-9a-f]+, \+4480 bytes\)",
    ):
        jt.write(model, 0, rows[:, :512], rows[:, 512:], a["slot_mapping"], cache)
    assert torch.equal(arena, before), "a refused call must not write"
    # Right after the rows, it passes.
    ok_cache = arena[N * 1152 :].view(16, rb)
    jt.write(model, 0, rows[:, :512], rows[:, 512:], a["slot_mapping"], ok_cache)

    # status inside slot_mapping, inside k_pe's row gap, inside the cache.
    slot_mapping = torch.arange(N + 2, dtype=torch.int64)
    status_in_map = slot_mapping[N - 1 :].view(torch.int32)[:1]  # on the last slot
    with pytest.raises(ValueError, match=r"status: .* overlaps slot_mapping"):
        jt.write(model, 0, kv_c, k_pe, slot_mapping[:N], a["kv_cache"], status_in_map)
    gap = torch.zeros(N, 576, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"status: .* overlaps k_pe"):
        jt.write(model, 0, a["kv_c"], gap[:, :64], a["slot_mapping"], a["kv_cache"],
                 gap[0, 64:66].view(torch.int32))
    flat = a["kv_cache"].view(-1)
    with pytest.raises(ValueError, match=r"kv_cache: .* overlaps status"):
        jt.write(model, 0, kv_c, k_pe, a["slot_mapping"], a["kv_cache"], flat[8:12].view(torch.int32))

    # The gather: out over the cache, over slots; status over out, over slots.
    out_arena = torch.zeros(N * 1152 + 16 * rb, dtype=torch.uint8)
    out = out_arena[: N * 1152].view(torch.bfloat16).view(N, 576)
    with pytest.raises(ValueError, match=r"out: .* overlaps kv_cache"):
        jt.gather(model, 0, out_arena[N * 1152 - 16 :][: 16 * rb].view(16, rb), a["slots"], out)
    slots_in_out = out[N - 1, 568:].view(torch.int32)  # the last 16 bytes of out
    slots_in_out.copy_(torch.arange(N, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"out: .* overlaps slots"):
        jt.gather(model, 0, a["kv_cache"], slots_in_out, out)
    with pytest.raises(ValueError, match=r"out: .* overlaps status"):
        jt.gather(model, 0, a["kv_cache"], a["slots"], out, out[0, :2].view(torch.int32))
    slots8 = torch.arange(N + 1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"status: .* overlaps slots"):
        jt.gather(model, 0, a["kv_cache"], slots8[:N], a["out"], slots8[N - 1 :][:1])
    # slots inside the cache: both only read.
    cache_bytes = torch.zeros(16 * rb + 16, dtype=torch.uint8)
    cache_bytes[16 * rb - 16 : 16 * rb].view(torch.int32).copy_(torch.arange(4, dtype=torch.int32))
    jt.gather(model, 0, cache_bytes[: 16 * rb].view(16, rb),
              cache_bytes[16 * rb - 16 : 16 * rb].view(torch.int32), a["out"])


def test_cpu_write_refuses_a_slot_given_to_two_tokens(model) -> None:
    """On CPU the host executor sees slot_mapping: a repeated slot is the library's
    InvalidArgumentError naming the slot and both tokens, and nothing is written. Padding
    (negative) slots may repeat."""
    a = _good(model)
    kv_cache = a["kv_cache"]
    with pytest.raises(
        jitcache.InvalidArgumentError,
        match=r"slot_mapping.*slot 5 appears at tokens 1 and 3",
    ):
        jt.write(model, 0, a["kv_c"] + 1, a["k_pe"], torch.tensor([2, 5, -1, 5]), kv_cache)
    assert not kv_cache.any(), "a refused call must not write"
    jt.write(model, 0, a["kv_c"] + 1, a["k_pe"], torch.tensor([-1, 5, -1, 2]), kv_cache)
    assert kv_cache.view(-1, model.record_bytes)[[2, 5]].any(dim=1).all()


def test_fp8_model_wants_368_byte_records(models) -> None:
    model = models["fp8"]
    assert model.record_bytes == 368
    a = _good(models["bf16"])  # a 432-byte cache
    with pytest.raises(ValueError, match=r"kv_cache: expected shape \[num_slots, 368\]"):
        jt.write(model, 0, a["kv_c"], a["k_pe"], a["slot_mapping"], a["kv_cache"])


# ---- CUDA (runs only where torch sees a GPU and jitcache can launch on it) ------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_cuda_ops_match_cpu_and_capture_in_a_graph(
    cache_dir: Path, glm5_mini: Path, seed: int
) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="auto") as rt:
        if not rt.device.available:
            pytest.skip(f"jitcache has no device: {rt.device.reason}")
        model = rt.prepare(glm5_mini)
    gen = torch.Generator().manual_seed(seed)
    n, layer = 64, 0
    kv_c, k_pe = random_tokens(gen, n)
    slot_mapping = torch.randperm(128, generator=gen)[:n].to(torch.int64)
    slots = slot_mapping.to(torch.int32)
    cpu_cache = jt.new_cache(model, 8, 16)
    cpu_out = torch.empty(n, 576, dtype=torch.bfloat16)
    jt.write(model, layer, kv_c, k_pe, slot_mapping, cpu_cache)
    jt.gather(model, layer, cpu_cache, slots, cpu_out)

    dev = torch.device("cuda")
    g_kv, g_pe, g_map, g_slots = (t.to(dev) for t in (kv_c, k_pe, slot_mapping, slots))
    g_cache = jt.new_cache(model, 8, 16, device=dev)
    g_out = torch.empty(n, 576, dtype=torch.bfloat16, device=dev)
    jt.write(model, layer, g_kv, g_pe, g_map, g_cache)
    jt.gather(model, layer, g_cache, g_slots, g_out)
    torch.cuda.synchronize()
    assert torch.equal(g_cache.cpu(), cpu_cache)
    assert np.array_equal(bits(g_out.cpu()), bits(cpu_out))

    # Captured once, replayed on new inputs: no allocation, sync or load inside the ops.
    g_cache.zero_()
    g_out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        jt.write(model, layer, g_kv, g_pe, g_map, g_cache)
        jt.gather(model, layer, g_cache, g_slots, g_out)
    g_kv.copy_(kv_c.flip(0))
    g_pe.copy_(k_pe.flip(0))
    graph.replay()
    torch.cuda.synchronize()
    flipped = (kv_c.flip(0).contiguous(), k_pe.flip(0).contiguous())
    jt.write(model, layer, *flipped, slot_mapping, cpu_cache)
    jt.gather(model, layer, cpu_cache, slots, cpu_out)
    assert torch.equal(g_cache.cpu(), cpu_cache)
    assert np.array_equal(bits(g_out.cpu()), bits(cpu_out))
    model.close()
