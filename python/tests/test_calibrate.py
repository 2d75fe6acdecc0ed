"""jitcache.calibrate: the recorder's maxima against the tensors fed through it, its
argument checks, the capture file, the forward hooks, and calibration by the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from conftest import run_cli  # noqa: E402

from jitcache import calibrate  # noqa: E402
from jitcache.calibrate import MaxAbsRecorder, attach  # noqa: E402

LATENT = 512
HIDDEN = 48
NUM_LAYERS = 4
DENOMINATOR = 2688.0
SAVE_ARGS = dict(
    rank=0, tp=1, model="tiny-mla", model_revision="0123456789abcdef0123456789abcdef01234567",
    dataset="random", context=64,
)
KEYS = ["format", "model", "model_revision", "dataset", "context", "tp", "rank", "tokens",
        "num_layers", "latent_dim", "max_abs"]


# ---- a small model named like DeepSeek-style MLA (vLLM's module paths) --------------------


class TinyRMSNorm(torch.nn.Module):
    """RMSNorm that, given a residual, returns (normed, residual) as vLLM's does; keeps a copy
    of every output while ``keep`` is set, so a test can compute the maxima on its own."""

    def __init__(self, dim: int, gen: torch.Generator) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(0.5 + torch.rand(dim, generator=gen))
        self.outputs: list[torch.Tensor] = []
        self.keep = True

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is not None:
            x = x + residual
            residual = x
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        if self.keep:
            self.outputs.append(out.detach().clone())
        return out if residual is None else (out, residual)


class TinyMLAWrapper(torch.nn.Module):
    """Holds the same norm object again, as vLLM's MultiHeadLatentAttentionWrapper does."""

    def __init__(self, norm: TinyRMSNorm) -> None:
        super().__init__()
        self.kv_a_layernorm = norm


class TinyAttention(torch.nn.Module):
    def __init__(self, gen: torch.Generator, with_residual: bool) -> None:
        super().__init__()
        self.kv_a_proj_with_mqa = torch.nn.Linear(HIDDEN, LATENT, bias=False)
        self.kv_a_layernorm = TinyRMSNorm(LATENT, gen)
        self.mla_attn = TinyMLAWrapper(self.kv_a_layernorm)
        self.kv_b_proj = torch.nn.Linear(LATENT, HIDDEN, bias=False)
        self.with_residual = with_residual
        with torch.no_grad():
            for linear in (self.kv_a_proj_with_mqa, self.kv_b_proj):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * 0.2)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        kv_c = self.kv_a_proj_with_mqa(hidden)
        if self.with_residual:
            normed, _ = self.mla_attn.kv_a_layernorm(kv_c, torch.ones_like(kv_c) * 0.01)
        else:
            normed = self.kv_a_layernorm(kv_c)
        return self.kv_b_proj(normed)


class TinyDecoderLayer(torch.nn.Module):
    def __init__(self, gen: torch.Generator, with_residual: bool = False) -> None:
        super().__init__()
        self.self_attn = TinyAttention(gen, with_residual)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.self_attn(hidden)


class TinyMTPLayer(torch.nn.Module):
    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.mtp_block = TinyDecoderLayer(gen)


class TinyInner(torch.nn.Module):
    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [TinyDecoderLayer(gen, with_residual=(i == 2)) for i in range(NUM_LAYERS)]
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


class TinyMTP(torch.nn.Module):
    """The draft layer at index num_layers, named as vLLM's DeepSeekMTP names it."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleDict({str(NUM_LAYERS): TinyMTPLayer(gen)})

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.layers[str(NUM_LAYERS)].mtp_block(hidden)


class TinyMLAModel(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.model = TinyInner(gen)
        self.mtp = TinyMTP(gen)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.model(hidden)
        return self.mtp(hidden)

    def norms(self) -> list[TinyRMSNorm]:
        return [layer.self_attn.kv_a_layernorm for layer in self.model.layers]

    def forget_outputs(self) -> None:
        for module in self.modules():
            if isinstance(module, TinyRMSNorm):
                module.outputs.clear()


def random_batches(seed: int, count: int = 5) -> list[torch.Tensor]:
    """Batches of different shapes ([B, T, H] and [N, H]) and magnitudes."""
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    batches = []
    for i in range(count):
        shape = (2, 3 + i, HIDDEN) if i % 2 == 0 else (5 + 2 * i, HIDDEN)
        scale = 10.0 ** float(torch.empty(()).uniform_(-2.0, 1.0, generator=gen))
        batches.append(torch.randn(shape, generator=gen) * scale)
    return batches


def independent_maxima(model: TinyMLAModel) -> list[float]:
    """max |output| per main layer from the norms' own copies, not from the recorder."""
    result = []
    for norm in model.norms():
        assert norm.outputs, "a layer produced no output"
        result.append(max(float(out.abs().max()) for out in norm.outputs))
    return result


