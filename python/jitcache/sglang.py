"""SGLang integration: a ``sglang.srt.plugins`` entry point that gives SGLang an NVFP4 MLA
KV cache, ``--kv-cache-dtype nvfp4_ds_mla``, written and read by jitcache's kernels.

:func:`register` is what the entry point ``jitcache = "jitcache.sglang:register"`` calls in
every SGLang process (``sglang.srt.plugins.load_plugins``; ``SGLANG_PLUGINS=jitcache``
whitelists it). It registers hooks with SGLang's ``HookRegistry``, applied by the loader:

- ``ServerArgs.add_cli_args`` (after): ``nvfp4_ds_mla`` becomes a choice of the parser's
  ``--kv-cache-dtype`` (SGLang's own list is left as it is).
- ``kv_cache_dtype.configure_kv_cache_dtype`` (around): ``nvfp4_ds_mla`` resolves to a
  bf16 pool dtype, the dtype the attention reads, as SGLang's ``fp4_mx_block16`` MLA pool
  hands its attention bf16.
- ``KVCacheConfigurator._build_mla_kv_pool`` (around): for ``nvfp4_ds_mla`` the MLA
  token-to-KV pool is :class:`jitcache._sglang_pool.NvfpMLATokenToKVPool`, whose buffers
  hold jitcache records and whose writes and reads are jitcache's ops with each layer's
  scale from the checkpoint (:func:`prepare_model`).
- ``KVCacheConfigurator._build_dsa_kv_pool`` and ``_build_hybrid_mla_swa_kv_pool``
  (around): refused for ``nvfp4_ds_mla`` with an error naming the pool (docs/sglang.md).

The record format is ``JITCACHE_SGLANG_FORMAT`` (default b12x-432; :func:`record_format`).
Importing this module imports nothing of SGLang; the pool lives in
:mod:`jitcache._sglang_pool`, imported when a pool is made.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Optional

from .formats import RECORD_BYTES
from .runtime import Model, Runtime
from ._types import PathArg

if TYPE_CHECKING:
    import torch

__all__ = [
    "KV_CACHE_DTYPE",
    "FORMAT_VARIABLE",
    "FORMATS",
    "DEFAULT_FORMAT",
    "HOOK_TARGETS",
    "register",
    "record_format",
    "prepare_model",
    "pool_class",
]

_logger = logging.getLogger("jitcache")

# vLLM's name for an NVFP4 MLA KV cache, kept for SGLang's --kv-cache-dtype.
KV_CACHE_DTYPE = "nvfp4_ds_mla"
FORMAT_VARIABLE = "JITCACHE_SGLANG_FORMAT"
# jitcache's formats with a per-layer scale (each layer's s_l from the checkpoint picks the
# identity or the dynamic kernel); all three hold the RoPE key. SGLang's attention reads
# the gathered bf16, so any of them serves it; b12x-432 keeps the RoPE key in bf16, exact.
FORMATS = ("b12x-432", "b12x-368", "flashmla-352")
DEFAULT_FORMAT = "b12x-432"

_CONFIGURATOR = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
HOOK_TARGETS = (
    "sglang.srt.server_args.ServerArgs.add_cli_args",
    "sglang.srt.mem_cache.kv_cache_dtype.configure_kv_cache_dtype",
    f"{_CONFIGURATOR}._build_mla_kv_pool",
    f"{_CONFIGURATOR}._build_dsa_kv_pool",
    f"{_CONFIGURATOR}._build_hybrid_mla_swa_kv_pool",
)
_registered = False


def record_format(value: Optional[str] = None) -> str:
    """The record format of ``nvfp4_ds_mla``: ``value``, else JITCACHE_SGLANG_FORMAT (its
    value with surrounding whitespace removed; unset or empty: b12x-432). ValueError for a
    name that is not one of :data:`FORMATS`, naming where it came from."""
    origin = "format"
    if value is None:
        value = (os.environ.get(FORMAT_VARIABLE) or "").strip()
        origin = FORMAT_VARIABLE
        if not value:
            return DEFAULT_FORMAT
    if not isinstance(value, str) or value not in FORMATS:
        per_token = " (per-token records are not served to SGLang: its pool applies each layer's scale)"
        hint = per_token if isinstance(value, str) and value in RECORD_BYTES else ""
        raise ValueError(f"{origin}: expected one of {', '.join(FORMATS)}, got {value!r}{hint}")
    return value


def prepare_model(
    model_path: PathArg,
    target: Optional[str] = None,
    revision: Optional[str] = None,
    format: Optional[str] = None,
    scales_override: Optional[PathArg] = None,
    runtime: Optional[Runtime] = None,
) -> Model:
    """Prepares the checkpoint's kernels for ``nvfp4_ds_mla`` (``format`` as in
    :func:`record_format`) with each layer's scale from jitcache's resolver (the same
    precedence as :meth:`jitcache.Runtime.prepare`). ``model_path``: what SGLang serves, a
    directory or a Hugging Face repo id in the local cache (:func:`jitcache.vllm.model_dir`);
    ``target`` None: the runtime's device picks it (docs/targets.md)."""
    from . import vllm as jv

    return jv.prepare_model(
        model_path,
        revision=revision,
        target=target,
        scales_override=scales_override,
        runtime=runtime,
        format=record_format(format),
        latent_scale="per-layer",
    )


def pool_class() -> type:
    """:class:`jitcache._sglang_pool.NvfpMLATokenToKVPool` (imports SGLang)."""
    from ._sglang_pool import NvfpMLATokenToKVPool

    return NvfpMLATokenToKVPool


