"""Captures the per-layer maxima that calibrate a checkpoint's NVFP4 MLA outer scales.

:class:`MaxAbsRecorder` accumulates, per main layer, the largest |value| of the
post-RMSNorm latent ``kv_c_normed``; :meth:`MaxAbsRecorder.save` writes one
``nvfp4_ds_mla_capture_v1`` file per rank, which ``jitcache scales calibrate`` turns
into a v1 scales file (``scale = max_abs / 2688``). :func:`attach` feeds a recorder from
a PyTorch model by forward hooks on its ``kv_a_layernorm`` modules::

    recorder = MaxAbsRecorder(num_layers=78)
    with attach(model, recorder):
        for batch in batches:
            model(batch)
    recorder.save(f"wikitext2-tp4-rank{rank}.json", rank=rank, tp=4, model="GLM-5.x",
                  model_revision=revision, dataset="wikitext-2", context=2048)

Torch is imported when a recorder first observes a tensor (or :func:`attach` runs), so
this module imports without it. In vLLM, run the capture with ``enforce_eager=True``:
hooks do not run when a CUDA graph replays, and a graph captured with the hooks in it
would record the capture's dummy batch. A model whose attention fuses the latent RMSNorm
into another kernel (vLLM's ``fuse_qkv_rmsnorm``) never calls ``kv_a_layernorm``; its
layers stay unobserved and :meth:`MaxAbsRecorder.save` refuses them.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ._types import PathArg

if TYPE_CHECKING:
    import torch

__all__ = ["FORMAT", "MaxAbsRecorder", "RecorderHooks", "attach", "layer_from_module_name"]

FORMAT = "nvfp4_ds_mla_capture_v1"
# The latent RMSNorm's attribute name in DeepSeek-style MLA (HF transformers and vLLM).
LATENT_NORM_NAME = "kv_a_layernorm"

_logger = logging.getLogger("jitcache")


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def _non_empty_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: must be a str, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise ValueError(f"{name}: must be a non-empty string, got {value!r}")
    return value


def _layer_list(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5": a short list however many layers are named."""
    runs: list[str] = []
    start = prev = layers[0]
    for layer in layers[1:] + [None]:
        if layer is not None and layer == prev + 1:
            prev = layer
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if layer is not None:
            start = prev = layer
    return ", ".join(runs)


