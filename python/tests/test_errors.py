"""Every exception class, from a real trigger in the library where one exists."""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
from pathlib import Path

import pytest

import jitcache
from jitcache import _lib, errors
from conftest import TARGET

ALL = [
    (1, jitcache.InvalidArgumentError),
    (2, jitcache.InvalidInputError),
    (3, jitcache.JitcacheIOError),
    (4, jitcache.NotFoundError),
    (5, jitcache.UnsafeError),
    (6, jitcache.CompileError),
    (7, jitcache.DatabaseError),
    (8, jitcache.UnavailableError),
    (9, jitcache.InternalError),
    (10, jitcache.OutOfMemoryError),
]


def scales_file(glm5_mini: Path) -> dict:
    return json.loads((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_text())


def checkpoint_with_sidecar_ref(tmp_path: Path, glm5_mini: Path, name: str, ref: str) -> Path:
    """A copy of glm5-mini's config.json whose scales reference points at `ref`."""
    ckpt = tmp_path / name
    ckpt.mkdir()
    config = json.loads((glm5_mini / "config.json").read_text())
    config["nvfp4_ds_mla_outer_scales"]["file"] = ref
    (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


@pytest.mark.parametrize("status,cls", ALL)
def test_error_for_mapping(status: int, cls: type) -> None:
    err = jitcache.error_for(status, "the message")
    assert type(err) is cls and isinstance(err, jitcache.Error)
    assert err.status == status and str(err) == "the message" and err.message == "the message"
    # the names agree with the library's
    assert err.status_name == _lib.decode(_lib.lib.jitcache_status_name(status))
    assert not isinstance(err, (OSError, MemoryError, ValueError))


def test_error_for_unknown_status() -> None:
    err = jitcache.error_for(42, "odd")
    assert type(err) is jitcache.Error and err.status == 42
    assert err.status_name == "JITCACHE_ERROR_UNKNOWN"
    assert errors.STATUS_NAMES[0] == _lib.decode(_lib.lib.jitcache_status_name(0))


def test_check_uses_last_error(glm5_mini: Path) -> None:
    with pytest.raises(jitcache.NotFoundError) as info:
        jitcache.resolve_scales(glm5_mini / "missing")
    assert _lib.last_error() == info.value.message
    _lib.check(0)  # OK raises nothing


def test_invalid_argument_bad_layer(glm5_mini: Path, warm_cache: Path) -> None:
    with jitcache.Runtime(cache_dir=warm_cache, device="none") as rt:
        model = rt.prepare(glm5_mini, target=TARGET)
    for bad in (79, -1, 1000):
        with pytest.raises(jitcache.InvalidArgumentError, match=f"no layer {bad}") as info:
            model.layer(bad)
        assert info.value.status == 1 and info.value.status_name == "JITCACHE_ERROR_INVALID_ARGUMENT"
    with pytest.raises(jitcache.InvalidArgumentError, match="checkpoint"):
        jitcache.resolve_scales("")


def test_invalid_input_malformed_override(glm5_mini: Path, tmp_path: Path) -> None:
    nan_file = tmp_path / "nan.json"
    data = scales_file(glm5_mini)
    data["scales"][3] = math.nan
    nan_file.write_text(json.dumps(data))  # json writes NaN, which is not JSON
    with pytest.raises(jitcache.InvalidInputError, match="NaN") as info:
        jitcache.resolve_scales(glm5_mini, scales_override=nan_file)
    assert str(nan_file) in str(info.value)

    negative = tmp_path / "negative.json"
    data = scales_file(glm5_mini)
    data["scales"][5] = -1.0
    data.pop("max_abs")
    negative.write_text(json.dumps(data))
    with pytest.raises(jitcache.InvalidInputError, match="scales"):
        jitcache.resolve_scales(glm5_mini, scales_override=negative)

    short = tmp_path / "short.json"
    data = scales_file(glm5_mini)
    data["scales"] = data["scales"][:10]
    data["max_abs"] = data["max_abs"][:10]
    short.write_text(json.dumps(data))
    with pytest.raises(jitcache.InvalidInputError):
        jitcache.resolve_scales(glm5_mini, scales_override=short)

    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(jitcache.InvalidInputError):
        jitcache.resolve_scales(glm5_mini, scales_override=garbage)


def test_invalid_input_tampered_sidecar(glm5_mini: Path, tmp_path: Path) -> None:
    """The sidecar's bytes must match the sha256 config.json records."""
    ckpt = checkpoint_with_sidecar_ref(tmp_path, glm5_mini, "tampered", "nvfp4_ds_mla_outer_scales.json")
    data = scales_file(glm5_mini)
    data["scales"][0] *= 2
    data.pop("max_abs")
    (ckpt / "nvfp4_ds_mla_outer_scales.json").write_text(json.dumps(data))
    with pytest.raises(jitcache.InvalidInputError, match="sha256"):
        jitcache.resolve_scales(ckpt)


def test_not_found(glm5_mini: Path, tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(jitcache.NotFoundError, match="does not exist"):
        jitcache.resolve_scales(tmp_path / "no-such-checkpoint")
    with pytest.raises(jitcache.NotFoundError):
        jitcache.resolve_scales(glm5_mini, scales_override=tmp_path / "no-such.json")
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(jitcache.NotFoundError):
            rt.prepare(tmp_path / "no-such-checkpoint", target=TARGET)


def test_unsafe_sidecar_leaves_checkpoint(glm5_mini: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.json").write_bytes((glm5_mini / "nvfp4_ds_mla_outer_scales.json").read_bytes())
    traversal = checkpoint_with_sidecar_ref(tmp_path, glm5_mini, "traversal", "../outside.json")
    with pytest.raises(jitcache.UnsafeError, match="leaves the checkpoint"):
        jitcache.resolve_scales(traversal)
    linked = checkpoint_with_sidecar_ref(tmp_path, glm5_mini, "linked", "nvfp4_ds_mla_outer_scales.json")
    (linked / "nvfp4_ds_mla_outer_scales.json").symlink_to(tmp_path / "outside.json")
    with pytest.raises(jitcache.UnsafeError, match="symlink"):
        jitcache.resolve_scales(linked)


def test_unsafe_cache_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "world-writable"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(jitcache.UnsafeError, match="world-writable"):
        jitcache.Runtime(cache_dir=shared, device="none", require_cache=True)
    # optional: memory-only with the reason and one warning naming the directory, never an error
    caplog.set_level(logging.WARNING, logger="jitcache")
    with jitcache.Runtime(cache_dir=shared, device="none", require_cache=False) as rt:
        assert rt.cache.mode == "memory-only"
        assert "world-writable" in rt.cache.reason
    warnings = [r.getMessage() for r in caplog.records if r.name == "jitcache" and r.levelno == logging.WARNING]
    assert any(str(shared) in m and "memory-only" in m for m in warnings), warnings
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(jitcache.UnsafeError, match="owned by uid 65534"):
            jitcache.Runtime(cache_dir=foreign, device="none", require_cache=True)


def test_require_cache_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "world-writable"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("JITCACHE_REQUIRE_CACHE", "1")
    with pytest.raises(jitcache.UnsafeError):
        jitcache.Runtime(cache_dir=shared, device="none")
    monkeypatch.setenv("JITCACHE_REQUIRE_CACHE", "maybe")
    with pytest.raises(jitcache.InvalidInputError, match="JITCACHE_REQUIRE_CACHE"):
        jitcache.Runtime(cache_dir=shared, device="none")


def test_io_error(tmp_path: Path) -> None:
    # the OS refuses the name (ENAMETOOLONG) when the cache directory is created
    with pytest.raises(jitcache.JitcacheIOError, match="too long"):
        jitcache.Runtime(cache_dir=tmp_path / ("x" * 300), device="none", require_cache=True)


def test_database_error(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign-db"
    foreign.mkdir(mode=0o700)
    with sqlite3.connect(foreign / "index.db") as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(jitcache.DatabaseError, match="schema_version"):
        jitcache.Runtime(cache_dir=foreign, device="none", require_cache=True)
    newer = tmp_path / "newer-db"
    newer.mkdir(mode=0o700)
    with sqlite3.connect(newer / "index.db") as db:
        db.execute("CREATE TABLE schema_version (version INTEGER)")
        db.execute("INSERT INTO schema_version VALUES (999)")
    with pytest.raises(jitcache.DatabaseError, match="newer"):
        jitcache.Runtime(cache_dir=newer, device="none", require_cache=True)


def test_unavailable(glm5_mini: Path, cache_dir: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(jitcache.UnavailableError, match="no target"):
            rt.prepare(glm5_mini)  # no target and no device to take it from


def test_errors_are_catchable_as_base(glm5_mini: Path) -> None:
    with pytest.raises(jitcache.Error) as info:
        jitcache.resolve_scales(glm5_mini / "nothing-here")
    assert isinstance(info.value, jitcache.NotFoundError)
