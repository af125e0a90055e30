#!/usr/bin/python3
"""kimi_linear_ref: tiny random Kimi-Linear checkpoints and their logits
computed from the SOURCE files (float64 numpy).

Role: tests only (tools/reference/kimi_linear_import_test.sh). `make-hf`
writes a Hugging Face checkpoint of model_type kimi_linear (config.json +
safetensors F32/F16/BF16, optionally sharded) with the published config's
shape of keys and tensor names; `make-gguf` the same weights as GGUF
kimi-linear laid out as llama.cpp's converter (convert_hf_to_gguf.py
KimiLinearModel) writes them (F32/F16/Q8_0). `logits` reads either with
ckpt_io's own readers and dequantisers; for a checkpoint directory it runs
the forward pass as Moonshot's modeling_kimi.py and the
flash-linear-attention KDA reference (fla/ops/kda/naive.py, gate.py)
define it (docs/MODEL.md "Kimi-Linear"), written independently of the C
engine and of docs/MODEL.md's K3 equations:
  KDA: depthwise causal conv1d (kernel K, zero history) + SiLU on q, k, v;
  q, k L2-normalised per head (eps 1e-6), q times head_dim^-0.5;
  g = -exp(A_log_h) softplus(f_b f_a x + dt_bias); beta = sigmoid(b x);
  per head S = S * exp(g)[:, None]; S += outer(beta k, v - k S); o = q S;
  o = rmsnorm(o, o_norm, rms_norm_eps) * sigmoid(g_b g_a x); o_proj.
  MLA (no RoPE, no q LoRA): keys [kv_b(rmsnorm(c, eps 1e-6)) nope part,
  shared k_rot], values from kv_b, softmax scale (dn + dr)^-0.5.
  MoE: sigmoid scores, selection by scores + e_score_correction_bias with
  groups scored by their top-two sum (dropped groups 0.0), weights
  scores[sel] / (sum + 1e-20) when moe_renormalize and k > 1, times
  routed_scaling_factor; shared experts added.
For a .gguf it computes what llama.cpp's graph (src/models/kimi-linear.cpp
at de3ff81) computes: q, k L2-normalised as x / sqrt(|x|^2 + rms_norm_eps)
(build_gdn_l2_norm: ggml_rms_norm(x, eps / d) / sqrt(d)); A
read as stored (-exp(A_log)); the latent RMSNorm with rms_norm_eps; MLA in
llama.cpp's absorbed form (q_nope through attn_k_b, scores against the
normalised latent plus q_pe.k_pe, values through attn_v_b); dropped expert
groups at -inf; weights always renormalised (sum clamped at 2^-14), times
expert_weights_scale. Nothing here reads a spill container.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402

# 4 layers: 0 KDA + dense FFN, 1 KDA, 2 MLA, 3 KDA (all MoE after layer 0)
DIMS = dict(V=300, D=64, L=4, H=2, dc=32, dn=16, dr=8, dv=16, kH=2, kd=16, K=4, E=8, F=32, Fd=64,
            S=1, k=3, dense=1, kda=[1, 2, 4], full=[3])

VARIANTS = {
    # as published: one expert group, sigmoid + bias, renormalised, scaled
    "base": dict(num_expert_group=1, topk_group=1, routed_scaling_factor=2.446),
    # group-limited selection (4 groups of 2, best 2 kept); a latent of RMS
    # ~3e-3, so the latent norm's eps (1e-6, not rms_norm_eps 1e-5) shows
    "grouped": dict(num_expert_group=4, topk_group=2, routed_scaling_factor=1.5, latent_scale=0.003),
}


def random_weights(var, seed):
    c = dict(DIMS)
    r = np.random.default_rng(seed)
    D, H, dn, dr, dv, dc, E, F = (c[x] for x in ("D", "H", "dn", "dr", "dv", "dc", "E", "F"))
    kH, kd, K = c["kH"], c["kd"], c["K"]
    n = kH * kd

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(m):
        return (1.0 + 0.2 * r.standard_normal(m)).astype(np.float32)

    w = {"model.embed_tokens.weight": r.standard_normal((c["V"], D)).astype(np.float32),
         "model.norm.weight": norm(D), "lm_head.weight": mat(c["V"], D)}
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
        a = p + "self_attn."
        if l + 1 in c["kda"]:
            for x in "qkv":
                w[a + f"{x}_proj.weight"] = mat(n, D)
                w[a + f"{x}_conv1d.weight"] = (r.standard_normal((n, 1, K)) * 0.5).astype(np.float32)
            w[a + "f_a_proj.weight"] = mat(kd, D)
            w[a + "f_b_proj.weight"] = mat(n, kd)
            w[a + "dt_bias"] = (0.5 * r.standard_normal(n)).astype(np.float32)
            w[a + "A_log"] = np.log(r.uniform(1, 16, kH)).astype(np.float32).reshape(1, 1, kH, 1) - 2.0
            w[a + "b_proj.weight"] = mat(kH, D)
            w[a + "g_a_proj.weight"] = mat(kd, D)
            w[a + "g_b_proj.weight"] = mat(n, kd)
            w[a + "o_norm.weight"] = norm(kd)
            w[a + "o_proj.weight"] = mat(D, n)
        else:
            w[a + "q_proj.weight"] = mat(H * (dn + dr), D)
            w[a + "kv_a_proj_with_mqa.weight"] = mat(dc + dr, D)
            w[a + "kv_a_proj_with_mqa.weight"][:dc] *= VARIANTS[var].get("latent_scale", 1.0)
            w[a + "kv_a_layernorm.weight"] = norm(dc)
            w[a + "kv_b_proj.weight"] = mat(H * (dn + dv), dc)
            w[a + "o_proj.weight"] = mat(D, H * dv)
        if l < c["dense"]:
            w[p + "mlp.gate_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.up_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.down_proj.weight"] = mat(D, c["Fd"])
            continue
        m = p + "block_sparse_moe."
        w[m + "gate.weight"] = mat(E, D) * 3
        w[m + "gate.e_score_correction_bias"] = (0.3 * r.standard_normal(E)).astype(np.float32)
        for e in range(E):
            w[m + f"experts.{e}.w1.weight"] = mat(F, D)
            w[m + f"experts.{e}.w3.weight"] = mat(F, D)
            w[m + f"experts.{e}.w2.weight"] = mat(D, F)
        S = c["S"] * F
        w[m + "shared_experts.gate_proj.weight"] = mat(S, D)
        w[m + "shared_experts.up_proj.weight"] = mat(S, D)
        w[m + "shared_experts.down_proj.weight"] = mat(D, S)
    return w, c


def hf_config(var, c):
    v = VARIANTS[var]
    return {"architectures": ["KimiLinearForCausalLM"],
            "auto_map": {"AutoConfig": "configuration_kimi.KimiLinearConfig",
                         "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM"},
            "bos_token_id": 1, "dtype": "bfloat16", "eos_token_id": 2, "first_k_dense_replace": c["dense"],
            "head_dim": 72, "hidden_act": "silu", "hidden_size": c["D"], "initializer_range": 0.02,
            "intermediate_size": c["Fd"], "kv_lora_rank": c["dc"],
            "linear_attn_config": {"full_attn_layers": c["full"], "head_dim": c["kd"], "kda_layers": c["kda"],
                                   "num_heads": c["kH"], "short_conv_kernel_size": c["K"]},
            "mla_use_nope": True, "model_max_length": 1048576, "model_type": "kimi_linear",
            "moe_intermediate_size": c["F"], "moe_layer_freq": 1, "moe_renormalize": True,
            "moe_router_activation_func": "sigmoid", "num_attention_heads": c["H"],
            "num_expert_group": v["num_expert_group"], "num_experts": c["E"], "num_experts_per_token": c["k"],
            "num_hidden_layers": c["L"], "num_key_value_heads": c["H"], "num_nextn_predict_layers": 0,
            "num_shared_experts": c["S"], "pad_token_id": 299, "q_lora_rank": None,
            "qk_nope_head_dim": c["dn"], "qk_rope_head_dim": c["dr"], "rms_norm_eps": 1e-05,
            "rope_scaling": None, "rope_theta": 10000.0, "routed_scaling_factor": v["routed_scaling_factor"],
            "tie_word_embeddings": False, "topk_group": v["topk_group"], "transformers_version": "4.57.0",
            "use_cache": True, "use_grouped_topk": True, "v_head_dim": c["dv"], "vocab_size": c["V"]}


def entries(w, names, dtype):
    """Every tensor in dtype (conv weights and norms too) except the router
    bias, A_log and dt_bias, which stay F32 as float32 parameters."""
    f32 = ("e_score_correction_bias", "A_log", "dt_bias")
    return [(n, "F32" if n.endswith(f32) else dtype, w[n]) for n in names]


def make_hf(out, var, dtype, seed, shards=1):
    os.makedirs(out, exist_ok=True)
    w, c = random_weights(var, seed)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(var, c), f, indent=1)
    names = sorted(w)
    wm = {}
    for s in range(shards):
        fn = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        ents = entries(w, names[s::shards], dtype)
        ck.write_safetensors(os.path.join(out, fn), ents)
        for n, _, _ in ents:
            wm[n] = fn
    if shards > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def gguf_type(gt, arr):
    """llama.cpp's converter falls back to F16 when rows do not split into
    Q8_0 blocks of 32."""
    return ck.GGML_F16 if gt == ck.GGML_Q8_0 and arr.shape[-1] % 32 else gt


def make_gguf(out, var, ty, seed, vocab=False):
    """GGUF kimi-linear as convert_hf_to_gguf.py's KimiLinearModel writes it:
    head_count_kv per layer (0 = KDA), conv numpy (1, C, 1, K), ssm_a =
    -exp(A_log) numpy (1, 1, H, 1), dt_bias as ssm_dt.bias, kv_b split into
    attn_k_b (nope rows transposed per head) / attn_v_b, experts stacked;
    F32 wherever the converter forces it (vectors, norms, the KDA conv
    weights, the router ffn_gate_inp), the rest in `ty`."""
    w, c = random_weights(var, seed)
    v = VARIANTS[var]
    gt = ir.GG_TYPES[ty]
    a = "kimi-linear"
    H, dn, dr, dv, dc, K, kd = c["H"], c["dn"], c["dr"], c["dv"], c["dc"], c["K"], c["kd"]
    assert c["kH"] == H, "llama.cpp: KDA layers have attention.head_count heads"
    kv = [("general.architecture", a), ("general.name", "tiny-kimi-linear-" + var), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]), (a + ".block_count", c["L"]),
          (a + ".feed_forward_length", c["Fd"]), (a + ".attention.head_count", H),
          (a + ".attention.head_count_kv", [0 if l + 1 in c["kda"] else 1 for l in range(c["L"])]),
          (a + ".rope.freq_base", 10000.0), (a + ".attention.layer_norm_rms_epsilon", 1e-5),
          (a + ".expert_count", c["E"]), (a + ".expert_used_count", c["k"]),
          (a + ".expert_gating_func", 2), (a + ".vocab_size", c["V"]),
          (a + ".ssm.conv_kernel", K), (a + ".kda.head_dim", kd), (a + ".attention.kv_lora_rank", dc),
          (a + ".rope.dimension_count", dr), (a + ".attention.key_length", dc + dr),
          (a + ".attention.value_length", dc), (a + ".attention.key_length_mla", dn + dr),
          (a + ".attention.value_length_mla", dv), (a + ".expert_feed_forward_length", c["F"]),
          (a + ".expert_shared_count", c["S"]), (a + ".leading_dense_block_count", c["dense"]),
          (a + ".expert_weights_scale", float(v["routed_scaling_factor"]))]
    if v["num_expert_group"] > 1:  # the keys llama.cpp reads (its converter writes them from n_group)
        kv += [(a + ".expert_group_count", v["num_expert_group"]),
               (a + ".expert_group_used_count", v["topk_group"])]
    kv += ir.gguf_tokenizer(c["V"], vocab, False)
    T = []
    f32 = ck.GGML_F32

    def mat(name, arr):
        T.append((name, gguf_type(gt, arr), arr))

    mat("token_embd.weight", w["model.embed_tokens.weight"])
    T.append(("output_norm.weight", f32, w["model.norm.weight"]))
    mat("output.weight", w["lm_head.weight"])
    for l in range(c["L"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        sa = p + "self_attn."
        T.append((b + "attn_norm.weight", f32, w[p + "input_layernorm.weight"]))
        if l + 1 in c["kda"]:
            for x in "qkv":
                mat(b + f"attn_{x}.weight", w[sa + f"{x}_proj.weight"])
                cw = w[sa + f"{x}_conv1d.weight"]
                T.append((b + f"ssm_conv1d_{x}.weight", f32, cw.reshape(1, cw.shape[0], 1, K)))
            mat(b + "ssm_f_a.weight", w[sa + "f_a_proj.weight"])
            mat(b + "ssm_f_b.weight", w[sa + "f_b_proj.weight"])
            T.append((b + "ssm_dt.bias", f32, w[sa + "dt_bias"]))
            T.append((b + "ssm_a", f32, -np.exp(w[sa + "A_log"].astype(np.float32))))
            mat(b + "ssm_beta.weight", w[sa + "b_proj.weight"])
            mat(b + "ssm_g_a.weight", w[sa + "g_a_proj.weight"])
            mat(b + "ssm_g_b.weight", w[sa + "g_b_proj.weight"])
            T.append((b + "ssm_norm.weight", f32, w[sa + "o_norm.weight"]))
        else:
            mat(b + "attn_q.weight", w[sa + "q_proj.weight"])
            mat(b + "attn_kv_a_mqa.weight", w[sa + "kv_a_proj_with_mqa.weight"])
            T.append((b + "attn_kv_a_norm.weight", f32, w[sa + "kv_a_layernorm.weight"]))
            kh = w[sa + "kv_b_proj.weight"].reshape(H, dn + dv, dc)
            mat(b + "attn_k_b.weight", np.ascontiguousarray(kh[:, :dn, :].transpose(0, 2, 1)))
            mat(b + "attn_v_b.weight", np.ascontiguousarray(kh[:, dn:, :]))
        mat(b + "attn_output.weight", w[sa + "o_proj.weight"])
        T.append((b + "ffn_norm.weight", f32, w[p + "post_attention_layernorm.weight"]))
        if l < c["dense"]:
            for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
                mat(b + g + ".weight", w[p + "mlp." + h + ".weight"])
            continue
        m = p + "block_sparse_moe."
        T.append((b + "ffn_gate_inp.weight", f32, w[m + "gate.weight"]))
        T.append((b + "exp_probs_b.bias", f32, w[m + "gate.e_score_correction_bias"]))
        for g, h, x in (("ffn_gate", "gate_proj", "w1"), ("ffn_up", "up_proj", "w3"), ("ffn_down", "down_proj", "w2")):
            mat(b + g + "_exps.weight", np.stack([w[m + f"experts.{e}.{x}.weight"] for e in range(c["E"])]))
            mat(b + g + "_shexp.weight", w[m + f"shared_experts.{h}.weight"])
    ck.write_gguf(out, kv, T)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))  # torch threshold 20


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def rms(x, w, eps):
    """RMSNorm over the last axis (rows of a sequence)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def l2norm(x, eps=1e-6):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


