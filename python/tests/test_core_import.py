"""Importing jitcache: the library lookup, the ABI check, and no numpy/torch needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jitcache
from jitcache import _lib

BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('numpy', 'torch'):\n"
    "            raise ModuleNotFoundError(f'blocked: {name}')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def child(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_check_abi() -> None:
    _lib.check_abi("/x/libjitcache.so.1", 1)
    with pytest.raises(ImportError) as info:
        _lib.check_abi("/x/libjitcache.so.1", 2)
    text = str(info.value)
    assert "/x/libjitcache.so.1" in text and "version 2" in text and "version 1" in text


def test_import_needs_no_numpy(python_env: dict, glm5_mini: Path) -> None:
    code = BLOCK + (
        "import jitcache\n"
        "assert 'numpy' not in sys.modules and 'torch' not in sys.modules\n"
        f"assert jitcache.resolve_scales({str(glm5_mini)!r}).num_layers == 79\n"
        "try:\n"
        "    import jitcache.host\n"
        "except ImportError as e:\n"
        "    print('host needs numpy:', e)\n"
    )
    proc = child(code, python_env)
    assert proc.returncode == 0, proc.stderr
    assert "host needs numpy" in proc.stdout


def test_missing_library(python_env: dict, tmp_path: Path) -> None:
    env = dict(python_env, JITCACHE_LIBRARY=str(tmp_path / "libjitcache.so.1"))
    proc = child("import jitcache", env)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and str(tmp_path / "libjitcache.so.1") in proc.stderr
    assert "does not exist" in proc.stderr


def test_not_a_library(python_env: dict, tmp_path: Path) -> None:
    fake = tmp_path / "libjitcache.so.1"
    fake.write_text("not an ELF file")
    proc = child("import jitcache", dict(python_env, JITCACHE_LIBRARY=str(fake)))
    assert proc.returncode != 0 and "cannot load" in proc.stderr and str(fake) in proc.stderr


def build_fake(tmp_path: Path, source: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build a fake library with")
    (tmp_path / "fake.c").write_text(source)
    out = tmp_path / "libfake.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(tmp_path / "fake.c")], check=True, timeout=60)
    return out


def test_abi_mismatch_refused(python_env: dict, tmp_path: Path) -> None:
    fake = build_fake(tmp_path, "unsigned jitcache_abi_version(void) { return 2; }\n")
    proc = child("import jitcache", dict(python_env, JITCACHE_LIBRARY=str(fake)))
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    assert str(fake) in proc.stderr and "C ABI version 2" in proc.stderr and "ABI version 1" in proc.stderr


def test_older_library_missing_functions_refused(python_env: dict, tmp_path: Path) -> None:
    fake = build_fake(tmp_path, "unsigned jitcache_abi_version(void) { return 1; }\n")
    proc = child("import jitcache", dict(python_env, JITCACHE_LIBRARY=str(fake)))
    assert proc.returncode != 0 and "lacks" in proc.stderr and "jitcache_prepare_with" in proc.stderr


def test_not_jitcache(python_env: dict, tmp_path: Path) -> None:
    fake = build_fake(tmp_path, "int something_else(void) { return 0; }\n")
    proc = child("import jitcache", dict(python_env, JITCACHE_LIBRARY=str(fake)))
    assert proc.returncode != 0 and "not libjitcache" in proc.stderr


def test_library_path_reported() -> None:
    path = Path(jitcache.library_path())
    assert path.is_absolute() and path.exists()
    given = os.environ.get("JITCACHE_LIBRARY", "").strip()
    if given:
        assert path == Path(os.path.abspath(given))
    else:
        assert path.name == "libjitcache.so.1" and path.parent.name == "lib"
