"""The remote tier through the Python package: Runtime(remote=...) and JITCACHE_REMOTE.

Each test module run starts its own redis-server on a free loopback port in a temporary
directory (no persistence); the tests are skipped, saying so, only where redis-server is
not installed (Debian package redis-server; scripts/deps.sh installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import jitcache

from conftest import TARGET, run_cli


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, executable: str) -> None:
        log = self.directory / "redis.log"
        for _ in range(5):  # the free port may be taken before redis-server binds it
            self.port = _free_port()
            self.process = subprocess.Popen(
                [executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(self.directory), "--logfile", str(log),
                 "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.process.poll() is None:
                if _ping(self.port):
                    return
                time.sleep(0.02)
            self.stop()
        text = log.read_text() if log.exists() else ""
        raise RuntimeError(f"redis-server did not start: {text}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; scripts/deps.sh installs it)")
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory)
    server.start(executable)
    yield server
    server.stop()


@pytest.fixture
def fleet_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fleet key file (32 random bytes, 0600) named by JITCACHE_REMOTE_KEY_FILE."""
    path = tmp_path / "fleet.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    monkeypatch.setenv("JITCACHE_REMOTE_KEY_FILE", str(path))
    return path


@pytest.fixture(autouse=True)
def _no_remote_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the calling shell's remote settings reaches these tests."""
    for name in ("JITCACHE_REMOTE", "JITCACHE_REMOTE_PASSWORD_FILE", "JITCACHE_REMOTE_PREFIX"):
        monkeypatch.delenv(name, raising=False)


def _node(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(mode=0o700)
    path.chmod(0o700)
    return path


def _prepare(cache: Path, checkpoint: Path, remote: str | None) -> jitcache.PrepareStats:
    with jitcache.Runtime(cache_dir=cache, device="none", remote=remote) as rt:
        with rt.prepare(checkpoint, rope="bf16", target=TARGET) as model:
            return model.stats


def _remote_counters(cli: Path, cache: Path) -> dict:
    doc = json.loads(run_cli(cli, "--cache-dir", str(cache), "stats", "--json").stdout)
    return doc["totals"]["remote"] if "totals" in doc else doc["remote"]


def test_two_runtimes_share_a_remote(
    glm5_mini: Path, tmp_path: Path, redis_server: RedisServer, fleet_key: Path, cli: Path
) -> None:
    node_a, node_b = _node(tmp_path, "node-a"), _node(tmp_path, "node-b")

    first = _prepare(node_a, glm5_mini, redis_server.url)
    assert first.variants == 4
    assert first.compiled == first.variants
    assert first.from_remote == 0

    # Another cache directory, the same remote: every variant comes verified from the remote.
    second = _prepare(node_b, glm5_mini, redis_server.url)
    assert second.compiled == 0
    assert second.cached == second.variants == first.variants
    assert second.from_remote == second.variants

    assert _remote_counters(cli, node_a)["uploads"] == first.variants
    b = _remote_counters(cli, node_b)
    assert b["hits"] == first.variants
    assert b["uploads"] == 0 and b["rejected"] == 0

    # The hits were stored in node B's own directory: with the remote gone, nothing compiles.
    redis_server.stop()
    third = _prepare(node_b, glm5_mini, None)
    assert third.compiled == 0
    assert third.cached == third.variants
    assert third.from_remote == 0  # from its own disk now


def test_remote_from_the_environment(
    glm5_mini: Path, tmp_path: Path, redis_server: RedisServer, fleet_key: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node_a, node_b = _node(tmp_path, "node-a"), _node(tmp_path, "node-b")
    assert _prepare(node_a, glm5_mini, redis_server.url).compiled == 4
    # remote=None follows JITCACHE_REMOTE.
    monkeypatch.setenv("JITCACHE_REMOTE", redis_server.url)
    assert _prepare(node_b, glm5_mini, None).compiled == 0


def test_a_malformed_remote_url(tmp_path: Path, fleet_key: Path) -> None:
    cache = _node(tmp_path, "cache")
    # The remote is never required: required cache or not, the runtime opens without it.
    for require in (True, False, None):
        with jitcache.Runtime(cache_dir=cache, device="none", require_cache=require,
                              remote="http://127.0.0.1:6379") as rt:
            assert rt.cache.mode == "read-write"


def test_remote_must_be_text(cache_dir: Path) -> None:
    with pytest.raises(TypeError):
        jitcache.Runtime(cache_dir=cache_dir, device="none", remote=6379)  # type: ignore[arg-type]
