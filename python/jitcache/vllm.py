"""vLLM integration: a ``vllm.general_plugins`` entry point and helpers for an attention backend.

:func:`register` is what the entry point ``jitcache = "jitcache.vllm:register"`` calls in
every vLLM process. It adds ``VLLM_NVFP4_MLA_SCALES_FILE`` (the explicit scales override
that jitcache's resolver reads) and jitcache's own user-set variables to
``vllm.envs.environment_variables``, so ``current_platform.validate_environ(hard_fail=True)``
accepts them. It is idempotent and never replaces a variable vLLM already defines.

For an attention backend:

- :func:`model_dir` turns what vLLM was asked to serve (a directory, or a Hugging Face repo
  id already in the local HF cache) into the snapshot directory; :func:`snapshot_revision`
  reads the revision from a ``.../snapshots/<rev>`` path.
- :func:`layer_scales` gives every layer's scale, mode, source and the provenance of the
  values, compiling nothing.
- :func:`prepare_model` prepares the kernels once (at model load, before any CUDA graph
  capture) and registers the model with :mod:`jitcache.torch`.
- :class:`KVCacheWriter` / :func:`do_kv_cache_update` write the KV cache through the
  ``jitcache::nvfp4_mla_write`` op with the signature of vLLM's
  ``MLAAttentionImpl.do_kv_cache_update``.
- :func:`record_format` names the record the attention backend reads for
  ``kv_cache_dtype="nvfp4_ds_mla"`` (docs/record-formats.md): upstream vLLM's
  ``FlashMLASparseBackend`` reads flashmla-352, the serving fork's ``B12X_MLA_SPARSE``
  backend b12x's records (b12x-368-per-token for b12x-368 with per-token scales);
  :func:`check_kv_cache` refuses a cache of another record size.
- :func:`kv_global_scale` hands FlashInfer's GLM NVFP4 reader
  (``SparseMLAGlmNvfp4Sm120Wrapper``, flashinfer-glm-416 records) a layer's
  ``kv_global_scale``: its s_l as a one-element float32 tensor on the device.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from .formats import RECORD_BYTES, RECORDS, has_rope
from .runtime import Model, ResolvedScales, Runtime, resolve_scales
from ._types import PathArg

if TYPE_CHECKING:
    import torch

__all__ = [
    "ENVIRONMENT_VARIABLES",
    "register",
    "register_metrics",
    "register_warmup",
    "warmed_model",
    "model_dir",
    "snapshot_revision",
    "layer_scales",
    "prepare_model",
    "layer_index",
    "kv_global_scale",
    "KVCacheWriter",
    "do_kv_cache_update",
    "KV_CACHE_DTYPE",
    "record_format",
    "check_kv_cache",
]

_logger = logging.getLogger("jitcache")
_REVISION = re.compile(r"[0-9a-f]{40}")


def _getter(name: str) -> Callable[[], Optional[str]]:
    """A getter as jitcache's library reads the variable: the value with surrounding
    whitespace removed; None when unset, empty or whitespace only."""

    def get() -> Optional[str]:
        value = os.environ.get(name)
        if value is None or not value.strip():
            return None
        return value.strip()

    return get


# name -> getter, in vLLM's convention (vllm.envs.environment_variables). Values are returned
# unparsed: jitcache's library parses and validates them (`jitcache env` lists them), and a
# getter never raises (vLLM evaluates every getter when it caches the environment and when
# it hashes its compile factors).
#
# Registered: the variables that change which kernels run or whether an engine starts.
# vLLM's validate_environ refuses unknown VLLM_* names, so VLLM_NVFP4_MLA_SCALES_FILE must be
# here; vLLM also hashes every registered variable into its torch.compile cache key.
ENVIRONMENT_VARIABLES: dict[str, Callable[[], Optional[str]]] = {
    name: _getter(name)
    for name in (
        "VLLM_NVFP4_MLA_SCALES_FILE",  # a v1 scales file that beats the checkpoint's scales
        "JITCACHE_STRICT",  # strict mode (boolean)
        "JITCACHE_REQUIRE_CACHE",  # fail instead of running memory-only (boolean)
        "JITCACHE_NO_COMPILE",  # fail on a kernel missing from every tier instead of compiling (boolean)
        "JITCACHE_LINEINFO",  # compile kernels with -lineinfo (boolean)
    )
}

# Not registered, on purpose: where things live and how much is logged change no kernel,
# and registering them would put them into vLLM's compile cache key (vLLM's own policy
# keeps location-only variables out of it), so that moving the cache or turning on debug
# logging would recompile every graph. validate_environ does not look at JITCACHE_* names.
# The remote tier's settings are of the same kind: they say where a verified kernel may be
# fetched from, never which kernel it is (the cache key says that). JITCACHE_VERIFY_SPEC
# says how often a cached kernel is checked against its source, never which kernel runs.
# Where the tool worker is and how long it may take say where a compile runs, never what
# it produces. Which file NVRTC, nvJitLink or libNVVM is loaded from says where a compiler
# lives; which build it is goes into every key through its build-id fingerprint. Cache
# providers (JITCACHE_PROVIDERS) are another place verified kernels are read from.
NOT_REGISTERED: tuple[str, ...] = (
    "JITCACHE_DIR",
    "JITCACHE_LOG_LEVEL",
    "JITCACHE_LIBRARY",
    "JITCACHE_CLI",
    "JITCACHE_SGLANG_FORMAT",  # the SGLang plugin's record format; vLLM's comes from its backend
    "JITCACHE_REMOTE",
    "JITCACHE_REMOTE_KEY_FILE",
    "JITCACHE_REMOTE_PASSWORD_FILE",
    "JITCACHE_REMOTE_PREFIX",
    "JITCACHE_REMOTE_CONNECT_TIMEOUT_MS",
    "JITCACHE_REMOTE_TIMEOUT_MS",
    "JITCACHE_REMOTE_BREAKER_MS",
    "JITCACHE_REMOTE_LEASE_MS",
    "JITCACHE_REMOTE_WAIT_MS",
    "JITCACHE_REMOTE_MAX_ENTRY_BYTES",
    "JITCACHE_VERIFY_SPEC",
    "JITCACHE_PROVIDERS",
    "JITCACHE_TOOL_WORKER",
    "JITCACHE_TOOL_TIMEOUT_MS",
    "JITCACHE_TOOL_WORKERS",
    "JITCACHE_NVRTC",
    "JITCACHE_NVJITLINK",
    "JITCACHE_NVVM",
)


def register() -> None:
    """The ``vllm.general_plugins`` entry point: registers the variables above in
    ``vllm.envs.environment_variables``, and jitcache's metrics collector in vLLM's
    Prometheus registry (:func:`register_metrics`). Safe to call any number of times, in any
    process; a variable vLLM already defines is left as it is."""
    import vllm.envs as envs

    table: dict[str, Any] = envs.environment_variables
    added = [name for name in ENVIRONMENT_VARIABLES if name not in table]
    for name in added:
        table[name] = ENVIRONMENT_VARIABLES[name]
    if added:
        _logger.debug("registered vLLM environment variables: %s", ", ".join(added))
    register_metrics()


def register_metrics() -> bool:
    """Registers :mod:`jitcache.metrics`' collector in vLLM's Prometheus registry
    (``vllm.v1.metrics.prometheus.get_prometheus_registry()``), so that the ``/metrics`` of
    a vLLM server whose process runs jitcache's runtimes shows their figures. True when
    registered (or already); False, with one debug line, where it cannot be: without
    prometheus_client, or when ``PROMETHEUS_MULTIPROC_DIR`` is set (vLLM then serves a
    registry made per scrape from the processes' metric files, which a collector of this
    process cannot join: use ``jitcache stats --format prometheus`` for the cache's figures).
    Never raises: metrics must not stop an engine."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") is not None:
        _logger.debug("jitcache metrics not registered: vLLM's Prometheus registry is multiprocess")
        return False
    try:
        from vllm.v1.metrics.prometheus import get_prometheus_registry

        from . import metrics

        metrics.register(get_prometheus_registry())
    except Exception as exc:  # noqa: BLE001 - an engine starts without jitcache's metrics
        _logger.debug("jitcache metrics not registered in vLLM's registry: %s", exc)
        return False
    return True


