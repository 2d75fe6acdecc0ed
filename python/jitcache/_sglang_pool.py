"""SGLang's MLA token-to-KV pool holding jitcache records (imports SGLang; see jitcache.sglang).

:class:`NvfpMLATokenToKVPool` is SGLang's ``MLATokenToKVPool`` with other buffers: per layer
one uint8 tensor [size + page_size, record_bytes] of the prepared Model's records. Writes
(``set_mla_kv_buffer``, ``set_kv_buffer``) quantize through ``jitcache::nvfp4_mla_write``
with the layer's binding; reads give the attention bf16, as SGLang's ``fp4_mx_block16`` MLA
pool (``MLATokenToKVPoolFP4``) does: ``get_key_buffer`` gathers the whole layer,
``get_mla_kv_buffer`` only the rows asked for, both through ``jitcache::nvfp4_mla_gather``.
Moves and host copies (``move_kv_cache``, ``get_cpu_copy``, ``load_cpu_copy``) are SGLang's
own: they copy rows, and a record is a row.

Slot 0 is SGLang's dummy slot (padded tokens write there): its writes are skipped, so that
several padded tokens never write one record.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import os

import torch
from sglang.srt.constants import GPU_MEMORY_TYPE_KV_CACHE
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, unwrap_write_loc
from sglang.srt.utils.async_probe import maybe_detect_oob

from . import torch as jt
from .formats import LATENT_DIM, ROPE_DIM, ROW_DIM
from .runtime import Model, resolve_scales
from .sglang import FORMATS, KV_CACHE_DTYPE
from ._types import PathArg



class ScaleMismatchError(ValueError):
    """The prepared Model's kernel for a layer is not the one the checkpoint's scale needs
    (the identity kernel, compiled for scale 1.0, for a calibrated layer, or the other way)."""


def check_scales(model: Model, checkpoint: PathArg, layers: range, scales_override: Optional[PathArg] = None,
                 revision: Optional[str] = None) -> None:
    """The identity guard: each layer in ``layers`` must be bound to the kernel and scale
    that jitcache's resolver gives the checkpoint (same precedence as prepare()). Raises
    :class:`ScaleMismatchError` naming the first layer that is not."""
    resolved = resolve_scales(checkpoint, scales_override, revision)
    if resolved.num_layers != model.num_layers:
        raise ScaleMismatchError(
            f"checkpoint {os.fspath(checkpoint)}: {resolved.num_layers} layers, but the prepared model "
            f"has {model.num_layers} ({model.checkpoint})"
        )
    for index in layers:
        bound, wanted = model.layer(index), resolved.layers[index]
        if bound.mode != wanted.mode or bound.scale != wanted.scale:
            raise ScaleMismatchError(
                f"layer {index}: the prepared model binds the {bound.mode} kernel with scale "
                f"{bound.scale!r}, but the checkpoint's scale is {wanted.scale!r} ({wanted.mode}, "
                f"{wanted.source}); prepare the model from the checkpoint SGLang serves"
            )


class NvfpMLATokenToKVPool(MLATokenToKVPool):
    """SGLang's MLA pool for ``--kv-cache-dtype nvfp4_ds_mla``.

    The arguments are ``MLATokenToKVPool``'s (``dtype`` is what the attention reads and
    must be bf16; ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64), plus ``jitcache_model``,
    a prepared :class:`jitcache.Model` with a per-layer format (jitcache.sglang.FORMATS)
    covering the layers [start_layer, start_layer + layer_num), and ``checkpoint`` (with
    ``scales_override`` / ``revision``): when given, every layer's binding is checked
    against the checkpoint's scales first (:func:`check_scales`)."""

    def __init__(
        self,
        size: int,
        page_size: int,
        dtype: torch.dtype,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        layer_num: int,
        device: str,
        enable_memory_saver: bool,
        start_layer: Optional[int] = None,
        end_layer: Optional[int] = None,
        *,
        jitcache_model: Model,
        checkpoint: Optional[PathArg] = None,
        scales_override: Optional[PathArg] = None,
        revision: Optional[str] = None,
    ) -> None:
        if not isinstance(jitcache_model, Model):
            raise TypeError(f"jitcache_model: expected a jitcache.Model, got {type(jitcache_model).__name__}")
        if jitcache_model.record not in FORMATS:
            raise ValueError(
                f"jitcache_model: its records are {jitcache_model.record}; {KV_CACHE_DTYPE} in SGLang "
                f"takes a per-layer format ({', '.join(FORMATS)})"
            )
        if dtype != torch.bfloat16:
            raise ValueError(f"dtype: jitcache's gather writes torch.bfloat16, the pool was asked for {dtype}")
        if kv_lora_rank != LATENT_DIM or qk_rope_head_dim != ROPE_DIM:
            raise ValueError(
                f"kv_lora_rank / qk_rope_head_dim: jitcache's records hold {LATENT_DIM} latent and "
                f"{ROPE_DIM} RoPE values per token, the model has {kv_lora_rank} / {qk_rope_head_dim}"
            )
        first = 0 if start_layer is None else start_layer
        if first < 0 or layer_num < 1 or first + layer_num > jitcache_model.num_layers:
            raise ValueError(
                f"layer_num: the pool's layers {first}..{first + layer_num - 1} are not all layers of the "
                f"prepared model (0..{jitcache_model.num_layers - 1})"
            )
        if checkpoint is not None:
            check_scales(jitcache_model, checkpoint, range(first, first + layer_num), scales_override, revision)
        self.jitcache_model = jitcache_model
        self.jitcache_format = jitcache_model.record
        self.record_bytes = jitcache_model.record_bytes
        jt.model_id(jitcache_model)  # registered now, not at the first launch
        super().__init__(
            size,
            page_size,
            dtype,
            kv_lora_rank,
            qk_rope_head_dim,
            layer_num,
            device,
            enable_memory_saver,
            start_layer,
            end_layer,
        )

    # ---- buffers ----------------------------------------------------------------------

    def _create_buffers(self) -> None:
        self.store_dtype = torch.uint8
        with self.memory_saver_adapter.region(GPU_MEMORY_TYPE_KV_CACHE):
            with torch.cuda.use_mem_pool(self.custom_mem_pool) if self.custom_mem_pool else nullcontext():
                # Slot 0 (SGLang's dummy slot for padded tokens) included, as upstream.
                self.kv_buffer = [
                    torch.zeros((self.size + self.page_size, self.record_bytes), dtype=torch.uint8, device=self.device)
                    for _ in range(self.layer_num)
                ]
        self._all_slots: Optional[torch.Tensor] = None

    def _buffer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id - self.start_layer]

    def _gather(self, layer_id: int, slots: torch.Tensor) -> torch.Tensor:
        out = torch.empty((slots.shape[0], ROW_DIM), dtype=torch.bfloat16, device=self.device)
        jt.gather(self.jitcache_model, layer_id, self._buffer(layer_id), slots, out)
        return out

    # ---- reads: bf16 for the attention ------------------------------------------------

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """The whole layer as bf16 [size + page_size, 1, 576] (latent then RoPE), gathered
        anew on each call, as ``MLATokenToKVPoolFP4.get_key_buffer`` dequantizes its layer."""
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(layer_id - self.start_layer)
        if self._all_slots is None:
            self._all_slots = torch.arange(self.size + self.page_size, dtype=torch.int32, device=self.device)
        return self._gather(layer_id, self._all_slots).unsqueeze(1)

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.get_key_buffer(layer_id)[..., : self.kv_lora_rank]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        key = self.get_key_buffer(layer_id)
        return key, key[..., : self.kv_lora_rank]

    def get_mla_kv_buffer(self, layer, loc: torch.Tensor, dst_dtype: Optional[torch.dtype] = None):  # noqa: ANN001
        """(k_nope [n, 1, 512], k_rope [n, 1, 64]) of the rows at ``loc``, gathered."""
        rows = self._gather(layer.layer_id, loc.reshape(-1).to(torch.int32))
        dst = dst_dtype or self.dtype
        nope = rows[:, : self.kv_lora_rank].unsqueeze(1).to(dst).contiguous()
        rope = rows[:, self.kv_lora_rank :].unsqueeze(1).to(dst).contiguous()
        return nope, rope

    # ---- writes: records -------------------------------------------------------------

    def _write(self, layer_id: int, loc_info, nope: torch.Tensor, rope: Optional[torch.Tensor], what: str) -> None:  # noqa: ANN001
        loc, _, _ = unwrap_write_loc(loc_info)
        maybe_detect_oob(loc, 0, self.size + self.page_size, what)
        if self._write_loc_dcp_span != 1:
            raise NotImplementedError(
                f"{what}: --dcp-size > 1 shards the MLA rows, and the {KV_CACHE_DTYPE} pool writes whole records"
            )
        n = loc.numel()
        if rope is None:
            raise ValueError(f"{what}: cache_k_rope is None, but {self.jitcache_format} records hold the RoPE key")
        nope = nope.reshape(n, self.kv_lora_rank)
        rope = rope.reshape(n, self.qk_rope_head_dim)
        if nope.dtype != torch.bfloat16:
            nope = nope.to(torch.bfloat16)
        if rope.dtype != torch.bfloat16:
            rope = rope.to(torch.bfloat16)
        slots = loc.reshape(-1).to(torch.int64)
        slots = torch.where(slots == 0, torch.full_like(slots, -1), slots)  # the dummy slot
        jt.write(self.jitcache_model, layer_id, nope, rope, slots, self._buffer(layer_id))

    def set_mla_kv_buffer(self, layer, loc_info, cache_k_nope, cache_k_rope, layer_id_override=None):  # noqa: ANN001
        layer_id = layer.layer_id if layer_id_override is None else layer_id_override
        self._write(layer_id, loc_info, cache_k_nope, cache_k_rope, f"set_mla_kv_buffer ({KV_CACHE_DTYPE})")

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v, layer_id_override=None):  # noqa: ANN001
        """``cache_k`` [T, 1, 576] (latent then RoPE); ``cache_v`` is its latent and is not read."""
        layer_id = layer.layer_id if layer_id_override is None else layer_id_override
        width = self.kv_lora_rank + self.qk_rope_head_dim
        if cache_k.shape[-1] != width:
            raise ValueError(f"set_kv_buffer: cache_k's last dimension is {cache_k.shape[-1]}, expected {width}")
        k = cache_k.reshape(-1, width)
        self._write(layer_id, loc_info, k[:, : self.kv_lora_rank], k[:, self.kv_lora_rank :],
                    f"set_kv_buffer ({KV_CACHE_DTYPE})")
