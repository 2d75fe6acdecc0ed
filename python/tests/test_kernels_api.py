"""Kernels from outside through the Python API: Runtime.declare_family, compile, lookup.

Hand-written kernels of each kind (kernel_sources.py), compiled for real without a GPU:
caching, shadow verification of a family whose spec forgets an input, verify_spec and
JITCACHE_VERIFY_SPEC, one compile across processes, and bad input of every kind.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jitcache
from conftest import last_json_lines, reaped
from kernel_sources import ELF_MAGIC, SOURCES, lookup_in_fresh_process, scale_cuda, scale_nvvm, scale_ptx

TARGET = "sm_90"


@pytest.fixture
def rt(cache_dir: Path):
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as runtime:
        yield runtime


def compile_scale(runtime: jitcache.Runtime, kind: str, scale: float = 1.0, family: str | None = None,
                  spec: dict | None = None, **kw) -> jitcache.CompiledKernel:
    args = dict(family=family or f"hand.{kind}", spec=spec if spec is not None else {"dtype": "f32"},
                kind=kind, source=SOURCES[kind](scale), entry="scale_copy", target=TARGET)
    args.update(kw)
    return runtime.compile(**args)


# ---- each kind, cached ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cuda", "nvvm", "ptx"])
def test_each_kind_compiles_once_then_comes_from_the_cache(rt: jitcache.Runtime, kind: str) -> None:
    rt.declare_family(f"hand.{kind}", kind, {"dtype": ["f32", "f16"]})
    rt.declare_family(f"hand.{kind}", kind, {"dtype": ["f16", "f32"]})  # the same schema again: fine
    first = compile_scale(rt, kind)
    assert not first.from_cache and not first.from_remote
    assert first.cubin.startswith(ELF_MAGIC)
    assert (first.family, first.kind, first.entry, first.target) == (f"hand.{kind}", kind, "scale_copy", TARGET)
    assert re.fullmatch(r"[0-9a-f]{32}", first.key)
    assert first.registers > 0 and first.spill_store_bytes == 0 and first.ms > 0
    again = compile_scale(rt, kind)
    assert again.from_cache and again.verified
    assert (again.key, again.cubin) == (first.key, first.cubin)
    hit = rt.lookup(f"hand.{kind}", {"dtype": "f32"}, TARGET)
    assert hit.outcome == "hit" and hit.kernel is not None
    assert (hit.kernel.key, hit.kernel.cubin, hit.kernel.entry) == (first.key, first.cubin, "scale_copy")
    assert rt.lookup(f"hand.{kind}", {"dtype": "f16"}, TARGET) == jitcache.KernelLookup("miss", None)
    assert rt.lookup(f"hand.{kind}", {"dtype": "f32"}, "sm_100a").outcome == "miss"


def test_results_are_frozen_values_without_the_cubin_in_their_repr(rt: jitcache.Runtime) -> None:
    rt.declare_family("hand.ptx", "ptx", {"dtype": []})
    k = compile_scale(rt, "ptx")
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.cubin = b""  # type: ignore[misc]
    assert "cubin" not in repr(k) and "scale_copy" in repr(k)
    assert isinstance(k.cubin, bytes)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rt.lookup("hand.ptx", {"dtype": "f32"}, TARGET).outcome = "miss"  # type: ignore[misc]


def test_nvvm_bitcode_travels_as_bytes(rt: jitcache.Runtime) -> None:
    """Bitcode is full of NUL bytes: the request passes it with its size. LLVM 20 bitcode
    (llvmlite) is read by libNVVM's Blackwell front end only; Hopper's is LLVM 7."""
    llvm = pytest.importorskip("llvmlite.binding")
    opaque = scale_nvvm(2.0).replace("float*", "ptr").replace("void (ptr, ptr, i32)* @", "ptr @")
    module = llvm.parse_assembly(opaque)
    module.verify()
    bitcode = module.as_bitcode()
    assert b"\0" in bitcode
    rt.declare_family("hand.bc", "nvvm", {"dtype": []})
    k = compile_scale(rt, "nvvm", family="hand.bc", source=bitcode, target="sm_100a")
    assert k.cubin.startswith(ELF_MAGIC) and k.entry == "scale_copy"
    assert compile_scale(rt, "nvvm", family="hand.bc", source=bytearray(bitcode), target="sm_100a").from_cache
    with pytest.raises(jitcache.CompileError, match=r"(?i)libnvvm") as info:
        compile_scale(rt, "nvvm", family="hand.bc", source=bitcode, target="sm_90")
    assert "sm_90" in str(info.value)


# ---- a tool that ends its process -------------------------------------------------------

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "runtime" / "compile" / "golden"

EXITING_CHILD = r"""
import sys
import jitcache
cache_dir, bitcode_path = sys.argv[1], sys.argv[2]
bitcode = open(bitcode_path, "rb").read()
with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as rt:
    rt.declare_family("corrupted", "nvvm", {"v": []})
    try:
        rt.compile(family="corrupted", spec={"v": "1"}, kind="nvvm", source=bitcode, entry="axpy", target="sm_90")
    except jitcache.CompileError as e:
        print("raised:", e)