def read_capture(path: Path) -> dict:
    text = path.read_text()
    assert text.endswith("}\n")
    doc = json.loads(text)
    assert list(doc) == KEYS
    assert text == json.dumps(doc, indent=2) + "\n"
    return doc


# ---- the recorder on a model -------------------------------------------------------------


def test_hooked_model_records_exact_maxima(seed: int, tmp_path: Path) -> None:
    model = TinyMLAModel(seed)
    batches = random_batches(seed)
    recorder = MaxAbsRecorder(NUM_LAYERS)
    with torch.no_grad(), attach(model, recorder) as hooks:
        assert hooks.layers == {i: f"model.layers.{i}.self_attn.kv_a_layernorm" for i in range(NUM_LAYERS)}
        assert hooks.skipped == [f"mtp.layers.{NUM_LAYERS}.mtp_block.self_attn.kv_a_layernorm"]
        for batch in batches:
            model(batch)
    expected = independent_maxima(model)
    expected_tokens = sum(b.numel() // HIDDEN for b in batches)
    assert recorder.maxima() == expected
    assert all(m > 0 for m in expected)
    # Each norm is hooked once although vLLM-style models reach it under two names.
    assert recorder.layer_tokens() == [expected_tokens] * NUM_LAYERS
    assert recorder.tokens == expected_tokens

    # Detached: later passes, even larger ones, change nothing.
    assert not hooks.attached
    hooks.remove()  # idempotent
    model.forget_outputs()
    model(batches[0] * 1000.0)
    assert recorder.maxima() == expected
    assert recorder.tokens == expected_tokens

    path = recorder.save(tmp_path / "rank0.json", **SAVE_ARGS)
    doc = read_capture(path)
    assert doc["max_abs"] == expected
    assert doc["tokens"] == expected_tokens
    assert doc["num_layers"] == NUM_LAYERS and doc["latent_dim"] == LATENT
    assert doc["format"] == "nvfp4_ds_mla_capture_v1"
    assert sorted(os.listdir(tmp_path)) == ["rank0.json"]  # no temporary left behind


def test_remove_without_context_manager(seed: int) -> None:
    model = TinyMLAModel(seed)
    recorder = MaxAbsRecorder(NUM_LAYERS)
    hooks = attach(model, recorder)
    with torch.no_grad():
        model(random_batches(seed, 1)[0])
    assert recorder.tokens > 0
    hooks.remove()
    hooks.remove()
    before = (recorder.maxima(), recorder.layer_tokens())
    with torch.no_grad():
        model(random_batches(seed + 1, 1)[0] * 50)
    assert (recorder.maxima(), recorder.layer_tokens()) == before
    assert all(not m._forward_hooks for m in model.modules())


def test_attach_errors(seed: int) -> None:
    recorder = MaxAbsRecorder(NUM_LAYERS)
    with pytest.raises(ValueError, match="no module named '\\*.kv_a_layernorm'"):
        attach(torch.nn.Sequential(torch.nn.Linear(4, 4)), recorder)

    gen = torch.Generator().manual_seed(seed)
    twice = TinyMLAModel(seed)
    twice.extra = torch.nn.Module()
    twice.extra.layers = torch.nn.ModuleList([torch.nn.Identity(), TinyDecoderLayer(gen)])
    with pytest.raises(ValueError) as info:
        attach(twice, recorder)
    text = str(info.value)
    assert "layer 1" in text
    assert "model.layers.1.self_attn.kv_a_layernorm" in text and "extra.layers.1.self_attn.kv_a_layernorm" in text
    assert all(not m._forward_hooks for m in twice.modules())  # nothing left half-attached

    unnumbered = torch.nn.Module()
    unnumbered.kv_a_layernorm = TinyRMSNorm(LATENT, gen)
    with pytest.raises(ValueError, match="module 'kv_a_layernorm': no layer number"):
        attach(unnumbered, recorder)

    only_draft = TinyMLAModel(seed)
    with pytest.raises(ValueError, match="every '\\*.kv_a_layernorm' module is at a layer >= num_layers 1"):
        attach(only_draft.mtp, MaxAbsRecorder(1))
    with pytest.raises(TypeError, match="recorder"):
        attach(only_draft, object())  # type: ignore[arg-type]


def test_layer_from_module_name() -> None:
    name = calibrate.layer_from_module_name
    assert name("model.layers.17.self_attn.kv_a_layernorm") == 17
    assert name("model.layers.78.mtp_block.self_attn.kv_a_layernorm") == 78
    assert name("outer.layers.3.inner.layers.5.kv_a_layernorm") == 5  # the last layers.<i>
    assert name("model.layers.x.kv_a_layernorm") is None
    assert name("kv_a_layernorm") is None
    assert name("model.layers") is None


# ---- observe ------------------------------------------------------------------------------


def test_observe_dtypes_and_shapes(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    recorder = MaxAbsRecorder(3, latent_dim=16)
    a = torch.randn(7, 16, generator=gen).to(torch.bfloat16)
    b = (torch.randn(2, 3, 16, generator=gen) * 4).to(torch.float16)
    c = torch.randn(1, 16, generator=gen, requires_grad=True)
    recorder.observe(0, a)
    recorder.observe(0, b)
    with torch.inference_mode():
        recorder.observe(1, c)
    recorder.observe(1, c * 0.5)  # outside inference mode after inside: still fine
    recorder.observe(2, torch.empty(0, 16))  # an empty batch is not an observation
    expected0 = max(float(a.abs().max()), float(b.abs().max()))
    expected1 = float(c.detach().abs().max())
    assert recorder.maxima() == [expected0, expected1, 0.0]
    assert recorder.layer_tokens() == [13, 2, 0]
    assert recorder.tokens == 2
    # Negative values count by magnitude.
    recorder.observe(2, -torch.full((1, 16), 3.5))
    assert recorder.maxima()[2] == 3.5
    recorder.reset()
    assert recorder.maxima() == [0.0, 0.0, 0.0] and recorder.tokens == 0


def test_observe_rejects_bad_input() -> None:
    recorder = MaxAbsRecorder(NUM_LAYERS)
    good = torch.ones(2, LATENT)
    for layer in (-1, NUM_LAYERS, 100):
        with pytest.raises(IndexError, match=f"layer: {layer} is out of range for {NUM_LAYERS} layers"):
            recorder.observe(layer, good)
    for layer in (True, 1.0, "1", torch.tensor(1)):
        with pytest.raises(TypeError, match="layer: must be an int"):
            recorder.observe(layer, good)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"layer 1\): last dimension must be latent_dim 512, got shape \[2, 256\]"):
        recorder.observe(1, torch.ones(2, 256))
    with pytest.raises(ValueError, match="latent_dim 512, got shape \\[\\]"):
        recorder.observe(1, torch.tensor(1.0))
    with pytest.raises(TypeError, match="dtype must be .*got torch.int32"):
        recorder.observe(1, torch.ones(2, LATENT, dtype=torch.int32))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        recorder.observe(1, [1.0] * LATENT)  # type: ignore[arg-type]
    assert recorder.tokens == 0 and recorder.maxima() == [0.0] * NUM_LAYERS
    for bad in (0, -3, True, 2.0):
        with pytest.raises((TypeError, ValueError), match="num_layers"):
            MaxAbsRecorder(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="latent_dim"):
        MaxAbsRecorder(4, latent_dim=0)


# Tensor methods that read a value back to the host (a synchronisation on a GPU) or need a
# data-dependent output size (which reads one too).
HOST_READS = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__",
              "__complex__", "nonzero", "masked_select", "unique", "any", "all"}