# GGUF name below blk.N. -> HF name below model.layers.N. (llama.cpp's
# convert_hf_to_gguf mapping read backwards); ssm_a, attn_k_b, attn_v_b and
# the stacked experts are kept apart (they are not HF tensors)
GGUF_TO_HF = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "ssm_conv1d_q.weight": "self_attn.q_conv1d.weight",
    "ssm_conv1d_k.weight": "self_attn.k_conv1d.weight", "ssm_conv1d_v.weight": "self_attn.v_conv1d.weight",
    "ssm_f_a.weight": "self_attn.f_a_proj.weight", "ssm_f_b.weight": "self_attn.f_b_proj.weight",
    "ssm_dt.bias": "self_attn.dt_bias", "ssm_a": "self_attn.A", "ssm_beta.weight": "self_attn.b_proj.weight",
    "ssm_g_a.weight": "self_attn.g_a_proj.weight", "ssm_g_b.weight": "self_attn.g_b_proj.weight",
    "ssm_norm.weight": "self_attn.o_norm.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight", "attn_k_b.weight": "self_attn.k_b",
    "attn_v_b.weight": "self_attn.v_b", "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "block_sparse_moe.gate.weight",
    "exp_probs_b.bias": "block_sparse_moe.gate.e_score_correction_bias",
    "ffn_gate_shexp.weight": "block_sparse_moe.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "block_sparse_moe.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "block_sparse_moe.shared_experts.down_proj.weight",
}
GGUF_EXPERTS = {"ffn_gate_exps.weight": "w1", "ffn_up_exps.weight": "w3", "ffn_down_exps.weight": "w2"}