# ---- the hooks ----------------------------------------------------------------------------


def _add_kv_cache_dtype_choice(result: Any, parser: Any, *args: Any, **kwargs: Any) -> None:
    """After ``ServerArgs.add_cli_args(parser)``: ``nvfp4_ds_mla`` joins the choices of that
    parser's ``--kv-cache-dtype`` (a new list: SGLang's own stays as it was)."""
    action = getattr(parser, "_option_string_actions", {}).get("--kv-cache-dtype")
    if action is None:
        raise RuntimeError("jitcache.sglang: SGLang's parser has no --kv-cache-dtype option to extend")
    choices = list(action.choices or ())
    if KV_CACHE_DTYPE not in choices:
        action.choices = choices + [KV_CACHE_DTYPE]
    return None


def _configure_kv_cache_dtype(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Around ``configure_kv_cache_dtype``: ``nvfp4_ds_mla`` is a bf16 pool (the dtype its
    gather writes and the attention reads), tagged ``nvfp4_ds_mla`` for the pool builder."""
    import torch

    requested = kwargs.get("server_args_kv_cache_dtype")
    if kwargs.get("is_draft_worker") and kwargs.get("speculative_draft_kv_cache_dtype") not in (None, "auto"):
        requested = kwargs["speculative_draft_kv_cache_dtype"]
    if requested != KV_CACHE_DTYPE:
        return original(*args, **kwargs)
    model_dtype = kwargs.get("model_dtype", torch.bfloat16)
    if model_dtype != torch.bfloat16:
        raise ValueError(
            f"--kv-cache-dtype {KV_CACHE_DTYPE}: jitcache's gather writes bf16, the model runs in "
            f"{model_dtype} (serve it with --dtype bfloat16)"
        )
    record_format()  # a bad JITCACHE_SGLANG_FORMAT fails here, at startup
    return KV_CACHE_DTYPE, torch.bfloat16


def _device_ordinal(configurator: Any) -> int:
    device = str(getattr(configurator, "device", "cuda"))
    if not device.startswith("cuda"):
        raise ValueError(
            f"--kv-cache-dtype {KV_CACHE_DTYPE}: jitcache's kernels run on CUDA devices, the pool's "
            f"device is {device!r}"
        )
    return int(getattr(configurator, "gpu_id", 0) or 0)


def _build_mla_kv_pool(original: Callable[..., Any], configurator: Any, *args: Any, **kwargs: Any) -> Any:
    """Around ``KVCacheConfigurator._build_mla_kv_pool``: for ``nvfp4_ds_mla`` the pool of
    jitcache records, its Model prepared from the served checkpoint."""
    if getattr(configurator, "kv_cache_dtype_str", None) != KV_CACHE_DTYPE:
        return original(configurator, *args, **kwargs)
    if getattr(configurator, "kv_shard_rank", None) is not None:
        raise ValueError(f"--kv-cache-dtype {KV_CACHE_DTYPE} does not support --enable-kv-cache-sharding")
    from sglang.srt.runtime_context import get_exec

    ordinal = _device_ordinal(configurator)
    config = configurator.model_config
    # The device's target: the most specific one the cache holds, else its arch-specific one.
    with Runtime(device_ordinal=ordinal) as runtime:
        model = prepare_model(config.model_path, revision=getattr(config, "revision", None), runtime=runtime)
    info = configurator.layer_info
    return pool_class()(
        kwargs.get("max_total_num_tokens", args[0] if args else None),
        page_size=configurator.pool_page_size,
        dtype=configurator.kv_cache_dtype,
        kv_lora_rank=config.kv_lora_rank,
        qk_rope_head_dim=config.qk_rope_head_dim,
        layer_num=info.num_effective_layers,
        device=configurator.device,
        enable_memory_saver=get_exec().features.enable_memory_saver,
        start_layer=info.start_layer,
        end_layer=info.end_layer,
        jitcache_model=model,
        checkpoint=model.checkpoint,
        revision=model.provenance.checkpoint_revision,
    )


def _refuse(pool: str) -> Callable[..., Any]:
    def around(original: Callable[..., Any], configurator: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(configurator, "kv_cache_dtype_str", None) == KV_CACHE_DTYPE:
            raise ValueError(
                f"--kv-cache-dtype {KV_CACHE_DTYPE}: jitcache gives SGLang its MLA token-to-KV pool "
                f"only; this model needs {pool}, which it does not replace (docs/sglang.md)"
            )
        return original(configurator, *args, **kwargs)

    return around


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: registers the hooks above with SGLang's
    ``HookRegistry`` (SGLang's loader applies them after every plugin ran). Idempotent."""
    global _registered
    if _registered:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    add_cli, configure, mla, dsa, hybrid = HOOK_TARGETS
    HookRegistry.register(add_cli, _add_kv_cache_dtype_choice, HookType.AFTER)
    HookRegistry.register(configure, _configure_kv_cache_dtype, HookType.AROUND)
    HookRegistry.register(mla, _build_mla_kv_pool, HookType.AROUND)
    HookRegistry.register(dsa, _refuse("the DSA pool (DSATokenToKVPool, with its indexer cache)"), HookType.AROUND)
    HookRegistry.register(hybrid, _refuse("the hybrid sliding-window MLA pool (SWAKVPool)"), HookType.AROUND)
    _registered = True
    _logger.debug("jitcache: SGLang hooks registered for --kv-cache-dtype %s", KV_CACHE_DTYPE)