def device_of(value: object) -> torch.device | None:
    """The device a call's argument or result names: a tensor's, a device, or a device string."""
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "meta"):
        return torch.device(value)
    return None


class DeviceReads(TorchFunctionMode):
    """Records each torch call made inside it that reads a value back to the host, or that
    takes or returns a tensor on another device than ``device`` (a copy off the device)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.calls: list[str] = []
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        self.calls.append(name)
        devices = [device_of(leaf) for leaf in tree_flatten((args, kwargs, out))[0]]
        if name in HOST_READS or any(d is not None and d.type != self.device.type for d in devices):
            self.reads.append(name)
        return out


def test_observe_reads_no_device_value(seed: int) -> None:
    """On a GPU, reading a value back is a host synchronisation: observe makes no torch call
    that reads one or leaves the tensor's device (the same calls run for CUDA tensors)."""
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randn(4, LATENT, generator=gen).to(dtype) for dtype in (torch.float32, torch.bfloat16)]
    recorder = MaxAbsRecorder(NUM_LAYERS)
    with DeviceReads(torch.device("cpu")) as watch:
        for layer in range(NUM_LAYERS):
            recorder.observe(layer, data[layer % 2])
    assert "aminmax" in watch.calls and "__setitem__" in watch.calls, watch.calls
    assert watch.reads == [], watch.calls
    assert recorder.maxima() == [float(data[layer % 2].abs().max()) for layer in range(NUM_LAYERS)]

    # The watch does see read-backs: what a careless `if`, `.item()` or `.cpu()` would do.
    with DeviceReads(torch.device("cpu")) as watch:
        bool(data[0].abs().max() > 0)
        data[0].max().item()
        data[0].tolist()
    assert watch.reads == ["__bool__", "item", "tolist"]
    with DeviceReads(torch.device("meta")) as watch:
        data[0].to("cpu")
    assert watch.reads == ["to"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_observe_on_cuda_does_not_synchronise(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randn(64, LATENT, generator=gen).to(torch.bfloat16) for _ in range(NUM_LAYERS)]
    on_device = [x.cuda() for x in data]
    recorder = MaxAbsRecorder(NUM_LAYERS)
    recorder.observe(0, on_device[0])  # the first call allocates the accumulator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for layer in range(1, NUM_LAYERS):
                recorder.observe(layer, on_device[layer])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # Layers on two devices (CPU and CUDA) merge into one list.
    recorder.observe(0, data[0] * 2)
    expected = [float(x.abs().max()) for x in data]
    expected[0] *= 2
    assert recorder.maxima() == expected


# ---- save ---------------------------------------------------------------------------------


def filled(num_layers: int = NUM_LAYERS, tokens: int = 3) -> MaxAbsRecorder:
    recorder = MaxAbsRecorder(num_layers)
    for layer in range(num_layers):
        recorder.observe(layer, torch.full((tokens, LATENT), 0.1 * (layer + 1)))
    return recorder


def test_save_values_are_float32_exact(tmp_path: Path, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    recorder = MaxAbsRecorder(NUM_LAYERS)
    fed = []
    for layer in range(NUM_LAYERS):
        x = torch.randn(9, LATENT, generator=gen) * 10.0 ** (layer - 2)
        fed.append(x)
        recorder.observe(layer, x)
    path = recorder.save(tmp_path / "c.json", **SAVE_ARGS)
    doc = read_capture(path)
    for layer, value in enumerate(doc["max_abs"]):
        assert value == float(fed[layer].abs().max())
        assert torch.tensor(value, dtype=torch.float32).item() == value  # a float32, written exactly
    assert doc["tokens"] == 9
    assert {k: doc[k] for k in SAVE_ARGS} == SAVE_ARGS


def test_save_refuses_nan_and_inf_naming_layers(tmp_path: Path) -> None:
    recorder = filled()
    poisoned = torch.full((2, LATENT), 0.5)
    poisoned[1, 7] = math.nan
    recorder.observe(1, poisoned)
    infinite = torch.full((1, LATENT), 0.5)
    infinite[0, 0] = -math.inf
    recorder.observe(3, infinite)
    recorder.observe(1, torch.full((1, LATENT), 9.0))  # a later finite maximum does not hide the NaN
    target = tmp_path / "c.json"
    target.write_text("old\n")
    with pytest.raises(ValueError) as info:
        recorder.save(target, **SAVE_ARGS)
    text = str(info.value)
    assert str(target) in text and "max_abs" in text
    assert "2 layer(s)" in text and "layer 1: nan" in text and "layer 3: inf" in text
    assert "layer 0" not in text and "layer 2" not in text
    assert target.read_text() == "old\n"  # the old file is untouched
    assert sorted(os.listdir(tmp_path)) == ["c.json"]


def test_save_refuses_unobserved_layers(tmp_path: Path) -> None:
    recorder = MaxAbsRecorder(6)
    for layer in (0, 4):
        recorder.observe(layer, torch.full((2, LATENT), 0.25))
    with pytest.raises(ValueError, match=r"4 of 6 layer\(s\) never observed \(1-3, 5\); pass allow_missing=True"):
        recorder.save(tmp_path / "c.json", **SAVE_ARGS)
    assert not (tmp_path / "c.json").exists()
    doc = read_capture(recorder.save(tmp_path / "c.json", **SAVE_ARGS, allow_missing=True))
    assert doc["max_abs"] == [0.25, 0.0, 0.0, 0.0, 0.25, 0.0]
    assert doc["tokens"] == 2

    with pytest.raises(ValueError, match="nothing observed"):
        MaxAbsRecorder(2).save(tmp_path / "empty.json", **SAVE_ARGS, allow_missing=True)
    assert not (tmp_path / "empty.json").exists()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"rank": 2, "tp": 2}, "rank"),
        ({"rank": -1}, "rank"),
        ({"rank": True}, "rank"),
        ({"rank": "0"}, "rank"),
        ({"tp": 0}, "tp"),
        ({"tp": 1.0}, "tp"),
        ({"model": ""}, "model"),
        ({"model_revision": None}, "model_revision"),
        ({"model_revision": "  "}, "model_revision"),
        ({"dataset": 3}, "dataset"),
        ({"context": 0}, "context"),
        ({"context": 2048.0}, "context"),
    ],
)
def test_save_rejects_bad_arguments(tmp_path: Path, changes: dict, field: str) -> None:
    recorder = filled()
    with pytest.raises((TypeError, ValueError)) as info:
        recorder.save(tmp_path / "c.json", **{**SAVE_ARGS, **changes})
    assert str(info.value).startswith(f"{field}: ")
    assert os.listdir(tmp_path) == []