# GGUF leaf -> container leaf where they differ (engine/import/arch_kimi_linear.c)
GGUF_TO_SPILL = {"ssm_f_a": "attn_f_a", "ssm_f_b": "attn_f_b", "ssm_beta": "attn_b", "ssm_g_a": "attn_g_a",
                 "ssm_g_b": "attn_g_b", "attn_kv_a_mqa": "attn_kv_a"}


def spill_name(name):
    """The container tensor of a GGUF tensor kept as it is, or None (k_b / v_b
    are joined into attn_kv_b, covered by the logits)."""
    if name == "token_embd.weight":
        return "tok_embd"
    if name == "output.weight":
        return "output"
    b, l, leaf = name.split(".", 2)
    leaf = leaf[:-len(".weight")]
    if leaf in ("attn_k_b", "attn_v_b"):
        return None
    return f"{b}.{l}." + GGUF_TO_SPILL.get(leaf, leaf)


def act_round(x, ty):
    """x (rows on the last axis) as ggml's CPU backend hands it to a dot
    product with a weight of type ty (its vec_dot_type): Q8_0 -> Q8_0 blocks
    of 32 (quantize_row_q8_0's AVX2 path: d = max|x| / 127 stored as f16,
    q = nearest-even(x 127 / max|x|)), F16 -> f16, F32 -> as is."""
    if ty == ck.GGML_F16:
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)
    if ty != ck.GGML_Q8_0:
        return x
    x32 = np.asarray(x, dtype=np.float32)
    b = x32.reshape(x32.shape[:-1] + (-1, 32))
    mx = np.max(np.abs(b), axis=-1, keepdims=True)
    d = (mx / np.float32(127)).astype(np.float16).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        idd = np.where(mx > 0, np.float32(127) / mx, np.float32(0)).astype(np.float32)
    q = np.rint((b * idd).astype(np.float32)).astype(np.float64)
    return (q * d).reshape(x32.shape)


