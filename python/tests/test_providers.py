"""Cache wheels as a user meets them: `jitcache pack` builds a real wheel; installed (here: its
files on sys.path, as site-packages holds them), its entry point makes Runtime.prepare()
on an empty cache compile nothing; a damaged or broken provider is a warning and a compile,
never a failed start. The fresh-environment test with every compiler hidden is
scripts/wheel_test.sh's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import jitcache
from jitcache import providers

from conftest import run_cli

TARGET = "sm_90"


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory, cli: Path, glm5_mini: Path) -> dict:
    """One cache wheel of glm5-mini for sm_90, made once for the module, and its JSON report."""
    pytest.importorskip("wheel", reason="jitcache pack makes the wheel with the `wheel` package")
    base = tmp_path_factory.mktemp("pack")
    cache = base / "cache"
    cache.mkdir(mode=0o700)
    env = dict(os.environ, VIRTUAL_ENV=sys.prefix)
    proc = run_cli(cli, "--cache-dir", str(cache), "pack", "--checkpoint", str(glm5_mini), "--arch", TARGET,
                   "--out", str(base / "dist"), "--json", env=env)
    report = json.loads(proc.stdout)
    report["base"] = base
    report["cache"] = cache
    return report


def install(wheel: Path, into: Path) -> Path:
    """The wheel's files unpacked as pip lays them out in site-packages."""
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(into)
    return into


def test_pack_builds_a_wheel_named_after_the_model_and_targets(packed: dict) -> None:
    wheel = Path(packed["wheel"])
    assert wheel.name == f"jitcache_cache_glm5_mini_sm90-{packed['version']}-py3-none-any.whl"
    assert wheel.is_file() and wheel.stat().st_size == packed["bytes"]
    assert packed["entries"] == 4 and packed["compiled"] == 4 and packed["cached"] == 0
    assert packed["targets"] == [TARGET] and packed["format"] == "b12x-432"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = f"jitcache_cache_glm5_mini_sm90-{packed['version']}.dist-info"
        # A real wheel: its RECORD lists every file with its hash (written by `wheel pack`).
        record = zf.read(f"{dist_info}/RECORD").decode()
        for name in names - {f"{dist_info}/RECORD"}:
            assert f"{name},sha256=" in record, name
        assert "Tag: py3-none-any" in zf.read(f"{dist_info}/WHEEL").decode()
        points = zf.read(f"{dist_info}/entry_points.txt").decode()
        assert "[jitcache.cache_providers]" in points
        assert "jitcache_cache_glm5_mini_sm90 = jitcache_cache_glm5_mini_sm90:provider" in points
        manifest = json.loads(zf.read("jitcache_cache_glm5_mini_sm90/provider/manifest.json"))
    assert manifest["format"] == "jitcache-provider" and manifest["version"] == 1
    assert manifest["checkpoint"] == "glm5-mini" and manifest["targets"] == [TARGET]
    assert sorted(e["key"] for e in manifest["entries"]) == sorted(v["key"] for v in packed["variants"])
    assert len(manifest["compiler_builds"]) == 1
    for entry in manifest["entries"]:
        assert f"jitcache_cache_glm5_mini_sm90/provider/bundles/{entry['key']}.bundle" in names


def test_packing_again_compiles_nothing(packed: dict, cli: Path, glm5_mini: Path) -> None:
    out = packed["base"] / "again"
    proc = run_cli(cli, "--cache-dir", str(packed["cache"]), "pack", "--checkpoint", str(glm5_mini), "--arch",
                   TARGET, "--out", str(out), "--package-version", "2.0.1", "--json",
                   env=dict(os.environ, VIRTUAL_ENV=sys.prefix))
    again = json.loads(proc.stdout)
    assert again["compiled"] == 0 and again["cached"] == 4
    assert Path(again["wheel"]).name == "jitcache_cache_glm5_mini_sm90-2.0.1-py3-none-any.whl"


def prepare_in_child(site: Path, cache: Path, checkpoint: Path, python_env: dict, extra: str = "") -> dict:
    """A fresh interpreter with `site` on its path (an installed cache wheel), preparing the
    checkpoint on an empty cache; returns what it saw."""
    code = textwrap.dedent(f"""
        import json, logging, jitcache
        from jitcache import providers
        seen = []
        logging.getLogger("jitcache").addHandler(type("H", (logging.Handler,), {{
            "emit": lambda self, r: seen.append(r.getMessage())}})())
        found = providers.installed()
        with jitcache.Runtime(cache_dir={str(cache)!r}, device="none"{extra}) as rt:
            before = [v.tier for v in rt.coverage({str(checkpoint)!r}, {TARGET!r})]
            model = rt.prepare({str(checkpoint)!r}, target={TARGET!r})
            after = [v.tier for v in rt.coverage({str(checkpoint)!r}, {TARGET!r})]
            s = model.stats
            print(json.dumps({{"providers": [p.name for p in found], "given": list(rt.providers),
                               "coverage_before": before, "coverage_after": after,
                               "compiled": s.compiled, "cached": s.cached, "from_provider": s.from_provider,
                               "kernels": [k.from_provider for k in model.kernels], "log": seen}}))
    """)
    env = dict(python_env)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_installed_cache_wheel_serves_prepare_with_no_compile(packed: dict, tmp_path: Path, glm5_mini: Path,
                                                                 python_env: dict) -> None:
    site = install(Path(packed["wheel"]), tmp_path / "site")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    seen = prepare_in_child(site, cache, glm5_mini, python_env)
    assert seen["providers"] == ["jitcache_cache_glm5_mini_sm90"]
    assert seen["compiled"] == 0 and seen["cached"] == 4 and seen["from_provider"] == 4
    assert seen["kernels"] == [True] * 4
    # Coverage says where each variant is before (the provider) and after (the local cache
    # it was copied into, found first in this process's memory).
    assert seen["coverage_before"] == ["provider"] * 4
    assert set(seen["coverage_after"]) <= {"memory", "local"} and len(seen["coverage_after"]) == 4
    # Copied into the local cache: the next start finds them there.
    again = prepare_in_child(site, cache, glm5_mini, python_env)
    assert again["compiled"] == 0 and again["from_provider"] == 0
    # Told not to use providers, a fresh cache compiles.
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    off = prepare_in_child(site, fresh, glm5_mini, python_env, extra=", providers=False")
    assert off["given"] == [] and off["compiled"] == 4


