#!/usr/bin/env python3
"""Regenerates examples/glm5-mini: a GLM-5.x-shaped checkpoint without weights whose
config.json references a nvfp4_ds_mla_outer_scale_v1 sidecar by path and SHA-256, and
examples/glm5-mini-captures: synthetic nvfp4_ds_mla_capture_v1 files that
`jitcache scales calibrate` turns back into that sidecar's values.

The values are synthetic: max_abs rises geometrically from 0.02 (shallow) to 5.2 (deep)
with a small deterministic ripple, like the real latent's ~240x spread across layers.
The captures: a primary run (wikitext-2, 2048 context, TP 4) whose per-layer maximum over
its ranks is exactly the sidecar's max_abs, the other ranks a little lower (below 2e-4
relative, inside the default agreement tolerance); and an independent envelope run (c4,
4096 context, TP 2) that is higher on the shallow layers 0..5 and lower everywhere else.
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


CAPTURE_FORMAT = "nvfp4_ds_mla_capture_v1"
MODEL_NAME = "GLM-5.x (shape only; glm5-mini example)"
PRIMARY = {"dataset": "wikitext-2", "context": 2048, "tp": 4, "tokens": 140 * 2048, "stem": "wikitext2"}
ENVELOPE = {"dataset": "c4", "context": 4096, "tp": 2, "tokens": 64 * 4096, "stem": "c4"}
ENVELOPE_RAISED = 6  # the envelope run exceeds the primary on layers 0..5
MAX_RANK_SPREAD = 2e-4


def rank_offset(layer, rank):
    """A deterministic relative shortfall in [2e-5, 1.9e-4): how far a rank's maximum lies
    below the run's maximum for a layer."""
    return 2e-5 + 1.7e-4 * (0.5 + 0.5 * math.sin(1.7 * layer + 2.9 * rank + 0.3))


def below(value, shortfall):
    """value * (1 - shortfall) as short decimal text, strictly below value."""
    lowered = float(f"{value * (1.0 - shortfall):.7g}")
    assert 0 < lowered < value and (value - lowered) / value < MAX_RANK_SPREAD
    return lowered


def rank_maxima(run_max, tp):
    """Per-rank maxima whose per-layer maximum over ranks is exactly run_max: one rank (or
    two) holds the value itself, the others a little below it."""
    ranks = []
    for rank in range(tp):
        values = []
        for layer, value in enumerate(run_max):
            holder = layer % tp
            ties = rank == holder or (tp > 2 and layer % 5 == 0 and rank == (holder + 1) % tp)
            values.append(value if ties else below(value, rank_offset(layer, rank)))
        ranks.append(values)
    for layer, value in enumerate(run_max):
        assert max(r[layer] for r in ranks) == value
    return ranks


def envelope_profile(primary):
    """Up to 3-12% above the primary on the first ENVELOPE_RAISED layers (most on the
    shallowest), 0.5-4% below it elsewhere."""
    values = []
    for layer, value in enumerate(primary):
        if layer < ENVELOPE_RAISED:
            factor = 1.12 - 0.09 * layer / (ENVELOPE_RAISED - 1)
        else:
            factor = 0.96 + 0.035 * (0.5 + 0.5 * math.sin(0.9 * layer))
        raised = float(f"{value * factor:.5g}")
        assert (raised > value) == (layer < ENVELOPE_RAISED)
        values.append(raised)
    return values


def write_captures(out, run, run_max):
    for rank, values in enumerate(rank_maxima(run_max, run["tp"])):
        capture = {
            "format": CAPTURE_FORMAT,
            "model": MODEL_NAME,
            "model_revision": MODEL_REVISION,
            "dataset": run["dataset"],
            "context": run["context"],
            "tp": run["tp"],
            "rank": rank,
            "tokens": run["tokens"],
            "num_layers": NUM_LAYERS,
            "latent_dim": 512,
            "max_abs": values,
        }
        name = f"{run['stem']}-tp{run['tp']}-rank{rank}.json"
        (out / name).write_text(json.dumps(capture, indent=2) + "\n")


def main():
    write_checkpoint()
    captures = pathlib.Path(__file__).resolve().parent / "glm5-mini-captures"
    captures.mkdir(exist_ok=True)
    primary = max_abs_profile()
    write_captures(captures, PRIMARY, primary)
    write_captures(captures, ENVELOPE, envelope_profile(primary))
    print(f"wrote the captures in {captures}")


def write_checkpoint():
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
