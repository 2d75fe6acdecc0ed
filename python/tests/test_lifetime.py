"""A Runtime's life against threads and fork() (issue 24 items 4 and 5), and a family
schema with a key given twice (item 16).

The thread and fork cases run in a child Python: on the code before the fix, the first
crashed the interpreter (SIGSEGV) and the second left children hung in NVRTC's mutex."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import jitcache
from conftest import TARGET
from jitcache import _lib
from jitcache.errors import InvalidArgumentError

def _run_child(tmp_path: Path, script: str, env: dict, cache: Path, checkpoint: Path) -> tuple[dict, str]:
    """Runs `script` in a fresh Python with (cache, checkpoint, target); its last line of
    output as JSON, and its stderr. A crash (the old behaviour) fails here."""
    path = tmp_path / "child.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", str(path), str(cache), str(checkpoint), TARGET],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


# Four threads prepare in a loop on a warm cache until their runtime is closed under them;
# each says how its calls ended.
CLOSE_UNDER_THREADS = r"""
import json, sys, threading, time
import jitcache
from jitcache.errors import InvalidArgumentError
cache_dir, checkpoint, target = sys.argv[1:4]
rt = jitcache.Runtime(cache_dir=cache_dir, device="none")
start = threading.Barrier(5)
lock = threading.Lock()
ends, prepared = [], [0]
def work():
    start.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            rt.prepare(checkpoint, target=target).close()
        except InvalidArgumentError as e:
            with lock:
                ends.append("closed" if "closed" in str(e) else "other: " + str(e))
            return
        except BaseException as e:
            with lock:
                ends.append("other: " + repr(e))
            return
        with lock:
            prepared[0] += 1
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
start.wait()
time.sleep(0.3)
rt.close()
for t in threads:
    t.join(60)
print(json.dumps({"ends": ends, "prepared": prepared[0]}), flush=True)
"""


def test_closing_a_runtime_under_preparing_threads_finishes_or_refuses_each_call(
    warm_cache: Path, glm5_mini: Path, python_env: dict, tmp_path: Path
) -> None:
    result, _ = _run_child(tmp_path, CLOSE_UNDER_THREADS, python_env, warm_cache, glm5_mini)
    assert result["ends"] == ["closed"] * 4, result
    assert result["prepared"] > 0


# A thread compiles new CUDA kernels (cold: NVRTC runs) while the main thread forks 8
# children; each child is refused the parent's runtime, opens its own and compiles and
# prepares with it. The parent reports each child's exit status (None: hung, killed).
FORK_WHILE_COMPILING = r"""
import json, os, sys, threading, time
import jitcache
from jitcache.errors import InvalidArgumentError
cache_dir, checkpoint, target = sys.argv[1:4]
FACTS = {"n": None}
def source(n):
    return 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= %d.5f; }\n' % n
def compile(rt, n):
    return rt.compile(family="life", spec={"n": str(n)}, kind="cuda", source=source(n), entry="k", target=target)
def child(i):
    try:
        compile(rt, 0)
        return 10
    except InvalidArgumentError as e:
        if "forked child" not in str(e):
            return 11
    rt.close()
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as own:
        own.declare_family("life", "cuda", FACTS)
        kernel = compile(own, 100000 + i)
        if kernel.from_cache or not kernel.cubin:
            return 12
        own.prepare(checkpoint, target=target).close()
    return 0
rt = jitcache.Runtime(cache_dir=cache_dir, device="none")
rt.declare_family("life", "cuda", FACTS)
compile(rt, 0)
stop = threading.Event()
compiled = [0]
def compiler():
    n = 1
    while not stop.is_set():
        compile(rt, n)
        compiled[0] += 1
        n += 1
thread = threading.Thread(target=compiler)
thread.start()
pids = []
for i in range(8):
    time.sleep(0.015 + 0.007 * i)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child(i)
        finally:
            os._exit(code)
    pids.append(pid)
stop.set()
thread.join()
deadline = time.monotonic() + 120
codes = []
for pid in pids:
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes.append(os.waitstatus_to_exitcode(status))
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            codes.append(None)
            break
        time.sleep(0.02)
print(json.dumps({"codes": codes, "compiled": compiled[0]}), flush=True)
"""


def test_a_child_forked_while_a_thread_compiles_opens_its_own_runtime_and_compiles(
    warm_cache: Path, glm5_mini: Path, python_env: dict, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"  # warm for the children's prepare; the compiles are new
    shutil.copytree(warm_cache, cache)
    result, stderr = _run_child(tmp_path, FORK_WHILE_COMPILING, python_env, cache, glm5_mini)
    assert result["codes"] == [0] * 8, (result, stderr[-2000:])
    assert result["compiled"] > 0


class _Repeating(Mapping):
    """A mapping whose items() name one fact twice (a dict cannot)."""

    def __init__(self, items: list[tuple[str, object]]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> object:
        return dict(self._items)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._items))

    def __len__(self) -> int:
        return len(dict(self._items))

    def items(self):  # type: ignore[override]
        return list(self._items)


def test_a_fact_or_schema_key_given_twice_is_refused_naming_it(cache_dir: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(InvalidArgumentError, match="fact 'tile' is given twice"):
            rt.declare_family("twice", "cuda", _Repeating([("tile", ["8"]), ("dtype", None), ("tile", None)]))
        raw = b'{"family": "twice", "kind": "cuda", "facts": {"tile": ["8"], "tile": []}}'
        with pytest.raises(InvalidArgumentError, match=r"key 'facts\.tile' is given twice"):
            _lib.check(_lib.lib.jitcache_declare_family(rt._live(), raw))
        rt.declare_family("twice", "cuda", {"tile": ["8"]})  # declared once, it is fine


def test_calls_on_a_closed_runtime_raise_and_close_is_idempotent(cache_dir: Path, glm5_mini: Path) -> None:
    rt = jitcache.Runtime(cache_dir=cache_dir, device="none")
    handle = rt._live()
    rt.close()
    rt.close()
    with pytest.raises(InvalidArgumentError, match="runtime closed"):
        rt.prepare(glm5_mini, target=TARGET)
    # The library itself refuses the closed handle (a thread that read it before close).
    with pytest.raises(InvalidArgumentError, match="runtime closed"):
        _lib.check(_lib.lib.jitcache_declare_family(handle, b'{"family": "f", "kind": "cuda", "facts": {}}'))
