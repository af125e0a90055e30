#!/usr/bin/python3
"""qwen35moe_ref: tiny random Qwen3.5-MoE GGUFs (llama.cpp's `qwen35moe`).

Role: tests only (the llama.cpp oracle, tools/peers/llama_oracle_test.sh).
`make-gguf` writes a GGUF laid out as llama.cpp's qwen35moe loader reads it
(src/models/qwen35moe.cpp): three Gated DeltaNet layers then one gated
attention layer per four (full_attention_interval 4, or the
attention.recurrent_layers bool array with --recurrent-array), the fused
attn_qkv with the v heads in llama.cpp's tiled order, attn_gate (z),
ssm_conv1d, ssm_dt.bias, ssm_a (= -exp(A_log)), ssm_alpha, ssm_beta,
ssm_norm, ssm_out; attention layers with attn_q holding each head's query
then its gate, per-head q/k norms, IMRoPE sections that rotate every pair
for text; softmax-routed experts and a shared expert with its sigmoid gate
(ffn_gate_inp_shexp). Hostile fixtures: --set-kv KEY=JSON (null drops the
key) and --drop TENSOR. The numbers are random; the maths is judged by
running llama.cpp and spill on the same file.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402

# attention: 4 heads of 16, 2 kv heads, RoPE on 8 dims (sections 2,1,1,0 = 4 pairs);
# GDN: 2 k heads, 4 v heads of 16, conv 4; 8 experts top-3 of 32, shared expert 64
DIMS = dict(V=300, D=64, L=4, H=4, Hk=2, d=16, rd=8, lk=2, lv=4, ld=16, K=4, E=8, k=3, F=32, Fs=64)


def random_tensors(seed, L):
    """[(gguf name, numpy f32 array)] in file order (numpy shapes = ggml reversed)."""
    c = dict(DIMS, L=L)
    r = np.random.default_rng(seed)
    D, H, Hk, d, E, F, Fs = (c[x] for x in ("D", "H", "Hk", "d", "E", "F", "Fs"))
    nv, C = c["lv"] * c["ld"], (2 * c["lk"] + c["lv"]) * c["ld"]

    def mat(*shape, s=1.0):
        return (s * r.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    t = [("token_embd.weight", r.standard_normal((c["V"], D)).astype(np.float32)),
         ("output_norm.weight", norm(D)), ("output.weight", mat(c["V"], D))]
    for l in range(L):
        b = f"blk.{l}."
        t.append((b + "attn_norm.weight", norm(D)))
        if (l + 1) % 4 != 0:  # Gated DeltaNet
            t += [(b + "attn_qkv.weight", mat(C, D)), (b + "attn_gate.weight", mat(nv, D)),
                  (b + "ssm_conv1d.weight", (0.5 * r.standard_normal((C, c["K"]))).astype(np.float32)),
                  (b + "ssm_dt.bias", (0.5 * r.standard_normal(c["lv"])).astype(np.float32)),
                  (b + "ssm_a", (-np.exp(r.uniform(0.0, np.log(4.0), c["lv"]))).astype(np.float32)),
                  (b + "ssm_alpha.weight", mat(c["lv"], D)), (b + "ssm_beta.weight", mat(c["lv"], D)),
                  (b + "ssm_norm.weight", norm(c["ld"])), (b + "ssm_out.weight", mat(D, nv))]
        else:  # gated attention
            t += [(b + "attn_q.weight", mat(2 * H * d, D)), (b + "attn_k.weight", mat(Hk * d, D)),
                  (b + "attn_v.weight", mat(Hk * d, D)), (b + "attn_q_norm.weight", norm(d)),
                  (b + "attn_k_norm.weight", norm(d)), (b + "attn_output.weight", mat(D, H * d))]
        t += [(b + "post_attention_norm.weight", norm(D)), (b + "ffn_gate_inp.weight", mat(E, D, s=3.0)),
              (b + "ffn_gate_exps.weight", mat(E, F, D)), (b + "ffn_up_exps.weight", mat(E, F, D)),
              (b + "ffn_down_exps.weight", mat(E, D, F)),
              (b + "ffn_gate_inp_shexp.weight", (r.standard_normal(D) / np.sqrt(D)).astype(np.float32)),
              (b + "ffn_gate_shexp.weight", mat(Fs, D)), (b + "ffn_up_shexp.weight", mat(Fs, D)),
              (b + "ffn_down_shexp.weight", mat(D, Fs))]
    return t, c


def make_gguf(out, ty, seed, L=4, vocab=False, recurrent_array=False, set_kv=(), drop=()):
    t, c = random_tensors(seed, L)
    a = "qwen35moe"
    kv = [("general.architecture", a), ("general.name", "tiny-qwen35moe"), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]), (a + ".block_count", L),
          (a + ".attention.head_count", c["H"]), (a + ".attention.head_count_kv", c["Hk"]),
          (a + ".attention.key_length", c["d"]), (a + ".attention.value_length", c["d"]),
          (a + ".rope.freq_base", 1000000.0), (a + ".attention.layer_norm_rms_epsilon", 1e-6),
          (a + ".rope.dimension_count", c["rd"]), (a + ".rope.dimension_sections", [2, 1, 1, 0]),
          (a + ".expert_count", c["E"]), (a + ".expert_used_count", c["k"]),
          (a + ".expert_feed_forward_length", c["F"]), (a + ".expert_shared_feed_forward_length", c["Fs"]),
          (a + ".ssm.conv_kernel", c["K"]), (a + ".ssm.state_size", c["ld"]), (a + ".ssm.group_count", c["lk"]),
          (a + ".ssm.time_step_rank", c["lv"]), (a + ".ssm.inner_size", c["lv"] * c["ld"])]
    if recurrent_array:
        kv.append((a + ".attention.recurrent_layers", [(l + 1) % 4 != 0 for l in range(L)]))
    else:
        kv.append((a + ".full_attention_interval", 4))
    kv += ir.gguf_tokenizer(c["V"], vocab, False)
    for item in set_kv:
        key, val = item.split("=", 1)
        val = json.loads(val)
        kv = [(k, x) for k, x in kv if k != key] + ([] if val is None else [(key, val)])
    gt = ir.GG_TYPES[ty]
    T = []
    for name, arr in t:
        # norms, biases, ssm_a, the conv and the shared gate stay F32 (llama.cpp's converter)
        small = arr.ndim == 1 or "ssm_conv1d" in name
        T.append((name, ck.GGML_F32 if small else gt, arr))
    ck.write_gguf(out, kv, [x for x in T if x[0] not in drop])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--type", default="F32", choices=["F32", "F16", "Q8_0"])
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary llama.cpp loads")
    g.add_argument("--recurrent-array", action="store_true", help="attention.recurrent_layers, not the interval")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--set-kv", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    g.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    a = ap.parse_args(argv)
    make_gguf(a.out, a.type, a.seed, a.layers, a.vocab, a.recurrent_array, a.set_kv, a.drop)


if __name__ == "__main__":
    main()