def test_save_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "c.json"
    filled(tokens=3).save(target, **SAVE_ARGS)
    first = target.read_text()
    filled(tokens=5).save(target, **{**SAVE_ARGS, "dataset": "other"})
    doc = read_capture(target)
    assert doc["tokens"] == 5 and doc["dataset"] == "other" and target.read_text() != first
    assert sorted(os.listdir(tmp_path)) == ["c.json"]
    with pytest.raises(FileNotFoundError):
        filled().save(tmp_path / "missing-dir" / "c.json", **SAVE_ARGS)


def test_import_needs_no_torch(python_env: dict) -> None:
    block = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    code = block + (
        "from jitcache.calibrate import MaxAbsRecorder, layer_from_module_name\n"
        "r = MaxAbsRecorder(3)\n"
        "assert r.maxima() == [0.0, 0.0, 0.0] and r.tokens == 0\n"
        "assert layer_from_module_name('model.layers.2.self_attn.kv_a_layernorm') == 2\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n"
        "    r.observe(0, None)\n"
        "except ImportError as e:\n"
        "    print('observe needs torch:', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=python_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "observe needs torch" in proc.stdout


# ---- calibration by the CLI ---------------------------------------------------------------


def test_cli_calibrates_saved_captures_exactly(cli: Path, seed: int, tmp_path: Path) -> None:
    """Two tensor-parallel ranks see the same latent; `jitcache scales calibrate` turns their
    captures into scales equal to max/2688 of exactly the values fed through the model."""
    model = TinyMLAModel(seed)
    batches = random_batches(seed)
    captures = []
    for rank in range(2):
        model.forget_outputs()
        recorder = MaxAbsRecorder(NUM_LAYERS)
        with torch.no_grad(), attach(model, recorder):
            for batch in batches:
                model(batch)
        expected = independent_maxima(model)
        assert recorder.maxima() == expected
        path = tmp_path / f"r{rank}.json"
        recorder.save(path, **{**SAVE_ARGS, "rank": rank, "tp": 2})
        captures.append(path)
    out = tmp_path / "s.json"
    run_cli(cli, "scales", "calibrate", *map(str, captures), "--out", str(out))
    scales = json.loads(out.read_text())
    assert scales["format"] == "nvfp4_ds_mla_outer_scale_v1"
    assert scales["num_layers"] == NUM_LAYERS and scales["latent_dim"] == LATENT
    assert scales["max_abs"] == expected
    assert scales["scales"] == [m / DENOMINATOR for m in expected]
    assert scales["model_revision"] == SAVE_ARGS["model_revision"]
    run_cli(cli, "scales", "validate", str(out))


# ---- the bundled synthetic captures ---------------------------------------------------------


def bundled_captures(repo_root: Path) -> tuple[list[dict], list[dict]]:
    folder = repo_root / "examples" / "glm5-mini-captures"
    primary = [read_capture(folder / f"wikitext2-tp4-rank{r}.json") for r in range(4)]
    envelope = [read_capture(folder / f"c4-tp2-rank{r}.json") for r in range(2)]
    return primary, envelope


def per_layer_max(run: list[dict]) -> list[float]:
    return [max(capture["max_abs"][i] for capture in run) for i in range(run[0]["num_layers"])]


def test_bundled_captures_match_the_sidecar(repo_root: Path, glm5_mini: Path) -> None:
    """The primary run's maximum over ranks is the sidecar's max_abs exactly, its ranks agree
    within 2e-4, and the envelope run is above it on layers 0..5 only."""
    sidecar = json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())
    config = json.loads((glm5_mini / "config.json").read_text())
    primary, envelope = bundled_captures(repo_root)
    for run, (dataset, context, tp) in ((primary, ("wikitext-2", 2048, 4)), (envelope, ("c4", 4096, 2))):
        assert [c["rank"] for c in run] == list(range(tp))
        for capture in run:
            assert (capture["dataset"], capture["context"], capture["tp"]) == (dataset, context, tp)
            assert capture["format"] == "nvfp4_ds_mla_capture_v1"
            assert capture["model_revision"] == sidecar["model_revision"]
            assert capture["num_layers"] == config["num_hidden_layers"] == len(capture["max_abs"])
            assert capture["latent_dim"] == config["kv_lora_rank"]
            assert capture["tokens"] == run[0]["tokens"] > 0
        top = per_layer_max(run)
        spread = max((top[i] - min(c["max_abs"][i] for c in run)) / top[i] for i in range(len(top)))
        assert 0 < spread < 2e-4
    primary_max = per_layer_max(primary)
    assert primary_max == sidecar["max_abs"]
    assert [m / DENOMINATOR for m in primary_max] == sidecar["scales"]
    ratios = [e / p for e, p in zip(per_layer_max(envelope), primary_max)]
    assert all(1.03 <= r <= 1.12 + 1e-9 for r in ratios[:6]), ratios[:6]
    assert all(r < 1.0 for r in ratios[6:])


