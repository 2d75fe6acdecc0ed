#!/usr/bin/env python3
"""Regenerates examples/glm5-mini: a GLM-5.x-shaped checkpoint without weights whose
config.json references a nvfp4_ds_mla_outer_scale_v1 sidecar by path and SHA-256.

The values are synthetic: max_abs rises geometrically from 0.02 (shallow) to 5.2 (deep)
with a small deterministic ripple, like the real latent's ~240x spread across layers.
Run from anywhere: python3 examples/make_glm5_mini.py
"""
import hashlib
import json
import math
import pathlib

NUM_LAYERS = 78
DENOMINATOR = 6 * 448  # 2688: largest E2M1 x largest E4M3
SIDECAR = "nvfp4_ds_mla_outer_scales.json"
# A made-up commit id, stable across regenerations.
MODEL_REVISION = hashlib.sha1(b"jitcache glm5-mini synthetic example").hexdigest()


def max_abs_profile():
    low, high = 0.02, 5.2
    values = []
    for i in range(NUM_LAYERS):
        t = i / (NUM_LAYERS - 1)
        smooth = low * (high / low) ** t
        # Ripple vanishes at both ends so the endpoints are exactly 0.02 and 5.2.
        ripple = 1.0 + 0.06 * math.sin(2.3 * i) * math.sin(math.pi * t)
        values.append(float(f"{smooth * ripple:.4g}"))
    return values


def main():
    out = pathlib.Path(__file__).resolve().parent / "glm5-mini"
    out.mkdir(exist_ok=True)
    max_abs = max_abs_profile()
    sidecar = {
        "format": "nvfp4_ds_mla_outer_scale_v1",
        "num_layers": NUM_LAYERS,
        "latent_dim": 512,
        "denominator": float(DENOMINATOR),
        "scales": [m / DENOMINATOR for m in max_abs],
        "max_abs": max_abs,
        "model_revision": MODEL_REVISION,
        "provenance": {
            "model": "GLM-5.x (shape only; glm5-mini example)",
            "dataset": "wikitext-2",
            "context": 2048,
            "tp": 4,
            "per_rank_agreement": "not measured (synthetic)",
            "notes": "synthetic example values, not a real calibration",
        },
    }
    sidecar_bytes = (json.dumps(sidecar, indent=2) + "\n").encode()
    (out / SIDECAR).write_bytes(sidecar_bytes)

    config = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "vocab_size": 154880,
        "hidden_size": 6144,
        "intermediate_size": 12288,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": NUM_LAYERS,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 2048,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 192,
        "v_head_dim": 256,
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "max_position_embeddings": 202752,
        "rope_theta": 1000000,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": [154820, 154827, 154829],
        "pad_token_id": 154820,
        "use_cache": True,
        "nvfp4_ds_mla_outer_scales": {
            "file": SIDECAR,
            "sha256": hashlib.sha256(sidecar_bytes).hexdigest(),
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {out}/config.json and {out}/{SIDECAR}")


if __name__ == "__main__":
    main()