def register_warmup(
    model: PathArg,
    target: str,
    revision: Optional[str] = None,
    scales_override: Optional[PathArg] = None,
    download_dir: Optional[PathArg] = None,
    *,
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> bool:
    """Registers the checkpoint's kernels with vLLM's JIT warmup (vLLM 0.33's
    ``JitWarmupRegistry``), so that ``kernel_warmup()`` prepares them, compile-only (no
    device), before vLLM's JIT monitor starts watching; a jitcache compile after that is
    reported by the monitor (docs/vllm.md). Call it while the model is built (an attention
    backend's ``__init__``): True when registered, False when no registry is active (outside
    a model runner's construction and model load), when the caller should call
    :func:`prepare_model` itself. ``target`` is the device's ("sm_90", "sm_100a", ...); the
    other arguments as in :func:`prepare_model`. The Model the warmup prepared is
    :func:`warmed_model`'s answer."""
    from . import _vllm_warmup

    key = _warmup_key(model, target, revision, scales_override, download_dir, format, latent_scale)
    registered = _vllm_warmup.register(key)
    if registered:
        _logger.debug("jitcache kernels of %s registered for vLLM's JIT warmup", key.checkpoint)
    return registered


def warmed_model(
    model: PathArg,
    target: str,
    revision: Optional[str] = None,
    scales_override: Optional[PathArg] = None,
    download_dir: Optional[PathArg] = None,
    *,
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> Optional[Model]:
    """The Model vLLM's JIT warmup prepared for these arguments (:func:`register_warmup`),
    or None before the warmup ran it."""
    from . import _vllm_warmup

    key = _warmup_key(model, target, revision, scales_override, download_dir, format, latent_scale)
    return _vllm_warmup.warmup_kernel().prepared(key)


def _warmup_key(
    model: PathArg,
    target: str,
    revision: Optional[str],
    scales_override: Optional[PathArg],
    download_dir: Optional[PathArg],
    format: Optional[str],
    latent_scale: Optional[str],
) -> Any:
    from ._vllm_warmup import WarmupKey

    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"target: expected a target such as 'sm_90' or 'sm_100a', got {target!r}")
    path = model_dir(model, revision, download_dir)
    return WarmupKey(
        checkpoint=os.fspath(path),
        target=target,
        format=format,
        latent_scale=latent_scale,
        revision=revision or snapshot_revision(path),
        scales_override=None if scales_override is None else os.fspath(scales_override),
    )


# ---- the record format the attention backend reads ------------------------------------

# vLLM's name for every NVFP4 MLA record (CacheDType "nvfp4_ds_mla"); the backend decides
# which bytes it means.
KV_CACHE_DTYPE = "nvfp4_ds_mla"
# Upstream vLLM's sparse MLA backend that reads it (FlashMLASparseBackend.get_name()), and
# the serving fork's b12x backend.
FLASHMLA_SPARSE = "FLASHMLA_SPARSE"
B12X_MLA_SPARSE = "B12X_MLA_SPARSE"
# Hugging Face model types: GLM-5.2 (whose fork serves fp8 RoPE records) and GLM-5.3 Flash,
# b12x's GLM_NEXT (no RoPE: qk_rope_head_dim 0), with its draft model's type.
_GLM_MOE_DSA = "glm_moe_dsa"
_GLM_NEXT = ("glm5_next", "glm5_next_mtp")


def _backend_name(backend: object) -> str:
    if isinstance(backend, str):
        return backend
    get_name = getattr(backend, "get_name", None)
    if callable(get_name):
        return str(get_name())
    raise TypeError(f"backend: expected an attention backend class or its name, got {type(backend).__name__}")


def _field(config: object, name: str) -> Any:
    """A config field: a dict's key (config.json as json.load gives it) or an attribute."""
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def _model_fields(hf_config: object) -> tuple[Optional[str], Optional[int]]:
    """(model_type, qk_rope_head_dim) of a config, a dict of one or a model type; a config
    with a ``text_config`` (a multimodal wrapper) is read there, its model type falling back
    to the outer one."""
    if hf_config is None or isinstance(hf_config, str):
        return hf_config, None
    outer_type = _field(hf_config, "model_type")
    text = _field(hf_config, "text_config")
    inner = hf_config if text is None else text
    return _field(inner, "model_type") or outer_type, _field(inner, "qk_rope_head_dim")


def record_format(
    kv_cache_dtype: str,
    backend: object,
    hf_config: object = None,
    *,
    rope: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> str:
    """The jitcache record (jitcache.formats.RECORDS) of vLLM's ``kv_cache_dtype`` under
    ``backend`` (an attention backend class, e.g. ``FlashMLASparseBackend``, or its
    ``get_name()``): the ``format`` to give :func:`prepare_model`, :func:`check_kv_cache`
    and the jitcache.torch ops.

    - ``FLASHMLA_SPARSE`` (upstream vLLM 0.33, SM100): flashmla-352, whose RoPE is unscaled
      fp8 of its own and whose latent scale is per-layer (``rope`` and a per-token
      ``latent_scale`` are refused).
    - ``B12X_MLA_SPARSE`` (the serving fork): from the model, ``hf_config`` (the Hugging
      Face config, a dict of its config.json, or its ``model_type``; read in its
      ``text_config`` when it has one): GLM-5.3 Flash (``glm5_next``, or any model with
      ``qk_rope_head_dim`` 0) b12x-304, which has no RoPE (``rope`` refused) and per-token
      scales only; ``glm_moe_dsa`` with ``rope="fp8"`` b12x-368, or b12x-368-per-token with
      ``latent_scale="per-token"``; any other model b12x-432 (bf16 RoPE, per-layer scales;
      ``rope="fp8"`` and per-token are refused for it).

    ``latent_scale``: "per-token" or "per-layer"; None: the record's default (per-layer,
    per-token for b12x-304). ValueError for another cache dtype or backend, naming what is
    supported, and for a combination that has no record, naming it."""
    if kv_cache_dtype != KV_CACHE_DTYPE:
        raise ValueError(
            f"kv_cache_dtype: jitcache writes {KV_CACHE_DTYPE!r} records, got {kv_cache_dtype!r}"
        )
    name = _backend_name(backend)
    if name not in (FLASHMLA_SPARSE, B12X_MLA_SPARSE):
        raise ValueError(
            f"backend: {name} is not a backend jitcache knows the {KV_CACHE_DTYPE} record of "
            f"(known: {FLASHMLA_SPARSE}, {B12X_MLA_SPARSE})"
        )
    if rope not in (None, "bf16", "fp8"):
        raise ValueError(f"rope: expected 'bf16' or 'fp8', got {rope!r}")
    if latent_scale not in (None, "per-layer", "per-token"):
        raise ValueError(f"latent_scale: expected 'per-layer' or 'per-token', got {latent_scale!r}")
    per_token = latent_scale == "per-token"
    if name == FLASHMLA_SPARSE:
        if rope is not None:
            raise ValueError(
                f"rope: {FLASHMLA_SPARSE} reads flashmla-352 records, whose RoPE is unscaled fp8 "
                f"of their own (no choice to make), got rope={rope!r}"
            )
        if per_token:
            raise ValueError(
                f"latent_scale: {FLASHMLA_SPARSE} reads flashmla-352 records, which have no "
                f"per-token scales, got latent_scale={latent_scale!r}"
            )
        return "flashmla-352"
    model_type, rope_dim = _model_fields(hf_config)
    if model_type in _GLM_NEXT or rope_dim == 0:
        if rope is not None:
            raise ValueError(
                f"rope: the model ({model_type!r}, qk_rope_head_dim {rope_dim!r}) is served with "
                f"b12x-304 records, which hold no RoPE, got rope={rope!r}"
            )
        if latent_scale == "per-layer":
            raise ValueError(
                f"latent_scale: the model ({model_type!r}) is served with b12x-304 records, "
                f"which have per-token scales only, got latent_scale={latent_scale!r}"
            )
        return "b12x-304"
    if rope == "fp8":
        if model_type != _GLM_MOE_DSA:
            raise ValueError(
                f"rope: fp8 RoPE records (b12x-368) are served for {_GLM_MOE_DSA} models only, "
                f"and the model type is {model_type!r}"
            )
        return "b12x-368-per-token" if per_token else "b12x-368"
    if per_token:
        raise ValueError(
            f"latent_scale: per-token records are b12x-368 (rope='fp8', {_GLM_MOE_DSA}) and "
            f"b12x-304; the model ({model_type!r}, rope={rope!r}) is served with b12x-432 "
            f"records, which have none"
        )
    return "b12x-432"


def check_kv_cache(kv_cache: "torch.Tensor", format: str) -> None:
    """Refuses a KV cache that is not uint8 or whose last dimension is not ``format``'s
    record size (``format`` a name of jitcache.formats.RECORDS), naming both sizes."""
    import torch

    if not isinstance(format, str) or format not in RECORD_BYTES:
        raise ValueError(f"format: expected one of {', '.join(RECORDS)}, got {format!r}")
    if kv_cache.dtype != torch.uint8:
        raise TypeError(f"kv_cache: expected dtype torch.uint8 (records), got {kv_cache.dtype}")
    expected = RECORD_BYTES[format]
    last = kv_cache.shape[-1] if kv_cache.dim() else None
    if last != expected:
        raise ValueError(
            f"kv_cache: its last dimension is {last} bytes per token (shape {list(kv_cache.shape)}), "
            f"but {format} records are {expected} bytes"
        )


# ---- the model being served ------------------------------------------------------------


def snapshot_revision(path: PathArg) -> Optional[str]:
    """The revision of a Hugging Face snapshot directory (``.../snapshots/<40 hex>``), else None."""
    p = Path(os.fspath(path))
    if p.parent.name == "snapshots" and _REVISION.fullmatch(p.name):
        return p.name
    return None


def model_dir(
    model: PathArg, revision: Optional[str] = None, download_dir: Optional[PathArg] = None
) -> Path:
    """The checkpoint directory for ``model``: the directory itself when it is one, else the
    snapshot of the Hugging Face repo id ``model`` (at ``revision``) in the local HF cache
    (``download_dir``, vLLM's ``--download-dir``; None: huggingface_hub's default). Nothing
    is downloaded; a repo that is not cached raises FileNotFoundError."""
    path = Path(os.fspath(model))
    if path.is_dir():
        return path
    text = os.fspath(model)
    if path.exists() or text.count("/") != 1 or text.startswith(("/", ".")):
        raise FileNotFoundError(f"model: {text!r} is not a checkpoint directory")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FileNotFoundError(
            f"model: {text!r} is not a directory, and huggingface_hub (needed to find a repo "
            "id in the local cache) is not installed"
        ) from None
    try:
        found = snapshot_download(
            text,
            revision=revision,
            cache_dir=None if download_dir is None else os.fspath(download_dir),
            local_files_only=True,
        )
    except Exception as exc:  # huggingface_hub's errors vary by version
        raise FileNotFoundError(
            f"model: {text!r} (revision {revision or 'main'}) is not in the local Hugging Face "
            f"cache: {exc}"
        ) from None
    return Path(found)


def layer_scales(
    model: PathArg,
    revision: Optional[str] = None,
    scales_override: Optional[PathArg] = None,
    download_dir: Optional[PathArg] = None,
) -> ResolvedScales:
    """Every layer's scale (main layers, then draft layers), mode and source, and the
    provenance of the values, for the checkpoint vLLM serves. Same precedence as
    :meth:`jitcache.Runtime.prepare` (``scales_override``, then VLLM_NVFP4_MLA_SCALES_FILE,
    then the checkpoint, then 1.0). ``revision`` defaults to the snapshot's."""
    path = model_dir(model, revision, download_dir)
    return resolve_scales(path, scales_override, revision or snapshot_revision(path))


def prepare_model(
    model: PathArg,
    revision: Optional[str] = None,
    rope: Optional[str] = None,
    target: Optional[str] = None,
    scales_override: Optional[PathArg] = None,
    runtime: Optional[Runtime] = None,
    download_dir: Optional[PathArg] = None,
    *,
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> Model:
    """Prepares the checkpoint's kernels (call it at model load, before CUDA graph capture)
    and registers the Model with :mod:`jitcache.torch`. Without ``runtime`` one is opened on
    the default cache directory for the call (the Model outlives it). ``format`` (see
    :func:`record_format`; ``rope`` "bf16" / "fp8" is the older spelling of the b12x ones)
    and ``latent_scale`` as in :meth:`jitcache.Runtime.prepare`."""
    from . import torch as jt

    path = model_dir(model, revision, download_dir)
    rev = revision or snapshot_revision(path)
    options = dict(
        rope=rope,
        target=target,
        scales_override=scales_override,
        revision=rev,
        format=format,
        latent_scale=latent_scale,
    )
    if runtime is not None:
        prepared = runtime.prepare(path, **options)
    else:
        with Runtime() as rt:
            prepared = rt.prepare(path, **options)
    if "vllm.utils.jit_monitor" in sys.modules:  # inside vLLM: after warmup, a compile is reported
        from ._vllm_warmup import report_compile_after_warmup

        report_compile_after_warmup(f"{path} ({prepared.record}, {prepared.target})", prepared.stats.compiled)
    jt.model_id(prepared)
    return prepared


def layer_index(layer_name: str) -> int:
    """The layer index in a vLLM module name ("model.layers.17.self_attn.attn" -> 17); a
    draft (MTP) layer's name carries num_hidden_layers + i, as jitcache indexes it."""
    numbers = [int(part) for part in layer_name.split(".") if part.isdigit()]
    if len(numbers) != 1:
        raise ValueError(f"layer_name: expected exactly one layer number in {layer_name!r}")
    return numbers[0]


def kv_global_scale(
    model: Union[Model, int],
    layer: Union[int, str],
    device: Union[str, "torch.device", None] = None,
) -> "torch.Tensor":
    """The ``kv_global_scale`` argument of FlashInfer's ``SparseMLAGlmNvfp4Sm120Wrapper.run``
    for one layer of a flashinfer-glm-416 model: a one-element float32 tensor on ``device``
    (the GPU the cache is on) holding s_l, or 1.0 for an identity layer. ``layer``: its
    index, or the vLLM module name (:func:`layer_index`). Create one per layer when the
    attention layer is built, before CUDA graph capture, and pass the same tensor to every
    call. InvalidArgumentError for a model of another format
    (:func:`jitcache.torch.kv_global_scale`)."""
    from . import torch as jt

    index = layer_index(layer) if isinstance(layer, str) else layer
    return jt.kv_global_scale(model, index, device)


# ---- the KV-cache write ----------------------------------------------------------------


def do_kv_cache_update(
    model: Union[Model, int],
    layer: int,
    kv_c_normed: "torch.Tensor",
    k_pe: Optional["torch.Tensor"],
    kv_cache: "torch.Tensor",
    slot_mapping: "torch.Tensor",
    kv_cache_dtype: str = "nvfp4_ds_mla",
    k_scale: Optional["torch.Tensor"] = None,
    skip_scale: bool = False,
) -> None:
    """Writes the tokens' records as vLLM's MLA ``do_kv_cache_update`` does, through
    ``jitcache::nvfp4_mla_write`` with the layer's binding.

    ``kv_c_normed`` [T, 512] and ``k_pe`` [T, 64] or [T, 1, 64] (bf16; not read, and may be
    None or empty, for a model whose format has no RoPE); ``slot_mapping`` int64 with S <= T
    entries (vLLM pads the inputs for CUDA graphs: only the first S rows are written; a
    negative slot is skipped); ``kv_cache`` uint8 [num_blocks, block_size, record_bytes] of
    the model's format (another record size is refused, naming both). ``kv_cache_dtype``,
    ``k_scale`` and ``skip_scale`` are accepted for the signature and not used: the scale is
    the layer's, from the checkpoint. An empty cache (a profiling run) writes nothing.
    Allocates no device memory and never synchronises."""
    from . import torch as jt

    if kv_cache.numel() == 0:
        return
    fmt = (model if isinstance(model, Model) else jt.get_model(model)).format
    check_kv_cache(kv_cache, fmt)
    if not has_rope(fmt):
        k_pe = None
    elif k_pe.dim() == 3:
        if k_pe.shape[1] != 1:
            raise ValueError(f"k_pe: expected shape [T, 64] or [T, 1, 64], got {list(k_pe.shape)}")
        k_pe = k_pe.squeeze(1)
    slots = slot_mapping.flatten()
    n = slots.shape[0]
    if kv_c_normed.dim() >= 1 and kv_c_normed.shape[0] != n:
        if kv_c_normed.shape[0] < n:
            raise ValueError(
                f"slot_mapping: {n} slots for {kv_c_normed.shape[0]} rows of kv_c_normed"
            )
        kv_c_normed = kv_c_normed[:n]
        k_pe = None if k_pe is None else k_pe[:n]
    jt.write(model, layer, kv_c_normed, k_pe, slots, kv_cache)


class KVCacheWriter:
    """One layer's KV-cache write, shaped like vLLM's ``MLAAttentionImpl.do_kv_cache_update``.

    Either bind it (``impl.do_kv_cache_update = KVCacheWriter(model, i).do_kv_cache_update``)
    or use it as a mixin of an MLA impl class that sets ``jitcache_model`` and
    ``jitcache_layer`` in its ``__init__``.
    """

    jitcache_model: Union[Model, int]
    jitcache_layer: int

    def __init__(self, model: Union[Model, int], layer: int) -> None:
        from . import torch as jt

        self.jitcache_model = model
        self.jitcache_layer = layer
        jt.model_id(model)  # registers it (and refuses a released model) now, not at launch

    def do_kv_cache_update(
        self,
        kv_c_normed: "torch.Tensor",
        k_pe: Optional["torch.Tensor"],
        kv_cache: "torch.Tensor",
        slot_mapping: "torch.Tensor",
        kv_cache_dtype: str,
        k_scale: "torch.Tensor",
        skip_scale: bool = False,
    ) -> None:
        do_kv_cache_update(
            self.jitcache_model,
            self.jitcache_layer,
            kv_c_normed,
            k_pe,
            kv_cache,
            slot_mapping,
            kv_cache_dtype,
            k_scale,
            skip_scale,
        )
