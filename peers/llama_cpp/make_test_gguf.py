#!/usr/bin/python3
"""Writes a tiny random-weight llama-architecture GGUF (v3, written by hand) for testing llama_ref,
and computes the same model's logits with numpy as an independent check of llama.cpp.

  make_test_gguf.py write OUT.gguf [--vocab-from VOCAB.gguf] [--dtype f32|f16] [--seed S]
                    [--n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --ctx 512]
  make_test_gguf.py forward MODEL.gguf --tokens "1 2 3" --out LOGITS.f32

`write` without --vocab-from builds a small byte-level BPE vocab (GPT-2 style: 256 byte tokens,
merges learned from a built-in code snippet, special tokens) so the file stays small;
--vocab-from copies every tokenizer.* key of another GGUF (e.g. llama.cpp's
models/ggml-vocab-llama-bpe.gguf). Weights are drawn from a seeded generator, so the same
options always give the same file. `forward` reads the GGUF back (the reader here only handles
what `write` produces plus vocab GGUFs) and writes float32 logits [n_tokens, n_vocab].
"""
import argparse
import re
import struct
import sys
from collections import Counter

import numpy as np

ALIGN = 32
# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
GGML_F32, GGML_F16 = 0, 1

# ---------------------------------------------------------------------------- GGUF writing


class Value:
    """A typed metadata value; arrays carry their element type."""

    def __init__(self, vtype, value, elem=None):
        self.vtype, self.value, self.elem = vtype, value, elem


def pack_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def pack_value(vtype, value, elem=None):
    if vtype == STR:
        return pack_str(value)
    if vtype == ARR:
        body = b"".join(pack_value(elem, v) for v in value) if elem == STR else \
            np.asarray(value, dtype=np.dtype(SCALAR_FMT[elem])).tobytes()
        return struct.pack("<IQ", elem, len(value)) + body
    return struct.pack(SCALAR_FMT[vtype], value)


def write_gguf(path, kv, tensors):
    """kv: {key: Value}; tensors: [(name, numpy array (rows, cols) or (n,), ggml type)]."""
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for key, v in kv.items():
        head += [pack_str(key), struct.pack("<I", v.vtype), pack_value(v.vtype, v.value, v.elem)]
    blobs, offset = [], 0
    for name, arr, gtype in tensors:
        data = arr.astype(np.float16 if gtype == GGML_F16 else np.float32).tobytes()
        ne = list(reversed(arr.shape))  # ggml order: ne[0] is the contiguous (column) dim
        head += [pack_str(name), struct.pack("<I", len(ne)), struct.pack(f"<{len(ne)}Q", *ne),
                 struct.pack("<IQ", gtype, offset)]
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    header = b"".join(head)
    header += b"\0" * ((-len(header)) % ALIGN)
    with open(path, "wb") as f:
        f.write(header)
        for b in blobs:
            f.write(b)

# ---------------------------------------------------------------------------- GGUF reading


class Reader:
    def __init__(self, path):
        self.buf = open(path, "rb").read()
        self.pos = 0

    def take(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals[0] if len(vals) == 1 else vals

    def string(self):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"string of {n} bytes at offset {self.pos} runs past the file end")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype == STR:
            return Value(STR, self.string())
        if vtype == ARR:
            elem, n = self.take("<I"), self.take("<Q")
            if elem == STR:
                return Value(ARR, [self.string() for _ in range(n)], STR)
            dt = np.dtype(SCALAR_FMT[elem])
            arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
            self.pos += n * dt.itemsize
            return Value(ARR, arr.tolist(), elem)
        return Value(vtype, self.take(SCALAR_FMT[vtype]))


