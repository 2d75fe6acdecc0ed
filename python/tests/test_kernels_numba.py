"""A real client of kernels from outside: numba-cuda's NVVM IR through Runtime.compile(kind="nvvm").

numba-cuda (NVIDIA's CUDA target for numba, python/requirements-test.txt) turns a Python
kernel into NVVM IR without a GPU. The IR is generated in a fresh interpreter: numba
mangles a per-process counter into the kernel's name, so two compiles of one function in
one process are two different sources, while fresh processes doing the same thing agree
byte for byte. numba writes the LLVM 7 dialect libNVVM reads for every target, so the IR
made for compute capability 9.0 compiles for sm_90, sm_100a and sm_120a alike.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jitcache
from kernel_sources import ELF_MAGIC, audit_json, lookup_in_fresh_process

if importlib.util.find_spec("numba_cuda") is None:
    pytest.skip("numba-cuda is not installed (python/requirements-test.txt)", allow_module_level=True)

FAMILY = "numba.axpy"
FACTS = {"dtype": ["float32", "float64"], "block": []}
TARGETS = ("sm_90", "sm_100a", "sm_120a")

# Run in a fresh interpreter: prints {"implementation": ..., dtype: {"ir", "entry"}} as JSON.
# _compile_pyfunc_with_fixup is what numba.cuda.compile() calls (it marks the kernel and
# keeps it in @llvm.used); it hands back the code library whose llvm_strs is the IR that
# numba would give libNVVM. kernels need abi="numba" (the C ABI is for device functions).
GENERATE = r"""
import json
from numba import cuda, float32, float64, int32
out = {"implementation": getattr(cuda, "implementation", "unknown")}
if out["implementation"] == "NVIDIA":
    import numba.cuda.compiler as ncc

    def axpy(a, x, y, n):
        i = cuda.grid(1)
        if i < n:
            y[i] = a * x[i] + y[i]

    for name, t in (("float32", float32), ("float64", float64)):
        lib, _ = ncc._compile_pyfunc_with_fixup(
            axpy, (t, t[::1], t[::1], int32), device=False, cc=(9, 0), abi="numba")
        out[name] = {"modules": list(lib.llvm_strs), "entry": lib._entry_name}
print(json.dumps(out))
"""


def kernel_entry(ir: str) -> str:
    """The name of the function the IR's !nvvm.annotations marks as a kernel."""
    marked = re.findall(r'@("[^"]+"|[\w.$]+), !"kernel", i32 1', ir)
    assert len(marked) == 1, f"expected one kernel annotation, found {marked}"
    name = marked[0].strip('"')
    assert f'define void @"{name}"(' in ir or f"define void @{name}(" in ir, name
    return name


