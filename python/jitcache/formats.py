"""The NVFP4 MLA record formats by name (docs/record-formats.md); no numpy needed.

Each serving engine reads its own record under the name ``nvfp4_ds_mla``:

===================  =====  ====================================================
format               bytes  read by
===================  =====  ====================================================
b12x-432             432    b12x sparse MLA, bf16 RoPE (the RoPE name "bf16")
b12x-368             368    b12x sparse MLA, fp8 RoPE ("fp8"); also per-token scales
b12x-304             304    b12x GLM_NEXT (GLM-5.3 Flash): no RoPE, per-token only
flashmla-352         352    vLLM's FlashMLASparseBackend (``kv_cache_dtype="nvfp4_ds_mla"``)
flashinfer-glm-416   416    FlashInfer's ``SparseMLAGlmNvfp4Sm120Wrapper`` (SM120), with
                            the layer's s_l as its ``kv_global_scale``
                            (:func:`jitcache.torch.kv_global_scale`)
flashinfer-dsv4-384  384    FlashInfer's SM120 sparse MLA, DeepSeek-V4 NVFP4 cache
                            (page-major)
flashmla-v41-288     288    FlashInfer's SM120 DeepSeek-V4.1 V41_FP4 extra cache
                            (page-major)
===================  =====  ====================================================

The page-major records (:data:`PAGE_SIZE`) split each record between its page's data
part and its footer: a page of 64 slots holds every slot's data part, then every footer.
Their writer takes one row of 512 values per token (:func:`input_width`: 448 NoPE + 64
RoPE, or 512 dims) and no k_pe, and only the identity latent scale.

A record is a format and the latent scale its tokens are written with (:data:`RECORDS`).
Every format has one record of its own name, except b12x-368, which holds two that read
as noise for each other: "b12x-368" (the per-layer scale s_l) and "b12x-368-per-token"
(each token's own scale). The torch ops' and jitcache.vllm's ``format`` name the record.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "FORMATS",
    "RECORDS",
    "ROPE_ALIASES",
    "RECORD_BYTES",
    "LATENT_DIM",
    "ROPE_DIM",
    "ROW_DIM",
    "record_format",
    "record_name",
    "record_latent_scale",
    "row_width",
    "has_rope",
    "latent_scales",
    "PAGE_SIZE",
    "page_size",
]

FORMATS = (
    "b12x-432",
    "b12x-368",
    "b12x-304",
    "flashmla-352",
    "flashinfer-glm-416",
    "flashinfer-dsv4-384",
    "flashmla-v41-288",
)
# The RoPE names of the older API and the CLI's --rope: the first two formats.
ROPE_ALIASES = {"bf16": "b12x-432", "fp8": "b12x-368"}
RECORD_BYTES = {
    "bf16": 432,
    "fp8": 368,
    "b12x-432": 432,
    "b12x-368": 368,
    "b12x-368-per-token": 368,
    "b12x-304": 304,
    "flashmla-352": 352,
    "flashinfer-glm-416": 416,
    "flashinfer-dsv4-384": 384,
    "flashmla-v41-288": 288,
}
# Slots per page of the page-major formats (the others have one record per slot).
PAGE_SIZE = {"flashinfer-dsv4-384": 64, "flashmla-v41-288": 64}
LATENT_DIM = 512
ROPE_DIM = 64
ROW_DIM = LATENT_DIM + ROPE_DIM
# The records by name: (format, latent scale), "per-layer" (s_l: identity or dynamic by the
# layer's scale) or "per-token". A format's own name is its per-layer record, or its only one.
RECORDS = {
    "b12x-432": ("b12x-432", "per-layer"),
    "b12x-368": ("b12x-368", "per-layer"),
    "b12x-368-per-token": ("b12x-368", "per-token"),
    "b12x-304": ("b12x-304", "per-token"),
    "flashmla-352": ("flashmla-352", "per-layer"),
    "flashinfer-glm-416": ("flashinfer-glm-416", "per-layer"),
    "flashinfer-dsv4-384": ("flashinfer-dsv4-384", "per-layer"),
    "flashmla-v41-288": ("flashmla-v41-288", "per-layer"),
}
_PER_TOKEN_RECORDS = {fmt: name for name, (fmt, latent) in RECORDS.items() if latent == "per-token"}
# The latent scales each format's records are written with (the library's table,
# kernel_templates/variant_dimensions.hpp); "identity" and "dynamic" are the per-layer scale
# s_l at 1.0 and otherwise.
_LATENT_SCALES = {
    "b12x-432": ("identity", "dynamic"),
    "b12x-368": ("identity", "dynamic", "per-token"),
    "b12x-304": ("per-token",),
    "flashmla-352": ("identity", "dynamic"),
    "flashinfer-glm-416": ("identity", "dynamic"),
    "flashinfer-dsv4-384": ("identity",),
    "flashmla-v41-288": ("identity",),
}


def record_format(format: Optional[str] = None, rope: Optional[str] = None) -> str:
    """The format a call means: ``format`` (a name of :data:`FORMATS`, "bf16" / "fp8", or a
    record name of :data:`RECORDS`, "b12x-368-per-token" meaning b12x-368), else ``rope``
    ("bf16" -> "b12x-432", "fp8" -> "b12x-368"), else "b12x-432". Both given must name the
    same format. ValueError otherwise, naming the argument. The latent scale a record name
    fixes is :func:`record_latent_scale`'s."""
    if rope is not None and rope not in ROPE_ALIASES:
        raise ValueError(f"rope: expected 'bf16' or 'fp8', got {rope!r}")
    if format is None:
        return ROPE_ALIASES[rope] if rope is not None else FORMATS[0]
    name = ROPE_ALIASES.get(format, format) if isinstance(format, str) else format
    if isinstance(name, str) and name in RECORDS:
        name = RECORDS[name][0]
    if name not in FORMATS:
        raise ValueError(
            f"format: expected one of {', '.join(RECORDS)} (or 'bf16', 'fp8'), got {format!r}"
        )
    if rope is not None and ROPE_ALIASES[rope] != name:
        raise ValueError(f"format {format!r} and rope {rope!r} name different records; give one of them")
    return name