def test_a_damaged_bundle_is_a_warning_and_a_compile(packed: dict, tmp_path: Path, glm5_mini: Path,
                                                     python_env: dict) -> None:
    site = install(Path(packed["wheel"]), tmp_path / "site")
    bundles = sorted((site / "jitcache_cache_glm5_mini_sm90" / "provider" / "bundles").iterdir())
    data = bytearray(bundles[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    bundles[0].write_bytes(bytes(data))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    seen = prepare_in_child(site, cache, glm5_mini, python_env)
    assert seen["compiled"] == 1 and seen["from_provider"] == 3
    skipped = [line for line in seen["log"] if "skipping entry" in line]
    assert len(skipped) == 1 and bundles[0].stem in skipped[0], seen["log"]


def test_a_broken_entry_point_is_skipped_with_a_warning(tmp_path: Path, python_env: dict) -> None:
    dist = tmp_path / "jitcache_cache_broken-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jitcache_cache_broken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[jitcache.cache_providers]\nbroken = no_such_module_here:provider\n")
    (tmp_path / "returns_junk.py").write_text("def provider():\n    return 42\n")
    (dist / "entry_points.txt").write_text(
        "[jitcache.cache_providers]\nbroken = no_such_module_here:provider\njunk = returns_junk:provider\n"
    )
    code = textwrap.dedent("""
        import json, logging
        from jitcache import providers
        seen = []
        logging.getLogger("jitcache").addHandler(type("H", (logging.Handler,), {
            "emit": lambda self, r: seen.append(r.getMessage())})())
        print(json.dumps({"found": [p.name for p in providers.installed()], "log": seen}))
    """)
    env = dict(python_env)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["found"] == []
    assert any("'broken'" in line and "ModuleNotFoundError" in line for line in seen["log"]), seen["log"]
    assert any("'junk'" in line and "returned int" in line for line in seen["log"]), seen["log"]


def test_providers_argument_is_checked(cache_dir: Path) -> None:
    with pytest.raises(jitcache.InvalidArgumentError, match="holds ':'"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", providers=["/a:b"])
    with pytest.raises(jitcache.InvalidArgumentError, match="expected None, False or a list"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", providers=3)
    with pytest.raises(jitcache.InvalidArgumentError, match="empty directory"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", providers=[""])
    with jitcache.Runtime(cache_dir=cache_dir, device="none", providers=[cache_dir / "nowhere"]) as rt:
        assert rt.providers == (str(cache_dir / "nowhere"),)


def test_a_missing_provider_directory_is_not_an_error(cache_dir: Path, glm5_mini: Path, warm_cache: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    # A warm cache never asks its providers: nothing is read, nothing is said.
    with jitcache.Runtime(cache_dir=warm_cache, device="none", providers=[cache_dir / "nowhere"]) as rt:
        assert rt.prepare(glm5_mini, target=TARGET).stats.compiled == 0
    assert not [r for r in caplog.records if "provider" in r.getMessage()]


def test_pack_without_the_wheel_package_is_an_environment_error(cli: Path, glm5_mini: Path, tmp_path: Path) -> None:
    fake = tmp_path / "python-without-wheel"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    proc = run_cli(cli, "--cache-dir", str(cache), "pack", "--checkpoint", str(glm5_mini), "--arch", TARGET,
                   "--out", str(tmp_path / "dist"), "--python", str(fake), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "pip install wheel" in proc.stderr and str(fake) in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


@pytest.mark.parametrize(
    "args, named",
    [
        (["--package-version", "one"], "--package-version"),
        (["--package-version", "1.0."], "--package-version"),
        (["--name", "Bad-Name"], "--name"),
        (["--name", "9lives"], "--name"),
    ],
)
def test_pack_refuses_bad_names_and_versions(cli: Path, glm5_mini: Path, tmp_path: Path, args: list,
                                             named: str) -> None:
    proc = run_cli(cli, "--cache-dir", str(tmp_path / "cache"), "pack", "--checkpoint", str(glm5_mini), "--arch",
                   TARGET, "--out", str(tmp_path / "dist"), *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr


def test_installed_is_scanned_once_per_process_unless_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    scans = []
    real = providers._entry_points
    monkeypatch.setattr(providers, "_entry_points", lambda: scans.append(1) or real())
    monkeypatch.setattr(providers, "_installed", None)
    first = providers.installed()
    assert providers.installed() == first and len(scans) == 1
    assert providers.installed(refresh=True) == first and len(scans) == 2
    assert all(isinstance(p, providers.Provider) for p in first)
