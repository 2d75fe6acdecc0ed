"""Small hand-written kernels of each source kind, and helpers shared by the tests of
kernels from outside (Runtime.declare_family / compile / lookup).

The kernels are tiny on purpose: every test here compiles for real (NVRTC, libNVVM,
nvJitLink), without a GPU, and should stay fast.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import run_cli

ELF_MAGIC = b"\x7fELF"


def scale_bits(scale: float) -> str:
    """A float32 as the hex digits PTX writes it with (0fXXXXXXXX)."""
    return struct.pack(">f", scale).hex().upper()


def scale_ptx(scale: float = 1.0, entry: str = "scale_copy", target: str = "sm_90") -> str:
    """y[i] = x[i] * scale for i < n: the scale is baked into the code, as a latent scale
    is in a generated kernel, so two scales are two different sources."""
    return f""".version 8.0
.target {target}
.address_size 64

.visible .entry {entry}(
	.param .u64 {entry}_param_0,
	.param .u64 {entry}_param_1,
	.param .u32 {entry}_param_2
)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [{entry}_param_0];
	ld.param.u64 	%rd2, [{entry}_param_1];
	ld.param.u32 	%r2, [{entry}_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mul.wide.s32 	%rd5, %r1, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.f32 	%f1, [%rd6];
	mul.f32 	%f2, %f1, 0f{scale_bits(scale)};
	add.s64 	%rd7, %rd4, %rd5;
	st.global.f32 	[%rd7], %f2;
$L__BB0_2:
	ret;
}}
"""


def scale_nvvm(scale: float = 1.0, entry: str = "scale_copy") -> str:
    """The same kernel as NVVM IR in the LLVM 7 dialect (typed pointers) that libNVVM reads
    for every target from compute_75 up."""
    return f"""target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @{entry}(float* %x, float* %y, i32 %n) {{
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done
body:
  %i64 = sext i32 %i to i64
  %px = getelementptr float, float* %x, i64 %i64
  %py = getelementptr float, float* %y, i64 %i64
  %v = load float, float* %px
  %s = fmul float %v, 0x{struct.pack(">d", struct.unpack("f", struct.pack("f", scale))[0]).hex().upper()}
  store float %s, float* %py
  br label %done
done:
  ret void
}}

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind readnone
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind readnone
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind readnone

!nvvm.annotations = !{{!0}}
!0 = !{{void (float*, float*, i32)* @{entry}, !"kernel", i32 1}}
!nvvmir.version = !{{!1}}
!1 = !{{i32 2, i32 0}}
"""


def scale_cuda(scale: float = 1.0, entry: str = "scale_copy") -> str:
    """The same kernel as CUDA C++ for NVRTC."""
    return f"""extern "C" __global__ void {entry}(const float* x, float* y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * {scale!r}f;
}}
"""


SOURCES = {"cuda": scale_cuda, "nvvm": scale_nvvm, "ptx": scale_ptx}


def ptx_entries(ptx: str) -> list[str]:
    """The kernel names a PTX module defines (its `.entry` lines)."""
    names = []
    for line in ptx.splitlines():
        words = line.replace("(", " ").split()
        if ".entry" in words:
            names.append(words[words.index(".entry") + 1])
    return names


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> str:
    """Runs code in a fresh interpreter and returns its stdout; a failure fails the caller."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"child python exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


# A fresh process with its own Runtime on the cache directory: declares the family and
# looks up each (spec, target), printing what it found as one JSON line.
LOOKUP_CHILD = r"""
import hashlib, json, sys
import jitcache
args = json.loads(sys.argv[1])
found = []
with jitcache.Runtime(cache_dir=args["cache_dir"], device="none", verify_spec=0) as rt:
    rt.declare_family(args["family"], args["kind"], args["facts"])
    for spec, target in args["queries"]:
        got = rt.lookup(args["family"], spec, target)
        k = got.kernel
        found.append({"outcome": got.outcome,
                      "key": k.key if k else None,
                      "sha256": hashlib.sha256(k.cubin).hexdigest() if k else None,
                      "from_cache": k.from_cache if k else None,
                      "entry": k.entry if k else None,
                      "kind": k.kind if k else None})
print(json.dumps(found))
"""


def lookup_in_fresh_process(
    env: dict[str, str], cache_dir: Path, family: str, kind: str, facts: dict, queries: list
) -> list[dict[str, Any]]:
    """What a new process with a new Runtime on cache_dir finds for each (spec, target)."""
    args = json.dumps(
        {"cache_dir": str(cache_dir), "family": family, "kind": kind, "facts": facts, "queries": queries}
    )
    proc = subprocess.run(
        [sys.executable, "-c", LOOKUP_CHILD, args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, f"lookup child exited {proc.returncode}:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def audit_json(cli: Path, cache_dir: Path) -> dict[str, Any]:
    """`jitcache audit --json` of a cache directory; a non-zero exit fails the test with the report."""
    proc = run_cli(cli, "--cache-dir", str(cache_dir), "audit", "--json", check=False)
    assert proc.returncode == 0, f"audit exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)
