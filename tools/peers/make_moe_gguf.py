#!/usr/bin/python3
"""tools/peers/make_moe_gguf.py: a big random-weight qwen3moe GGUF for speed
experiments against llama.cpp (experiments/vs-llama-cpp.json, docs/PEERS.md).

Writes the weights directly in the quantised domain, streaming one tensor at
a time (memory: one layer's expert tensor, ~115 MB for the 30B shape), so a
17 GB file needs no quantiser and no float copy:
  - experts (ffn_{gate,up,down}_exps): Q4_K (default) or Q4_0 blocks of random
    bits with valid f16 scales (d, dmin small, positive, finite: no NaN/Inf);
  - attention, token embedding and output: Q8_0 (random int8, f16 scales);
  - norms and routers (ffn_gate_inp): F32 (norms around 1, so each seed's
    norms differ and `spill exp` can tell two files apart by their CRC).
Magnitudes follow 1/sqrt(fan_in) so the 48-layer forward pass stays finite.
Random models are for speed, not for agreement (docs/PEERS.md).

The shape `qwen3-30b-a3b` is Qwen3-30B-A3B's config.json: 48 layers, d_model
2048, 32 query / 4 KV heads of 128, 128 experts, top-8, expert FFN 768,
vocabulary 151936, rope theta 1e6, rms eps 1e-6, untied output. The
vocabulary is a byte-level BPE one (256 byte symbols, then two- and
three-symbol tokens each with its merge), unique tokens, as llama.cpp needs.

  make_moe_gguf.py OUT.gguf [--shape qwen3-30b-a3b|small] [--experts Q4_K|Q4_0]
                   [--seed N] [--layers N]
--layers N overrides the shape's layer count (e.g. 6 layers of the 30B shape,
~2.7 GB, for profiling a fitted token without the 17 GB file).
The file is written to OUT.gguf.tmp and renamed when complete.
"""
import argparse
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import ckpt_io as ck  # noqa: E402  (GGUF value encoding and ggml type ids)

SHAPES = {
    # Qwen3-30B-A3B (config.json of Qwen/Qwen3-30B-A3B)
    "qwen3-30b-a3b": dict(L=48, D=2048, H=32, Hk=4, d=128, E=128, k=8, F=768, V=151936, ctx=40960),
    # a few hundred MB, same proportions per layer, for trying the pipeline
    "small": dict(L=4, D=2048, H=32, Hk=4, d=128, E=128, k=8, F=768, V=151936, ctx=40960),
}


