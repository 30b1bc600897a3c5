#!/usr/bin/python3
"""Reference forward pass of a Llama / Qwen2 / Qwen3 / Qwen3-MoE / StarCoder2 / Gemma checkpoint in
Hugging Face layout, in numpy (Gemma: embeddings times sqrt(hidden), RMSNorm times (1 + w), GeGLU;
Qwen3-MoE: router softmax, top-k experts, renormalised when norm_topk_prob).

Written from the maths of Hugging Face's modeling_llama / modeling_qwen2 / modeling_qwen3 /
modeling_starcoder2 (rotate-half RoPE, grouped-query attention, SwiGLU MLP, RMSNorm; Qwen3's
per-head RMSNorm of q and k before RoPE; StarCoder2's LayerNorm with bias, tanh-GELU MLP c_fc /
c_proj and biases on every linear layer; its sliding window), independent
of efim's C++ code: it is the oracle the C++ forward pass is tested against.

Usage: ref_forward.py MODEL_DIR --tokens 1,2,3 [--precision float64|float32] --out logits.bin
Writes logits for every position, shape [n_tokens, vocab], as raw little-endian float32 (.bin)
or as a numpy array (.npy).
"""
import argparse
import json
import math
import os
import struct

import numpy as np


# ---------------------------------------------------------------- safetensors (read only)
def read_safetensors(path):
    """Returns {name: float32 array} for one .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = raw[base + begin:base + end]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":  # bfloat16 = upper 16 bits of a float32
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        out[name] = a.reshape(shape)
    return out


def read_folder(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return unfuse_experts(read_safetensors(os.path.join(model_dir, "model.safetensors")))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for fname in files:
        tensors.update(read_safetensors(os.path.join(model_dir, fname)))
    return unfuse_experts(tensors)


def unfuse_experts(tensors):
    """transformers 5's fused experts (mlp.experts.gate_up_proj [E, 2I, H]: gate rows, then up
    rows; mlp.experts.down_proj [E, H, I]) as one tensor per expert and role."""
    for name in [n for n in tensors if n.endswith(".mlp.experts.gate_up_proj")]:
        p = name[: -len("gate_up_proj")]
        gate_up, down = tensors.pop(name), tensors.pop(p + "down_proj")
        inter = gate_up.shape[1] // 2
        for e in range(gate_up.shape[0]):
            tensors[f"{p}{e}.gate_proj.weight"] = gate_up[e, :inter]
            tensors[f"{p}{e}.up_proj.weight"] = gate_up[e, inter:]
            tensors[f"{p}{e}.down_proj.weight"] = down[e]
    return tensors


# ---------------------------------------------------------------- maths
def rope_inv_freq(cfg, head_dim):
    """Inverse frequencies theta^(-2i/d), i < d/2, after the configured scaling."""
    # transformers >= 4.56 may put theta and scaling in "rope_parameters"
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", scaling.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        factor = scaling["factor"]
        lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        out = np.empty_like(inv)
        for i, f in enumerate(inv):
            wavelen = 2 * math.pi / f
            if wavelen < old_ctx / hi:       # high frequency: unchanged
                out[i] = f
            elif wavelen > old_ctx / lo:     # low frequency: slowed by factor
                out[i] = f / factor
            else:                            # in between: interpolate the two
                smooth = (old_ctx / wavelen - lo) / (hi - lo)
                out[i] = (1 - smooth) * f / factor + smooth * f
        return out
    raise ValueError(f"rope scaling {kind} not supported")


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def moe_mlp(cfg, W, p, xn):
    """modeling_qwen3_moe's sparse block: softmax router, top-k, optional renormalisation."""
    k = cfg["num_experts_per_tok"]
    logits = xn @ W(p + "mlp.gate.weight").T                        # [n, E]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = probs / probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(xn)
    for i in range(xn.shape[0]):
        top = np.argsort(-probs[i], kind="stable")[:k]
        wts = probs[i, top]
        if cfg.get("norm_topk_prob", False):
            wts = wts / wts.sum()
        for e, we in zip(top, wts):
            q = p + f"mlp.experts.{e}."
            gate = xn[i] @ W(q + "gate_proj.weight").T
            up = xn[i] @ W(q + "up_proj.weight").T
            out[i] += we * ((gate / (1 + np.exp(-gate)) * up) @ W(q + "down_proj.weight").T)
    return out