class MaxAbsRecorder:
    """Per-layer max |kv_c_normed| over everything observed, kept on the tensors' devices.

    :meth:`observe` never synchronises with the device: the running maxima live in a
    float32 tensor of shape ``[num_layers]`` on each device that data arrived from (layers
    split across devices, as with pipeline stages in one process, get one accumulator per
    device) and are merged, with one copy to the host per device, by :meth:`maxima` and
    :meth:`save`. A NaN in the data makes that layer's maximum NaN (an infinity stays
    infinite), so :meth:`save` refuses it instead of hiding it. Inputs are float16,
    bfloat16, float32 (kept exactly) or float64 (rounded to the nearest float32).
    """

    def __init__(self, num_layers: int, latent_dim: int = 512) -> None:
        self.num_layers = _positive_int("num_layers", num_layers)
        self.latent_dim = _positive_int("latent_dim", latent_dim)
        self.reset()

    def reset(self) -> None:
        """Forgets everything observed."""
        self._accumulators: dict[Any, "torch.Tensor"] = {}
        # Counted on the host from shapes, so observe needs no device value.
        self._layer_tokens = [0] * self.num_layers

    def observe(self, layer: int, kv_c_normed: "torch.Tensor") -> None:
        """Folds a tensor ``[..., latent_dim]`` of layer ``layer`` into its maximum."""
        import torch

        # A host integer (numpy's too); not a bool, and not a tensor, whose value would
        # have to be read back from the device.
        if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
            raise TypeError(f"layer: must be an int, got {type(layer).__name__} {layer!r}")
        layer = int(layer)
        if not 0 <= layer < self.num_layers:
            raise IndexError(
                f"layer: {layer} is out of range for {self.num_layers} layers (0..{self.num_layers - 1})"
            )
        if not isinstance(kv_c_normed, torch.Tensor):
            raise TypeError(
                f"kv_c_normed (layer {layer}): must be a torch.Tensor, got {type(kv_c_normed).__name__}"
            )
        if kv_c_normed.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(
                f"kv_c_normed (layer {layer}): dtype must be float16, bfloat16, float32 or float64, "
                f"got {kv_c_normed.dtype}"
            )
        shape = tuple(kv_c_normed.shape)
        if not shape or shape[-1] != self.latent_dim:
            raise ValueError(
                f"kv_c_normed (layer {layer}): last dimension must be latent_dim {self.latent_dim}, "
                f"got shape {list(shape)}"
            )
        tokens = kv_c_normed.numel() // self.latent_dim
        if tokens == 0:
            return  # an empty batch has no maximum (and is not an observation)
        # inference_mode whatever the caller's mode: the accumulator is then always an
        # inference tensor updated inside inference mode, and no autograd graph is built.
        with torch.inference_mode():
            device = kv_c_normed.device
            acc = self._accumulators.get(device)
            if acc is None:
                acc = torch.zeros(self.num_layers, dtype=torch.float32, device=device)
                self._accumulators[device] = acc
            # aminmax: one pass and no |x| copy of the tensor; both ends propagate NaN.
            low, high = torch.aminmax(kv_c_normed.detach())
            largest = torch.maximum(high, -low).to(torch.float32)
            acc[layer] = torch.maximum(acc[layer], largest)
        self._layer_tokens[layer] += tokens

    def _merged(self) -> list[float]:
        if not self._accumulators:
            return [0.0] * self.num_layers
        import torch

        merged: Optional[torch.Tensor] = None
        for acc in self._accumulators.values():
            host = acc.detach().to("cpu")
            merged = host if merged is None else torch.maximum(merged, host)
        assert merged is not None
        # float32 -> Python float is exact; repr then writes the shortest text of that double.
        return [float(v) for v in merged.tolist()]

    def maxima(self) -> list[float]:
        """Each layer's maximum so far (0.0 for a layer never observed; NaN after NaN data).
        Synchronises with each device once."""
        return self._merged()

    def layer_tokens(self) -> list[int]:
        """How many tokens (rows of latent_dim) each layer has observed."""
        return list(self._layer_tokens)

    @property
    def tokens(self) -> int:
        """Tokens observed: the fewest any observed layer saw (0 before any observation)."""
        seen = [n for n in self._layer_tokens if n > 0]
        return min(seen) if seen else 0

    def save(
        self,
        path: PathArg,
        *,
        rank: int,
        tp: int,
        model: str,
        model_revision: str,
        dataset: str,
        context: int,
        allow_missing: bool = False,
    ) -> Path:
        """Writes this rank's ``nvfp4_ds_mla_capture_v1`` file atomically; returns its path.

        Refuses a layer whose maximum is NaN or infinite, and a layer never observed unless
        ``allow_missing`` (it is then written as 0.0, which ``scales calibrate`` rejects: for
        a partial capture to be merged or inspected, not calibrated as it is).
        """
        tp = _positive_int("tp", tp)
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"rank: must be an int, got {type(rank).__name__} {rank!r}")
        if not 0 <= rank < tp:
            raise ValueError(f"rank: must be in [0, tp) = [0, {tp}), got {rank}")
        model = _non_empty_str("model", model)
        model_revision = _non_empty_str("model_revision", model_revision)
        dataset = _non_empty_str("dataset", dataset)
        context = _positive_int("context", context)
        tokens = self.tokens
        if tokens == 0:
            raise ValueError(f"{os.fspath(path)}: nothing observed (tokens 0); no capture written")
        maxima = self._merged()
        bad = [i for i, v in enumerate(maxima) if not math.isfinite(v)]
        if bad:
            shown = "; ".join(f"layer {i}: {maxima[i]!r}" for i in bad[:16])
            raise ValueError(
                f"{os.fspath(path)}: field 'max_abs': {len(bad)} layer(s) saw NaN or infinite data "
                f"({_layer_list(bad)}): {shown}; no capture written"
            )
        missing = [i for i, n in enumerate(self._layer_tokens) if n == 0]
        if missing and not allow_missing:
            raise ValueError(
                f"{os.fspath(path)}: field 'max_abs': {len(missing)} of {self.num_layers} layer(s) never observed "
                f"({_layer_list(missing)}); pass allow_missing=True to write them as 0.0"
            )
        document = {
            "format": FORMAT,
            "model": model,
            "model_revision": model_revision,
            "dataset": dataset,
            "context": context,
            "tp": tp,
            "rank": rank,
            "tokens": tokens,
            "num_layers": self.num_layers,
            "latent_dim": self.latent_dim,
            "max_abs": maxima,
        }
        text = json.dumps(document, indent=2, allow_nan=False) + "\n"
        target = Path(path)
        _write_atomic(target, text.encode("utf-8"))
        return target


