#!/usr/bin/python3
"""glm4moe_ref: tiny random GLM-4.5-family checkpoints and their logits
computed from the SOURCE files (float64 numpy).

Role: tests only (tools/reference/glm4moe_import_test.sh and the llama.cpp
oracle, tools/peers/llama_oracle_test.sh). `make-hf` writes a Hugging Face
checkpoint of model_type glm4_moe (config.json + safetensors, with the MTP
layer after the trunk as the released checkpoints carry it); `make-gguf` a
GGUF glm4moe laid out as llama.cpp's converter (conversion/glm.py) writes
it: block_count includes nextn_predict_layers, the MTP layer's tensors
(blk.L.nextn.*) after the trunk, q/k/v biases, post_attention_norm as the
FFN norm, exp_probs_b.bias. `logits` reads either with ckpt_io's own readers
and dequantisers and runs the forward pass as each model's own code defines
it: transformers' Glm4Moe for checkpoints, llama.cpp's glm4-moe.cpp for
GGUF. Both: q/k/v projections plus bias, per-head q/k RMSNorm when present,
rotate-half RoPE on the first rotary dims of each head (frequencies
theta^(-2i/rotary_dim); the rest unrotated), softmax(q.k / sqrt(head_dim)),
leading dense SwiGLU layers, then a sigmoid router: selection by score +
correction bias (group-limited by the sum of each group's two best when
n_group > 1; dropped groups 0.0 in the modelling code, -inf in llama.cpp),
weights the unbiased scores of the selected experts, normalised (sum + 1e-20
/ max(sum, 2^-14)), times routed_scaling_factor; plus the shared expert.
The MTP layers are never part of the forward pass. Nothing here reads a
spill container.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402

DIMS = dict(V=300, D=64, L=3, H=4, Hk=2, d=16, E=8, k=3, F=32, Fd=64, S=1, dense=1, mtp=1)
KQ_DIMS = dict(D=256, d=64, F=256, Fd=256)  # K-quant rows are whole 256-element super-blocks
# Q4_K_M: d_model and heads whole super-blocks, the down matrices' inputs
# (expert, shared and dense FFN widths) not, as GLM-4.5-Air's 1408 / 10944
MIX_DIMS = dict(D=256, d=64, F=96, Fd=160)

VARIANTS = {
    # GLM-4.5-Air: q/k/v biases, no q/k norm, routed scale 1, one shared expert
    "air": dict(qk_norm=False, bias=True, rsf=1.0, n_group=1, topk_group=1, prf=0.5, tied=False),
    # GLM-4.5 (355B): q/k norm, routed scale 2.5; here also expert groups and a tied head
    "full": dict(qk_norm=True, bias=True, rsf=2.5, n_group=4, topk_group=2, prf=0.5, tied=True),
    # without attention biases, rotary over a quarter of the head, 2 dense layers, 2 shared experts
    "plain": dict(qk_norm=True, bias=False, rsf=1.8, n_group=1, topk_group=1, prf=0.25, tied=False,
                  dense=2, L=4, S=2),
}


def dims(var, kq=False):
    c = dict(DIMS)
    v = VARIANTS[var]
    for key in ("dense", "L", "S"):
        if key in v:
            c[key] = v[key]
    if kq == "mix":
        c.update(MIX_DIMS)
    elif kq:
        c.update(KQ_DIMS)
    c["rd"] = int(c["d"] * v["prf"])
    return c


def random_weights(var, seed, kq=False):
    """{hf_name: f32 array} of a random model, HF Glm4Moe names (with the
    MTP layer model.layers.<L>.*)."""
    c = dims(var, kq)
    v = VARIANTS[var]
    r = np.random.default_rng(seed)
    D, H, Hk, d, E, F = (c[x] for x in ("D", "H", "Hk", "d", "E", "F"))

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def vec(n, s=0.3):
        return (s * r.standard_normal(n)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": r.standard_normal((c["V"], D)).astype(np.float32),
         "model.norm.weight": norm(D)}
    if not v["tied"]:
        w["lm_head.weight"] = mat(c["V"], D)
    for l in range(c["L"] + c["mtp"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
        w[p + "self_attn.q_proj.weight"] = mat(H * d, D)
        w[p + "self_attn.k_proj.weight"] = mat(Hk * d, D)
        w[p + "self_attn.v_proj.weight"] = mat(Hk * d, D)
        if v["bias"]:
            w[p + "self_attn.q_proj.bias"] = vec(H * d)
            w[p + "self_attn.k_proj.bias"] = vec(Hk * d)
            w[p + "self_attn.v_proj.bias"] = vec(Hk * d)
        if v["qk_norm"]:
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        w[p + "self_attn.o_proj.weight"] = mat(D, H * d)
        if l < c["dense"]:
            w[p + "mlp.gate_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.up_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.down_proj.weight"] = mat(D, c["Fd"])
            continue
        w[p + "mlp.gate.weight"] = mat(E, D) * 3
        w[p + "mlp.gate.e_score_correction_bias"] = vec(E)
        for e in range(E):
            w[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(F, D)
            w[p + f"mlp.experts.{e}.up_proj.weight"] = mat(F, D)
            w[p + f"mlp.experts.{e}.down_proj.weight"] = mat(D, F)
        S = c["S"] * F
        w[p + "mlp.shared_experts.gate_proj.weight"] = mat(S, D)
        w[p + "mlp.shared_experts.up_proj.weight"] = mat(S, D)
        w[p + "mlp.shared_experts.down_proj.weight"] = mat(D, S)
        if l >= c["L"]:  # the MTP layer's own parts
            w[p + "eh_proj.weight"] = mat(D, 2 * D)
            w[p + "enorm.weight"] = norm(D)
            w[p + "hnorm.weight"] = norm(D)
            w[p + "shared_head.norm.weight"] = norm(D)
    return w, c


def hf_config(var, c):
    v = VARIANTS[var]
    return {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "vocab_size": c["V"],
            "hidden_size": c["D"], "intermediate_size": c["Fd"], "moe_intermediate_size": c["F"],
            "num_hidden_layers": c["L"], "num_attention_heads": c["H"], "num_key_value_heads": c["Hk"],
            "head_dim": c["d"], "partial_rotary_factor": v["prf"], "n_shared_experts": c["S"],
            "n_routed_experts": c["E"], "num_experts_per_tok": c["k"], "first_k_dense_replace": c["dense"],
            "n_group": v["n_group"], "topk_group": v["topk_group"], "norm_topk_prob": True,
            "routed_scaling_factor": v["rsf"], "num_nextn_predict_layers": c["mtp"],
            "use_qk_norm": v["qk_norm"], "attention_bias": v["bias"], "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "rope_scaling": None,
            "tie_word_embeddings": v["tied"], "max_position_embeddings": 131072, "attention_dropout": 0.0,
            "initializer_range": 0.02, "pad_token_id": 0, "bos_token_id": None, "eos_token_id": 2,
            "torch_dtype": "bfloat16", "transformers_version": "4.54.0", "use_cache": True}


def make_hf(out, var, dtype, seed, shards=1):
    os.makedirs(out, exist_ok=True)
    w, c = random_weights(var, seed)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(var, c), f, indent=1)
    names = sorted(w)
    wm = {}
    for s in range(shards):
        fn = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        ents = ir.st_entries(w, names[s::shards], dtype)
        ck.write_safetensors(os.path.join(out, fn), ents)
        for n, _, _ in ents:
            wm[n] = fn
    if shards > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def glm_tokenizer(n):
    """tokenizer.ggml.* of a byte-level BPE of n tokens with pre "glm4"
    (llama.cpp's CHATGLM4 split): the letter pairs of import_ref's
    vocabulary, the last ones replaced by merges whose result depends on the
    split (digit runs, case-insensitive contractions, a space before a
    word), so a wrong pre-tokenizer changes the ids."""
    toks, merges = ir.byte_level_vocab(n)
    extra = [("1", "2"), ("12", "3"), ("4", "5"), ("'", "s"), ("'", "S"), ("\u0120", "a"), ("\u0120a", "b"),
             ("!", "a"), ("\u010a", "\u010a")]
    toks, merges = toks[:n - len(extra)], merges[:n - 256 - len(extra)]
    for x, y in extra:
        toks.append(x + y)
        merges.append(x + " " + y)
    return [("tokenizer.ggml.pre", "glm4"), ("tokenizer.ggml.tokens", toks),
            ("tokenizer.ggml.token_type", np.ones(len(toks), dtype=np.int32)), ("tokenizer.ggml.merges", merges),
            ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.eos_token_id", 2),
            ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.add_bos_token", False)]


def make_gguf(out, var, ty, seed, vocab=False, set_kv=(), drop=()):
    """GGUF glm4moe as llama.cpp's converter writes it (the MTP layer
    included). Hostile fixtures: set_kv "KEY=JSON" sets or adds a key (JSON
    null drops it), drop names tensors left out."""
    kq = ty in ("Q4_K", "Q5_K", "Q6_K")
    w, c = random_weights(var, seed, "mix" if ty == "Q4_K_M" else kq)
    v = VARIANTS[var]
    gt = ir.GG_TYPES[ty]
    krng = np.random.default_rng(seed + 1000)
    a = "glm4moe"
    kv = [("general.architecture", a), ("general.name", "tiny-glm-" + var), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]),
          (a + ".block_count", c["L"] + c["mtp"]), (a + ".feed_forward_length", c["Fd"]),
          (a + ".attention.head_count", c["H"]), (a + ".attention.head_count_kv", c["Hk"]),
          (a + ".attention.key_length", c["d"]), (a + ".attention.value_length", c["d"]),
          (a + ".rope.freq_base", 1000000.0), (a + ".attention.layer_norm_rms_epsilon", 1e-5),
          (a + ".rope.dimension_count", c["rd"]), (a + ".expert_count", c["E"]),
          (a + ".expert_used_count", c["k"]), (a + ".expert_feed_forward_length", c["F"]),
          (a + ".expert_shared_count", c["S"]), (a + ".leading_dense_block_count", c["dense"]),
          (a + ".expert_gating_func", 2), (a + ".expert_weights_scale", float(v["rsf"])),
          (a + ".expert_weights_norm", True), (a + ".nextn_predict_layers", c["mtp"])]
    if v["n_group"] > 1:
        kv += [(a + ".expert_group_count", v["n_group"]), (a + ".expert_group_used_count", v["topk_group"])]
    kv += glm_tokenizer(c["V"]) if vocab else ir.gguf_tokenizer(c["V"], False, False)
    for item in set_kv:
        key, val = item.split("=", 1)
        val = json.loads(val)
        kv = [(k, x) for k, x in kv if k != key] + ([] if val is None else [(key, val)])
    T = []
    f32 = ck.GGML_F32

    def mat(name, arr):
        t = mix_type(name, arr.shape[-1], c["L"] + c["mtp"], c["E"]) if ty == "Q4_K_M" else gt
        if t in (ck.GGML_Q4_K, ck.GGML_Q5_K, ck.GGML_Q6_K):
            # random super-blocks of the array's shape: the reference dequantises the same blocks
            T.append((name, t, ck.random_kquant(t, arr.shape, krng, 1.0 / np.sqrt(arr.shape[-1]))))
        else:  # quantised from the values by ckpt_io's quantisers (Q8_0, Q5_0, ...)
            T.append((name, t, arr))

    mat("token_embd.weight", w["model.embed_tokens.weight"])
    T.append(("output_norm.weight", f32, w["model.norm.weight"]))
    if "lm_head.weight" in w:
        mat("output.weight", w["lm_head.weight"])
    for l in range(c["L"] + c["mtp"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        T.append((b + "attn_norm.weight", f32, w[p + "input_layernorm.weight"]))
        for x in "qkv":
            mat(b + f"attn_{x}.weight", w[p + f"self_attn.{x}_proj.weight"])
            if v["bias"]:
                T.append((b + f"attn_{x}.bias", f32, w[p + f"self_attn.{x}_proj.bias"]))
        if v["qk_norm"]:
            T.append((b + "attn_q_norm.weight", f32, w[p + "self_attn.q_norm.weight"]))
            T.append((b + "attn_k_norm.weight", f32, w[p + "self_attn.k_norm.weight"]))
        mat(b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])
        T.append((b + "post_attention_norm.weight", f32, w[p + "post_attention_layernorm.weight"]))
        if l < c["dense"]:
            for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
                mat(b + g + ".weight", w[p + "mlp." + h + ".weight"])
            continue
        mat(b + "ffn_gate_inp.weight", w[p + "mlp.gate.weight"])
        T.append((b + "exp_probs_b.bias", f32, w[p + "mlp.gate.e_score_correction_bias"]))
        for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            mat(b + g + "_exps.weight", np.stack([w[p + f"mlp.experts.{e}.{h}.weight"] for e in range(c["E"])]))
            mat(b + g + "_shexp.weight", w[p + f"mlp.shared_experts.{h}.weight"])
        if l >= c["L"]:
            mat(b + "nextn.eh_proj.weight", w[p + "eh_proj.weight"])
            T.append((b + "nextn.enorm.weight", f32, w[p + "enorm.weight"]))
            T.append((b + "nextn.hnorm.weight", f32, w[p + "hnorm.weight"]))
            T.append((b + "nextn.shared_head_norm.weight", f32, w[p + "shared_head.norm.weight"]))
    ck.write_gguf(out, kv, [t for t in T if t[0] not in drop])


def mix_type(name, cols, n_layers, n_expert):
    """llama.cpp's Q4_K_M type for `name` (import_ref.q4_k_m_type) with
    llama-quantize's fallback for a matrix whose column count is not a
    multiple of 256 (llama-quant.cpp, llama.cpp de3ff81): Q4_K -> Q5_0,
    Q5_K -> Q5_1, Q6_K -> Q8_0. GLM-4.5-Air's Q4_K_M GGUF stores its
    1408-column expert and 10944-column dense down matrices so."""
    t = ir.q4_k_m_type(name, n_layers, n_expert)
    if cols % 256:
        t = {ck.GGML_Q4_K: ck.GGML_Q5_0, ck.GGML_Q5_K: ck.GGML_Q5_1, ck.GGML_Q6_K: ck.GGML_Q8_0}.get(t, t)
    return t


# ------------------------------------------------------------------ forward

def rope_partial(v, p, theta, rd):
    """Rotate-half RoPE on the first rd dims of the last axis (frequencies
    theta^(-2i/rd)), the other dims unchanged."""
    return np.concatenate([ir.rope_neox(v[..., :rd], p, theta), v[..., rd:]], axis=-1)


class GgmlAct:
    """A matrix applied the way ggml's CPU backend applies a quantised one:
    the input rounded to the weight's vec_dot_type first (Q8_0 blocks of 32
    for Q8_0, Q8_K blocks of 256 for the K-quants). Only for `logits
    --ggml-act`, which explains llama.cpp's logits."""

    def __init__(self, w, rnd):
        self.w, self.rnd = w, rnd

    def __matmul__(self, x):
        return self.w @ self.rnd(x)