def record_latent_scale(format: Optional[str], latent_scale: Optional[str] = None) -> Optional[str]:
    """The latent scale a call means: "per-token" for the name of a per-token record that is
    not a format's own ("b12x-368-per-token"; ``latent_scale``, when given, must then be
    "per-token"), else ``latent_scale`` as given (None: the format's default). ValueError
    for a contradiction, naming both."""
    if format is None or format in FORMATS or RECORDS.get(format, ("", ""))[1] != "per-token":
        return latent_scale
    if latent_scale in (None, "per-token"):
        return "per-token"
    raise ValueError(
        f"latent_scale: {latent_scale!r}, but format {format!r} names per-token records "
        f"(format {RECORDS[format][0]!r} names the per-layer ones)"
    )


def record_name(format: str, latent_scale: Optional[str] = None) -> str:
    """The name of the record ``format`` is written with under ``latent_scale``: "per-token",
    or "per-layer" ("identity" and "dynamic" are its two kernels); None: the format's own
    record. The format's own name, or "b12x-368-per-token". ValueError for a combination
    that has no record, naming both."""
    if latent_scale not in (None, "per-layer", "identity", "dynamic", "per-token"):
        raise ValueError(f"latent_scale: expected 'per-layer' or 'per-token', got {latent_scale!r}")
    latent = record_latent_scale(format, latent_scale)
    fmt = record_format(format)
    if latent is None:
        return fmt
    kind = "per-token" if latent == "per-token" else "per-layer"
    name = _PER_TOKEN_RECORDS.get(fmt) if kind == "per-token" else fmt
    if name is None or RECORDS[name][1] != kind:
        raise ValueError(f"latent_scale: {fmt} has no {kind} records (format {format!r}, latent_scale {latent_scale!r})")
    return name


def has_rope(format: str) -> bool:
    """Whether the writer takes a separate k_pe of 64 RoPE values (all but b12x-304 and the
    page-major formats, whose RoPE, if any, is in the input row)."""
    fmt = record_format(format)
    return fmt != "b12x-304" and fmt not in PAGE_SIZE


def row_width(format: str) -> int:
    """Values per gathered row: 576, or 512 for b12x-304 and the page-major formats."""
    return ROW_DIM if has_rope(format) else LATENT_DIM


def page_size(format: str) -> int:
    """Slots per page: 64 for a page-major format, 1 for one record per slot."""
    return PAGE_SIZE.get(record_format(format), 1)


def latent_scales(format: str) -> tuple[str, ...]:
    """The latent scales the format's records are written with (a record name: its own)."""
    if format in RECORDS and RECORDS[format][1] == "per-token":
        return ("per-token",)
    return _LATENT_SCALES[record_format(format)]
