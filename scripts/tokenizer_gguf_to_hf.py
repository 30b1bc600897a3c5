#!/usr/bin/python3
"""Builds a Hugging Face tokenizer.json from a GGUF vocabulary (tokens, types, merges) and the
pre-tokenizer structure of its family, so that npm `tokenizers` can serve as the oracle for
vocabularies whose tokenizer.json is not shipped (DeepSeek-Coder, StarCoder).

Usage: /usr/bin/python3 scripts/tokenizer_gguf_to_hf.py IN.gguf OUT.json

Reads the GGUF with llama.cpp's gguf-py (.deps/llama.cpp/gguf-py), independently of efim's
reader. The pre-tokenizers are those of the original Hugging Face files:
  deepseek-coder: Split [\\r\\n], Split \\s?\\p{L}+, Split \\s?\\p{P}+, Split [一-龥ࠀ-一가-퟿]+,
                  Digits(individual), ByteLevel(use_regex=false)
  starcoder:      Digits(individual), ByteLevel(use_regex=true)
Control tokens (type 3) become special added tokens, user-defined ones (type 4) non-special;
all tokens are also listed in model.vocab so that every id stays where the GGUF puts it.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".deps", "llama.cpp", "gguf-py"))
import gguf  # noqa: E402


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


DIGITS = {"type": "Digits", "individual_digits": True}
PRE_TOKENIZERS = {
    "deepseek-coder": [split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"),
                       split("[一-龥ࠀ-一가-퟿]+"), DIGITS, byte_level(False)],
    "starcoder": [DIGITS, byte_level(True)],
}


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    pre = field(r, "tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        sys.exit(f"tokenizer_gguf_to_hf: unsupported tokenizer.ggml.pre {pre!r}")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    # Every token goes into model.vocab, added ones too (as in the original StarCoder file):
    # Hugging Face renumbers added tokens that are missing from model.vocab.
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        vocab.setdefault(t, i)
        if ty in (3, 4):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ty == 3})
    out = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": PRE_TOKENIZERS[pre]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": list(merges)},
    }
    tmp = f"{dst}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    os.replace(tmp, dst)


if __name__ == "__main__":
    main()
