#!/usr/bin/python3
"""Writes tiny random Llama-family checkpoints in Hugging Face layout, for parity tests.

Usage: make_tiny_model.py OUT_DIR --kind {llama,llama256,qwen2,qwen3,qwen3_moe,qwen3_moe_dense,qwen3_moe256,starcoder2,gemma} [--dtype {f32,bf16}]
       [--seed N]
       [--shards N]

  llama: GQA (4 heads, 2 KV heads, head dim 16), llama3 RoPE scaling chosen so that the
         high-, medium- and low-frequency branches all occur, untied lm_head.
  llama256: every matrix width a multiple of 256 (hidden 256, ffn 512, head dim 64), so that
         llama.cpp's quantizer uses its K-quant and IQ4_XS types everywhere (no fallbacks).
  qwen2: q/k/v biases, tied input/output embeddings, GQA.
  qwen3: per-head q/k RMSNorm, head_dim 32 independent of hidden 64 (q_dim 128), no biases,
         tied embeddings, GQA.
  qwen3_moe: qwen3's attention; every MLP a mixture of 8 SwiGLU experts of width 32, 2 used per
         token (router softmax, top-2 renormalised: norm_topk_prob), one tensor per expert as
         the Qwen3-MoE checkpoints store them, untied head.
  qwen3_moe_dense: qwen3_moe with 4 layers, of which 0 and 2 run a dense SwiGLU MLP of width 96
         (mlp_only_layers [0, 2]).
  qwen3_moe256: the same with every width a multiple of 256 (hidden 256, head dim 64, experts of
         width 256), for llama.cpp's K-quant and IQ4_XS types on the stacked expert tensors.
  starcoder2: LayerNorm with bias, tanh-GELU MLP c_fc / c_proj, biases on every linear layer,
         tied embeddings, GQA (sliding window 4096, longer than these tests' prompts).
  gemma: embeddings times sqrt(hidden), RMSNorm weights stored as w for (1 + w), GeGLU, head_dim
         32 independent of hidden 64, one KV head (multi-query, as CodeGemma 2B), tied.

Weights are drawn from a seeded numpy generator (float64), then stored as f32 or bf16 (round to
nearest even). Only numpy and the standard library are used.
"""
import argparse
import json
import os
import struct

import numpy as np

KINDS = {
    "llama": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
        vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2,
        # wavelengths of the 8 frequencies: 6.3, 19.9, 62.8, ...; high-frequency cut 32/4 = 8,
        # low-frequency cut 32/1 = 32: one unscaled, one smoothed, six scaled frequencies.
        rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=32),
    ),
    "llama256": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
        vocab_size=300, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=512, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2,
    ),
    "qwen3": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
        vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, intermediate_size=96, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=[5, 7],
    ),
    "starcoder2": dict(
        architectures=["Starcoder2ForCausalLM"], model_type="starcoder2",
        hidden_act="gelu_pytorch_tanh", vocab_size=300, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=256,
        max_position_embeddings=16384, sliding_window=4096, norm_epsilon=1e-5,
        rope_theta=100000.0, tie_word_embeddings=True, use_bias=True, bos_token_id=0,
        eos_token_id=0,
    ),
    "gemma": dict(
        architectures=["GemmaForCausalLM"], model_type="gemma", hidden_act="gelu",
        hidden_activation="gelu_pytorch_tanh", vocab_size=300, hidden_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
        intermediate_size=96, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False, bos_token_id=2,
        eos_token_id=1,
    ),
    "qwen2": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
        vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False, bos_token_id=None, eos_token_id=[5, 7],
    ),
}


