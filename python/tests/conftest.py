"""Shared fixtures for the jitcache Python tests.

The tests use the jitcache package importable in this interpreter (installed, or on
PYTHONPATH with JITCACHE_LIBRARY), the bundled example checkpoint, and the CLI binary
(JITCACHE_CLI, else the package's bundled copy, else <repo>/build/tools/jitcache).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = "sm_90"


def _find_cli() -> Path | None:
    given = os.environ.get("JITCACHE_CLI", "").strip()
    if given:
        return Path(given).resolve()
    import jitcache

    bundled = Path(jitcache.__file__).resolve().parent / "bin" / "jitcache"
    if bundled.is_file():
        return bundled
    built = REPO_ROOT / "build" / "tools" / "jitcache"
    return built if built.is_file() else None


_WATCHED_PREFIXES = ("JITCACHE_", "VLLM_", "XDG_", "JCTEST_")


def _watched_environment() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(_WATCHED_PREFIXES) or name in ("HOME", "TMPDIR")
    }


@pytest.fixture(autouse=True)
def _environment_left_as_found() -> Iterator[None]:
    """Fails a test that leaves a watched variable changed (change them with monkeypatch).

    Set up before monkeypatch (``_clean_environment`` asks for it first), so it checks
    after monkeypatch has undone its changes; puts the old values back either way.
    """
    before = _watched_environment()
    yield
    after = _watched_environment()
    def shown(value: str | None) -> str:
        return "unset" if value is None else repr(value)

    changes = [
        f"{name}: was {shown(before.get(name))}, now {shown(after.get(name))}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    ]
    for name in after.keys() - before.keys():
        del os.environ[name]
    os.environ.update(before)
    if changes:
        pytest.fail("the test left the environment changed (use monkeypatch): " + "; ".join(changes))


@pytest.fixture(autouse=True)
def _clean_environment(_environment_left_as_found: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables that would change what the tests expect (each test that wants one sets it)."""
    for name in ("VLLM_NVFP4_MLA_SCALES_FILE", "JITCACHE_REQUIRE_CACHE", "JITCACHE_NO_COMPILE",
                 "JITCACHE_LOG_LEVEL", "JITCACHE_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def glm5_mini(repo_root: Path) -> Path:
    path = repo_root / "examples" / "glm5-mini"
    assert (path / "config.json").is_file(), f"missing example checkpoint {path}"
    return path


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """A fresh, private (0700) cache directory."""
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    path.chmod(0o700)
    return path


@pytest.fixture(scope="session")
def cli() -> Path:
    path = _find_cli()
    if path is None:
        pytest.fail("no jitcache CLI: set JITCACHE_CLI or build build/tools/jitcache")
    return path


@pytest.fixture
def seed() -> int:
    """A fresh random seed per test (JCTEST_SEED pins it), printed so a failure can be replayed."""
    given = os.environ.get("JCTEST_SEED", "").strip()
    value = int(given) if given else random.SystemRandom().randrange(2**32)
    print(f"seed: {value} (rerun with JCTEST_SEED={value})")
    return value


def run_cli(cli: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs the CLI; with check, a non-zero exit fails the test showing stderr."""
    proc = subprocess.run(
        [str(cli), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and proc.returncode != 0:
        pytest.fail(f"jitcache {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def in_threads(work: Callable[[], object], count: int) -> list[object]:
    """Runs `work` on `count` Python threads at once; what each returned, or what it raised."""
    results: list[object] = [None] * count

    def run(index: int) -> None:
        try:
            results[index] = work()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@contextlib.contextmanager
def reaped(children: list[subprocess.Popen]) -> Iterator[list[subprocess.Popen]]:
    """Kills whichever of the child processes is still running when the block ends."""
    try:
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def last_json_lines(children: list[subprocess.Popen], timeout: float) -> list[dict]:
    """Waits for each child, which must exit 0, and parses the last line it printed as JSON."""
    results = []
    for child in children:
        out, err = child.communicate(timeout=timeout)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def scales_show_json(cli: Path, checkpoint: Path, *extra: str) -> dict:
    """`jitcache scales show --checkpoint DIR --json` as a dict."""
    proc = run_cli(cli, "scales", "show", "--checkpoint", str(checkpoint), *extra, "--json")
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory, glm5_mini: Path) -> Path:
    """A cache directory already holding glm5-mini's sm_90 kernels (both ropes), shared by the session."""
    import jitcache

    path = tmp_path_factory.mktemp("warm") / "cache"
    path.mkdir(mode=0o700)
    with jitcache.Runtime(cache_dir=path, device="none") as rt:
        for rope in ("bf16", "fp8"):
            rt.prepare(glm5_mini, rope=rope, target=TARGET).close()
    return path


@pytest.fixture
def python_env() -> dict[str, str]:
    """The environment a child Python needs to import the same jitcache as this one."""
    import jitcache

    env = dict(os.environ)
    package_parent = str(Path(jitcache.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, env.get("PYTHONPATH", "")) if p
    )
    if env.get("JITCACHE_LIBRARY", "").strip():
        env["JITCACHE_LIBRARY"] = jitcache.library_path()
    return env


PYTHON = sys.executable