def _write_atomic(target: Path, data: bytes) -> None:
    """Temporary file beside the target, fsync, rename over it, fsync the directory: a
    reader sees the old file or the whole new one, and a failure leaves nothing behind."""
    directory = target.parent
    temp = directory / f".{target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    # Mode 0666 filtered by the umask, as for any file a user's command makes.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a directory that cannot be opened cannot be fsynced either; the rename is done
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def layer_from_module_name(name: str) -> Optional[int]:
    """The integer after the last ``layers`` segment of a module path
    ("model.layers.17.self_attn.kv_a_layernorm" -> 17), or None when there is none."""
    parts = name.split(".")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "layers" and parts[i + 1].isascii() and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


class RecorderHooks:
    """The forward hooks :func:`attach` registered; a context manager that removes them.

    ``layers`` maps each calibrated layer to its module's name; ``skipped`` lists the
    modules not hooked because their layer is >= num_layers (draft / MTP layers).
    """

    def __init__(self, handles: list[Any], layers: dict[int, str], skipped: list[str]) -> None:
        self._handles = handles
        self.layers = layers
        self.skipped = skipped

    def remove(self) -> None:
        """Detaches every hook; calling it again does nothing."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def __enter__(self) -> "RecorderHooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def attach(model: "torch.nn.Module", recorder: MaxAbsRecorder) -> RecorderHooks:
    """Hooks ``recorder`` onto every submodule of ``model`` named ``*.kv_a_layernorm``.

    The layer is the integer after the last ``layers.`` in the module's path (vLLM's
    DeepseekV2/GLM ``model.layers.{i}.self_attn.kv_a_layernorm``; its MTP model's
    ``model.layers.{78}.mtp_block.self_attn.kv_a_layernorm``). Modules at layers >=
    ``recorder.num_layers`` are draft layers and are skipped (counted in ``skipped``).
    A module reachable under two names (vLLM also holds it as ``mla_attn.kv_a_layernorm``)
    is hooked once. The hook records the module's output, or its first element when it
    returns a tuple (an RMSNorm given a residual returns ``(normed, residual)``).
    Raises ValueError when no such module exists, when one has no layer number, or when
    two modules map to one layer.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(recorder, MaxAbsRecorder):
        raise TypeError(f"recorder: must be a MaxAbsRecorder, got {type(recorder).__name__}")
    layers: dict[int, str] = {}
    modules: dict[int, torch.nn.Module] = {}
    skipped: list[str] = []
    # named_modules() yields each module object once, under the first name it is found at.
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != LATENT_NORM_NAME:
            continue
        layer = layer_from_module_name(name)
        if layer is None:
            raise ValueError(f"module {name!r}: no layer number (expected a path with 'layers.<i>')")
        if layer >= recorder.num_layers:
            skipped.append(name)
            continue
        if layer in layers:
            raise ValueError(f"layer {layer}: two latent RMSNorm modules, {layers[layer]!r} and {name!r}")
        layers[layer] = name
        modules[layer] = module
    if not layers and not skipped:
        raise ValueError(f"model {type(model).__name__}: no module named '*.{LATENT_NORM_NAME}' to record from")
    if not layers:
        raise ValueError(
            f"model {type(model).__name__}: every '*.{LATENT_NORM_NAME}' module is at a layer >= "
            f"num_layers {recorder.num_layers} ({len(skipped)} skipped: {', '.join(skipped)})"
        )

    def make_hook(layer: int):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            normed = output[0] if isinstance(output, (tuple, list)) else output
            recorder.observe(layer, normed)

        return hook

    handles = [modules[layer].register_forward_hook(make_hook(layer)) for layer in sorted(modules)]
    _logger.info(
        "calibrate: recording %d layer(s) of %d; skipped %d draft module(s) at layers >= %d%s",
        len(layers),
        recorder.num_layers,
        len(skipped),
        recorder.num_layers,
        f" ({', '.join(skipped)})" if skipped else "",
    )
    return RecorderHooks(handles, dict(sorted(layers.items())), skipped)