print("survived")
"""


def test_bitcode_that_makes_libnvvm_exit_raises_and_the_interpreter_lives(
    cache_dir: Path, tmp_path: Path, python_env: dict
) -> None:
    """Issue 24: byte 44 of the golden bitcode flipped made libNVVM call exit(1), which
    ended the Python process calling Runtime.compile. libNVVM now runs in the tool worker.
    (Run in a child interpreter, so that a regression fails this test, not the session.)"""
    bitcode = bytearray((GOLDEN / "axpy_nvvm.bc").read_bytes())
    bitcode[44] ^= 0xFF
    corrupted = tmp_path / "corrupted.bc"
    corrupted.write_bytes(bytes(bitcode))
    done = subprocess.run([sys.executable, "-c", EXITING_CHILD, str(cache_dir), str(corrupted)],
                          capture_output=True, text=True, env=python_env, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "raised:" in done.stdout and "libNVVM" in done.stdout, done.stdout
    assert "exited with status 1" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("survived"), done.stdout


# ---- shadow verification --------------------------------------------------------------


def hex_digests(message: str) -> list[str]:
    return re.findall(r"\b[0-9a-f]{16,64}\b", message)


def test_a_family_that_forgets_an_input_is_caught_with_both_digests(rt: jitcache.Runtime) -> None:
    """The source depends on a latent scale that is not a spec fact: the second source for
    the same spec is refused (nothing served), naming the family and both source digests."""
    rt.declare_family("forgetful", "ptx", {"dtype": ["f32"]})
    first = compile_scale(rt, "ptx", scale=1.0, family="forgetful")
    assert not first.from_cache
    messages = []
    for scale in (2.0, 0.5):
        with pytest.raises(jitcache.InvalidInputError) as info:
            compile_scale(rt, "ptx", scale=scale, family="forgetful")
        message = str(info.value)
        assert "forgetful" in message and "incomplete" in message and "dtype" in message, message
        messages.append(message)
    one, two = (set(hex_digests(m)) for m in messages)
    recorded = one & two  # the first source's digest is in both refusals
    assert len(recorded) >= 1, messages
    assert one - recorded and two - recorded and (one - recorded) != (two - recorded), messages
    # The entry is still the first source's, and that source still compiles from the cache.
    assert rt.lookup("forgetful", {"dtype": "f32"}, TARGET).kernel.cubin == first.cubin
    assert compile_scale(rt, "ptx", scale=1.0, family="forgetful").from_cache


def test_verify_spec_turns_hits_into_verify(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"dtype": "f32"}
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as rt:
        rt.declare_family("hand.ptx", "ptx", {"dtype": []})
        stored = compile_scale(rt, "ptx")
        assert rt.lookup("hand.ptx", spec, TARGET).outcome == "hit"
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=1.0) as rt:
        rt.declare_family("hand.ptx", "ptx", {"dtype": []})
        assert rt.lookup("hand.ptx", spec, TARGET) == jitcache.KernelLookup("verify", None)
        assert rt.lookup("hand.ptx", {"dtype": "f16"}, TARGET).outcome == "miss"  # nothing to verify
        # What a caller does with "verify": generate the source and compile; it agrees.
        checked = compile_scale(rt, "ptx")
        assert checked.from_cache and checked.verified and checked.cubin == stored.cubin
        with pytest.raises(jitcache.InvalidInputError, match="hand.ptx"):
            compile_scale(rt, "ptx", scale=3.0)
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=True) as rt:
        rt.declare_family("hand.ptx", "ptx", {"dtype": []})
        assert rt.lookup("hand.ptx", spec, TARGET).outcome == "verify"

    for value, outcome in (("1", "verify"), ("true", "verify"), ("0", "hit"), ("off", "hit"), ("1.0", "verify")):
        monkeypatch.setenv("JITCACHE_VERIFY_SPEC", value)
        with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
            rt.declare_family("hand.ptx", "ptx", {"dtype": []})
            assert rt.lookup("hand.ptx", spec, TARGET).outcome == outcome, value
    # The argument beats the environment.
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=1) as rt:
        monkeypatch.setenv("JITCACHE_VERIFY_SPEC", "0")
        rt.declare_family("hand.ptx", "ptx", {"dtype": []})
        assert rt.lookup("hand.ptx", spec, TARGET).outcome == "verify"


def test_a_verify_fraction_samples_the_hits(cache_dir: Path) -> None:
    """verify_spec=0.5: about half the hits are chosen (200 lookups: both outcomes, each far
    from all or none; a failure here is a 1 in 10**16 event, not bad luck)."""
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0.5) as rt:
        rt.declare_family("hand.ptx", "ptx", {"dtype": []})
        compile_scale(rt, "ptx")
        outcomes = [rt.lookup("hand.ptx", {"dtype": "f32"}, TARGET).outcome for _ in range(200)]
    assert set(outcomes) == {"hit", "verify"}
    assert 40 <= outcomes.count("verify") <= 160, outcomes.count("verify")


@pytest.mark.parametrize("value", ["2", "abc", "-0.5", "nan"])
def test_a_bad_verify_spec_variable_is_a_clear_error(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("JITCACHE_VERIFY_SPEC", value)
    with pytest.raises(jitcache.Error, match="JITCACHE_VERIFY_SPEC") as info:
        jitcache.Runtime(cache_dir=cache_dir, device="none")
    assert value in str(info.value)
    with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0.25):
        pass  # an explicit fraction does not read the variable


@pytest.mark.parametrize("value", [1.5, -0.1, math.nan, math.inf])
def test_verify_spec_out_of_range(cache_dir: Path, value: float) -> None:
    with pytest.raises(jitcache.InvalidArgumentError, match="verify_spec"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=value)


def test_verify_spec_of_the_wrong_type(cache_dir: Path) -> None:
    with pytest.raises(TypeError, match="verify_spec.*str"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec="0.5")  # type: ignore[arg-type]


# ---- one compile across processes ----------------------------------------------------

CHILD = r"""
import hashlib, json, os, sys, time
import jitcache
cache_dir, barrier, index = sys.argv[1], sys.argv[2], sys.argv[3]
source = open(os.path.join(barrier, "source.cu")).read()
with jitcache.Runtime(cache_dir=cache_dir, device="none", verify_spec=0) as rt:
    rt.declare_family("race", "cuda", {"dtype": ["f32"]})
    open(os.path.join(barrier, "ready." + index), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(barrier, "go")):
        if time.monotonic() > deadline:
            sys.exit("no go signal within 60 s")
        time.sleep(0.002)
    k = rt.compile(family="race", spec={"dtype": "f32"}, kind="cuda", source=source,
                   entry="scale_copy", target="sm_90")
