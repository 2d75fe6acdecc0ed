#!/usr/bin/env python3
"""Regenerates examples/dsv4-mini: a DeepSeek-V4-shaped checkpoint without weights, for
the page-major records (flashinfer-dsv4-384, flashmla-v41-288).

Four layers and one draft layer, and no nvfp4_ds_mla outer-scale sidecar: every layer's
scale is 1.0, so every layer takes the identity kernels, the only ones these records are
written with (neither FlashInfer reader takes a per-layer KV scale; docs/record-formats.md).
The attention geometry is DeepSeek-V4's single latent row of 512 values per token: 448
NoPE + 64 RoPE (qk_rope_head_dim), so kv_lora_rank 512 is the width the writers take. The
remaining fields are placeholders of the right kind, not the real model's values.
Run from anywhere: python3 examples/make_dsv4_mini.py
"""
import json
import pathlib

NUM_LAYERS = 4


def main():
    out = pathlib.Path(__file__).resolve().parent / "dsv4-mini"
    out.mkdir(exist_ok=True)
    config = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "torch_dtype": "bfloat16",
        "vocab_size": 129280,
        "hidden_size": 4096,
        "num_hidden_layers": NUM_LAYERS,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "q_lora_rank": 1024,
        "kv_lora_rank": 512,
        "head_dim": 512,
        "qk_nope_head_dim": 448,
        "qk_rope_head_dim": 64,
        "v_head_dim": 512,
        "index_topk": 512,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000,
        "tie_word_embeddings": False,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {out}/config.json")


if __name__ == "__main__":
    main()
