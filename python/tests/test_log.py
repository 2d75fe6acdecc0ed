"""The log bridge: library lines reach logging.getLogger("jitcache") with their levels."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import jitcache
from jitcache import _lib, _log
from conftest import TARGET, in_threads

SHA256 = "81a983903240aef680e9db83ba770d0fea6a977ab915cf98400bbaa7d5f12265"


@pytest.fixture(autouse=True)
def restore_logger():
    logger = logging.getLogger("jitcache")
    level = logger.level
    yield logger
    logger.setLevel(level)
    _log.install()
    _log.sync()


def jitcache_records(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "jitcache" and (level is None or r.levelno == level)
    ]


def test_info_line_names_the_source(glm5_mini: Path, warm_cache: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="jitcache")
    jitcache.resolve_scales(glm5_mini)
    lines = [r.getMessage() for r in jitcache_records(caplog, logging.INFO)]
    assert any(
        "checkpoint metadata (sidecar)" in m and SHA256 in m and str(glm5_mini) in m for m in lines
    ), lines
    caplog.clear()
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        rt.prepare(glm5_mini, target=TARGET).close()
    lines = [r.getMessage() for r in jitcache_records(caplog, logging.INFO)]
    assert any("checkpoint metadata (sidecar)" in m and SHA256 in m for m in lines), lines


def test_override_warning(glm5_mini: Path, tmp_path: Path, caplog) -> None:
    override = tmp_path / "override.json"
    shutil.copy(glm5_mini / "nvfp4_ds_mla_outer_scales.json", override)
    caplog.set_level(logging.INFO, logger="jitcache")
    jitcache.resolve_scales(glm5_mini, scales_override=override)
    warnings = [r.getMessage() for r in jitcache_records(caplog, logging.WARNING)]
    assert any("shadows the checkpoint's scales metadata" in m and str(override) in m for m in warnings), warnings
    infos = [r.getMessage() for r in jitcache_records(caplog, logging.INFO)]
    assert any("explicit override (argument)" in m for m in infos), infos


def test_threshold_follows_the_logger(glm5_mini: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="jitcache")
    jitcache.resolve_scales(glm5_mini)
    assert jitcache_records(caplog, logging.INFO) == []
    caplog.set_level(logging.INFO, logger="jitcache")
    jitcache.resolve_scales(glm5_mini)
    assert len(jitcache_records(caplog, logging.INFO)) == 1


def test_library_threshold_without_the_bridge(glm5_mini: Path, capfd, restore_logger) -> None:
    """With the bridge removed the library writes to stderr, below the logger's level nothing."""
    _log.uninstall()
    restore_logger.setLevel(logging.WARNING)
    capfd.readouterr()
    jitcache.resolve_scales(glm5_mini)
    assert "outer scales for" not in capfd.readouterr().err
    restore_logger.setLevel(logging.INFO)
    jitcache.resolve_scales(glm5_mini)
    assert "jitcache INFO: outer scales for" in capfd.readouterr().err


def test_set_log_level(glm5_mini: Path, caplog, restore_logger) -> None:
    caplog.set_level(logging.DEBUG)  # the handler takes everything; the levels below decide
    jitcache.set_log_level("ERROR")
    assert restore_logger.level == logging.ERROR
    jitcache.resolve_scales(glm5_mini)
    assert jitcache_records(caplog) == []
    jitcache.set_log_level("OFF")
    jitcache.resolve_scales(glm5_mini)
    assert jitcache_records(caplog) == []
    jitcache.set_log_level(logging.INFO)
    jitcache.resolve_scales(glm5_mini)
    assert len(jitcache_records(caplog, logging.INFO)) == 1
    with pytest.raises(ValueError):
        jitcache.set_log_level("LOUD")
    with pytest.raises(TypeError):
        jitcache.set_log_level(True)