def forward(cfg, w, tokens, dt):
    h = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // nh
    n = len(tokens)
    qwen = cfg["model_type"] == "qwen2"
    qk_norm = cfg["model_type"] in ("qwen3", "qwen3_moe")
    moe = cfg["model_type"] == "qwen3_moe"
    starcoder2 = cfg["model_type"] == "starcoder2"  # LayerNorm, GELU MLP c_fc / c_proj
    gemma = cfg["model_type"] == "gemma"  # x * sqrt(h), RMSNorm times (1 + w), GeGLU
    eps = cfg["norm_epsilon"] if starcoder2 else cfg["rms_norm_eps"]
    bias = qwen or cfg.get("attention_bias", False) or (starcoder2 and cfg.get("use_bias", True))
    o_bias = bias and not qwen

    def W(name):
        return w[name].astype(dt)

    def linear(x, prefix, has_bias):
        y = x @ W(prefix + ".weight").T
        return y + W(prefix + ".bias") if has_bias else y

    pos = np.arange(n, dtype=np.float64)
    ang = np.outer(pos, rope_inv_freq(cfg, hd))              # [n, hd/2]
    cos = np.cos(np.concatenate([ang, ang], axis=-1)).astype(dt)  # [n, hd]
    sin = np.sin(np.concatenate([ang, ang], axis=-1)).astype(dt)
    mask = np.triu(np.full((n, n), -np.inf, dtype=dt), k=1)  # causal
    window = cfg.get("sliding_window") if starcoder2 else None
    if window:  # query i sees keys i - window + 1 .. i (transformers' sliding-window mask)
        mask += np.tril(np.full((n, n), -np.inf, dtype=dt), k=-window)

    def norm(x, prefix):
        if starcoder2:
            return layer_norm(x, W(prefix + ".weight"), W(prefix + ".bias"), eps)
        return rms_norm(x, W(prefix + ".weight") + (1 if gemma else 0), eps)

    x = W("model.embed_tokens.weight")[np.asarray(tokens)]   # [n, h]
    if gemma:
        x = x * np.asarray(math.sqrt(h), dtype=dt)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        xn = norm(x, p + "input_layernorm")
        q = linear(xn, p + "self_attn.q_proj", bias).reshape(n, nh, hd).transpose(1, 0, 2)
        k = linear(xn, p + "self_attn.k_proj", bias).reshape(n, nkv, hd).transpose(1, 0, 2)
        v = linear(xn, p + "self_attn.v_proj", bias).reshape(n, nkv, hd).transpose(1, 0, 2)
        if qk_norm:  # over each head's hd values, before RoPE
            q = rms_norm(q, W(p + "self_attn.q_norm.weight"), eps)
            k = rms_norm(k, W(p + "self_attn.k_norm.weight"), eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // nkv  # query head j reads KV head j // rep
        k = np.repeat(k, rep, axis=0)
        v = np.repeat(v, rep, axis=0)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask  # [nh, n, n]
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        attn = (probs @ v).transpose(1, 0, 2).reshape(n, nh * hd)
        x = x + linear(attn, p + "self_attn.o_proj", o_bias)
        xn = norm(x, p + "post_attention_layernorm")
        if moe and layer not in cfg.get("mlp_only_layers", []) and \
                (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0:  # else a dense MLP
            x = x + moe_mlp(cfg, W, p, xn)
        elif starcoder2:
            x = x + linear(gelu_tanh(linear(xn, p + "mlp.c_fc", bias)), p + "mlp.c_proj", bias)
        else:
            gate = linear(xn, p + "mlp.gate_proj", False)
            up = linear(xn, p + "mlp.up_proj", False)
            act = gelu_tanh(gate) if gemma else gate / (1 + np.exp(-gate))
            x = x + linear(act * up, p + "mlp.down_proj", False)
    x = norm(x, "model.norm")
    tied = cfg.get("tie_word_embeddings", gemma)
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    return x @ W(head).T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--precision", choices=["float64", "float32"], default="float64")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg["model_type"] not in ("llama", "qwen2", "qwen3", "qwen3_moe", "starcoder2", "gemma"):
        raise SystemExit(f"model_type {cfg['model_type']} not supported")
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    logits = forward(cfg, read_folder(args.model_dir), tokens, np.dtype(args.precision))
    if args.out.endswith(".npy"):
        np.save(args.out, logits.astype(np.float32))
    else:
        logits.astype("<f4").tofile(args.out)


if __name__ == "__main__":
    main()
