"""The NVFP4 MLA record formats by name (docs/record-formats.md); no numpy needed.

Each serving engine reads its own record under the name ``nvfp4_ds_mla``:

=============  =====  =========================================================
format         bytes  read by
=============  =====  =========================================================
b12x-432       432    b12x sparse MLA, bf16 RoPE (the RoPE name "bf16")
b12x-368       368    b12x sparse MLA, fp8 RoPE ("fp8"); also per-token scales
b12x-304       304    b12x GLM_NEXT (GLM-5.3 Flash): no RoPE, per-token only
flashmla-352   352    vLLM's FlashMLASparseBackend (``kv_cache_dtype="nvfp4_ds_mla"``)
=============  =====  =========================================================
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "FORMATS",
    "ROPE_ALIASES",
    "RECORD_BYTES",
    "LATENT_DIM",
    "ROPE_DIM",
    "ROW_DIM",
    "record_format",
    "row_width",
    "has_rope",
    "latent_scales",
]

FORMATS = ("b12x-432", "b12x-368", "b12x-304", "flashmla-352")
# The RoPE names of the older API and the CLI's --rope: the first two formats.
ROPE_ALIASES = {"bf16": "b12x-432", "fp8": "b12x-368"}
RECORD_BYTES = {
    "bf16": 432,
    "fp8": 368,
    "b12x-432": 432,
    "b12x-368": 368,
    "b12x-304": 304,
    "flashmla-352": 352,
}
LATENT_DIM = 512
ROPE_DIM = 64
ROW_DIM = LATENT_DIM + ROPE_DIM
# The latent scales each format's records are written with (the library's table,
# kernel_templates/variant_dimensions.hpp); "identity" and "dynamic" are the per-layer scale
# s_l at 1.0 and otherwise.
_LATENT_SCALES = {
    "b12x-432": ("identity", "dynamic"),
    "b12x-368": ("identity", "dynamic", "per-token"),
    "b12x-304": ("per-token",),
    "flashmla-352": ("identity", "dynamic"),
}


def record_format(format: Optional[str] = None, rope: Optional[str] = None) -> str:
    """The format a call means: ``format`` (a name of :data:`FORMATS`, or "bf16" / "fp8"),
    else ``rope`` ("bf16" -> "b12x-432", "fp8" -> "b12x-368"), else "b12x-432". Both given
    must name the same format. ValueError otherwise, naming the argument."""
    if rope is not None and rope not in ROPE_ALIASES:
        raise ValueError(f"rope: expected 'bf16' or 'fp8', got {rope!r}")
    if format is None:
        return ROPE_ALIASES[rope] if rope is not None else FORMATS[0]
    name = ROPE_ALIASES.get(format, format) if isinstance(format, str) else format
    if name not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)} (or 'bf16', 'fp8'), got {format!r}")
    if rope is not None and ROPE_ALIASES[rope] != name:
        raise ValueError(f"format {format!r} and rope {rope!r} name different records; give one of them")
    return name


def has_rope(format: str) -> bool:
    """Whether the format's records hold the 64 RoPE values (all but b12x-304)."""
    return record_format(format) != "b12x-304"


def row_width(format: str) -> int:
    """Values per gathered row: 576, or 512 for a format without RoPE (b12x-304)."""
    return ROW_DIM if has_rope(format) else LATENT_DIM


def latent_scales(format: str) -> tuple[str, ...]:
    """The latent scales the format's records are written with."""
    return _LATENT_SCALES[record_format(format)]