def read_gguf(path):
    """Returns (kv {key: Value}, tensors {name: numpy array in (rows, cols) layout})."""
    r = Reader(path)
    magic, version, n_tensors, n_kv = r.take("<4sIQQ")
    if magic != b"GGUF" or version != 3:
        raise ValueError(f"{path}: not a GGUF v3 file (magic {magic!r}, version {version})")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        infos.append((name, ne, r.take("<I"), r.take("<Q")))
    align = kv["general.alignment"].value if "general.alignment" in kv else ALIGN
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, ne, gtype, off in infos:
        if gtype not in (GGML_F32, GGML_F16):
            raise ValueError(f"{path}: tensor {name} has ggml type {gtype}; only F32/F16 supported")
        dt = np.float16 if gtype == GGML_F16 else np.float32
        arr = np.frombuffer(r.buf, dtype=dt, count=int(np.prod(ne)), offset=base + off)
        tensors[name] = arr.reshape(list(reversed(ne))).astype(np.float64)
    return kv, tensors

# ---------------------------------------------------------------------------- synthetic vocab

CORPUS = """
def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

for i in range(10):
    print(i, fibonacci(i))

class Stack:
    def __init__(self):
        self.items = []
    def push(self, item):
        self.items.append(item)
    def pop(self):
        return self.items.pop()

int main(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) printf("%s\\n", argv[i]);
    return 0;
}
The quick brown fox jumps over the lazy dog. Hello world, hello code.
"""
SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def synthetic_vocab(n_merges=200):
    """256 byte tokens + merges learned on CORPUS (greedy BPE) + control tokens."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = Counter("".join(b2u[b] for b in w.encode("utf-8"))
                    for w in re.findall(r" ?\w+| ?[^\w\s]+|\s+", CORPUS))
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for w in seqs:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    types = [1] * len(tokens) + [3] * len(SPECIALS)  # 1 normal, 3 control
    tokens += SPECIALS
    eot = tokens.index("<|endoftext|>")
    return {
        "tokenizer.ggml.model": Value(STR, "gpt2"),
        "tokenizer.ggml.pre": Value(STR, "gpt-2"),
        "tokenizer.ggml.tokens": Value(ARR, tokens, STR),
        "tokenizer.ggml.token_type": Value(ARR, types, I32),
        "tokenizer.ggml.merges": Value(ARR, merges, STR),
        "tokenizer.ggml.bos_token_id": Value(U32, eot),
        "tokenizer.ggml.eos_token_id": Value(U32, eot),
        "tokenizer.ggml.add_bos_token": Value(BOOL, False),
    }

# ---------------------------------------------------------------------------- model


def model_kv(a, n_vocab):
    head_dim = a.n_embd // a.n_head
    return {
        "general.architecture": Value(STR, "llama"),
        "general.name": Value(STR, "efim-tiny-test"),
        "general.file_type": Value(U32, 1 if a.dtype == "f16" else 0),
        "llama.vocab_size": Value(U32, n_vocab),
        "llama.context_length": Value(U32, a.ctx),
        "llama.embedding_length": Value(U32, a.n_embd),
        "llama.block_count": Value(U32, a.n_layer),
        "llama.feed_forward_length": Value(U32, a.n_ff),
        "llama.attention.head_count": Value(U32, a.n_head),
        "llama.attention.head_count_kv": Value(U32, a.n_head_kv),
        "llama.attention.layer_norm_rms_epsilon": Value(F32, 1e-5),
        "llama.rope.freq_base": Value(F32, 10000.0),
        "llama.rope.dimension_count": Value(U32, head_dim),
    }


def model_tensors(a, n_vocab):
    """Random weights scaled so activations stay O(1) and logits are well separated."""
    rng = np.random.default_rng(a.seed)
    d, hd, ff = a.n_embd, a.n_embd // a.n_head, a.n_ff
    wt = GGML_F16 if a.dtype == "f16" else GGML_F32

    def lin(rows, cols, gain=1.0):  # numpy (rows=out, cols=in) == ggml ne {in, out}
        return rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    t = [("token_embd.weight", rng.standard_normal((n_vocab, d)), wt),
         ("output_norm.weight", norm(d), GGML_F32),
         ("output.weight", lin(n_vocab, d, 4.0), wt)]
    for i in range(a.n_layer):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", norm(d), GGML_F32),
              (p + "attn_q.weight", lin(a.n_head * hd, d, 2.0), wt),
              (p + "attn_k.weight", lin(a.n_head_kv * hd, d, 2.0), wt),
              (p + "attn_v.weight", lin(a.n_head_kv * hd, d), wt),
              (p + "attn_output.weight", lin(d, a.n_head * hd), wt),
              (p + "ffn_norm.weight", norm(d), GGML_F32),
              (p + "ffn_gate.weight", lin(ff, d), wt),
              (p + "ffn_up.weight", lin(ff, d), wt),
              (p + "ffn_down.weight", lin(d, ff), wt)]
    return t


def cmd_write(a):
    if a.n_embd % a.n_head or a.n_head % a.n_head_kv or (a.n_embd // a.n_head) % 2:
        sys.exit(f"bad shape: n_embd {a.n_embd}, n_head {a.n_head}, n_head_kv {a.n_head_kv}")
    if a.vocab_from:
        src, _ = read_gguf(a.vocab_from)
        vocab = {k: v for k, v in src.items() if k.startswith("tokenizer.")}
    else:
        vocab = synthetic_vocab()
    n_vocab = len(vocab["tokenizer.ggml.tokens"].value)
    kv = {**model_kv(a, n_vocab), **vocab}
    write_gguf(a.out, kv, model_tensors(a, n_vocab))
    print(f"wrote {a.out}: llama, n_vocab {n_vocab}, n_embd {a.n_embd}, n_layer {a.n_layer}, "
          f"heads {a.n_head}/{a.n_head_kv}, n_ff {a.n_ff}, {a.dtype}")

# ---------------------------------------------------------------------------- numpy forward


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, base):
    """x: [T, heads, hd]; llama.cpp's NORM rope rotates adjacent pairs (x[2i], x[2i+1])."""
    T, _, hd = x.shape
    theta = np.arange(T)[:, None] * base ** (-np.arange(0, hd, 2) / hd)  # [T, hd/2]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def attention(q, k, v):
    """q: [T, H, hd], k/v: [T, Hkv, hd]; causal, grouped heads (head h uses kv head h // group)."""
    T, H, hd = q.shape
    group = H // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)  # [H, T, T]
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, H * hd)