def q8_0_round(x):
    """ggml quantize_row_q8_0_ref in f32: per block of 32, d = amax / 127,
    q = round(x / d) (half away from zero), value q * f16(d)."""
    x = np.asarray(x, dtype=np.float32)
    out = np.zeros(x.size, dtype=np.float64)
    for b in range(0, x.size, 32):
        blk = x[b:b + 32]
        amax = np.float32(np.max(np.abs(blk)))
        dd = np.float32(amax / np.float32(127.0))
        idd = np.float32(1.0) / dd if dd else np.float32(0.0)
        q = np.trunc(blk * idd + np.copysign(np.float32(0.5), blk * idd))
        out[b:b + 32] = q * np.float64(np.float16(dd))
    return out


class Model:
    def __init__(self, src, ggml_act=False):
        self.ggml_act = ggml_act
        if src.endswith(".gguf"):
            self._load_gguf(src)
        else:
            self._load_hf(src)

    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = {k: v.astype(np.float64) for k, v in ck.read_checkpoint_dir(d).items()}
        self.hf = True
        self.eps = cfg["rms_norm_eps"]
        self.H, self.Hk = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.d = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        rp = cfg.get("rope_parameters") or cfg  # transformers >= 5 nests them
        self.rd = int(self.d * rp.get("partial_rotary_factor", 0.5))
        self.theta = rp.get("rope_theta", 10000.0)
        self.k = cfg["num_experts_per_tok"]
        self.ng, self.tg = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.norm = cfg.get("norm_topk_prob", True)
        self.rsf = cfg.get("routed_scaling_factor", 1.0)
        self.emb, self.fnorm = w["model.embed_tokens.weight"], w["model.norm.weight"]
        self.out = self.emb if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        self.layers = []
        for l in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            g = lambda n: w.get(p + n)  # noqa: E731
            L = dict(attn_norm=g("input_layernorm.weight"), ffn_norm=g("post_attention_layernorm.weight"),
                     q=g("self_attn.q_proj.weight"), k=g("self_attn.k_proj.weight"),
                     v=g("self_attn.v_proj.weight"), o=g("self_attn.o_proj.weight"),
                     bq=g("self_attn.q_proj.bias"), bk=g("self_attn.k_proj.bias"), bv=g("self_attn.v_proj.bias"),
                     q_norm=g("self_attn.q_norm.weight"), k_norm=g("self_attn.k_norm.weight"))
            if l < cfg.get("first_k_dense_replace", 1):
                L["dense"] = (g("mlp.gate_proj.weight"), g("mlp.up_proj.weight"), g("mlp.down_proj.weight"))
            else:
                L["router"], L["bias"] = g("mlp.gate.weight"), g("mlp.gate.e_score_correction_bias")
                L["experts"] = [tuple(g(f"mlp.experts.{e}.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj"))
                                for e in range(cfg["n_routed_experts"])]
                if cfg.get("n_shared_experts", 1):
                    L["shared"] = tuple(g(f"mlp.shared_experts.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj"))
            self.layers.append(L)

    def _load_gguf(self, path):
        kv, t = ck.read_gguf(path)
        a = "glm4moe"
        kq = (ck.GGML_Q4_K, ck.GGML_Q5_K, ck.GGML_Q6_K)

        def f(n, emb=False):  # with --ggml-act a quantised matrix rounds its input as ggml does
            if n not in t:
                return None
            w = ck.gguf_tensor_f32(t[n]).astype(np.float64)
            ty = t[n][0]
            # (Q5_0's vec_dot_type is Q8_0; Q5_1's Q8_1 block sums are not emulated)
            if self.ggml_act and not emb and w.ndim >= 2 and ty in kq + (ck.GGML_Q8_0, ck.GGML_Q5_0):
                rnd = ir.q8_k_round if ty in kq else q8_0_round
                return [GgmlAct(m, rnd) for m in w] if w.ndim == 3 else GgmlAct(w, rnd)
            return list(w) if w.ndim == 3 else w
        self.hf = False
        self.eps = kv[a + ".attention.layer_norm_rms_epsilon"]
        self.H = kv[a + ".attention.head_count"]
        self.Hk = kv.get(a + ".attention.head_count_kv", self.H)
        self.d = kv.get(a + ".attention.key_length", kv[a + ".embedding_length"] // self.H)
        self.rd = kv.get(a + ".rope.dimension_count", self.d)
        self.theta = kv.get(a + ".rope.freq_base", 10000.0)
        self.k = kv[a + ".expert_used_count"]
        self.ng, self.tg = kv.get(a + ".expert_group_count", 0), kv.get(a + ".expert_group_used_count", 0)
        self.norm = kv.get(a + ".expert_weights_norm", False)
        self.rsf = kv.get(a + ".expert_weights_scale", 0.0) or 1.0
        self.emb = f("token_embd.weight", emb=True)
        self.out = f("output.weight") if "output.weight" in t else f("token_embd.weight")
        self.fnorm = f("output_norm.weight")
        n_layers = kv[a + ".block_count"] - kv.get(a + ".nextn_predict_layers", 0)
        self.layers = []
        for l in range(n_layers):
            b = f"blk.{l}."
            L = dict(attn_norm=f(b + "attn_norm.weight"), ffn_norm=f(b + "post_attention_norm.weight"),
                     q=f(b + "attn_q.weight"), k=f(b + "attn_k.weight"), v=f(b + "attn_v.weight"),
                     o=f(b + "attn_output.weight"), bq=f(b + "attn_q.bias"), bk=f(b + "attn_k.bias"),
                     bv=f(b + "attn_v.bias"), q_norm=f(b + "attn_q_norm.weight"), k_norm=f(b + "attn_k_norm.weight"))
            if l < kv.get(a + ".leading_dense_block_count", 0):
                L["dense"] = tuple(f(b + n + ".weight") for n in ("ffn_gate", "ffn_up", "ffn_down"))
            else:
                L["router"], L["bias"] = f(b + "ffn_gate_inp.weight"), f(b + "exp_probs_b.bias")
                ex = [f(b + n + ".weight") for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
                L["experts"] = list(zip(*ex))
                if kv.get(a + ".expert_shared_count", 0):
                    L["shared"] = tuple(f(b + n + ".weight") for n in ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"))
            self.layers.append(L)

    def route(self, L, h):
        E = len(L["experts"])
        scores = 1 / (1 + np.exp(-(L["router"] @ h)))
        choice = scores + L["bias"]
        if self.ng > 1:
            gs = choice.reshape(self.ng, -1)
            keep = np.argsort(-np.sort(gs, axis=1)[:, -2:].sum(1), kind="stable")[:self.tg]
            mask = np.zeros(self.ng, bool)
            mask[keep] = True
            choice = np.where(np.repeat(mask, E // self.ng), choice, 0.0 if self.hf else -np.inf)
        sel = np.argsort(-choice, kind="stable")[:self.k]
        w = scores[sel]
        if self.norm:
            w = w / (w.sum() + 1e-20) if self.hf else w / max(w.sum(), 6.103515625e-5)
        return sel, w * self.rsf

    def forward(self, tokens):
        H, Hk, d, eps = self.H, self.Hk, self.d, self.eps
        caches = [([], []) for _ in self.layers]
        out = []
        for p, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            for l, L in enumerate(self.layers):
                h = ir.rmsnorm(x, L["attn_norm"], eps)
                q, k, v = L["q"] @ h, L["k"] @ h, L["v"] @ h
                if L["bq"] is not None:
                    q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
                q, k, v = q.reshape(H, d), k.reshape(Hk, d), v.reshape(Hk, d)
                if L["q_norm"] is not None:
                    q = np.stack([ir.rmsnorm(r, L["q_norm"], eps) for r in q])
                    k = np.stack([ir.rmsnorm(r, L["k_norm"], eps) for r in k])
                q, k = rope_partial(q, p, self.theta, self.rd), rope_partial(k, p, self.theta, self.rd)
                K, V = caches[l]
                K.append(k)
                V.append(v)
                Ks, Vs = np.stack(K), np.stack(V)
                o = np.empty((H, d))
                for j in range(H):
                    kh = j // (H // Hk)
                    a = ir.softmax(Ks[:, kh, :] @ q[j] / np.sqrt(d))
                    o[j] = a @ Vs[:, kh, :]
                x = x + L["o"] @ o.reshape(-1)
                h = ir.rmsnorm(x, L["ffn_norm"], eps)
                if "dense" in L:
                    g, u, dn = L["dense"]
                    x = x + dn @ (ir.silu(g @ h) * (u @ h))
                    continue
                sel, w = self.route(L, h)
                y = np.zeros_like(x)
                for wi, e in zip(w, sel):
                    g, u, dn = L["experts"][e]
                    y += wi * (dn @ (ir.silu(g @ h) * (u @ h)))
                if "shared" in L:
                    g, u, dn = L["shared"]
                    y += dn @ (ir.silu(g @ h) * (u @ h))
                x = x + y
            out.append(self.out @ ir.rmsnorm(x, self.fnorm, eps))
        return np.stack(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("out")
    m.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    m.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    g.add_argument("--type", default="F32",
                   choices=["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "Q4_K_M"],
                   help="Q4_K_M: llama.cpp's mix with its fallback for down matrices whose columns are "
                        "not whole 256-blocks (Q5_0 / Q8_0)")
    g.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary llama.cpp loads")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--set-kv", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    g.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    lg = sub.add_parser("logits")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--ggml-act", action="store_true",
                    help="round quantised matrices' inputs as ggml's CPU backend does (explains llama.cpp)")
    lg.add_argument("--out")
    lg.add_argument("--compare")
    lg.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if a.cmd == "make-hf":
        make_hf(a.out, a.variant, a.dtype, a.seed, a.shards)
        return
    if a.cmd == "make-gguf":
        make_gguf(a.out, a.variant, a.type, a.seed, a.vocab, a.set_kv, a.drop)
        return
    ref = Model(a.src, a.ggml_act).forward([int(x) for x in a.tokens.split(",")])
    if a.out:
        ref.astype("<f4").tofile(a.out)
    if a.compare:
        other = np.fromfile(a.compare, dtype="<f4").astype(np.float64).reshape(-1, ref.shape[1])
        if other.shape != ref.shape:
            raise SystemExit(f"compare: shapes {other.shape} vs {ref.shape}")
        per = np.max(np.abs(other - ref), axis=1) / float(np.max(np.abs(ref)))
        rel = float(per.max())
        am = bool(np.all(np.argmax(ref, 1) == np.argmax(other, 1)))
        print(f"compare: rel {rel:.3e} argmax_agree {am}")
        if rel > a.tol or not am:
            raise SystemExit(f"compare: relative difference {rel:.3e} > {a.tol} or argmax differs")


if __name__ == "__main__":
    main()