def vocab(n):
    """Unique byte-level BPE tokens and their merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    sym = dict(zip(bs, (chr(c) for c in cs)))
    s = [sym[b] for b in range(256)]
    toks, merges = s[:], []
    for a in range(256):
        for b in range(256):
            if len(toks) == n:
                return toks, merges
            toks.append(s[a] + s[b])
            merges.append(s[a] + " " + s[b])
    i = 0
    while len(toks) < n:  # three symbols: (two-symbol token) + symbol
        left = toks[256 + i // 256]
        right = s[i % 256]
        toks.append(left + right)
        merges.append(left + " " + right)
        i += 1
    return toks, merges


def q8_0(rng, rows, cols, scale):
    """Q8_0 blocks: f16 d then 32 int8; |w| <= 127 d, std ~ 73 d = scale."""
    nb = rows * cols // 32
    b = np.frombuffer(rng.bytes(nb * 34), dtype=np.uint8).reshape(nb, 34).copy()
    b[:, 2:][b[:, 2:] == 0x80] = 0x81  # int8 -128 -> -127, as ggml's quantiser never writes it
    d = (rng.uniform(0.5, 1.5, nb) * scale / 73.0).astype(np.float16)
    b[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    return b


def q4_0(rng, rows, cols, scale):
    """Q4_0 blocks: f16 d then 16 bytes of nibbles; w = d (q - 8), std ~ 4.6 d."""
    nb = rows * cols // 32
    b = np.frombuffer(rng.bytes(nb * 18), dtype=np.uint8).reshape(nb, 18).copy()
    d = (rng.uniform(0.5, 1.5, nb) * scale / 4.6).astype(np.float16)
    b[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    return b


def q4_k(rng, rows, cols, scale):
    """Q4_K super-blocks: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128
    bytes of nibbles, all random but d and dmin: w = d sc q - dmin m has
    mean ~ 236 d - 31.5 dmin (~0 with dmin = 7.5 d) and std ~ 245 d."""
    nb = rows * cols // 256
    b = np.frombuffer(rng.bytes(nb * 144), dtype=np.uint8).reshape(nb, 144).copy()
    d = rng.uniform(0.5, 1.5, nb) * scale / 245.0
    dmin = d * 7.5 * rng.uniform(0.9, 1.1, nb)
    b[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    b[:, 2:4] = dmin.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return b


QUANT = {ck.GGML_Q8_0: q8_0, ck.GGML_Q4_0: q4_0, ck.GGML_Q4_K: q4_k}


def tensors(c, expert_type):
    """(name, ggml type, numpy shape, scale) in file order."""
    D, F, E, H, Hk, d = c["D"], c["F"], c["E"], c["H"], c["Hk"], c["d"]
    T = [("token_embd.weight", ck.GGML_Q8_0, (c["V"], D), 0.02),
         ("output_norm.weight", ck.GGML_F32, (D,), None),
         ("output.weight", ck.GGML_Q8_0, (c["V"], D), D ** -0.5)]
    for l in range(c["L"]):
        b = f"blk.{l}."
        T += [(b + "attn_norm.weight", ck.GGML_F32, (D,), None),
              (b + "attn_q.weight", ck.GGML_Q8_0, (H * d, D), D ** -0.5),
              (b + "attn_k.weight", ck.GGML_Q8_0, (Hk * d, D), D ** -0.5),
              (b + "attn_v.weight", ck.GGML_Q8_0, (Hk * d, D), D ** -0.5),
              (b + "attn_output.weight", ck.GGML_Q8_0, (D, H * d), (H * d) ** -0.5),
              (b + "attn_q_norm.weight", ck.GGML_F32, (d,), None),
              (b + "attn_k_norm.weight", ck.GGML_F32, (d,), None),
              (b + "ffn_norm.weight", ck.GGML_F32, (D,), None),
              (b + "ffn_gate_inp.weight", ck.GGML_F32, (E, D), D ** -0.5),
              (b + "ffn_gate_exps.weight", expert_type, (E, F, D), D ** -0.5),
              (b + "ffn_up_exps.weight", expert_type, (E, F, D), D ** -0.5),
              (b + "ffn_down_exps.weight", expert_type, (E, D, F), F ** -0.5)]
    return T


def nbytes(ty, shape):
    be, bb = ck.GGML_BLOCK[ty]
    n = int(np.prod(shape))
    assert n % be == 0 and shape[-1] % be == 0, (ty, shape)
    return n // be * bb


def data(rng, ty, shape, scale):
    if ty == ck.GGML_F32:
        if scale is None:  # a norm
            return rng.uniform(0.8, 1.2, shape).astype(np.float32).tobytes()
        return (rng.standard_normal(shape) * scale).astype(np.float32).tobytes()
    rows = int(np.prod(shape[:-1]))
    return QUANT[ty](rng, rows, shape[-1], scale).tobytes()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="qwen3-30b-a3b", choices=sorted(SHAPES))
    ap.add_argument("--experts", default="Q4_K", choices=["Q4_K", "Q4_0"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count")
    a = ap.parse_args(argv)
    c = dict(SHAPES[a.shape])
    if a.layers < 0:
        ap.error("--layers must be positive")
    if a.layers:
        c["L"] = a.layers
    et = {"Q4_K": ck.GGML_Q4_K, "Q4_0": ck.GGML_Q4_0}[a.experts]
    A = "qwen3moe"
    toks, merges = vocab(c["V"])
    kv = [("general.architecture", A), ("general.name", f"{a.shape}{'-L%d' % a.layers if a.layers else ''}-{a.experts}-seed{a.seed}"),
          ("general.alignment", 32),
          (A + ".context_length", c["ctx"]), (A + ".embedding_length", c["D"]),
          (A + ".block_count", c["L"]), (A + ".feed_forward_length", 6144),
          (A + ".expert_feed_forward_length", c["F"]),
          (A + ".attention.head_count", c["H"]), (A + ".attention.head_count_kv", c["Hk"]),
          (A + ".attention.key_length", c["d"]), (A + ".attention.value_length", c["d"]),
          (A + ".rope.freq_base", 1000000.0), (A + ".attention.layer_norm_rms_epsilon", 1e-6),
          (A + ".expert_count", c["E"]), (A + ".expert_used_count", c["k"]),
          ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "gpt-2"),
          ("tokenizer.ggml.tokens", toks),
          ("tokenizer.ggml.token_type", np.ones(len(toks), dtype=np.int32)),
          ("tokenizer.ggml.merges", merges),
          ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2),
          ("tokenizer.ggml.add_bos_token", False)]
    T = tensors(c, et)
    infos, off = [], 0
    for name, ty, shape, _ in T:
        ne = list(reversed(shape))
        infos.append(ck._gstr(name) + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", ty, off))
        off += nbytes(ty, shape) + (-nbytes(ty, shape) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(T), len(kv))
    for k, v in kv:
        t, b = ck._gval(v)
        head += ck._gstr(k) + struct.pack("<I", t) + b
    head += b"".join(infos)
    head += b"\0" * (-len(head) % 32)
    total = len(head) + off
    rng = np.random.default_rng(a.seed)
    tmp = a.out + ".tmp"
    t0, done = time.time(), len(head)
    with open(tmp, "wb") as f:
        f.write(head)
        for i, (name, ty, shape, scale) in enumerate(T):
            raw = data(rng, ty, shape, scale)
            assert len(raw) == nbytes(ty, shape)
            f.write(raw)
            f.write(b"\0" * (-len(raw) % 32))
            done += len(raw) + (-len(raw) % 32)
            if name.endswith("down_exps.weight") or i == len(T) - 1:
                print(f"{name}: {done / 1e9:.2f} / {total / 1e9:.2f} GB, {time.time() - t0:.0f} s",
                      file=sys.stderr, flush=True)
        f.flush()
        os.fsync(f.fileno())
    assert os.path.getsize(tmp) == total
    os.replace(tmp, a.out)
    print(f"{a.out}: {total} bytes ({total / 2**30:.2f} GiB), {len(T)} tensors, "
          f"shape {a.shape}, experts {a.experts}, seed {a.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
