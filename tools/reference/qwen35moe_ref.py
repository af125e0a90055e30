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
running llama.cpp and spill on the same file. K-quant types (Q4_K, Q5_K,
Q6_K) widen the model so every matrix row is whole 256-element
super-blocks (KQ_DIMS) and write random super-blocks (ckpt_io.random_kquant)
in place of the quantised f32 values.

`make-hf` writes the same model as the released HF checkpoint stores it.
`logits` is a float64 forward pass in transformers' Qwen3_5Moe conventions,
of a make-hf directory or of a GGUF (its tensors dequantised with ckpt_io's
own dequantisers, then reordered into the checkpoint's layout exactly as
make-hf does); with --ggml-act the input of every K-quant matrix is first
rounded to Q8_K blocks as ggml's CPU backend does (import_ref.q8_k_round),
which explains llama.cpp's logits rather than spill's.
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
# K-quant rows are whole 256-element super-blocks: d_model, the GDN value width
# (lv ld), the attention output (H d) and the expert widths are 256
KQ_DIMS = dict(D=256, d=64, ld=64, F=256, Fs=256)
KQ_TYPES = ("Q4_K", "Q5_K", "Q6_K")


def zc(w):
    """A zero-centred HF norm weight w (f32) as the GGUF holds it: w + 1 in f32."""
    return np.asarray(w, dtype=np.float32) + np.float32(1.0)


def neg_exp(a_log):
    """HF A_log (f32) as the GGUF's ssm_a: -exp in double, rounded once to f32."""
    return (-np.exp(np.asarray(a_log, dtype=np.float32).astype(np.float64))).astype(np.float32)


