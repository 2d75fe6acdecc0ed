"""Per-call overhead of jitcache.torch.write / gather on CPU against the bare C ABI call.

Prepares examples/glm5-mini (device "none", target sm_90) in a private temporary cache, then
times, for N tokens (default 1 and 16), with time.perf_counter over many calls:

  ctypes    jitcache_model_host_write called through ctypes with a prebuilt launch struct:
            the host executor's own work plus the ctypes call
  c_abi     Model.host_write with the same struct (the core's method around that call)
  op        torch.ops.jitcache.nvfp4_mla_write (the dispatcher, the checks, building the struct)
  write     jitcache.torch.write(model, layer, ...) (the op plus argument type checks and the
            model-id lookup)

and the same for the gather. overhead = wrapper - ctypes (what jitcache.torch adds to a
call of the C ABI). Layer 0 (dynamic scale).

    python python/bench/bench_torch_overhead.py [--tokens 1 16] [--calls 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from ctypes import byref
from pathlib import Path

import torch

import jitcache
import jitcache.torch as jt
from jitcache import _lib

REPO = Path(__file__).resolve().parents[2]


def per_call_us(fns, calls: int, repeats: int) -> list[tuple[float, float]]:
    """(best, median) over `repeats` rounds of the mean of `calls` calls, in microseconds, for
    each function; the rounds interleave the functions so that a noisy moment hits them all."""
    for fn in fns:
        for _ in range(min(calls, 500)):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, into in zip(fns, samples):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            into.append((time.perf_counter() - start) / calls * 1e6)
    return [(min(s), statistics.median(s)) for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--checkpoint", default=str(REPO / "examples" / "glm5-mini"))
    opts = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = Path(tmp) / "cache"
        cache_dir.mkdir(mode=0o700)
        with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
            model = rt.prepare(opts.checkpoint, target="sm_90")
    layer = 0
    mid = jt.model_id(model)
    rb = model.record_bytes
    print(f"jitcache {jitcache.__version__}, torch {torch.__version__}, layer {layer} "
          f"({model.layer(layer).mode}), {rb}-byte records, best / median of {opts.repeats} x "
          f"{opts.calls} calls, microseconds per call")
    print(f"{'N':>4} {'kernel':<7} {'ctypes':>8} {'c_abi':>8} {'op':>8} {'wrapper':>8} "
          f"{'overhead':>9}   (best; median in brackets)")
    handle = model._handle  # the raw C handle, to time the bare ctypes call
    c_write = _lib.lib.jitcache_model_host_write
    c_gather = _lib.lib.jitcache_model_host_gather
    gen = torch.Generator().manual_seed(0)
    for n in opts.tokens:
        kv_c = torch.randn(n, 512, generator=gen).bfloat16()
        k_pe = torch.randn(n, 64, generator=gen).bfloat16()
        slot_mapping = torch.arange(n, dtype=torch.int64)
        kv_cache = torch.zeros(max(n, 16), rb, dtype=torch.uint8)
        slots = torch.arange(n, dtype=torch.int32)
        out = torch.empty(n, 576, dtype=torch.bfloat16)

        wargs = _lib.WriterLaunch(kv_c.data_ptr(), 0, k_pe.data_ptr(), 0, slot_mapping.data_ptr(), n,
                                  kv_cache.data_ptr(), kv_cache.shape[0], 0)
        gargs = _lib.GatherLaunch(kv_cache.data_ptr(), kv_cache.shape[0], slots.data_ptr(), n,
                                  out.data_ptr(), 0, 0)
        op_w = torch.ops.jitcache.nvfp4_mla_write
        op_g = torch.ops.jitcache.nvfp4_mla_gather
        rows = {
            "write": (
                lambda: c_write(handle, layer, byref(wargs)),
                lambda: model.host_write(layer, wargs),
                lambda: op_w(kv_c, k_pe, slot_mapping, kv_cache, mid, layer),
                lambda: jt.write(model, layer, kv_c, k_pe, slot_mapping, kv_cache),
            ),
            "gather": (
                lambda: c_gather(handle, layer, byref(gargs)),
                lambda: model.host_gather(layer, gargs),
                lambda: op_g(kv_cache, slots, out, mid, layer),
                lambda: jt.gather(model, layer, kv_cache, slots, out),
            ),
        }
        for kernel, fns in rows.items():
            (r, rm), (c, cm), (o, om), (w, wm) = per_call_us(fns, opts.calls, opts.repeats)
            print(f"{n:>4} {kernel:<7} {r:8.2f} {c:8.2f} {o:8.2f} {w:8.2f} {w - r:9.2f}   "
                  f"({rm:.2f} {cm:.2f} {om:.2f} {wm:.2f} {wm - rm:.2f})")
    model.close()


if __name__ == "__main__":
    main()