def generate_twice(env: dict[str, str]) -> list[dict]:
    """GENERATE in two fresh interpreters at once (numba's import and typing take seconds)."""
    children = [
        subprocess.Popen([sys.executable, "-c", GENERATE], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    docs = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, f"numba child exited {child.returncode}:\n{err}"
        docs.append(json.loads(out.strip().splitlines()[-1]))
    return docs


@pytest.fixture(scope="module")
def numba_runs(python_env_module: dict[str, str]) -> list[dict]:
    docs = generate_twice(python_env_module)
    if docs[0]["implementation"] != "NVIDIA":
        pytest.skip(f"numba.cuda is numba's built-in target ({docs[0]['implementation']}), not numba-cuda")
    return docs


@pytest.fixture(scope="module")
def numba_ir(numba_runs: list[dict]) -> dict[str, dict[str, str]]:
    """IR and entry per dtype, from the first fresh interpreter."""
    doc = numba_runs[0]
    out = {}
    for dtype in ("float32", "float64"):
        modules = doc[dtype]["modules"]
        assert len(modules) == 1, f"{dtype}: numba produced {len(modules)} IR modules, expected one"
        entry = kernel_entry(modules[0])
        assert entry == doc[dtype]["entry"], (entry, doc[dtype]["entry"])
        out[dtype] = {"ir": modules[0], "entry": entry}
    return out


@pytest.fixture(scope="module")
def python_env_module() -> dict[str, str]:
    """python_env for module-scoped fixtures (the conftest one is per test)."""
    env = dict(os.environ)
    parent = str(Path(jitcache.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (parent, env.get("PYTHONPATH", "")) if p)
    if env.get("JITCACHE_LIBRARY", "").strip():
        env["JITCACHE_LIBRARY"] = jitcache.library_path()
    return env


def compile_axpy(rt: jitcache.Runtime, numba_ir: dict, dtype: str, target: str) -> jitcache.CompiledKernel:
    return rt.compile(
        family=FAMILY,
        spec={"dtype": dtype, "block": "128"},
        kind="nvvm",
        source=numba_ir[dtype]["ir"],
        entry=numba_ir[dtype]["entry"],
        target=target,
    )


def test_the_ir_is_the_same_from_every_fresh_process(numba_runs: list[dict], numba_ir: dict) -> None:
    """The counter gotcha, checked: another fresh interpreter makes byte-identical IR (so a
    spec record written by one process agrees with the next one's source)."""
    assert numba_runs[1]["float32"]["modules"] == numba_runs[0]["float32"]["modules"]
    assert numba_runs[1]["float64"]["modules"] == numba_runs[0]["float64"]["modules"]
    assert numba_ir["float32"]["ir"] != numba_ir["float64"]["ir"]


def test_numba_ir_compiles_for_each_target_then_comes_from_the_cache(
    numba_ir: dict, cache_dir: Path, python_env: dict, cli: Path
) -> None:
    first: dict[str, jitcache.CompiledKernel] = {}
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as rt:
        rt.declare_family(FAMILY, "nvvm", FACTS)
        for target in TARGETS:
            k = compile_axpy(rt, numba_ir, "float32", target)
            assert not k.from_cache, target
            assert k.cubin.startswith(ELF_MAGIC) and len(k.cubin) > 1000, (target, len(k.cubin))
            assert (k.family, k.kind, k.entry, k.target) == (FAMILY, "nvvm", numba_ir["float32"]["entry"], target)
            assert re.fullmatch(r"[0-9a-f]{32}", k.key), k.key
            assert k.registers > 0, k
            first[target] = k
        assert len({k.key for k in first.values()}) == len(TARGETS)
        assert len({k.cubin for k in first.values()}) == len(TARGETS)  # one binary per target

        for target in TARGETS:
            again = compile_axpy(rt, numba_ir, "float32", target)
            assert again.from_cache, target
            assert again.verified  # the source was compared with the spec record, and agrees
            assert (again.key, again.cubin) == (first[target].key, first[target].cubin)

        # Another value of a spec fact is another kernel.
        wide = compile_axpy(rt, numba_ir, "float64", "sm_90")
        assert not wide.from_cache and wide.key != first["sm_90"].key

    found = lookup_in_fresh_process(
        python_env, cache_dir, FAMILY, "nvvm", FACTS,
        [[{"dtype": "float32", "block": "128"}, t] for t in TARGETS]
        + [[{"dtype": "float32", "block": "256"}, "sm_90"]],
    )
    for target, got in zip(TARGETS, found):
        assert got["outcome"] == "hit", (target, got)
        assert got["key"] == first[target].key
        assert got["sha256"] == hashlib.sha256(first[target].cubin).hexdigest()
        assert got["from_cache"] and got["kind"] == "nvvm"
        assert got["entry"] == numba_ir["float32"]["entry"]
    assert found[-1] == {"outcome": "miss", "key": None, "sha256": None, "from_cache": None,
                         "entry": None, "kind": None}

    report = audit_json(cli, cache_dir)
    assert report["clean"], report["findings"]
    assert report["findings"] == []
    assert report["entries"] >= len(TARGETS) + 1  # the kernels (and their spec records)


def test_numba_ir_for_the_wrong_family_kind_or_a_missing_entry(numba_ir: dict, cache_dir: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        rt.declare_family(FAMILY, "nvvm", FACTS)
        with pytest.raises(jitcache.InvalidArgumentError, match="numba.axpy is declared with nvvm sources; this request is ptx"):
            rt.compile(family=FAMILY, spec={"dtype": "float32", "block": "128"}, kind="ptx",
                       source=numba_ir["float32"]["ir"], entry=numba_ir["float32"]["entry"], target="sm_90")
        # numba's kernel under the name a user would guess: the cubin has only the mangled one.
        with pytest.raises(jitcache.CompileError, match="'axpy' is not a function") as info:
            rt.compile(family=FAMILY, spec={"dtype": "float32", "block": "128"}, kind="nvvm",
                       source=numba_ir["float32"]["ir"], entry="axpy", target="sm_90")
        assert numba_ir["float32"]["entry"][:20] in str(info.value)  # names the functions it has
