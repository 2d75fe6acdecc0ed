"""A real client of kernels from outside: Triton's PTX through Runtime.compile(kind="ptx").

triton.compile() makes PTX for an explicit GPUTarget without a GPU. For compute
capability 9.0 and up Triton writes the arch-specific target (`.target sm_90a`,
`sm_100a`, `sm_120a`). Its PTX ISA version follows the ptxas Triton bundles, newer than
the toolkit's nvJitLink may know, so the Blackwell PTX is asked for at ISA 9.0
(options={"ptx_version": 90}). All three are jitcache targets (sm_90a on request); the
sm_90a PTX is refused for plain sm_90, with ptxas' reason.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

import jitcache
from kernel_sources import ELF_MAGIC, audit_json, lookup_in_fresh_process, ptx_entries

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

FAMILY = "triton.axpy"
FACTS = {"dtype": ["fp32", "fp16"], "BLOCK": ["256", "1024"], "num_warps": []}
SPEC = {"dtype": "fp32", "BLOCK": "1024", "num_warps": "4"}
CAPS = {90: "sm_90a", 100: "sm_100a", 120: "sm_120a"}


@triton.jit
def axpy(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, a * x + y, mask=mask)


@pytest.fixture(scope="module")
def triton_ptx(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    """PTX and entry per compute capability (100, 120 at ISA 9.0; 90 as Triton makes it),
    compiled once for the module with Triton's cache in a temporary directory."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        mp.setenv("TRITON_ALWAYS_COMPILE", "1")
        for cap in (90, 100, 120):
            src = ASTSource(
                fn=axpy,
                signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32", "BLOCK": "constexpr"},
                constexprs={"BLOCK": 1024},
            )
            # ISA 9.0 for Blackwell (what nvJitLink 13.0 reads); never for cap 90, where
            # Triton's bundled ptxas 12.9 fails on it.
            options = {"num_warps": 4} if cap == 90 else {"num_warps": 4, "ptx_version": 90}
            kernel = triton.compile(src, target=GPUTarget("cuda", cap, 32), options=options)
            ptx = kernel.asm["ptx"]
            entries = ptx_entries(ptx)
            assert entries == [kernel.metadata.name], (entries, kernel.metadata.name)
            out[cap] = {"ptx": ptx, "entry": entries[0]}
    return out


def compile_ptx(rt: jitcache.Runtime, ptx: dict, target: str) -> jitcache.CompiledKernel:
    return rt.compile(family=FAMILY, spec=SPEC, kind="ptx", source=ptx["ptx"], entry=ptx["entry"], target=target)


def test_triton_writes_the_arch_specific_targets(triton_ptx: dict) -> None:
    for cap, target in CAPS.items():
        assert re.search(rf"^\.target {target}\b", triton_ptx[cap]["ptx"], re.M), cap
    assert re.search(r"^\.version 9\.0$", triton_ptx[100]["ptx"], re.M)


def test_triton_ptx_compiles_for_each_target_then_comes_from_the_cache(
    triton_ptx: dict, cache_dir: Path, python_env: dict, cli: Path
) -> None:
    first = {}
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as rt:
        rt.declare_family(FAMILY, "ptx", FACTS)
        for cap, target in CAPS.items():
            k = compile_ptx(rt, triton_ptx[cap], target)
            assert not k.from_cache, target
            assert k.cubin.startswith(ELF_MAGIC) and len(k.cubin) > 1000, (target, len(k.cubin))
            assert (k.family, k.kind, k.entry, k.target) == (FAMILY, "ptx", "axpy", target)
            assert k.registers > 0, k
            first[target] = k
        for cap, target in CAPS.items():
            again = compile_ptx(rt, triton_ptx[cap], target)
            assert again.from_cache and again.verified, target
            assert (again.key, again.cubin) == (first[target].key, first[target].cubin)

    found = lookup_in_fresh_process(
        python_env, cache_dir, FAMILY, "ptx", FACTS, [[SPEC, t] for t in CAPS.values()]
    )
    for target, got in zip(CAPS.values(), found):
        assert got["outcome"] == "hit", (target, got)
        assert got["key"] == first[target].key
        assert got["sha256"] == hashlib.sha256(first[target].cubin).hexdigest()
        assert got["entry"] == "axpy" and got["kind"] == "ptx"

    report = audit_json(cli, cache_dir)
    assert report["clean"], report["findings"]
    assert report["findings"] == []
    assert report["entries"] >= len(CAPS)


def test_sm_90a_ptx_is_refused_for_sm_90_by_name(triton_ptx: dict, cache_dir: Path) -> None:
    """Triton's cap-90 PTX is for sm_90a only: compiled for plain sm_90 it is a CompileError
    naming nvJitLink, the target and ptxas' reason, and nothing is stored."""
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        rt.declare_family(FAMILY, "ptx", FACTS)
        with pytest.raises(jitcache.CompileError, match="sm_90a") as failed:
            compile_ptx(rt, triton_ptx[90], "sm_90")
        message = str(failed.value)
        assert "nvjitlink" in message.lower() and "sm_90" in message, message
        assert rt.lookup(FAMILY, SPEC, "sm_90").outcome == "miss"
        # The same PTX for a target jitcache does not know is refused before any tool runs.
        with pytest.raises(jitcache.InvalidArgumentError, match="sm_90x"):
            compile_ptx(rt, triton_ptx[90], "sm_90x")