print(json.dumps({"from_cache": k.from_cache, "key": k.key, "sha256": hashlib.sha256(k.cubin).hexdigest()}))
"""


def test_eight_processes_compile_one_request_once(cache_dir: Path, tmp_path: Path, python_env: dict) -> None:
    """Eight processes, released together on a cold cache, ask for the same kernel: one
    compiles it, the seven others wait for it and read it from the cache."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (barrier / "source.cu").write_text(scale_cuda(1.25))
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(cache_dir), str(barrier), str(i)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_env)
        for i in range(8)
    ]
    with reaped(procs):
        deadline = time.monotonic() + 90
        while len(list(barrier.glob("ready.*"))) < 8:
            failed = [p for p in procs if p.poll() is not None]
            assert not failed, failed[0].communicate()[1]
            assert time.monotonic() < deadline, "the children did not all get ready"
            time.sleep(0.01)
        (barrier / "go").touch()
        results = last_json_lines(procs, timeout=120)
    assert sorted(r["from_cache"] for r in results) == [False] + [True] * 7, results
    assert len({r["sha256"] for r in results}) == 1
    assert len({r["key"] for r in results}) == 1


# ---- bad input ----------------------------------------------------------------------

BAD_SOURCES = {
    "cuda": ('extern "C" __global__ void scale_copy(float* y) { y[0] = this; }', r"(?i)nvrtc"),
    "nvvm": ("this is not LLVM IR at all\n", r"(?i)libnvvm"),
    "ptx": ("garbage, not PTX\n", r"(?i)nvjitlink"),
}


