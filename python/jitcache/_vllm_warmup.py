"""jitcache's kernels as a vLLM JIT warmup kernel (vLLM 0.33's
``vllm.model_executor.warmup.jit_warmup``). Imports vLLM: reached only through
:func:`jitcache.vllm.register_warmup`.

vLLM's model runner collects ``VllmJitKernel`` registrations while it builds the model
(``JitWarmupRegistry.capture`` / ``activate``) and compiles every registered key in
``kernel_warmup()`` (``JitWarmupRegistry.warmup``). :class:`JitcacheWarmupKernel` is one
such kernel: each key is one checkpoint's kernel set, and compiling it is a compile-only
prepare (a Runtime without a device) that fills the cache. After warmup vLLM activates its
JIT monitor (``vllm.utils.jit_monitor``); a jitcache prepare that still compiles is then
reported the way the monitor reports a Triton or CuTeDSL compile: a warning, or a
RuntimeError with ``--jit-monitor-mode=error``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

from vllm.logger import init_logger
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry, VllmJitKernel

from .runtime import Model, Runtime

# Under "vllm.": vLLM configures that namespace (its format, level and handlers).
logger = init_logger("vllm.jitcache")


@dataclass(frozen=True)
class WarmupKey:
    """One checkpoint's kernel set on one target: what a compile-only prepare needs."""

    checkpoint: str
    target: str
    format: Optional[str] = None
    latent_scale: Optional[str] = None
    revision: Optional[str] = None
    scales_override: Optional[str] = None


def report_compile_after_warmup(what: str, compiled: int) -> None:
    """Reports jitcache compiles that happen once vLLM's JIT monitor is active (after
    warmup), through the monitor's own handler: a warning, or RuntimeError in error mode."""
    if compiled <= 0:
        return
    from vllm.utils import jit_monitor

    if not jit_monitor.is_active():
        return
    handle = getattr(jit_monitor, "_handle_jit_event", None)
    detail = f"{compiled} kernel variant(s) compiled"
    if handle is None:  # a vLLM whose monitor has no handler: warn as it would
        logger.warning("jitcache kernel JIT compilation during inference: %s (%s)", what, detail)
        return
    handle(backend="jitcache", event="kernel JIT compilation", fn_name=what, detail=detail)


class JitcacheWarmupKernel(VllmJitKernel[WarmupKey]):
    """jitcache's kernels in vLLM's JIT warmup. ``get_warmup_keys(key)`` gives the key it
    was registered with; ``compile(key)`` prepares it without a device (compiles the misses
    into the cache, loads nothing) and keeps the Model as the compiled executor."""

    CompileKey = WarmupKey

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._runtime: Optional[Runtime] = None

    def runtime(self) -> Runtime:
        """The compile-only runtime of the warmup (the default cache directory), opened once
        and kept: its session's counters are what jitcache.metrics reports."""
        with self._lock:
            if self._runtime is None or self._runtime.closed:
                self._runtime = Runtime(device="none")
            return self._runtime

    def get_warmup_keys(self, key: WarmupKey) -> list[WarmupKey]:  # type: ignore[override]
        return [key]

    def compile(self, compile_key: WarmupKey) -> None:
        model = self.runtime().prepare(
            compile_key.checkpoint,
            target=compile_key.target,
            scales_override=compile_key.scales_override,
            revision=compile_key.revision,
            format=compile_key.format,
            latent_scale=compile_key.latent_scale,
        )
        stats = model.stats
        logger.info(
            "jitcache: %d kernel variants for %s (%s, %s): %d cached, %d compiled, %.0f ms",
            stats.variants,
            compile_key.checkpoint,
            model.record,
            compile_key.target,
            stats.cached,
            stats.compiled,
            stats.wall_ms,
        )
        self._compiled_cache[compile_key] = model
        report_compile_after_warmup(f"{compile_key.checkpoint} ({model.record}, {compile_key.target})", stats.compiled)

    def prepared(self, key: WarmupKey) -> Optional[Model]:
        """The Model the warmup prepared for ``key``, or None."""
        return self._compiled_cache.get(key)


_kernel: Optional[JitcacheWarmupKernel] = None
_kernel_lock = threading.Lock()


def warmup_kernel() -> JitcacheWarmupKernel:
    """The process's one jitcache warmup kernel (registrations of one key are kept once)."""
    global _kernel
    with _kernel_lock:
        if _kernel is None:
            _kernel = JitcacheWarmupKernel()
        return _kernel


def register(key: WarmupKey) -> bool:
    """Registers ``key`` with the active JitWarmupRegistry; False when none is active (not
    inside a model runner's construction or model load)."""
    if JitWarmupRegistry._active.get() is None:
        return False
    warmup_kernel().register_warmup(key)
    return True