# starcoder2 with a window shorter than the test prompts: the sliding-window attention of the
# real checkpoints (4096) at a size the tests reach (same weights as "starcoder2").
KINDS["starcoder2_swa"] = dict(KINDS["starcoder2"], sliding_window=8)
# Four query heads per KV head: llama.cpp's quantizer gives attn_v more bits for these (Q2_K,
# IQ4_NL, IQ4_XS); 64 wide, every K-quant row falls back; 256 wide, none does.
KINDS["llama_gqa4"] = dict(KINDS["llama"], num_key_value_heads=1)
KINDS["llama256_gqa4"] = dict(KINDS["llama256"], num_key_value_heads=1)
# 80 layers: llama.cpp's quantizer takes such a llama (with grouped KV heads) or qwen2 for a 70B
# and gives its attn_v more bits.
KINDS["llama80_gqa4"] = dict(KINDS["llama_gqa4"], num_hidden_layers=80)
KINDS["qwen2_80"] = dict(KINDS["qwen2"], num_hidden_layers=80)
# qwen3's attention with a mixture of experts in every layer, untied.
KINDS["qwen3_moe"] = dict(KINDS["qwen3"], architectures=["Qwen3MoeForCausalLM"],
                          model_type="qwen3_moe", tie_word_embeddings=False,
                          moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
# Dense MLPs among the expert layers (Qwen3MoeConfig's mlp_only_layers): layers 0 and 2 run a
# SwiGLU MLP of intermediate_size, layers 1 and 3 the experts. llama.cpp's qwen3moe loads none.
KINDS["qwen3_moe_dense"] = dict(KINDS["qwen3_moe"], num_hidden_layers=4, mlp_only_layers=[0, 2])
# The same model saved as transformers 5 may save it: each layer's experts fused into
# mlp.experts.gate_up_proj [n_experts, 2 * moe_intermediate, hidden] (gate rows, then up rows)
# and mlp.experts.down_proj [n_experts, hidden, moe_intermediate] (same weights, same seed).
KINDS["qwen3_moe_fused"] = dict(KINDS["qwen3_moe"], _fused_experts=True)
# The mixture of experts again with every width a multiple of 256.
KINDS["qwen3_moe256"] = dict(KINDS["qwen3_moe"], hidden_size=256, head_dim=64,
                             intermediate_size=512, moe_intermediate_size=256)


def f32_to_bf16_bits(a):
    """Round float32 values to bfloat16 (nearest even); returns uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def moe_layer(cfg, i):
    """modeling_qwen3_moe: layer i runs the experts unless listed in mlp_only_layers or skipped by
    decoder_sparse_step."""
    return (i not in cfg.get("mlp_only_layers", [])
            and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)


def make_tensors(cfg, rng):
    """Returns {hf_name: float64 array} for a random model with config cfg."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    vocab = cfg["vocab_size"]
    qwen = cfg["model_type"] == "qwen2"

    def mat(rows, cols):  # std 1/sqrt(fan_in): activations keep unit scale through layers
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    # Gemma stores w for a norm that multiplies by (1 + w).
    norm_base = 0.0 if cfg["model_type"] == "gemma" else 1.0

    def norm(n):
        return norm_base + 0.2 * rng.standard_normal(n)

    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, h))}
    if cfg["model_type"] == "starcoder2":
        return starcoder2_tensors(cfg, rng, t, mat, norm)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(h)
        t[p + "self_attn.q_proj.weight"] = 2.0 * mat(nh * hd, h)  # sharper attention
        t[p + "self_attn.k_proj.weight"] = 2.0 * mat(nkv * hd, h)
        t[p + "self_attn.v_proj.weight"] = mat(nkv * hd, h)
        t[p + "self_attn.o_proj.weight"] = mat(h, nh * hd)
        if cfg["model_type"] in ("qwen3", "qwen3_moe"):
            t[p + "self_attn.q_norm.weight"] = norm(hd)
            t[p + "self_attn.k_norm.weight"] = norm(hd)
        if qwen:
            t[p + "self_attn.q_proj.bias"] = 0.5 * rng.standard_normal(nh * hd)
            t[p + "self_attn.k_proj.bias"] = 0.5 * rng.standard_normal(nkv * hd)
            t[p + "self_attn.v_proj.bias"] = 0.5 * rng.standard_normal(nkv * hd)
        t[p + "post_attention_layernorm.weight"] = norm(h)
        if cfg["model_type"] == "qwen3_moe" and moe_layer(cfg, i):
            ff = cfg["moe_intermediate_size"]
            t[p + "mlp.gate.weight"] = 2.0 * mat(cfg["num_experts"], h)  # distinct router scores
            for e in range(cfg["num_experts"]):
                q = p + f"mlp.experts.{e}."
                t[q + "gate_proj.weight"] = mat(ff, h)
                t[q + "up_proj.weight"] = mat(ff, h)
                t[q + "down_proj.weight"] = mat(h, ff)
            continue
        t[p + "mlp.gate_proj.weight"] = mat(inter, h)
        t[p + "mlp.up_proj.weight"] = mat(inter, h)
        t[p + "mlp.down_proj.weight"] = mat(h, inter)
    t["model.norm.weight"] = norm(h)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = 2.0 * mat(vocab, h)
    return t


