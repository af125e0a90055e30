#!/usr/bin/python3
"""tools/peers/kimi_tok_oracle.py: spill's tokenizer for Kimi K3's files
against llama.cpp's on the same vocabulary (docs/PEERS.md "kimi-k2 tokenizer").

Builds a small tiktoken vocabulary the way the real one was made (byte-level
BPE merges learnt on a mixed corpus: English, code, digits, Han, Cyrillic),
writes it in K3's checkpoint layout (tiktoken.model + tokenizer_config.json
naming K3's special slots: [BOS] [EOS] <|end_of_msg|> <|open|> <|close|>
<|sep|> at the first six ids after the ranks, [UNK] [PAD] at the last two),
and the GGUF llama.cpp's converter makes from it (conversion/kimi_linear.py
through kimi_k3.py: tokens by id as byte-level strings, specials and
<|reserved_token_ID|> as control tokens, merges recovered from the ranks,
pre-tokenizer "kimi-k2"). Then every document is tokenized by
`spill tokenize DIR --file DOC --json` (special tokens parsed, and with
--no-special) and by `llama_peer tokenize GGUF` (parse_special on / off):
the ids must be equal.

  kimi_tok_oracle.py SPILL LLAMA_PEER WORKDIR
Prints one line per mismatch and a summary; exit 1 on any mismatch.
"""
import base64
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import ckpt_io  # noqa: E402
import numpy as np  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's the dog's day; they'll see.",
    "def main(argc, argv):\n    return argc + 1  # comment\n\n",
    "In 2026, 1234567 tokens cost $3.50 (about 12.5%).",
    "人工智能是未来的方向。我们正在学习机器学习和深度学习。",
    "Привет, мир! Как дела? Всё хорошо.",
    "<html><body class=\"main\">Hello &amp; goodbye</body></html>",
    "    indented\tline\r\nnext line\n\n\nthree newlines",
]

SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
            5: "<|sep|>", 254: "[UNK]", 255: "[PAD]"}

DOCS = [
    "Hello world",
    "It's the dog's day; they'll see. WE'RE HERE, I'M FINE",
    "人工智能abc学习 mixed 中文English文字",
    "12345678901 and 3.14159 and 2026-12-07",
    "   leading spaces\n\n\ttabs\r\n  trailing   ",
    "Привет мир — дела 🙂👍🏽 emoji ZWJ 👨‍👩‍👧",
    "<|open|>message role=\"user\"<|sep|>Hi there<|close|>message<|sep|><|end_of_msg|>",
    "<|open|>think<|sep|>reasoning<|close|>think<|sep|><|open|>response<|sep|>answer",
    "[BOS]text[EOS] <|reserved_token_{R}|> <|reserved_token_9|> [PAD]",  # {R}: a reserved slot
    "not a marker: <|open| <|close |> <|sep|",
    "def f(x):\n    return x**2  # square\n",
    "a" * 40 + " " + "ab" * 30,
    "",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_ranks(n_merges):
    """Byte-level BPE on CORPUS (words split at spaces, kept with their space)."""
    ranks = {bytes([b]): b for b in range(256)}
    words = []
    for text in CORPUS:
        for i, w in enumerate(text.encode().split(b" ")):
            words.append([bytes([c]) for c in ((b" " if i else b"") + w)])
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        tok = best[0] + best[1]
        if tok in ranks:
            break
        ranks[tok] = len(ranks)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == best[0] and w[i + 1] == best[1]:
                    w[i:i + 2] = [tok]
                i += 1
    return ranks


def recover_merge(ranks, token, max_rank):
    """The two parts BPE joins last to make token (tiktoken's merge order)."""
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def write_checkpoint(d, ranks):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tiktoken.model"), "w") as f:
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write("%s %d\n" % (base64.b64encode(tok).decode(), r))
    n = len(ranks)
    cfg = {"added_tokens_decoder": {str(n + k): {"content": v, "special": True}
                                    for k, v in SPECIALS.items()},
           "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]"}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)


def write_gguf(path, ranks):
    b2u = bytes_to_unicode()
    text = lambda t: "".join(b2u[b] for b in t)  # noqa: E731
    n = len(ranks)
    tokens, types = [None] * (n + 256), [1] * (n + 256)
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        tokens[r] = text(tok)
        if len(tok) > 1:
            parts = recover_merge(ranks, tok, r)
            if len(parts) == 2:
                merges.append(text(parts[0]) + " " + text(parts[1]))
    for k in range(256):
        tokens[n + k] = SPECIALS.get(k, "<|reserved_token_%d|>" % (n + k))
        types[n + k] = 3
    kvs = [("general.architecture", "llama"),
           ("llama.context_length", 64), ("llama.embedding_length", 16),
           ("llama.block_count", 1), ("llama.feed_forward_length", 32),
           ("llama.attention.head_count", 2), ("llama.attention.head_count_kv", 2),
           ("llama.attention.layer_norm_rms_epsilon", 1e-5), ("llama.vocab_size", n + 256),
           ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "kimi-k2"),
           ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", np.array(types, dtype=np.int32)),
           ("tokenizer.ggml.merges", merges),
           ("tokenizer.ggml.bos_token_id", n), ("tokenizer.ggml.eos_token_id", n + 2),
           ("tokenizer.ggml.add_bos_token", False)]
    ckpt_io.write_gguf(path, kvs, [])


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    spill, peer, work = sys.argv[1:]
    ranks = train_ranks(400)
    ckpt = os.path.join(work, "k3tok")
    write_checkpoint(ckpt, ranks)
    gguf = os.path.join(work, "k3tok.gguf")
    write_gguf(gguf, ranks)
    docs_file = os.path.join(work, "docs.bin")
    DOCS[:] = [d.replace("{R}", str(len(ranks) + 6)) for d in DOCS]
    with open(docs_file, "wb") as f:
        for d in DOCS:
            b = d.encode()
            f.write(b"%d\n" % len(b) + b)
    bad = same = 0
    for special in (True, False):
        args = [peer, "tokenize", gguf, "--docs", docs_file] + (["--special"] if special else [])
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL llama_peer tokenize: %s" % r.stderr.strip()[-400:])
            sys.exit(1)
        want = [[int(x) for x in line.split(",")] if line else [] for line in r.stdout.split("\n")[:len(DOCS)]]
        for i, d in enumerate(DOCS):
            p = os.path.join(work, "doc%d.txt" % i)
            with open(p, "wb") as f:
                f.write(d.encode())
            cmd = [spill, "tokenize", ckpt, "--file", p, "--json"] + ([] if special else ["--no-special"])
            s = subprocess.run(cmd, capture_output=True, text=True)
            got = json.loads(s.stdout)["ids"] if s.returncode == 0 else None
            if got == want[i]:
                same += 1
            else:
                bad += 1
                print("FAIL special=%s doc %d %r: spill %s, llama.cpp %s %s" % (
                    special, i, d[:40], got, want[i], s.stderr.strip()[-200:]))
    print("%d of %d tokenizations identical (%d ranks, %d merges learnt; 256 special slots)"
          % (same, same + bad, len(ranks), len(ranks) - 256))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
