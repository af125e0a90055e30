#!/usr/bin/python3
"""deepseek_ref: tiny random DeepSeek-family checkpoints and their logits
computed from the SOURCE files (float64 numpy).

Role: tests only (tools/reference/deepseek_import_test.sh and the llama.cpp
oracle). `make-hf` writes a Hugging Face checkpoint of model_type
deepseek_v2 / deepseek_v3 / kimi_k2 (config.json + safetensors, F32/F16/BF16
or block FP8 e4m3 with weight_scale_inv); `make-gguf` a GGUF deepseek2 laid
out as llama.cpp's converter writes it (attn_k_b / attn_v_b split, or the
legacy attn_kv_b). `logits` reads either with ckpt_io's own readers and
dequantisers and runs the forward pass as each model's own code defines it:
for checkpoints DeepSeek's modeling_deepseek.py (interleaved RoPE pairs on
the rope dims with YaRN frequencies and mscale on cos/sin, softmax scale
times mscale(mscale_all_dim)^2; V2 softmax routing, greedy or
group_limited_greedy scoring a group by its best expert; V3 / K2 sigmoid +
e_score_correction_bias, noaux_tc scoring a group by the sum of its two
best; dropped groups masked with 0.0 as masked_fill does; V2 scales by
routed_scaling_factor only when not renormalising, V3 always), for GGUF
llama.cpp's (gating func, exp_probs_b selection bias, groups by the top-two
sum with -inf masks, expert_weights_norm then expert_weights_scale, YaRN
kq scale from yarn_log_multiplier). Nothing here reads a spill container.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402

DIMS = dict(V=300, D=64, L=3, H=2, ql=32, dc=32, dn=32, dr=16, dv=32, E=8, F=32, Fd=64, S=1, k=3,
            dense=1)

VARIANTS = {
    # V2: softmax, group_limited_greedy (best expert per group), not renormalised -> scaled
    "v2": dict(model_type="deepseek_v2", ql=32, scoring_func="softmax", topk_method="group_limited_greedy",
               n_group=4, topk_group=2, norm_topk_prob=False, routed_scaling_factor=1.5,
               rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=64,
                                 beta_fast=32, beta_slow=1, mscale=0.707, mscale_all_dim=0.707)),
    # V2-Lite: no q LoRA, greedy, renormalised (routed_scaling_factor then unused by V2's code)
    "v2lite": dict(model_type="deepseek_v2", ql=0, scoring_func="softmax", topk_method="greedy",
                   n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.0,
                   rope_scaling=None),
    # V3: sigmoid + bias, noaux_tc (sum of top two per group), renormalised and scaled, MTP layer
    "v3": dict(model_type="deepseek_v3", ql=32, scoring_func="sigmoid", topk_method="noaux_tc",
               n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, mtp=1,
               rope_scaling=dict(type="yarn", factor=40.0, original_max_position_embeddings=64,
                                 beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0)),
    # Kimi K2: V3 code, one group, YaRN with beta_fast 1
    "k2": dict(model_type="kimi_k2", ql=32, scoring_func="sigmoid", topk_method="noaux_tc",
               n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.827,
               rope_scaling=dict(type="yarn", factor=32.0, original_max_position_embeddings=64,
                                 beta_fast=1.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0)),
    # GLM-4.7-Flash (glm4_moe_lite, llama.cpp converts it as deepseek2): no scoring_func key
    # (sigmoid + bias), noaux_tc, one group, rms_norm_eps 1e-5 for every norm, an MTP layer
    "glmlite": dict(model_type="glm4_moe_lite", ql=32, scoring_func="sigmoid", topk_method="noaux_tc",
                    n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=1.8, mtp=1,
                    rope_scaling=None, glm=True),
}


def random_weights(var, seed):
    """{hf_name: f32 array} of a random model, HF DeepSeek names."""
    c = dict(DIMS)
    v = VARIANTS[var]
    c["ql"] = v["ql"]
    r = np.random.default_rng(seed)
    D, H, dn, dr, dv, dc, ql, E, F = (c[x] for x in ("D", "H", "dn", "dr", "dv", "dc", "ql", "E", "F"))

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": r.standard_normal((c["V"], D)).astype(np.float32),
         "model.norm.weight": norm(D), "lm_head.weight": mat(c["V"], D)}
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
        if ql:
            w[p + "self_attn.q_a_proj.weight"] = mat(ql, D)
            w[p + "self_attn.q_a_layernorm.weight"] = norm(ql)
            w[p + "self_attn.q_b_proj.weight"] = mat(H * (dn + dr), ql)
        else:
            w[p + "self_attn.q_proj.weight"] = mat(H * (dn + dr), D)
        w[p + "self_attn.kv_a_proj_with_mqa.weight"] = mat(dc + dr, D)
        w[p + "self_attn.kv_a_layernorm.weight"] = norm(dc)
        w[p + "self_attn.kv_b_proj.weight"] = mat(H * (dn + dv), dc)
        w[p + "self_attn.o_proj.weight"] = mat(D, H * dv)
        if l < c["dense"]:
            w[p + "mlp.gate_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.up_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.down_proj.weight"] = mat(D, c["Fd"])
            continue
        w[p + "mlp.gate.weight"] = mat(E, D) * 3
        if v["scoring_func"] == "sigmoid":
            w[p + "mlp.gate.e_score_correction_bias"] = (0.3 * r.standard_normal(E)).astype(np.float32)
        for e in range(E):
            w[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(F, D)
            w[p + f"mlp.experts.{e}.up_proj.weight"] = mat(F, D)
            w[p + f"mlp.experts.{e}.down_proj.weight"] = mat(D, F)
        S = c["S"] * F
        w[p + "mlp.shared_experts.gate_proj.weight"] = mat(S, D)
        w[p + "mlp.shared_experts.up_proj.weight"] = mat(S, D)
        w[p + "mlp.shared_experts.down_proj.weight"] = mat(D, S)
    if v.get("mtp"):  # a next-token-prediction layer: not part of the forward pass
        p = f"model.layers.{c['L']}."
        w[p + "eh_proj.weight"] = mat(D, 2 * D)
        w[p + "enorm.weight"] = norm(D)
    return w, c


def hf_config(var, c):
    v = VARIANTS[var]
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": v["model_type"],
           "vocab_size": c["V"], "hidden_size": c["D"], "intermediate_size": c["Fd"],
           "moe_intermediate_size": c["F"], "num_hidden_layers": c["L"], "num_attention_heads": c["H"],
           "num_key_value_heads": c["H"], "n_shared_experts": c["S"], "n_routed_experts": c["E"],
           "routed_scaling_factor": v["routed_scaling_factor"], "kv_lora_rank": c["dc"],
           "q_lora_rank": v["ql"] or None, "qk_rope_head_dim": c["dr"], "v_head_dim": c["dv"],
           "qk_nope_head_dim": c["dn"], "topk_method": v["topk_method"], "n_group": v["n_group"],
           "topk_group": v["topk_group"], "num_experts_per_tok": c["k"], "moe_layer_freq": 1,
           "first_k_dense_replace": c["dense"], "norm_topk_prob": v["norm_topk_prob"],
           "scoring_func": v["scoring_func"], "aux_loss_alpha": 0.001, "seq_aux": True,
           "hidden_act": "silu", "max_position_embeddings": 4096, "initializer_range": 0.02,
           "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": None, "bos_token_id": 1,
           "eos_token_id": 2, "pretraining_tp": 1, "tie_word_embeddings": False,
           "rope_theta": 10000.0, "rope_scaling": v["rope_scaling"], "attention_bias": False,
           "attention_dropout": 0.0, "torch_dtype": "bfloat16", "ep_size": 1}
    if v.get("mtp"):
        cfg["num_nextn_predict_layers"] = v["mtp"]
    if v.get("glm"):  # GLM-4.7-Flash's config: its own class and keys
        cfg["architectures"] = ["Glm4MoeLiteForCausalLM"]
        for k in ("scoring_func", "aux_loss_alpha", "seq_aux", "pretraining_tp", "ep_size"):
            del cfg[k]
        cfg.update(rms_norm_eps=1e-5, partial_rotary_factor=1.0, rope_theta=1000000.0, dtype="bfloat16")
        del cfg["torch_dtype"]
    return cfg


def break_fp8(ents, how):
    """Hostile FP8 fixtures: a scale grid of the wrong shape or a missing one."""
    if how == "scale-shape":
        return [(n, d, np.ones((a.shape[0] + 1, a.shape[1]), np.float32)
                 if n == "model.layers.0.self_attn.o_proj.weight_scale_inv" else a) for n, d, a in ents]
    return [(n, d, a) for n, d, a in ents if n != "model.layers.1.self_attn.kv_b_proj.weight_scale_inv"]


def make_hf(out, var, dtype, seed, shards=1, broken=None):
    os.makedirs(out, exist_ok=True)
    w, c = random_weights(var, seed)
    cfg = hf_config(var, c)
    if dtype == "F8_E4M3":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [ir.FP8_BLOCK, ir.FP8_BLOCK]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    names = sorted(w)
    wm = {}
    for s in range(shards):
        fn = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        ents = ir.st_entries(w, names[s::shards], dtype)
        if broken:
            ents = break_fp8(ents, broken)
        ck.write_safetensors(os.path.join(out, fn), ents)
        for n, _, _ in ents:
            wm[n] = fn
    if shards > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def make_gguf(out, var, ty, seed, legacy_kvb=False, vocab=False, nextn=False):
    """GGUF deepseek2 as llama.cpp's converter writes it; routing keys in
    llama.cpp's terms (v2: softmax, no groups; v3: sigmoid + bias + groups).
    nextn: one next-token-prediction layer after the trunk as GLM-4.7-Flash's
    converter writes it (block_count + 1, nextn_predict_layers 1, the layer's
    own tensors (here a copy of the last layer's) and blk.L.nextn.*)."""
    w, c = random_weights(var, seed)
    v = VARIANTS[var]
    gt = ir.GG_TYPES[ty]
    a = "deepseek2"
    H, dn, dr, dv, dc = c["H"], c["dn"], c["dr"], c["dv"], c["dc"]
    sig = v["scoring_func"] == "sigmoid"
    kv = [("general.architecture", a), ("general.name", "tiny-" + var), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]), (a + ".block_count", c["L"]),
          (a + ".feed_forward_length", c["Fd"]), (a + ".expert_feed_forward_length", c["F"]),
          (a + ".attention.head_count", H), (a + ".attention.head_count_kv", 1 if not legacy_kvb else H),
          (a + ".rope.dimension_count", dr), (a + ".rope.freq_base", 10000.0),
          (a + ".attention.layer_norm_rms_epsilon", 1e-6), (a + ".attention.kv_lora_rank", dc),
          (a + ".leading_dense_block_count", c["dense"]), (a + ".expert_count", c["E"]),
          (a + ".expert_used_count", c["k"]), (a + ".expert_shared_count", c["S"]),
          (a + ".expert_weights_scale", float(v["routed_scaling_factor"]) if (sig or not v["norm_topk_prob"]) else 1.0),
          (a + ".expert_weights_norm", bool(v["norm_topk_prob"])),
          (a + ".expert_gating_func", 2 if sig else 1)]
    # 0 = no q LoRA (llama.cpp needs the key unless the layer count says "lite")
    kv.append((a + ".attention.q_lora_rank", v["ql"]))
    if legacy_kvb:
        kv += [(a + ".attention.key_length", dn + dr), (a + ".attention.value_length", dv)]
    else:
        kv += [(a + ".attention.key_length", dc + dr), (a + ".attention.value_length", dc),
               (a + ".attention.key_length_mla", dn + dr), (a + ".attention.value_length_mla", dv)]
    if sig and v["n_group"] > 1:  # llama.cpp's group rule is V3's; V2 GGUFs carry no groups
        kv += [(a + ".expert_group_count", v["n_group"]), (a + ".expert_group_used_count", v["topk_group"])]
    rs = v["rope_scaling"]
    if rs:
        kv += [(a + ".rope.scaling.type", "yarn"), (a + ".rope.scaling.factor", float(rs["factor"])),
               (a + ".rope.scaling.original_context_length", rs["original_max_position_embeddings"]),
               (a + ".rope.scaling.yarn_log_multiplier", 0.1 * rs["mscale_all_dim"])]
        if rs["beta_fast"] != 32:
            kv.append((a + ".rope.scaling.yarn_beta_fast", float(rs["beta_fast"])))
        if rs["beta_slow"] != 1:
            kv.append((a + ".rope.scaling.yarn_beta_slow", float(rs["beta_slow"])))
    kv += ir.gguf_tokenizer(c["V"], vocab, False)
    if nextn:
        kv = [(k, c["L"] + 1 if k == a + ".block_count" else x) for k, x in kv]
        kv.append((a + ".nextn_predict_layers", 1))
    T = []
    f32 = ck.GGML_F32

    def mat(name, arr):
        T.append((name, gt, arr))

    mat("token_embd.weight", w["model.embed_tokens.weight"])
    T.append(("output_norm.weight", f32, w["model.norm.weight"]))
    mat("output.weight", w["lm_head.weight"])
    for l in range(c["L"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        T.append((b + "attn_norm.weight", f32, w[p + "input_layernorm.weight"]))
        if v["ql"]:
            mat(b + "attn_q_a.weight", w[p + "self_attn.q_a_proj.weight"])
            T.append((b + "attn_q_a_norm.weight", f32, w[p + "self_attn.q_a_layernorm.weight"]))
            mat(b + "attn_q_b.weight", w[p + "self_attn.q_b_proj.weight"])
        else:
            mat(b + "attn_q.weight", w[p + "self_attn.q_proj.weight"])
        mat(b + "attn_kv_a_mqa.weight", w[p + "self_attn.kv_a_proj_with_mqa.weight"])
        T.append((b + "attn_kv_a_norm.weight", f32, w[p + "self_attn.kv_a_layernorm.weight"]))
        kvb = w[p + "self_attn.kv_b_proj.weight"]
        if legacy_kvb:
            mat(b + "attn_kv_b.weight", kvb)
        else:  # convert_hf_to_gguf: k_b = nope rows transposed per head, v_b = v rows
            kh = kvb.reshape(H, dn + dv, dc)
            mat(b + "attn_k_b.weight", np.ascontiguousarray(kh[:, :dn, :].transpose(0, 2, 1)))
            mat(b + "attn_v_b.weight", np.ascontiguousarray(kh[:, dn:, :]))
        mat(b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])
        T.append((b + "ffn_norm.weight", f32, w[p + "post_attention_layernorm.weight"]))
        if l < c["dense"]:
            for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
                mat(b + g + ".weight", w[p + "mlp." + h + ".weight"])
            continue
        mat(b + "ffn_gate_inp.weight", w[p + "mlp.gate.weight"])
        if sig:
            T.append((b + "exp_probs_b.bias", f32, w[p + "mlp.gate.e_score_correction_bias"]))
        for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            mat(b + g + "_exps.weight", np.stack([w[p + f"mlp.experts.{e}.{h}.weight"] for e in range(c["E"])]))
            mat(b + g + "_shexp.weight", w[p + f"mlp.shared_experts.{h}.weight"])
    if nextn:
        last, L = f"blk.{c['L'] - 1}.", c["L"]
        T += [(f"blk.{L}." + n[len(last):], t, x) for n, t, x in T if n.startswith(last)]
        r = np.random.default_rng(seed + 77)
        D = c["D"]
        mat(f"blk.{L}.nextn.eh_proj.weight", (r.standard_normal((D, 2 * D)) / np.sqrt(2 * D)).astype(np.float32))
        for n in ("enorm", "hnorm", "shared_head_norm"):
            T.append((f"blk.{L}.nextn.{n}.weight", f32, (1.0 + 0.2 * r.standard_normal(D)).astype(np.float32)))
    ck.write_gguf(out, kv, T)


# ------------------------------------------------------------------ forward

def yarn_get_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_freqs(dr, theta, yarn):
    """inv_freq of DeepSeek's rotary classes (YaRN when yarn is a dict)."""
    f = theta ** (-np.arange(0, dr, 2) / dr)
    if not yarn:
        return f
    s, orig = yarn["factor"], yarn["orig"]

    def cdim(rot):
        return dr * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    lo = max(math.floor(cdim(yarn["beta_fast"])), 0)
    hi = min(math.ceil(cdim(yarn["beta_slow"])), dr - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dr // 2) - lo) / (hi - lo), 0, 1)
    mask = 1.0 - ramp
    return (f / s) * (1 - mask) + f * mask


def rope_pairs(v, p, freqs, mscale):
    """Rotation of interleaved pairs (2i, 2i+1) by p * freqs[i]."""
    a = p * freqs
    c, s = np.cos(a) * mscale, np.sin(a) * mscale
    x0, x1 = v[..., 0::2], v[..., 1::2]
    out = np.empty_like(v)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


class Model:
    def __init__(self, src):
        if src.endswith(".gguf"):
            self._load_gguf(src)
        else:
            self._load_hf(src)

    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = {k: v.astype(np.float64) for k, v in ck.read_checkpoint_dir(d).items()}
        bs = (cfg.get("quantization_config") or {}).get("weight_block_size")
        for n in [n for n in w if n.endswith("_scale_inv")]:
            s = w.pop(n)
            t = n[:-len("_scale_inv")]
            w[t] = w[t] * np.kron(s, np.ones((bs[0], bs[1])))[:w[t].shape[0], :w[t].shape[1]]
        self.v2 = cfg["model_type"] == "deepseek_v2"
        self.hf = True
        self.eps = cfg["rms_norm_eps"]
        self.H, self.dn, self.dr, self.dv = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim",
                                                               "qk_rope_head_dim", "v_head_dim"))
        self.dc = cfg["kv_lora_rank"]
        self.k = cfg["num_experts_per_tok"]
        self.sig = cfg.get("scoring_func", "sigmoid" if cfg["model_type"] == "glm4_moe_lite" else "softmax") == "sigmoid"
        self.tm = cfg.get("topk_method", "greedy")
        self.ng, self.tg = cfg.get("n_group", 1) or 1, cfg.get("topk_group", 1) or 1
        self.norm = cfg.get("norm_topk_prob", False) and self.k > 1
        self.rsf = cfg.get("routed_scaling_factor", 1.0)
        rs = cfg.get("rope_scaling")
        dk = self.dn + self.dr
        self.scale = dk ** -0.5
        self.mscale = 1.0
        yarn = None
        if rs:
            yarn = dict(factor=rs["factor"], orig=rs["original_max_position_embeddings"],
                        beta_fast=rs.get("beta_fast", 32), beta_slow=rs.get("beta_slow", 1))
            ms, mall = rs.get("mscale", 1), rs.get("mscale_all_dim", 0)
            self.mscale = yarn_get_mscale(rs["factor"], ms) / yarn_get_mscale(rs["factor"], mall)
            if mall:
                self.scale *= yarn_get_mscale(rs["factor"], mall) ** 2
        self.freqs = rope_freqs(self.dr, cfg.get("rope_theta", 10000.0), yarn)
        self.emb, self.out, self.fnorm = w["model.embed_tokens.weight"], w["lm_head.weight"], w["model.norm.weight"]
        self.layers = []
        for l in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            g = lambda n: w[p + n]  # noqa: E731
            L = dict(attn_norm=g("input_layernorm.weight"), ffn_norm=g("post_attention_layernorm.weight"),
                     kv_a=g("self_attn.kv_a_proj_with_mqa.weight"), kv_a_norm=g("self_attn.kv_a_layernorm.weight"),
                     kv_b=g("self_attn.kv_b_proj.weight"), o=g("self_attn.o_proj.weight"))
            if p + "self_attn.q_a_proj.weight" in w:
                L.update(q_a=g("self_attn.q_a_proj.weight"), q_a_norm=g("self_attn.q_a_layernorm.weight"),
                         q_b=g("self_attn.q_b_proj.weight"))
            else:
                L["q"] = g("self_attn.q_proj.weight")
            if l < cfg.get("first_k_dense_replace", 0):
                L["dense"] = (g("mlp.gate_proj.weight"), g("mlp.up_proj.weight"), g("mlp.down_proj.weight"))
            else:
                L["router"] = g("mlp.gate.weight")
                L["bias"] = w.get(p + "mlp.gate.e_score_correction_bias")
                L["experts"] = [tuple(g(f"mlp.experts.{e}.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj"))
                                for e in range(cfg["n_routed_experts"])]
                if cfg.get("n_shared_experts"):
                    L["shared"] = tuple(g(f"mlp.shared_experts.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj"))
            self.layers.append(L)

    def _load_gguf(self, path):
        kv, t = ck.read_gguf(path)
        a = "deepseek2"
        f = lambda n: ck.gguf_tensor_f32(t[n]).astype(np.float64)  # noqa: E731
        self.hf = False
        self.eps = kv[a + ".attention.layer_norm_rms_epsilon"]
        self.H = kv[a + ".attention.head_count"]
        self.dr = kv[a + ".rope.dimension_count"]
        self.dc = kv[a + ".attention.kv_lora_rank"]
        mla = (a + ".attention.key_length_mla") in kv
        self.dn = kv[a + (".attention.key_length_mla" if mla else ".attention.key_length")] - self.dr
        self.dv = kv[a + (".attention.value_length_mla" if mla else ".attention.value_length")]
        self.k = kv[a + ".expert_used_count"]
        self.sig = kv.get(a + ".expert_gating_func", 1) == 2
        self.ng, self.tg = kv.get(a + ".expert_group_count", 0), kv.get(a + ".expert_group_used_count", 0)
        self.norm = kv.get(a + ".expert_weights_norm", False)
        self.rsf = kv.get(a + ".expert_weights_scale", 0.0) or 1.0
        dk = self.dn + self.dr
        self.scale = dk ** -0.5
        self.mscale = 1.0
        yarn = None
        if kv.get(a + ".rope.scaling.type") == "yarn":
            fac = kv[a + ".rope.scaling.factor"]
            yarn = dict(factor=fac, orig=kv[a + ".rope.scaling.original_context_length"],
                        beta_fast=kv.get(a + ".rope.scaling.yarn_beta_fast", 32.0),
                        beta_slow=kv.get(a + ".rope.scaling.yarn_beta_slow", 1.0))
            m = 1.0 + kv.get(a + ".rope.scaling.yarn_log_multiplier", 0.0) * math.log(fac)
            self.scale *= m * m
        self.freqs = rope_freqs(self.dr, kv.get(a + ".rope.freq_base", 10000.0), yarn)
        self.emb = f("token_embd.weight")
        self.out = f("output.weight") if "output.weight" in t else self.emb
        self.fnorm = f("output_norm.weight")
        self.layers = []
        H, dn, dv, dc = self.H, self.dn, self.dv, self.dc
        for l in range(kv[a + ".block_count"] - kv.get(a + ".nextn_predict_layers", 0)):
            b = f"blk.{l}."
            L = dict(attn_norm=f(b + "attn_norm.weight"), ffn_norm=f(b + "ffn_norm.weight"),
                     kv_a=f(b + "attn_kv_a_mqa.weight"), kv_a_norm=f(b + "attn_kv_a_norm.weight"),
                     o=f(b + "attn_output.weight"))
            if b + "attn_k_b.weight" in t:
                kb, vb = f(b + "attn_k_b.weight"), f(b + "attn_v_b.weight")  # (H, dc, dn), (H, dv, dc)
                L["kv_b"] = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(H * (dn + dv), dc)
            else:
                L["kv_b"] = f(b + "attn_kv_b.weight")
            if b + "attn_q_a.weight" in t:
                L.update(q_a=f(b + "attn_q_a.weight"), q_a_norm=f(b + "attn_q_a_norm.weight"),
                         q_b=f(b + "attn_q_b.weight"))
            else:
                L["q"] = f(b + "attn_q.weight")
            if l < kv.get(a + ".leading_dense_block_count", 0):
                L["dense"] = tuple(f(b + n + ".weight") for n in ("ffn_gate", "ffn_up", "ffn_down"))
            else:
                L["router"] = f(b + "ffn_gate_inp.weight")
                L["bias"] = f(b + "exp_probs_b.bias") if b + "exp_probs_b.bias" in t else None
                ex = [f(b + n + ".weight") for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
                L["experts"] = [(ex[0][e], ex[1][e], ex[2][e]) for e in range(ex[0].shape[0])]
                if kv.get(a + ".expert_shared_count", 0):
                    L["shared"] = tuple(f(b + n + ".weight") for n in ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"))
            self.layers.append(L)

    def route(self, L, h):
        E = len(L["experts"])
        logits = L["router"] @ h
        scores = 1 / (1 + np.exp(-logits)) if self.sig else ir.softmax(logits)
        choice = scores + L["bias"] if L.get("bias") is not None else scores.copy()
        if self.hf:
            groups = self.ng > 1 and (self.tm == "group_limited_greedy" or self.tm == "noaux_tc")
            top2 = self.tm == "noaux_tc"
            masked = 0.0  # masked_fill(~score_mask, 0.0)
        else:
            groups, top2, masked = self.ng > 1, True, -np.inf
        if groups:
            gs = choice.reshape(self.ng, -1)
            gsc = np.sort(gs, axis=1)[:, -2:].sum(1) if top2 else gs.max(1)
            keep = np.argsort(-gsc, kind="stable")[:self.tg]
            mask = np.zeros(self.ng, bool)
            mask[keep] = True
            choice = np.where(np.repeat(mask, E // self.ng), choice, masked)
        sel = np.argsort(-choice, kind="stable")[:self.k]
        w = scores[sel]
        if self.hf:
            if self.norm:
                w = w / (w.sum() + 1e-20)
                if not self.v2:
                    w = w * self.rsf
            else:
                w = w * self.rsf
        else:
            if self.norm:
                w = w / max(w.sum(), 6.103515625e-5)
            w = w * self.rsf
        return sel, w

    def forward(self, tokens):
        H, dn, dr, dv, dc, eps = self.H, self.dn, self.dr, self.dv, self.dc, self.eps
        caches = [([], [], []) for _ in self.layers]
        out = []
        for p, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            for l, L in enumerate(self.layers):
                h = ir.rmsnorm(x, L["attn_norm"], eps)
                q = L["q_b"] @ ir.rmsnorm(L["q_a"] @ h, L["q_a_norm"], eps) if "q_a" in L else L["q"] @ h
                q = q.reshape(H, dn + dr)
                kva = L["kv_a"] @ h
                c = ir.rmsnorm(kva[:dc], L["kv_a_norm"], eps)
                kr = rope_pairs(kva[dc:], p, self.freqs, self.mscale)
                qn, qr = q[:, :dn], rope_pairs(q[:, dn:], p, self.freqs, self.mscale)
                kvb = (L["kv_b"] @ c).reshape(H, dn + dv)
                K, V, R = caches[l]
                K.append(kvb[:, :dn])
                V.append(kvb[:, dn:])
                R.append(kr)
                Ks, Vs, Rs = np.stack(K), np.stack(V), np.stack(R)
                o = np.empty((H, dv))
                for j in range(H):
                    a = ir.softmax((Ks[:, j, :] @ qn[j] + Rs @ qr[j]) * self.scale)
                    o[j] = a @ Vs[:, j, :]
                x = x + L["o"] @ o.reshape(-1)
                h = ir.rmsnorm(x, L["ffn_norm"], eps)
                if "dense" in L:
                    g, u, d = L["dense"]
                    x = x + d @ (ir.silu(g @ h) * (u @ h))
                    continue
                sel, w = self.route(L, h)
                y = np.zeros_like(x)
                for wi, e in zip(w, sel):
                    g, u, d = L["experts"][e]
                    y += wi * (d @ (ir.silu(g @ h) * (u @ h)))
                if "shared" in L:
                    g, u, d = L["shared"]
                    y += d @ (ir.silu(g @ h) * (u @ h))
                x = x + y
            out.append(self.out @ ir.rmsnorm(x, self.fnorm, eps))
        return np.stack(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("out")
    m.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    m.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16", "F8_E4M3"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--break-fp8", choices=["scale-shape", "missing-scale"], help="hostile fixture")
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    g.add_argument("--type", default="F32", choices=["F32", "F16", "BF16", "Q8_0", "Q4_0"])
    g.add_argument("--legacy-kvb", action="store_true", help="one attn_kv_b instead of attn_k_b/attn_v_b")
    g.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary llama.cpp loads")
    g.add_argument("--nextn", action="store_true", help="an MTP layer after the trunk (GLM-4.7-Flash)")
    g.add_argument("--seed", type=int, default=1)
    lg = sub.add_parser("logits")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out")
    lg.add_argument("--compare")
    lg.add_argument("--tol", type=float, default=1e-4)
    lg.add_argument("--max-outliers", type=int, default=0,
                    help="positions allowed over --tol (requantised weights can flip a routing choice)")
    a = ap.parse_args(argv)
    if a.cmd == "make-hf":
        make_hf(a.out, a.variant, a.dtype, a.seed, a.shards, a.break_fp8)
        return
    if a.cmd == "make-gguf":
        make_gguf(a.out, a.variant, a.type, a.seed, a.legacy_kvb, a.vocab, a.nextn)
        return
    ref = Model(a.src).forward([int(x) for x in a.tokens.split(",")])
    if a.out:
        ref.astype("<f4").tofile(a.out)
    if a.compare:
        other = np.fromfile(a.compare, dtype="<f4").astype(np.float64).reshape(-1, ref.shape[1])
        if other.shape != ref.shape:
            raise SystemExit(f"compare: shapes {other.shape} vs {ref.shape}")
        per = np.max(np.abs(other - ref), axis=1) / float(np.max(np.abs(ref)))
        rel = float(per.max())
        over = int((per > a.tol).sum())
        am = bool(np.all(np.argmax(ref, 1) == np.argmax(other, 1)))
        print(f"compare: rel {rel:.3e} argmax_agree {am} positions over {a.tol:g}: {over}")
        if over > a.max_outliers:
            raise SystemExit(f"compare: relative difference {rel:.3e} > {a.tol} at {over} positions")


if __name__ == "__main__":
    main()