class GgmlAct:
    """A weight applied as ggml applies it (`logits --ggml-act`, the
    explanation of llama.cpp's logits, not what spill must match): W @ h and
    xs @ W.T round the activation with act_round first."""
    __array_ufunc__ = None

    def __init__(self, w, ty):
        self.w, self.ty = w, ty

    @property
    def T(self):  # only ever used as xs @ W.T (__rmatmul__)
        return self

    def __matmul__(self, h):
        return self.w @ act_round(h, self.ty)

    def __rmatmul__(self, xs):
        return act_round(xs, self.ty) @ self.w.T


class Model:
    def __init__(self, src, ggml_act=False):
        self.gguf = src.endswith(".gguf")
        self.ggml_act = ggml_act
        if self.gguf:
            self._load_gguf(src)
        else:
            self._load_hf(src)

    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        self.w = {k: v.astype(np.float64) for k, v in ck.read_checkpoint_dir(d).items()}
        self.cfg = cfg
        la = cfg.get("linear_attn_config") or {}
        self.kda = set(la.get("kda_layers") or [])
        self.kH, self.kd, self.K = la.get("num_heads"), la.get("head_dim"), la.get("short_conv_kernel_size")
        self.eps = cfg["rms_norm_eps"]
        self.H, self.dn, self.dr, self.dv, self.dc = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim",
                                                                       "qk_rope_head_dim", "v_head_dim",
                                                                       "kv_lora_rank"))
        self.E, self.k = cfg["num_experts"], cfg["num_experts_per_token"]
        self.ng, self.tg = cfg.get("num_expert_group", 1), cfg.get("topk_group", 1)
        self.renorm = cfg.get("moe_renormalize", False)
        self.rsf = cfg["routed_scaling_factor"]
        self.L = cfg["num_hidden_layers"]
        self.n_dense = cfg.get("first_k_dense_replace", 0)
        self.shared = bool(cfg.get("num_shared_experts"))
        self.out = self.w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else self.w["lm_head.weight"]

    def _load_gguf(self, path):
        kv, t = ck.read_gguf(path)
        a = kv["general.architecture"]
        if a != "kimi-linear":
            raise SystemExit(f"{path}: general.architecture {a!r}, not kimi-linear")
        g = lambda k, d=None: kv.get(f"{a}.{k}", d)  # noqa: E731
        self.L, self.H, self.eps = g("block_count"), g("attention.head_count"), g("attention.layer_norm_rms_epsilon")
        hk = g("attention.head_count_kv")
        hk = hk if isinstance(hk, list) else [hk] * self.L
        self.kda = {l + 1 for l in range(self.L) if hk[l] == 0}
        self.kH, self.kd, self.K = self.H, g("kda.head_dim"), g("ssm.conv_kernel")
        self.dr, self.dc, self.dv = g("rope.dimension_count"), g("attention.kv_lora_rank"), g("attention.value_length_mla")
        self.dn = g("attention.key_length_mla") - self.dr
        self.E, self.k = g("expert_count"), g("expert_used_count")
        self.ng, self.tg = g("expert_group_count", 1) or 1, g("expert_group_used_count", 1) or 1
        self.rsf = g("expert_weights_scale", 0.0) or 1.0
        if g("expert_gating_func") != 2:
            raise SystemExit("only sigmoid gating")
        self.n_dense = g("leading_dense_block_count", 0)
        self.shared = bool(g("expert_shared_count"))
        self.w, self.gty = {}, {}  # gty: ggml type of each (renamed) tensor
        act = lambda x, ty: GgmlAct(x, ty) if self.ggml_act and x.ndim == 2 else x  # noqa: E731
        for name, te in t.items():
            x = ck.gguf_tensor_f32(te).astype(np.float64)
            if not name.startswith("blk."):
                self.w[name] = x
                continue
            _, l, leaf = name.split(".", 2)
            pre = f"model.layers.{l}."
            if leaf in GGUF_EXPERTS:
                for e in range(self.E):
                    self.w[pre + f"block_sparse_moe.experts.{e}.{GGUF_EXPERTS[leaf]}.weight"] = act(x[e], te[0])
            elif leaf.startswith("ssm_conv1d_"):
                self.w[pre + GGUF_TO_HF[leaf]] = x.reshape(-1, 1, self.K)  # numpy (1, C, 1, K)
            else:
                self.w[pre + GGUF_TO_HF[leaf]] = act(x, te[0])
                self.gty[pre + GGUF_TO_HF[leaf]] = te[0]
        self.w["model.embed_tokens.weight"] = self.w["token_embd.weight"]
        self.w["model.norm.weight"] = self.w["output_norm.weight"]
        self.out = act(self.w["output.weight"], t["output.weight"][0])

    def l2(self, x):
        if self.gguf:  # build_gdn_l2_norm: rms_norm(x, eps / d) / sqrt(d) = x / sqrt(|x|^2 + eps)
            return l2norm(x, self.eps)
        return l2norm(x)

    def g(self, l, n):
        return self.w[f"model.layers.{l}.{n}"]

    def kda_layer(self, l, xs):
        """xs (T, D) -> (T, D): the whole sequence through the recurrence."""
        a = "self_attn."
        T_, H, d, K = xs.shape[0], self.kH, self.kd, self.K

        def conv(x, wt):  # x (T, C), wt (C, 1, K): causal depthwise, zero history, SiLU
            wt = wt.reshape(wt.shape[0], K)
            pad = np.concatenate([np.zeros((K - 1, x.shape[1])), x])
            y = np.stack([np.sum(pad[t:t + K].T * wt, axis=1) for t in range(T_)])
            return ir.silu(y)

        q = conv(xs @ self.g(l, a + "q_proj.weight").T, self.g(l, a + "q_conv1d.weight")).reshape(T_, H, d)
        k = conv(xs @ self.g(l, a + "k_proj.weight").T, self.g(l, a + "k_conv1d.weight")).reshape(T_, H, d)
        v = conv(xs @ self.g(l, a + "v_proj.weight").T, self.g(l, a + "v_conv1d.weight")).reshape(T_, H, d)
        f = (xs @ self.g(l, a + "f_a_proj.weight").T) @ self.g(l, a + "f_b_proj.weight").T
        A = self.g(l, a + "A").reshape(H, 1) if self.gguf else -np.exp(self.g(l, a + "A_log").reshape(H, 1))
        gl = A * softplus(f.reshape(T_, H, d) + self.g(l, a + "dt_bias").reshape(H, d))
        beta = sigmoid(xs @ self.g(l, a + "b_proj.weight").T)  # (T, H)
        q, k = self.l2(q) * d ** -0.5, self.l2(k)
        S = np.zeros((H, d, d))
        o = np.empty((T_, H, d))
        for t in range(T_):
            S = S * np.exp(gl[t])[..., None]
            u = v[t] - np.einsum("hk,hkv->hv", k[t], S)
            S = S + np.einsum("hk,hv->hkv", beta[t][:, None] * k[t], u)
            o[t] = np.einsum("hk,hkv->hv", q[t], S)
        gate = ((xs @ self.g(l, a + "g_a_proj.weight").T) @ self.g(l, a + "g_b_proj.weight").T).reshape(T_, H, d)
        on = self.g(l, a + "o_norm.weight")
        o = rms(o, on, self.eps) * sigmoid(gate)  # FusedRMSNormGated(activation sigmoid)
        return o.reshape(T_, H * d) @ self.g(l, a + "o_proj.weight").T

    def mla_absorbed(self, l, xs):
        """llama.cpp's MLA (GGUF attn_k_b / attn_v_b): q_nope mapped into the
        latent by k_b, scored against the normalised latent c plus q_pe.k_pe;
        the attention-weighted latent mapped out by v_b."""
        a = "self_attn."
        T_, H, dn, dr, dc = xs.shape[0], self.H, self.dn, self.dr, self.dc
        q = (xs @ self.g(l, a + "q_proj.weight").T).reshape(T_, H, dn + dr)
        kv = xs @ self.g(l, a + "kv_a_proj_with_mqa.weight").T
        c = rms(kv[:, :dc], self.g(l, a + "kv_a_layernorm.weight"), self.eps)
        kb, vb = self.g(l, a + "k_b"), self.g(l, a + "v_b")  # (H, dc, dn), (H, dv, dc)
        tk = tv = ck.GGML_F32
        if self.ggml_act:  # k_b / v_b round their inputs too
            tk, tv = self.gty[f"model.layers.{l}.{a}k_b"], self.gty[f"model.layers.{l}.{a}v_b"]
        o = np.empty((T_, H, self.dv))
        for j in range(H):
            qa = act_round(q[:, j, :dn], tk) @ kb[j].T  # (T, dc)
            for t in range(T_):
                s = (c[:t + 1] @ qa[t] + kv[:t + 1, dc:] @ q[t, j, dn:]) * (dn + dr) ** -0.5
                o[t, j] = vb[j] @ act_round(ir.softmax(s) @ c[:t + 1], tv)
        return o.reshape(T_, -1) @ self.g(l, a + "o_proj.weight").T

    def mla_layer(self, l, xs):
        if self.gguf:
            return self.mla_absorbed(l, xs)
        a = "self_attn."
        T_, H, dn, dr, dv, dc = xs.shape[0], self.H, self.dn, self.dr, self.dv, self.dc
        q = (xs @ self.g(l, a + "q_proj.weight").T).reshape(T_, H, dn + dr)
        kv = xs @ self.g(l, a + "kv_a_proj_with_mqa.weight").T
        c = rms(kv[:, :dc], self.g(l, a + "kv_a_layernorm.weight"), 1e-6)  # KimiRMSNorm(kv_lora_rank)
        kvb = (c @ self.g(l, a + "kv_b_proj.weight").T).reshape(T_, H, dn + dv)
        keys = np.concatenate([kvb[:, :, :dn], np.repeat(kv[:, None, dc:], H, axis=1)], axis=-1)
        vals = kvb[:, :, dn:]
        o = np.empty((T_, H, dv))
        for t in range(T_):
            for j in range(H):
                s = keys[:t + 1, j] @ q[t, j] * (dn + dr) ** -0.5
                o[t, j] = ir.softmax(s) @ vals[:t + 1, j]
        return o.reshape(T_, H * dv) @ self.g(l, a + "o_proj.weight").T

    def moe(self, l, h):
        m = "block_sparse_moe."
        scores = sigmoid(self.g(l, m + "gate.weight") @ h)
        choice = scores + self.g(l, m + "gate.e_score_correction_bias")
        gs = np.sort(choice.reshape(self.ng, -1), axis=1)[:, -2:].sum(1)
        keep = np.argsort(-gs, kind="stable")[:self.tg]
        mask = np.zeros(self.ng, bool)
        mask[keep] = True
        choice = np.where(np.repeat(mask, self.E // self.ng), choice, -np.inf if self.gguf else 0.0)
        sel = np.argsort(-choice, kind="stable")[:self.k]
        wt = scores[sel]
        if self.gguf:  # llama.cpp: always, the sum clamped at the smallest normal f16
            wt = wt / max(wt.sum(), 6.103515625e-5)
        elif self.k > 1 and self.renorm:
            wt = wt / (wt.sum() + 1e-20)
        wt = wt * self.rsf
        y = np.zeros_like(h)
        for wi, e in zip(wt, sel):
            ex = m + f"experts.{e}."
            y += wi * (self.g(l, ex + "w2.weight") @ (ir.silu(self.g(l, ex + "w1.weight") @ h) *
                                                      (self.g(l, ex + "w3.weight") @ h)))
        if self.shared:
            s = m + "shared_experts."
            y += self.g(l, s + "down_proj.weight") @ (ir.silu(self.g(l, s + "gate_proj.weight") @ h) *
                                                      (self.g(l, s + "up_proj.weight") @ h))
        return y

    def forward(self, tokens):
        x = self.w["model.embed_tokens.weight"][tokens].copy()  # (T, D)
        for l in range(self.L):
            h = rms(x, self.g(l, "input_layernorm.weight"), self.eps)
            x = x + (self.kda_layer(l, h) if l + 1 in self.kda else self.mla_layer(l, h))
            h = rms(x, self.g(l, "post_attention_layernorm.weight"), self.eps)
            if l < self.n_dense:
                p = "mlp."
                x = x + (ir.silu(h @ self.g(l, p + "gate_proj.weight").T) * (h @ self.g(l, p + "up_proj.weight").T)) \
                    @ self.g(l, p + "down_proj.weight").T
            else:
                x = x + np.stack([self.moe(l, ht) for ht in h])
        return rms(x, self.w["model.norm.weight"], self.eps) @ self.out.T


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("out")
    m.add_argument("--variant", default="base", choices=sorted(VARIANTS))
    m.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--seed", type=int, default=1)
    gg = sub.add_parser("make-gguf")
    gg.add_argument("out")
    gg.add_argument("--variant", default="base", choices=sorted(VARIANTS))
    gg.add_argument("--type", default="F32", choices=["F32", "F16", "Q8_0"])
    gg.add_argument("--seed", type=int, default=1)
    gg.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary llama.cpp loads")
    cw = sub.add_parser("check-weights", help="Q8_0 tensors of a GGUF bit-identical in the container")
    cw.add_argument("gguf")
    cw.add_argument("container")
    lg = sub.add_parser("logits")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out")
    lg.add_argument("--compare")
    lg.add_argument("--tol", type=float, default=1e-4)
    lg.add_argument("--ggml-act", action="store_true",
                    help="GGUF: round every matmul input as ggml's CPU backend does (Q8_0 / F16), "
                         "to explain llama.cpp's logits")
    a = ap.parse_args(argv)
    if a.cmd == "make-hf":
        make_hf(a.out, a.variant, a.dtype, a.seed, a.shards)
        return
    if a.cmd == "make-gguf":
        make_gguf(a.out, a.variant, a.type, a.seed, a.vocab)
        return
    if a.cmd == "check-weights":
        ir.check_weights(a.gguf, a.container, rename=spill_name)
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
            raise SystemExit(f"compare: relative difference {rel:.3e} (tol {a.tol}), argmax agree {am}")


if __name__ == "__main__":
    main()