def test_cli_calibrates_bundled_captures(cli: Path, repo_root: Path, glm5_mini: Path, tmp_path: Path) -> None:
    """Calibrating the bundled primary run reproduces the bundled sidecar's values; with the
    envelope, layers 0..5 take the envelope's maxima."""
    primary, envelope = bundled_captures(repo_root)
    folder = repo_root / "examples" / "glm5-mini-captures"
    primary_files = [str(folder / f"wikitext2-tp4-rank{r}.json") for r in range(4)]
    envelope_files = [str(folder / f"c4-tp2-rank{r}.json") for r in range(2)]
    sidecar = json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())

    out = tmp_path / "scales.json"
    run_cli(cli, "scales", "calibrate", *primary_files, "--checkpoint", str(glm5_mini), "--out", str(out))
    produced = json.loads(out.read_text())
    assert produced["max_abs"] == sidecar["max_abs"]
    assert produced["scales"] == sidecar["scales"]

    out = tmp_path / "scales-envelope.json"
    run_cli(cli, "scales", "calibrate", *primary_files, "--envelope", *envelope_files,
            "--checkpoint", str(glm5_mini), "--out", str(out))
    produced = json.loads(out.read_text())
    expected = [max(p, e) for p, e in zip(per_layer_max(primary), per_layer_max(envelope))]
    assert produced["max_abs"] == expected
    assert produced["scales"] == [m / DENOMINATOR for m in expected]
    assert [i for i, (a, b) in enumerate(zip(expected, sidecar["max_abs"])) if a != b] == list(range(6))
    run_cli(cli, "scales", "validate", str(out))