@pytest.mark.parametrize("kind", ["cuda", "nvvm", "ptx"])
def test_bad_input_of_each_kind(rt: jitcache.Runtime, kind: str) -> None:
    family = f"hand.{kind}"
    rt.declare_family(family, kind, {"dtype": ["f32", "f16"], "block": []})
    spec = {"dtype": "f32", "block": "128"}
    text, tool = BAD_SOURCES[kind]
    with pytest.raises(jitcache.CompileError, match=tool) as info:
        compile_scale(rt, kind, family=family, spec=spec, source=text)
    assert TARGET in str(info.value)
    with pytest.raises(jitcache.CompileError, match="'no_such_kernel' is not a function") as info:
        compile_scale(rt, kind, family=family, spec=spec, entry="no_such_kernel")
    assert "scale_copy" in str(info.value)  # lists the functions there are
    with pytest.raises(jitcache.InvalidArgumentError, match="sm_999"):
        compile_scale(rt, kind, family=family, spec=spec, target="sm_999")
    with pytest.raises(jitcache.NotFoundError, match="never.declared"):
        compile_scale(rt, kind, family="never.declared", spec=spec)
    with pytest.raises(jitcache.InvalidArgumentError, match="dtype") as info:
        compile_scale(rt, kind, family=family, spec={"dtype": "bf16", "block": "128"})
    assert "bf16" in str(info.value) and "f32" in str(info.value)  # the value and the allowed ones
    with pytest.raises(jitcache.InvalidArgumentError, match="block"):
        compile_scale(rt, kind, family=family, spec={"dtype": "f32"})
    with pytest.raises(jitcache.InvalidArgumentError, match="unknown_fact"):
        compile_scale(rt, kind, family=family, spec={**spec, "unknown_fact": "1"})
    other = "ptx" if kind != "ptx" else "cuda"
    with pytest.raises(jitcache.InvalidArgumentError, match=other):
        compile_scale(rt, other, family=family, spec=spec)
    with pytest.raises(jitcache.NotFoundError, match="never.declared"):
        rt.lookup("never.declared", spec, TARGET)
    with pytest.raises(jitcache.InvalidArgumentError, match="dtype"):
        rt.lookup(family, {"dtype": "bf16", "block": "128"}, TARGET)
    # None of that stored anything.
    assert rt.lookup(family, spec, TARGET).outcome == "miss"