def starcoder2_tensors(cfg, rng, t, mat, norm):
    """StarCoder2 layout: LayerNorm weight + bias, q/k/v/o with biases, mlp.c_fc / mlp.c_proj."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = h // nh

    def bias(n):
        return 0.2 * rng.standard_normal(n)

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for ln in ("input_layernorm", "post_attention_layernorm"):
            t[p + ln + ".weight"] = norm(h)
            t[p + ln + ".bias"] = bias(h)
        for name, rows, scale in (("q", nh * hd, 2.0), ("k", nkv * hd, 2.0), ("v", nkv * hd, 1.0)):
            t[p + f"self_attn.{name}_proj.weight"] = scale * mat(rows, h)
            t[p + f"self_attn.{name}_proj.bias"] = bias(rows)
        t[p + "self_attn.o_proj.weight"] = mat(h, nh * hd)
        t[p + "self_attn.o_proj.bias"] = bias(h)
        t[p + "mlp.c_fc.weight"] = 2.0 * mat(inter, h)
        t[p + "mlp.c_fc.bias"] = bias(inter)
        t[p + "mlp.c_proj.weight"] = mat(h, inter)
        t[p + "mlp.c_proj.bias"] = bias(h)
    t["model.norm.weight"] = norm(h)
    t["model.norm.bias"] = bias(h)
    return t


def encode(arr, dtype):
    if dtype == "f32":
        return "F32", np.ascontiguousarray(arr, dtype="<f4").tobytes()
    return "BF16", f32_to_bf16_bits(arr.astype(np.float32)).astype("<u2").tobytes()


def write_safetensors(path, entries):
    """entries: list of (name, st_dtype, shape, bytes)."""
    header, offset = {}, 0
    for name, st_dtype, shape, data in entries:
        header[name] = {"dtype": st_dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, _, _, data in entries:
            f.write(data)


def fuse_experts(cfg, tensors):
    """Per-expert gate/up/down_proj tensors -> transformers 5's fused gate_up_proj / down_proj."""
    out = {}
    for layer in range(cfg["num_hidden_layers"]):
        if not moe_layer(cfg, layer):
            continue
        p = f"model.layers.{layer}.mlp.experts."
        n = cfg["num_experts"]
        out[p + "gate_up_proj"] = np.stack([
            np.concatenate([tensors.pop(f"{p}{e}.gate_proj.weight"),
                            tensors.pop(f"{p}{e}.up_proj.weight")]) for e in range(n)])
        out[p + "down_proj"] = np.stack([tensors.pop(f"{p}{e}.down_proj.weight") for e in range(n)])
    tensors.update(out)
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args()

    cfg = dict(KINDS[args.kind])
    fused = cfg.pop("_fused_experts", False)
    cfg["torch_dtype"] = "float32" if args.dtype == "f32" else "bfloat16"
    rng = np.random.default_rng(args.seed)
    tensors = make_tensors(cfg, rng)
    if fused:
        tensors = fuse_experts(cfg, tensors)

    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    entries = []
    for name, arr in tensors.items():
        st_dtype, data = encode(arr, args.dtype)
        entries.append((name, st_dtype, arr.shape, data))
    if args.shards <= 1:
        write_safetensors(os.path.join(args.out_dir, "model.safetensors"), entries)
        return
    n = args.shards
    weight_map = {}
    for s in range(n):
        fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        part = entries[s::n]
        write_safetensors(os.path.join(args.out_dir, fname), part)
        for e in part:
            weight_map[e[0]] = fname
    with open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)


if __name__ == "__main__":
    main()