def forward(kv, w, tokens):
    g = lambda k: kv[f"llama.{k}"].value  # noqa: E731
    H, Hkv, eps, base = g("attention.head_count"), g("attention.head_count_kv"), \
        g("attention.layer_norm_rms_epsilon"), g("rope.freq_base")
    x = w["token_embd.weight"][tokens]  # [T, d]
    T, d = x.shape
    hd = d // H
    for i in range(g("block_count")):
        p = lambda n: w[f"blk.{i}.{n}.weight"]  # noqa: E731
        h = rms_norm(x, p("attn_norm"), eps)
        q = rope((h @ p("attn_q").T).reshape(T, H, hd), base)
        k = rope((h @ p("attn_k").T).reshape(T, Hkv, hd), base)
        v = (h @ p("attn_v").T).reshape(T, Hkv, hd)
        x = x + attention(q, k, v) @ p("attn_output").T
        h = rms_norm(x, p("ffn_norm"), eps)
        gate = h @ p("ffn_gate").T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ p("ffn_up").T)) @ p("ffn_down").T
    out = w.get("output.weight", w["token_embd.weight"])
    return rms_norm(x, w["output_norm.weight"], eps) @ out.T  # [T, n_vocab]


def cmd_forward(a):
    kv, w = read_gguf(a.model)
    tokens = [int(t) for t in a.tokens.replace(",", " ").split()]
    logits = forward(kv, w, np.array(tokens))
    logits.astype(np.float32).tofile(a.out)
    print(f"wrote {a.out}: logits [{len(tokens)}, {logits.shape[1]}] float32")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--vocab-from")
    w.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    w.add_argument("--seed", type=int, default=1)
    for name, default in (("n-embd", 64), ("n-layer", 2), ("n-head", 4), ("n-head-kv", 2),
                          ("n-ff", 128), ("ctx", 512)):
        w.add_argument(f"--{name}", type=int, default=default)
    f = sub.add_parser("forward")
    f.add_argument("model")
    f.add_argument("--tokens", required=True)
    f.add_argument("--out", required=True)
    a = ap.parse_args()
    cmd_write(a) if a.cmd == "write" else cmd_forward(a)


if __name__ == "__main__":
    main()
