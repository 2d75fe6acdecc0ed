#!/usr/bin/env python3
"""The torch path on a GPU, as a user meets it: jitcache's torch ops (python/jitcache/torch.py)
on CUDA tensors, through the jitcache package this Python imports, for every record
(jitcache.formats.RECORDS) and each kind of layer binding the checkpoint has (an identity and
a dynamic scale). Each case writes and gathers random rows (printed seed) on the CPU (the host
executor) and on the GPU, eagerly and then as a write + gather captured in a
torch.cuda.CUDAGraph and replayed on fresh rows, and requires the caches and the gathered rows
to be bit-identical. Without torch, CUDA or a device jitcache can use, it says why and exits
0 with status "skipped"; a mismatch exits 1.

    gpu_torch_check.py [--checkpoint DIR] [--json REPORT] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path


def write_report(path: str | None, report: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=2) + "\n")


def skip(path: str | None, reason: str) -> int:
    print(f"skipped: {reason}")
    write_report(path, {"status": "skipped", "reason": reason})
    return 0


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=str(root / "examples" / "glm5-mini"))
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"seed {seed} (--seed {seed} replays it)")

    try:
        import torch
    except ImportError as e:
        return skip(args.json_path, f"no torch in this Python ({e})")
    if not torch.cuda.is_available():
        return skip(args.json_path, "torch sees no CUDA device")
    try:
        import jitcache
        import jitcache.torch as jt
    except Exception as e:  # noqa: BLE001 - any reason the package cannot load is the report
        write_report(args.json_path, {"status": "failed", "error": f"cannot import jitcache: {e}"})
        print(f"gpu_torch_check: cannot import jitcache: {e}", file=sys.stderr)
        return 1

    started = time.monotonic()
    report: dict = {
        "status": "ok",
        "seed": seed,
        "torch": torch.__version__,
        "jitcache": os.path.dirname(jitcache.__file__),
        "device": torch.cuda.get_device_name(),
        "cases": [],
    }
    dev = torch.device("cuda")
    n, slots = 256, 512

    def rows(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        magnitude = 10.0 ** (torch.rand(n, 1, generator=gen) * 4 - 3)
        return ((torch.randn(n, 512, generator=gen) * magnitude).bfloat16(),
                (torch.randn(n, 64, generator=gen) * magnitude).bfloat16())

    def slot_maps(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        write = torch.randperm(slots, generator=gen)[:n].to(torch.int64)
        write[:3] = -1  # skipped tokens
        read = torch.randint(0, slots, (n,), generator=gen, dtype=torch.int32)
        read[-2:] = -1  # zero rows
        return write, read

    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.cpu().contiguous().view(torch.int16)

    failures = 0
    with tempfile.TemporaryDirectory(prefix="jitcache-torch-check-") as cache_dir:
        with jitcache.Runtime(cache_dir=cache_dir, device="auto") as rt:
            if not rt.device.available:
                return skip(args.json_path, f"jitcache has no device: {rt.device.reason}")
            report["target"] = rt.device.target
            models = {}
            for record, (fmt, latent) in jitcache.formats.RECORDS.items():
                models[record] = rt.prepare(args.checkpoint, format=fmt,
                                            latent_scale="per-token" if latent == "per-token" else None)
        gen = torch.Generator().manual_seed(seed)
        for record, model in models.items():
            width = jitcache.formats.row_width(model.format)
            rope = jitcache.formats.has_rope(model.format)
            # One layer of each kind of checkpoint scale (identity, dynamic).
            layers = {}
            for info in model.layers:
                layers.setdefault(info.mode, info.layer)
            for mode, layer in sorted(layers.items()):
                case = {"record": record, "layer": layer, "scale_mode": mode,
                        "latent_scale": model.latent_scale}

                def cpu(kv_c, k_pe, write_slots, read_slots):  # noqa: ANN001, ANN202
                    cache = jt.new_cache(model, slots // 16, 16)
                    out = torch.empty(n, width, dtype=torch.bfloat16)
                    jt.write(model, layer, kv_c, k_pe if rope else None, write_slots, cache)
                    jt.gather(model, layer, cache, read_slots, out)
                    return cache, out

                kv_c, k_pe = rows(gen)
                write_slots, read_slots = slot_maps(gen)
                want_cache, want_out = cpu(kv_c, k_pe, write_slots, read_slots)
                # Static device tensors: the eager run, then the graph's inputs and outputs.
                g_kv_c, g_k_pe = kv_c.to(dev), k_pe.to(dev)
                g_write, g_read = write_slots.to(dev), read_slots.to(dev)
                g_cache = jt.new_cache(model, slots // 16, 16, device=dev)
                g_out = torch.empty(n, width, dtype=torch.bfloat16, device=dev)

                def step() -> None:
                    jt.write(model, layer, g_kv_c, g_k_pe if rope else None, g_write, g_cache)
                    jt.gather(model, layer, g_cache, g_read, g_out)

                step()
                torch.cuda.synchronize()
                case["eager"] = bool(torch.equal(g_cache.cpu(), want_cache) and torch.equal(bits(g_out), bits(want_out)))

                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()
                replays = []
                for _ in range(2):  # fresh rows and slots each replay, into a zeroed cache
                    kv_c, k_pe = rows(gen)
                    write_slots, read_slots = slot_maps(gen)
                    want_cache, want_out = cpu(kv_c, k_pe, write_slots, read_slots)
                    g_kv_c.copy_(kv_c)
                    g_k_pe.copy_(k_pe)
                    g_write.copy_(write_slots)
                    g_read.copy_(read_slots)
                    g_cache.zero_()
                    graph.replay()
                    torch.cuda.synchronize()
                    replays.append(bool(torch.equal(g_cache.cpu(), want_cache)
                                        and torch.equal(bits(g_out), bits(want_out))))
                case["graph"] = all(replays)
                del graph
                ok = case["eager"] and case["graph"]
                failures += not ok
                print(f"  {record:<20} layer {layer:>2} ({mode:<8}) eager {'ok' if case['eager'] else 'DIFFERS'}"
                      f", graph {'ok' if case['graph'] else 'DIFFERS'}")
                report["cases"].append(case)
            model.close()
    report["seconds"] = round(time.monotonic() - started, 2)
    if failures:
        report["status"] = "failed"
        print(f"gpu_torch_check: {failures} case(s) differ from the CPU (seed {seed})", file=sys.stderr)
    else:
        print(f"torch ops on {report['device']}: {len(report['cases'])} cases bit-identical to the CPU, eager and "
              f"in a CUDA graph")
    write_report(args.json_path, report)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
