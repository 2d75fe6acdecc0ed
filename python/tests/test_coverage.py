"""Runtime.coverage and Runtime(no_compile=True): which tier holds each variant a checkpoint
needs, and a runtime that refuses to compile a miss (UnavailableError naming every missing
variant and the tiers it was looked up in)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import jitcache


def test_coverage_of_a_cold_cache_names_every_variant_and_no_tier(cache_dir: Path, glm5_mini: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        variants = rt.coverage(glm5_mini, "sm_90")
    assert variants, "glm5-mini needs kernels"
    assert all(isinstance(v, jitcache.VariantCoverage) for v in variants)
    assert all(v.tier is None and v.tier_name is None and not v.covered for v in variants)
    assert {v.kernel for v in variants} == {"writer", "gather"}
    assert all(v.target == "sm_90" and v.format == "b12x-432" and len(v.key) == 32 for v in variants)
    assert all(v.label == f"{v.kernel}/{v.latent_scale}/{v.format}/{v.target}" for v in variants)
    layers = {layer for v in variants for layer in v.layers}
    assert layers == set(range(len(layers))), "every layer uses some variant"


def test_no_compile_refuses_a_cold_cache_naming_every_missing_variant(cache_dir: Path, glm5_mini: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        labels = [v.label for v in rt.coverage(glm5_mini, "sm_90")]
    with jitcache.Runtime(cache_dir=cache_dir, device="none", no_compile=True) as rt:
        with pytest.raises(jitcache.UnavailableError) as raised:
            rt.prepare(glm5_mini, target="sm_90")
        message = str(raised.value)
        assert "no-compile mode" in message
        assert "looked up in memory, disk (" in message
        for label in labels:
            assert label in message
        assert all(v.tier is None for v in rt.coverage(glm5_mini, "sm_90")), "nothing was compiled or stored"


def test_no_compile_from_the_environment_and_overridden_by_the_option(
    cache_dir: Path, glm5_mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JITCACHE_NO_COMPILE", "1")
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(jitcache.UnavailableError, match="no-compile mode"):
            rt.prepare(glm5_mini, target="sm_90", format="b12x-304")
    monkeypatch.setenv("JITCACHE_NO_COMPILE", "maybe")
    with pytest.raises(jitcache.InvalidInputError, match="JITCACHE_NO_COMPILE"):
        jitcache.Runtime(cache_dir=cache_dir, device="none")
    with pytest.raises(TypeError, match="no_compile"):
        jitcache.Runtime(cache_dir=cache_dir, device="none", no_compile="yes")  # type: ignore[arg-type]


def test_a_warm_cache_is_covered_and_served_without_compiling(
    warm_cache: Path, tmp_path: Path, glm5_mini: Path
) -> None:
    cache = tmp_path / "copy"
    shutil.copytree(warm_cache, cache)
    cache.chmod(0o700)
    with jitcache.Runtime(cache_dir=cache, device="none") as rt:
        variants = rt.coverage(glm5_mini, "sm_90")
    assert variants and all(v.tier == "local" and v.tier_name == "disk" for v in variants)
    with jitcache.Runtime(cache_dir=cache, device="none", no_compile=True) as rt:
        model = rt.prepare(glm5_mini, target="sm_90")
        assert model.stats.compiled == 0
        assert model.stats.cached == len(variants)
        # What prepare just read is now in this process's memory, the first tier asked.
        assert all(v.tier == "memory" for v in rt.coverage(glm5_mini, "sm_90"))


def test_coverage_refuses_what_prepare_refuses(cache_dir: Path, tmp_path: Path) -> None:
    with jitcache.Runtime(cache_dir=cache_dir, device="none") as rt:
        with pytest.raises(jitcache.Error):
            rt.coverage(tmp_path / "no-such-checkpoint", "sm_90")
        with pytest.raises(jitcache.UnavailableError, match="no target"):
            rt.coverage(tmp_path, None)