def test_level_mapping() -> None:
    assert _log.library_level(logging.DEBUG) == _lib.LOG_DEBUG
    assert _log.library_level(logging.NOTSET) == _lib.LOG_DEBUG
    assert _log.library_level(15) == _lib.LOG_INFO
    assert _log.library_level(logging.INFO) == _lib.LOG_INFO
    assert _log.library_level(logging.WARNING) == _lib.LOG_WARNING
    assert _log.library_level(logging.ERROR) == _lib.LOG_ERROR
    assert _log.library_level(logging.CRITICAL) == _lib.LOG_OFF
    assert _log.python_level("warn") == logging.WARNING
    assert _log.python_level("off") > logging.CRITICAL


def test_compile_worker_threads(glm5_mini: Path, cache_dir: Path, caplog) -> None:
    """jobs > 1: compile workers log from their own threads; every line arrives."""
    caplog.set_level(logging.DEBUG, logger="jitcache")
    with jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=4) as rt:
        model = rt.prepare(glm5_mini, rope="fp8", target=TARGET)
    assert model.stats.compiled == 4
    compiled = [r for r in jitcache_records(caplog, logging.DEBUG) if r.getMessage().startswith("compiled ")]
    assert len(compiled) == 4, [r.getMessage() for r in compiled]
    assert {r.getMessage().split()[1] for r in compiled} == {
        "writer/identity/b12x-368/sm_90",
        "writer/dynamic/b12x-368/sm_90",
        "gather/identity/b12x-368/sm_90",
        "gather/dynamic/b12x-368/sm_90",
    }
    main = threading.get_ident()
    assert any(r.thread != main for r in compiled), "no line came from a worker thread"


def test_python_threads_logging_at_once(glm5_mini: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="jitcache")

    def work() -> None:
        for _ in range(3):
            jitcache.resolve_scales(glm5_mini)

    assert in_threads(work, 8) == [None] * 8
    assert len([r for r in jitcache_records(caplog, logging.INFO) if "outer scales for" in r.getMessage()]) == 24


def test_raising_filter_never_unwinds_into_the_library(glm5_mini: Path, restore_logger, caplog) -> None:
    caplog.set_level(logging.INFO, logger="jitcache")

    def boom(record: logging.LogRecord) -> bool:
        raise RuntimeError("a broken filter")

    restore_logger.addFilter(boom)
    try:
        resolved = jitcache.resolve_scales(glm5_mini)
    finally:
        restore_logger.removeFilter(boom)
    assert resolved.num_layers == 79


def test_control_characters_arrive_escaped(glm5_mini: Path, tmp_path: Path, caplog) -> None:
    odd = tmp_path / "line\nbreak"
    shutil.copytree(glm5_mini, odd)
    caplog.set_level(logging.INFO, logger="jitcache")
    jitcache.resolve_scales(odd)
    lines = [r.getMessage() for r in jitcache_records(caplog, logging.INFO)]
    assert any("line\\x0abreak" in m for m in lines), lines
    assert not any("\n" in m for m in lines)


def test_log_level_from_environment(glm5_mini: Path, python_env: dict) -> None:
    code = (
        "import json, logging, sys, jitcache\n"
        "records = []\n"
        "class H(logging.Handler):\n"
        "    def emit(self, r): records.append(r.levelname)\n"
        "logging.getLogger('jitcache').addHandler(H())\n"
        "jitcache.resolve_scales(sys.argv[1])\n"
        "print(json.dumps([logging.getLogger('jitcache').level, records]))\n"
    )
    for value, level, expect_info in (("debug", logging.DEBUG, True), ("error", logging.ERROR, False)):
        env = dict(python_env, JITCACHE_LOG_LEVEL=value)
        proc = subprocess.run(
            [sys.executable, "-c", code, str(glm5_mini)], capture_output=True, text=True, env=env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        got_level, records = json.loads(proc.stdout.splitlines()[-1])
        assert got_level == level
        assert ("INFO" in records) == expect_info
