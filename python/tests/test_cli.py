"""`python -m jitcache` runs the CLI: output, and exit codes passed through unchanged."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import jitcache


def run_module(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jitcache", *args], capture_output=True, text=True, env=env, timeout=60, **kw
    )


def test_version(python_env: dict, cli: Path) -> None:
    env = dict(python_env, JITCACHE_CLI=str(cli))
    proc = run_module(["--version"], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == jitcache.__version__


def test_subcommand_output(python_env: dict, cli: Path, glm5_mini: Path) -> None:
    env = dict(python_env, JITCACHE_CLI=str(cli))
    proc = run_module(["scales", "show", "--checkpoint", str(glm5_mini), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["layers"]) == 79
    assert "outer scales for" in proc.stderr  # the CLI's own log line on its stderr
    helped = run_module(["kv", "quantize", "--help"], env)
    assert helped.returncode == 0 and "--scale" in helped.stdout and "--rope" in helped.stdout


def test_exit_codes_propagate(python_env: dict, cli: Path, glm5_mini: Path, tmp_path: Path) -> None:
    env = dict(python_env, JITCACHE_CLI=str(cli))
    bad = tmp_path / "nan.json"
    data = json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())
    data["scales"][0] = math.nan
    bad.write_text(json.dumps(data))
    cases = [
        (["scales", "show", "--checkpoint", str(glm5_mini), "--scales", str(bad)], 1),  # invalid input
        (["scales", "show", "--checkpoint", str(tmp_path / "missing")], 2),  # environment error
        (["--no-such-option"], 2),  # usage error
        (["scales", "validate", str(glm5_mini / "nvfp4_ds_mla_outer_scales.json")], 0),
    ]
    for args, code in cases:
        direct = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=60)
        via = run_module(args, env)
        assert direct.returncode == code, (args, direct.stderr)
        assert via.returncode == code, (args, via.stderr)
        assert via.stdout == direct.stdout


def test_cwd_and_argument_passing(python_env: dict, cli: Path, glm5_mini: Path) -> None:
    """Relative paths resolve against the caller's directory; arguments pass verbatim."""
    env = dict(python_env, JITCACHE_CLI=str(cli))
    proc = run_module(["scales", "show", "--checkpoint", glm5_mini.name, "--json"], env, cwd=glm5_mini.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["checkpoint"] == glm5_mini.name


def test_missing_cli(python_env: dict, tmp_path: Path) -> None:
    env = dict(python_env, JITCACHE_CLI=str(tmp_path / "nope" / "jitcache"))
    proc = run_module(["--version"], env)
    assert proc.returncode == 2
    assert "JITCACHE_CLI" in proc.stderr and str(tmp_path / "nope") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_console_entry_point(python_env: dict, cli: Path) -> None:
    env = dict(python_env, JITCACHE_CLI=str(cli))
    code = "import sys; from jitcache.__main__ import main; sys.exit(main(['--version']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == jitcache.__version__


def test_installed_console_script(python_env: dict) -> None:
    script = Path(sys.executable).parent / "jitcache"
    bundled = Path(jitcache.__file__).resolve().parent / "bin" / "jitcache"
    if not (script.is_file() and bundled.is_file()):
        pytest.skip("jitcache is not pip-installed in this environment")
    env = dict(python_env)
    env.pop("JITCACHE_CLI", None)
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == jitcache.__version__


def test_the_cli_is_told_the_interpreters_environment(python_env: dict, tmp_path: Path) -> None:
    """From a virtual environment that is not activated, the CLI gets VIRTUAL_ENV, so it
    searches the same NVIDIA pip packages for NVRTC as the library in this interpreter;
    an activated one's VIRTUAL_ENV is left as it is."""
    probe = tmp_path / "print-venv"
    probe.write_text('#!/bin/sh\nprintf "%s" "${VIRTUAL_ENV-unset}"\n')
    probe.chmod(0o755)
    env = {k: v for k, v in python_env.items() if k != "VIRTUAL_ENV"}
    env["JITCACHE_CLI"] = str(probe)
    proc = run_module([], env)
    assert proc.returncode == 0, proc.stderr
    in_venv = sys.prefix != sys.base_prefix
    assert proc.stdout == (sys.prefix if in_venv else "unset")
    env["VIRTUAL_ENV"] = str(tmp_path / "activated")
    proc = run_module([], env)
    assert proc.stdout == str(tmp_path / "activated")
