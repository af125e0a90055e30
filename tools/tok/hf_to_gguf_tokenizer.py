#!/usr/bin/env python3
"""tools/tok/hf_to_gguf_tokenizer.py: writes the tokenizer of a Hugging Face
tokenizer.json (+ tokenizer_config.json) as a tensor-less GGUF holding the
tokenizer.ggml.* keys the way llama.cpp's converter lays them out (tokens by
id, token_type 1 normal / 3 control / 4 user-defined, merges "a b", model
"gpt2", the pre-tokenizer name given), with tools/reference/ckpt_io.py's
writer. Tests use it to check that a GGUF tokenizer equals its tokenizer.json.
--llama-loadable adds the hyper-parameters of a one-layer "llama" model (no
tensors), so llama.cpp's vocabulary-only load (llama_peer tokenize) accepts
the file; spill reads the tokenizer keys only either way.

  hf_to_gguf_tokenizer.py TOKENIZER_JSON PRE_NAME OUT.gguf [--llama-loadable]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import ckpt_io  # noqa: E402
import numpy as np  # noqa: E402


def main():
    args = sys.argv[1:]
    loadable = "--llama-loadable" in args
    args = [a for a in args if a != "--llama-loadable"]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    src, pre, out = args
    with open(src, encoding="utf-8") as f:
        tj = json.load(f)
    cfg_path = os.path.join(os.path.dirname(src), "tokenizer_config.json")
    cfg = {}
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max(list(vocab.values()) + list(added.keys())) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    types = [5] * n
    for s, i in vocab.items():
        tokens[i] = s
        types[i] = 1
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = 3 if a.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    def tok_id(key):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return tokens.index(v) if v in tokens else None

    arch = [("general.architecture", "tokenizer-only")]
    if loadable:
        arch = [("general.architecture", "llama"), ("llama.context_length", 64),
                ("llama.embedding_length", 16), ("llama.block_count", 1),
                ("llama.feed_forward_length", 32), ("llama.attention.head_count", 2),
                ("llama.attention.head_count_kv", 2),
                ("llama.attention.layer_norm_rms_epsilon", 1e-5), ("llama.vocab_size", n)]
    kvs = arch + [
           ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", pre),
           ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", np.array(types, dtype=np.int32)),
           ("tokenizer.ggml.merges", merges)]
    for key, gk in (("bos_token", "tokenizer.ggml.bos_token_id"),
                    ("eos_token", "tokenizer.ggml.eos_token_id")):
        i = tok_id(key)
        if i is not None:
            kvs.append((gk, i))
    kvs.append(("tokenizer.ggml.add_bos_token", bool(cfg.get("add_bos_token", False))))
    # the config's chat_template, else chat_template.jinja beside it (llama.cpp's gguf-py order)
    jinja = os.path.join(os.path.dirname(src), "chat_template.jinja")
    if isinstance(cfg.get("chat_template"), str):
        kvs.append(("tokenizer.chat_template", cfg["chat_template"]))
    elif os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            kvs.append(("tokenizer.chat_template", f.read()))
    tmp = out + ".tmp"
    ckpt_io.write_gguf(tmp, kvs, [])
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