def random_tensors(seed, L, kq=False):
    """[(gguf name, numpy f32 array)] in file order (numpy shapes = ggml reversed);
    kq: the K-quant sizes (KQ_DIMS)."""
    c = dict(DIMS, L=L, **(KQ_DIMS if kq else {}))
    r = np.random.default_rng(seed)
    D, H, Hk, d, E, F, Fs = (c[x] for x in ("D", "H", "Hk", "d", "E", "F", "Fs"))
    nv, C = c["lv"] * c["ld"], (2 * c["lk"] + c["lv"]) * c["ld"]

    def mat(*shape, s=1.0):
        return (s * r.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):  # llama.cpp's converter: the HF zero-centred weight w plus 1, in f32
        return zc(0.2 * r.standard_normal(n))

    t = [("token_embd.weight", r.standard_normal((c["V"], D)).astype(np.float32)),
         ("output_norm.weight", norm(D)), ("output.weight", mat(c["V"], D))]
    for l in range(L):
        b = f"blk.{l}."
        t.append((b + "attn_norm.weight", norm(D)))
        if (l + 1) % 4 != 0:  # Gated DeltaNet
            t += [(b + "attn_qkv.weight", mat(C, D)), (b + "attn_gate.weight", mat(nv, D)),
                  (b + "ssm_conv1d.weight", (0.5 * r.standard_normal((C, c["K"]))).astype(np.float32)),
                  (b + "ssm_dt.bias", (0.5 * r.standard_normal(c["lv"])).astype(np.float32)),
                  (b + "ssm_a", neg_exp(r.uniform(0.0, np.log(4.0), c["lv"]).astype(np.float32))),
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


def qwen35_tokenizer(n):
    """tokenizer.ggml.* of a byte-level BPE of n tokens with pre "qwen35"
    (llama.cpp's QWEN35 split: Qwen2's with combining marks kept in words):
    import_ref's letter pairs, the last ones replaced by merges whose result
    depends on the split (a letter with a following U+0301 / U+0308, which
    NFC leaves alone after x and q; a mark after punctuation; digits one by
    one), so Qwen2's split gives other ids."""
    toks, merges = ir.byte_level_vocab(n)
    sym = ir._byte_symbols()
    acute = sym[0xCC] + sym[0x81]   # U+0301
    diaer = sym[0xCC] + sym[0x88]   # U+0308
    extra = [(sym[0xCC], sym[0x81]), (sym[0xCC], sym[0x88]), ("x", acute), ("q", diaer), ("x" + acute, "y"),
             ("!", acute), ("1", "2"), ("\u0120", "x")]
    toks, merges = toks[:n - len(extra)], merges[:n - 256 - len(extra)]
    for x, y in extra:
        toks.append(x + y)
        merges.append(x + " " + y)
    return [("tokenizer.ggml.pre", "qwen35"), ("tokenizer.ggml.tokens", toks),
            ("tokenizer.ggml.token_type", np.ones(len(toks), dtype=np.int32)), ("tokenizer.ggml.merges", merges),
            ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.eos_token_id", 2),
            ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.add_bos_token", False)]


def make_gguf(out, ty, seed, L=4, vocab=False, recurrent_array=False, set_kv=(), drop=()):
    kq = ty in KQ_TYPES
    t, c = random_tensors(seed, L, kq)
    krng = np.random.default_rng(seed + 1000)
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
    kv += qwen35_tokenizer(c["V"]) if vocab else ir.gguf_tokenizer(c["V"], False, False)
    for item in set_kv:
        key, val = item.split("=", 1)
        val = json.loads(val)
        kv = [(k, x) for k, x in kv if k != key] + ([] if val is None else [(key, val)])
    gt = ir.GG_TYPES[ty]
    T = []
    for name, arr in t:
        # norms, biases, ssm_a, the conv and the shared gate stay F32 (llama.cpp's converter)
        small = arr.ndim == 1 or "ssm_conv1d" in name
        if small:
            T.append((name, ck.GGML_F32, arr))
        elif kq:  # random super-blocks of the array's shape: the reference dequantises the same blocks
            T.append((name, gt, ck.random_kquant(gt, arr.shape, krng, 1.0 / np.sqrt(arr.shape[-1]))))
        else:
            T.append((name, gt, arr))
    ck.write_gguf(out, kv, [x for x in T if x[0] not in drop])


def grouped(a, c, axis=0, hd=None, off=0):
    """llama.cpp's tiled v-head order (head v Hk + g) back to the HF
    checkpoint's grouped one (head g r + v) along axis, from index off on,
    in blocks of hd (default the GDN head size)."""
    hd = c["ld"] if hd is None else hd
    Hk, r = c["lk"], c["lv"] // c["lk"]
    a = np.moveaxis(a, axis, 0)
    head, tail = a[:off], a[off:]
    t = tail.reshape((r, Hk, hd) + tail.shape[1:]).swapaxes(0, 1).reshape(tail.shape)
    return np.ascontiguousarray(np.moveaxis(np.concatenate([head, t]), 0, axis))


def hf_tensors(seed, L, flat=False, per_expert=False):
    """The same model as make_gguf's, as the released HF checkpoint stores
    it: [(name, f32 array)]."""
    t, c = random_tensors(seed, L)
    out = [(n, a) for n, a, _ in to_hf(dict(t), c, L, flat, per_expert)]
    # the MTP layer and (released form) the vision tower: skipped by the import
    r = np.random.default_rng(seed + 7)
    out += [("mtp.fc.weight", r.standard_normal((c["D"], 2 * c["D"])).astype(np.float32)),
            ("mtp.norm.weight", r.standard_normal(c["D"]).astype(np.float32)),
            ("mtp.layers.0.input_layernorm.weight", r.standard_normal(c["D"]).astype(np.float32))]
    if not flat:
        out.append(("model.visual.blocks.0.attn.qkv.weight", r.standard_normal((24, 8)).astype(np.float32)))
    return out, c


def to_hf(g, c, L, flat=False, per_expert=False):
    """GGUF tensors {name: array} (llama.cpp's layout: tiled v heads, norms
    w + 1, ssm_a) -> [(HF name, array, GGUF name it came from)] in the
    checkpoint's layout. Exact in float64 (f32 arrays stay f32: make-hf)."""
    one = np.float32(1.0)
    m = "model." if flat else "model.language_model."
    qk = 2 * c["lk"] * c["ld"]
    out = [(m + "embed_tokens.weight", g["token_embd.weight"], "token_embd.weight"),
           (m + "norm.weight", g["output_norm.weight"] - one, "output_norm.weight"),
           ("lm_head.weight", g["output.weight"], "output.weight")]

    def a_log(x):  # -exp(A_log) -> A_log, in the array's own precision
        return np.log(-x.astype(np.float64)).astype(x.dtype)
    for l in range(L):
        b, p = f"blk.{l}.", f"{m}layers.{l}."
        out.append((p + "input_layernorm.weight", g[b + "attn_norm.weight"] - one, b + "attn_norm.weight"))
        if b + "attn_qkv.weight" in g:  # Gated DeltaNet
            la = p + "linear_attn."
            out += [(la + "in_proj_qkv.weight", grouped(g[b + "attn_qkv.weight"], c, off=qk), b + "attn_qkv.weight"),
                    (la + "in_proj_z.weight", grouped(g[b + "attn_gate.weight"], c), b + "attn_gate.weight"),
                    (la + "conv1d.weight", grouped(g[b + "ssm_conv1d.weight"], c, off=qk)[:, None, :],
                     b + "ssm_conv1d.weight"),
                    (la + "dt_bias", grouped(g[b + "ssm_dt.bias"], c, hd=1), b + "ssm_dt.bias"),
                    (la + "A_log", grouped(a_log(g[b + "ssm_a"]), c, hd=1), b + "ssm_a"),
                    (la + "in_proj_a.weight", grouped(g[b + "ssm_alpha.weight"], c, hd=1), b + "ssm_alpha.weight"),
                    (la + "in_proj_b.weight", grouped(g[b + "ssm_beta.weight"], c, hd=1), b + "ssm_beta.weight"),
                    # the gated norm: not zero-centred
                    (la + "norm.weight", g[b + "ssm_norm.weight"], b + "ssm_norm.weight"),
                    (la + "out_proj.weight", grouped(g[b + "ssm_out.weight"], c, axis=1), b + "ssm_out.weight")]
        else:
            sa = p + "self_attn."
            out += [(sa + "q_proj.weight", g[b + "attn_q.weight"], b + "attn_q.weight"),
                    (sa + "k_proj.weight", g[b + "attn_k.weight"], b + "attn_k.weight"),
                    (sa + "v_proj.weight", g[b + "attn_v.weight"], b + "attn_v.weight"),
                    (sa + "q_norm.weight", g[b + "attn_q_norm.weight"] - one, b + "attn_q_norm.weight"),
                    (sa + "k_norm.weight", g[b + "attn_k_norm.weight"] - one, b + "attn_k_norm.weight"),
                    (sa + "o_proj.weight", g[b + "attn_output.weight"], b + "attn_output.weight")]
        out += [(p + "post_attention_layernorm.weight", g[b + "post_attention_norm.weight"] - one,
                 b + "post_attention_norm.weight"),
                (p + "mlp.gate.weight", g[b + "ffn_gate_inp.weight"], b + "ffn_gate_inp.weight"),
                (p + "mlp.shared_expert_gate.weight", g[b + "ffn_gate_inp_shexp.weight"][None, :],
                 b + "ffn_gate_inp_shexp.weight")]
        for x, h in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            src = b + f"ffn_{x}_shexp.weight"
            out.append((p + f"mlp.shared_expert.{h}.weight", g[src], src))
        ge, ue, de = (g[b + f"ffn_{x}_exps.weight"] for x in ("gate", "up", "down"))
        if per_expert:
            for e in range(c["E"]):
                out += [(p + f"mlp.experts.{e}.gate_proj.weight", ge[e], b + "ffn_gate_exps.weight"),
                        (p + f"mlp.experts.{e}.up_proj.weight", ue[e], b + "ffn_up_exps.weight"),
                        (p + f"mlp.experts.{e}.down_proj.weight", de[e], b + "ffn_down_exps.weight")]
        else:
            out += [(p + "mlp.experts.gate_up_proj", np.concatenate([ge, ue], axis=1), b + "ffn_gate_exps.weight"),
                    (p + "mlp.experts.down_proj", de, b + "ffn_down_exps.weight")]
    return out


def hf_config(c, L, flat=False):
    """config.json as Qwen/Qwen3.5-35B-A3B ships it (keys and nesting), with
    the tiny model's sizes; flat: Qwen3_5MoeForCausalLM's."""
    text = {"model_type": "qwen3_5_moe_text", "attention_bias": False, "attention_dropout": 0.0,
            "attn_output_gate": True, "dtype": "bfloat16", "eos_token_id": 2, "full_attention_interval": 4,
            "head_dim": c["d"], "hidden_act": "silu", "hidden_size": c["D"], "initializer_range": 0.02,
            "layer_types": ["full_attention" if (l + 1) % 4 == 0 else "linear_attention" for l in range(L)],
            "linear_conv_kernel_dim": c["K"], "linear_key_head_dim": c["ld"], "linear_num_key_heads": c["lk"],
            "linear_num_value_heads": c["lv"], "linear_value_head_dim": c["ld"], "mamba_ssm_dtype": "float32",
            "max_position_embeddings": 4096, "moe_intermediate_size": c["F"], "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False, "num_attention_heads": c["H"], "num_experts": c["E"],
            "num_experts_per_tok": c["k"], "num_hidden_layers": L, "num_key_value_heads": c["Hk"],
            "output_router_logits": False, "pad_token_id": None, "partial_rotary_factor": c["rd"] / c["d"],
            "rms_norm_eps": 1e-6, "router_aux_loss_coef": 0.001,
            "rope_parameters": {"mrope_interleaved": True, "mrope_section": [2, 1, 1], "rope_type": "default",
                                "rope_theta": 1000000.0, "partial_rotary_factor": c["rd"] / c["d"]},
            "shared_expert_intermediate_size": c["Fs"], "tie_word_embeddings": False, "use_cache": True,
            "vocab_size": c["V"]}
    if flat:
        return dict(text, architectures=["Qwen3_5MoeForCausalLM"], transformers_version="5.0.0")
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "image_token_id": 248056,
            "model_type": "qwen3_5_moe", "text_config": text, "tie_word_embeddings": False,
            "transformers_version": "4.57.0.dev0", "video_token_id": 248057, "vision_end_token_id": 248054,
            "vision_start_token_id": 248053,
            "vision_config": {"model_type": "qwen3_5_moe_vision", "depth": 1, "hidden_size": 8}}


def make_hf(out, dtype, seed, L=4, flat=False, per_expert=False, set_cfg=(), drop=(), add=()):
    """The HF checkpoint directory. Hostile fixtures: set_cfg "KEY=JSON" in
    text_config ("top.KEY=JSON" at the top level; null drops the key),
    drop / add name tensors left out / added (a small random matrix)."""
    os.makedirs(out, exist_ok=True)
    t, c = hf_tensors(seed, L, flat, per_expert)
    cfg = hf_config(c, L, flat)
    for item in set_cfg:
        key, val = item.split("=", 1)
        d = cfg if flat or key.startswith("top.") else cfg["text_config"]
        key = key[4:] if key.startswith("top.") else key
        if json.loads(val) is None:
            d.pop(key, None)
        else:
            d[key] = json.loads(val)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    t = [x for x in t if x[0] not in drop] + [(n, np.ones((4, 4), np.float32)) for n in add]
    # vectors and the small parameters stay f32 as in the released checkpoint's A_log; the rest in dtype
    ents = [(n, "F32" if a.ndim == 1 else dtype, a) for n, a in t]
    ck.write_safetensors(os.path.join(out, "model.safetensors"), ents)


# ------------------------------------------------------------------ HF forward

def hf_logits(d, tokens):
    """float64 forward pass of an HF checkpoint directory written by
    make-hf (forward()). -> (n_tokens, V)."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    tc = dict(cfg, **cfg.get("text_config", {}))
    w = {k: v.astype(np.float64) for k, v in ck.read_checkpoint_dir(d).items()}
    return forward(tc, w, tokens)


class GgmlAct:
    """A K-quant matrix applied the way ggml's CPU backend applies it: the
    input rounded to Q8_K blocks of 256 first (vec_dot_type of Q4_K, Q5_K,
    Q6_K). Only for `logits --ggml-act`, which explains llama.cpp's logits;
    the plain reference (what spill with act_quant f32 must match) keeps
    float64 inputs. The rounding is per 256-block, so it is the same in the
    checkpoint's v-head order as in llama.cpp's tiled one when a matrix's
    input is one block (ssm_out's lv ld = 256 in KQ_DIMS)."""

    def __init__(self, w):
        self.w = w

    def __matmul__(self, x):
        return self.w @ ir.q8_k_round(x)


def gguf_model(path, ggml_act=False):
    """A qwen35moe GGUF as forward() takes it: (text config, {HF name:
    float64 array or GgmlAct}). The tensors are dequantised by ckpt_io
    (the GGUF's own blocks), then reordered into the checkpoint's layout by
    to_hf (exact in float64); the sizes and layer kinds come from the
    file's keys and tensors."""
    kv, t = ck.read_gguf(path)
    a = kv["general.architecture"]
    L = kv[a + ".block_count"] - kv.get(a + ".nextn_predict_layers", 0)
    g = {n: ck.gguf_tensor_f32(x).astype(np.float64) for n, x in t.items()}
    hd = kv[a + ".attention.key_length"]
    c = dict(lk=kv[a + ".ssm.group_count"], lv=kv[a + ".ssm.time_step_rank"], ld=kv[a + ".ssm.state_size"],
             E=kv[a + ".expert_count"])
    kinds = ["linear_attention" if f"blk.{l}.attn_qkv.weight" in t else "full_attention" for l in range(L)]
    tc = {"rms_norm_eps": kv[a + ".attention.layer_norm_rms_epsilon"],
          "num_attention_heads": kv[a + ".attention.head_count"],
          "num_key_value_heads": kv[a + ".attention.head_count_kv"], "head_dim": hd,
          "rope_parameters": {"rope_theta": kv[a + ".rope.freq_base"],
                              "partial_rotary_factor": kv[a + ".rope.dimension_count"] / hd},
          "linear_num_key_heads": c["lk"], "linear_num_value_heads": c["lv"], "linear_key_head_dim": c["ld"],
          "linear_conv_kernel_dim": kv[a + ".ssm.conv_kernel"], "num_experts": c["E"],
          "num_experts_per_tok": kv[a + ".expert_used_count"], "num_hidden_layers": L, "layer_types": kinds,
          "moe_intermediate_size": kv[a + ".expert_feed_forward_length"],
          "tie_word_embeddings": "output.weight" not in t}
    if tc["tie_word_embeddings"]:
        g["output.weight"] = g["token_embd.weight"]
    kq = (ck.GGML_Q4_K, ck.GGML_Q5_K, ck.GGML_Q6_K)
    w = {}
    for name, arr, src in to_hf(g, c, L, flat=True, per_expert=True):
        # the embedding is a row lookup (ggml_get_rows: no rounding)
        rounds = ggml_act and src != "token_embd.weight" and arr.ndim == 2 and t[src][0] in kq
        w[name] = GgmlAct(arr) if rounds else arr
    return tc, w


def forward(tc, w, tokens):
    """float64 forward pass as transformers' Qwen3_5Moe modelling code
    computes it (its own conventions: grouped v heads repeat_interleave'd
    over the k heads, zero-centred norms (1 + w), g = -exp(A_log) softplus(a
    + dt_bias), l2 norms with eps 1e-6): an independent check of the
    import's reorders and transforms. tc: the text config; w: {HF name:
    array}. -> (n_tokens, V)."""
    m = "model.language_model." if "model.language_model.embed_tokens.weight" in w else "model."
    eps, H, Hk, hd = tc["rms_norm_eps"], tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    rp = tc.get("rope_parameters", {})
    theta = rp.get("rope_theta", tc.get("rope_theta"))
    rd = int(hd * rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25)))
    nk, nv, dk, K = (tc[x] for x in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                      "linear_conv_kernel_dim"))
    E, k = tc["num_experts"], tc["num_experts_per_tok"]

    def zc_norm(x, wt):  # Qwen3_5MoeRMSNorm
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + wt)

    def l2(x):
        return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)

    def mlp(p, h):
        return w[p + "down_proj.weight"] @ (ir.silu(w[p + "gate_proj.weight"] @ h) * (w[p + "up_proj.weight"] @ h))

    L = tc["num_hidden_layers"]
    state = [None] * L
    hist = [[] for _ in range(L)]
    out = []
    for pos, tok in enumerate(tokens):
        x = w[m + "embed_tokens.weight"][tok].copy()
        for l in range(L):
            p = f"{m}layers.{l}."
            h = zc_norm(x, w[p + "input_layernorm.weight"])
            if tc["layer_types"][l] == "linear_attention":
                a = p + "linear_attn."
                hist[l].append(w[a + "in_proj_qkv.weight"] @ h)
                past = hist[l][-K:]
                past = [np.zeros_like(past[0])] * (K - len(past)) + past
                cw = w[a + "conv1d.weight"][:, 0, :]  # (C, K): tap j sees x[t - (K-1) + j]
                mixed = ir.silu(sum(cw[:, j] * past[j] for j in range(K)))
                q = l2(mixed[:nk * dk].reshape(nk, dk)) / np.sqrt(dk)
                kk = l2(mixed[nk * dk:2 * nk * dk].reshape(nk, dk))
                v = mixed[2 * nk * dk:].reshape(nv, dk)
                q, kk = np.repeat(q, nv // nk, axis=0), np.repeat(kk, nv // nk, axis=0)  # repeat_interleave
                beta = 1 / (1 + np.exp(-(w[a + "in_proj_b.weight"] @ h)))
                ain = w[a + "in_proj_a.weight"] @ h + w[a + "dt_bias"]
                g = -np.exp(w[a + "A_log"]) * np.logaddexp(0.0, ain)
                S = np.zeros((nv, dk, dk)) if state[l] is None else state[l]
                o = np.empty((nv, dk))
                for j in range(nv):
                    S[j] *= np.exp(g[j])
                    delta = (v[j] - kk[j] @ S[j]) * beta[j]
                    S[j] += np.outer(kk[j], delta)
                    o[j] = q[j] @ S[j]
                state[l] = S
                z = (w[a + "in_proj_z.weight"] @ h).reshape(nv, dk)
                o = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps) * w[a + "norm.weight"] * ir.silu(z)
                x = x + w[a + "out_proj.weight"] @ o.reshape(-1)
            else:
                a = p + "self_attn."
                qg = (w[a + "q_proj.weight"] @ h).reshape(H, 2 * hd)
                q, gate = qg[:, :hd], qg[:, hd:].reshape(-1)
                q = zc_norm(q, w[a + "q_norm.weight"])
                kk = zc_norm((w[a + "k_proj.weight"] @ h).reshape(Hk, hd), w[a + "k_norm.weight"])
                v = (w[a + "v_proj.weight"] @ h).reshape(Hk, hd)

                def rot(t):
                    return np.concatenate([ir.rope_neox(t[..., :rd], pos, theta), t[..., rd:]], axis=-1)
                q, kk = rot(q), rot(kk)
                hist[l].append((kk, v))
                Ks, Vs = np.stack([c[0] for c in hist[l]]), np.stack([c[1] for c in hist[l]])
                o = np.empty((H, hd))
                for j in range(H):
                    kh = j // (H // Hk)
                    o[j] = ir.softmax(Ks[:, kh] @ q[j] / np.sqrt(hd)) @ Vs[:, kh]
                x = x + w[a + "o_proj.weight"] @ (o.reshape(-1) / (1 + np.exp(-gate)))
            h = zc_norm(x, w[p + "post_attention_layernorm.weight"])
            probs = ir.softmax(w[p + "mlp.gate.weight"] @ h)
            sel = np.argsort(-probs, kind="stable")[:k]
            y = np.zeros_like(x)
            gu, dn = w.get(p + "mlp.experts.gate_up_proj"), w.get(p + "mlp.experts.down_proj")
            F = tc["moe_intermediate_size"]
            for e in sel:
                if gu is not None:
                    ge, ue, de = gu[e][:F], gu[e][F:], dn[e]
                else:
                    ge, ue, de = (w[p + f"mlp.experts.{e}.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj"))
                y += probs[e] / probs[sel].sum() * (de @ (ir.silu(ge @ h) * (ue @ h)))
            sg = 1 / (1 + np.exp(-(w[p + "mlp.shared_expert_gate.weight"] @ h)))
            x = x + y + sg * mlp(p + "mlp.shared_expert.", h)
        head = w[m + "embed_tokens.weight"] if tc.get("tie_word_embeddings") else w["lm_head.weight"]
        out.append(head @ zc_norm(x, w[m + "norm.weight"]))
    return np.stack(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--type", default="F32", choices=["F32", "F16", "Q8_0"] + list(KQ_TYPES))
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary (pre qwen35) llama.cpp loads")
    g.add_argument("--recurrent-array", action="store_true", help="attention.recurrent_layers, not the interval")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--set-kv", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    g.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    h = sub.add_parser("make-hf", help="the same model as the released HF checkpoint stores it")
    h.add_argument("out")
    h.add_argument("--dtype", default="F32", choices=["F32", "BF16", "F16"])
    h.add_argument("--layers", type=int, default=4)
    h.add_argument("--seed", type=int, default=1)
    h.add_argument("--flat", action="store_true", help="Qwen3_5MoeForCausalLM (model.*, no text_config)")
    h.add_argument("--per-expert", action="store_true", help="mlp.experts.N.*_proj, not the fused tensors")
    h.add_argument("--set-cfg", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    h.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    h.add_argument("--add", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    lg = sub.add_parser("logits", help="float64 forward of a make-hf directory or a GGUF, compared with "
                        "spill's logits or written out")
    lg.add_argument("src", help="a make-hf directory or a .gguf")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--ggml-act", action="store_true",
                    help="GGUF: round K-quant matrices' inputs to Q8_K as ggml's CPU backend does")
    lg.add_argument("--out", metavar="FILE", help="write the logits, raw f32, all positions")
    lg.add_argument("--compare", metavar="FILE", help="raw f32 logits, all positions")
    lg.add_argument("--tol", type=float, default=1e-4, help="max |diff| / max |ref logit|")
    a = ap.parse_args(argv)
    if a.cmd == "logits":
        toks = [int(t) for t in a.tokens.split(",")]
        if a.src.endswith(".gguf"):
            ref = forward(*gguf_model(a.src, a.ggml_act), toks)
        elif a.ggml_act:
            sys.exit("--ggml-act needs a GGUF")
        else:
            ref = hf_logits(a.src, toks)
        if a.out:
            ref.astype("<f4").tofile(a.out)
        if not a.compare:
            return
        got = np.fromfile(a.compare, dtype="<f4").reshape(ref.shape)
        rel = float(np.max(np.abs(ref - got)) / np.max(np.abs(ref)))
        same = int(np.sum(np.argmax(ref, 1) == np.argmax(got, 1)))
        print(f"max_abs_diff/max_ref {rel:.3g}, argmax {same}/{len(toks)}")
        sys.exit(0 if rel <= a.tol and same == len(toks) else 2)
    if a.cmd == "make-hf":
        make_hf(a.out, a.dtype, a.seed, a.layers, a.flat, a.per_expert, a.set_cfg, a.drop, a.add)
        return
    make_gguf(a.out, a.type, a.seed, a.layers, a.vocab, a.recurrent_array, a.set_kv, a.drop)


if __name__ == "__main__":
    main()