def test_arguments_checked_in_python(rt: jitcache.Runtime) -> None:
    rt.declare_family("hand.ptx", "ptx", {"dtype": None})
    with pytest.raises(jitcache.InvalidArgumentError, match="kind: expected one of 'cuda', 'nvvm', 'ptx', got 'llvm'"):
        rt.compile(family="hand.ptx", spec={"dtype": "f32"}, kind="llvm", source=scale_ptx(),
                   entry="scale_copy", target=TARGET)
    with pytest.raises(jitcache.InvalidArgumentError, match="kind"):
        rt.declare_family("hand.other", "CUDA", {})
    with pytest.raises(TypeError, match=r"spec\['dtype'\]: expected a str, got int"):
        compile_scale(rt, "ptx", spec={"dtype": 32})
    with pytest.raises(TypeError, match="spec: expected a mapping"):
        compile_scale(rt, "ptx", spec=[("dtype", "f32")])
    with pytest.raises(TypeError, match="options: expected a sequence of str, got str"):
        compile_scale(rt, "ptx", options="-O3")
    with pytest.raises(TypeError, match=r"options\[1\]: expected a str, got int"):
        compile_scale(rt, "ptx", options=["-O3", 3])
    with pytest.raises(TypeError, match="source: expected str or bytes, got int"):
        compile_scale(rt, "ptx", source=123)
    with pytest.raises(TypeError, match="entry: expected a str, got NoneType"):
        compile_scale(rt, "ptx", entry=None)
    with pytest.raises(jitcache.InvalidArgumentError, match="family.*NUL"):
        compile_scale(rt, "ptx", family="hand.ptx\0evil")
    with pytest.raises(TypeError, match=r"headers: expected a mapping"):
        compile_scale(rt, "ptx", headers=["a.h"])
    with pytest.raises(TypeError, match=r"facts\['dtype'\]: expected a sequence of str, got str"):
        rt.declare_family("hand.x", "ptx", {"dtype": "f32"})
    with pytest.raises(TypeError, match=r"facts\['dtype'\]\[0\]: expected a str, got int"):
        rt.declare_family("hand.x", "ptx", {"dtype": [32]})
    with pytest.raises(TypeError, match="compile"):
        rt.compile("hand.ptx", {"dtype": "f32"}, "ptx", scale_ptx(), "scale_copy", TARGET)  # type: ignore[misc]
    # A family cannot change its schema within a process.
    with pytest.raises(jitcache.InvalidArgumentError, match="hand.ptx"):
        rt.declare_family("hand.ptx", "ptx", {"dtype": ["f32"]})
    rt.close()
    with pytest.raises(jitcache.InvalidArgumentError, match="runtime closed"):
        compile_scale(rt, "ptx")
    with pytest.raises(jitcache.InvalidArgumentError, match="runtime closed"):
        rt.lookup("hand.ptx", {"dtype": "f32"}, TARGET)


def test_headers_reach_nvrtc_and_the_key(rt: jitcache.Runtime, python_env: dict, cache_dir: Path) -> None:
    """A CUDA source with a named header: the header's text changes the key; a fresh
    process finds the entry by spec alone."""
    rt.declare_family("hand.headers", "cuda", {"version": []})
    source = '#include "scale.h"\n' + scale_cuda(1.0).replace("1.0f", "SCALE")
    one = rt.compile(family="hand.headers", spec={"version": "1"}, kind="cuda", source=source,
                     headers={"scale.h": "#define SCALE 1.5f\n"}, entry="scale_copy", target=TARGET)
    two = rt.compile(family="hand.headers", spec={"version": "2"}, kind="cuda", source=source,
                     headers={"scale.h": "#define SCALE 2.5f\n"}, entry="scale_copy", target=TARGET)
    assert one.key != two.key and one.cubin != two.cubin
    with pytest.raises(jitcache.InvalidInputError, match="hand.headers"):
        rt.compile(family="hand.headers", spec={"version": "1"}, kind="cuda", source=source,
                   headers={"scale.h": "#define SCALE 9.5f\n"}, entry="scale_copy", target=TARGET)
    with pytest.raises(jitcache.CompileError, match="scale.h"):
        rt.compile(family="hand.headers", spec={"version": "3"}, kind="cuda", source=source,
                   entry="scale_copy", target=TARGET)
    found = lookup_in_fresh_process(python_env, cache_dir, "hand.headers", "cuda", {"version": []},
                                    [[{"version": "1"}, TARGET], [{"version": "2"}, TARGET]])
    assert [f["key"] for f in found] == [one.key, two.key]
