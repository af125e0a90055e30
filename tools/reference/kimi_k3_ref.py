#!/usr/bin/python3
"""kimi_k3_ref: tiny random Kimi K3 models and their logits (float64 numpy).

Role: tests only (tools/peers/kimi_k3_oracle_test.sh); the reference for
docs/MODEL.md "Kimi K3 (released)". Written from llama.cpp de3ff81's
kimi-k3 (src/models/kimi-k3.cpp, conversion/kimi_k3.py, gguf-py) read as a
specification; no code of theirs, and nothing here reads a spill container.

  make-hf DIR    the released checkpoint's layout: config.json with
                 architectures KimiK3ForConditionalGeneration and the text
                 model under text_config, tensors under `language_model.`
                 (a tiny vision_tower / mm_projector beside them), routed
                 experts as compressed-tensors mxfp4-pack-quantized
                 (`weight_packed` uint8 [rows, cols/2], element 2i in the low
                 nibble; `weight_scale` e8m0 [rows, cols/32]), the AttnRes
                 `*_res_norm` / `*_res_proj` pairs, A_log padded past the
                 head count, `g_proj` on KDA (full-rank gate) and on MLA
                 layers (output gate), kv_b_proj, e_score_correction_bias.
  make-gguf F    the same model as GGUF `kimi-k3` in llama.cpp's layout,
                 converted by hf_to_gguf() below (res pairs fused into one
                 score vector, ssm_a = -exp(A_log[:H]), kv_b split into
                 attn_k_b / attn_v_b, experts stacked; experts F32 holding
                 exactly the MXFP4 values, or MXFP4 repacked byte for byte).
  logits SRC     the forward pass of llama.cpp's kimi-k3 graph from a .gguf
                 (our reader and dequantisers) or from a make-hf directory
                 (the same conversion in memory, experts dequantised straight
                 from the compressed-tensors bytes, not through the repack).

One random model per (variant, seed): every form above holds the same
values, so their logits are bit-identical here. Variants select the
optional parts (AttnRes block size or none, q LoRA, MLA output gate, KDA
gate lower bound, latent MoE with or without its norm, shared experts,
SiTU betas incl. linear beta <= 0, routing renormalisation and scale).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402
import kimi_linear_ref as kl  # noqa: E402

ARCH = "kimi-k3"
# 6 layers: 1-based full_attn_layers [4, 6] are MLA (every 4th and the last,
# as in K3), the rest KDA; layer 0 dense; KDA and MLA share H heads.
DIMS = dict(V=300, D=64, L=6, H=2, kd=16, K=4, dc=32, dn=16, dr=8, dv=16, E=8, k=3, F=32, Fd=96,
            full=[4, 6], dense=1, A_pad=2)

# bs: attn_res_block_size (0 = no AttnRes); qlora: q_lora_rank (None = plain
# attn_q); gate: MLA output gate; lb: kda gate_lower_bound (None = the
# kimi-linear softplus decay); latent: routed_expert_hidden_size (None = the
# experts run at D); rnorm: routed_expert_norm; S: shared experts; beta /
# lbeta: SiTU; renorm / rsf: moe_renormalize / routed_scaling_factor.
VARIANTS = {
    "full": dict(bs=2, qlora=24, gate=True, lb=-5.0, latent=32, rnorm=True, S=2, beta=1.5, lbeta=2.0,
                 renorm=True, rsf=2.5),
    "nolora": dict(bs=2, qlora=None, gate=True, lb=None, latent=32, rnorm=False, S=1, beta=2.0, lbeta=0.0,
                   renorm=False, rsf=0.7),
    "plain": dict(bs=0, qlora=16, gate=False, lb=-3.0, latent=None, rnorm=False, S=0, beta=4.0, lbeta=-1.0,
                  renorm=True, rsf=1.0),
    "released": dict(bs=3, qlora=None, gate=True, lb=-5.0, latent=32, rnorm=True, S=2, beta=4.0, lbeta=25.0,
                     renorm=True, rsf=2.5),
}

sigmoid, rms, softplus = kl.sigmoid, kl.rms, kl.softplus

# ---------------------------------------------------------------- MXFP4


def ct_mxfp4_random(rows, cols, r):
    """Random compressed-tensors MXFP4 (packed uint8 [rows, cols/2], scale
    uint8 [rows, cols/32]): values of RMS ~ 1/sqrt(cols); one block in 64
    gets exponent 0 or 1 (ggml's small-exponent scales)."""
    codes = r.integers(0, 16, size=(rows, cols), dtype=np.uint8)
    target = np.log2(1.0 / np.sqrt(cols) / 5.85)  # 5.85: RMS of the doubled e2m1 values
    e = (128 + np.round(target) + r.integers(-1, 2, size=(rows, cols // 32))).astype(np.uint8)
    tiny = r.random(e.shape) < 1 / 64
    e[tiny] = r.integers(0, 2, size=int(tiny.sum()), dtype=np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), e


def ct_mxfp4_dequant(packed, scale):
    """compressed-tensors mxfp4-pack-quantized -> float32 [rows, cols]: element
    2i is byte i's low nibble, 2i+1 its high one; value = e2m1(code) *
    2^(scale - 127) = kvalues_mxfp4[code] * 2^(scale - 128)."""
    if (scale == 255).any():
        raise ValueError("MXFP4 scale 255 (e8m0 NaN)")
    rows = packed.shape[0]
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(rows, -1)
    d = np.ldexp(np.float32(1), scale.astype(np.int32) - 128).astype(np.float32)
    return ck.MXFP4_VALUES[codes] * np.repeat(d, 32, axis=1)


def ct_to_ggml_mxfp4(packed, scale):
    """The lossless repack (conversion/base.py repack_mxfp4_blocks): per block
    of 32, the scale byte then 16 bytes, byte j = element j | element j+16 << 4."""
    rows = packed.shape[0]
    nb = scale.shape[1]
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(rows, nb, 32)
    qs = (codes[:, :, :16] | (codes[:, :, 16:] << 4)).astype(np.uint8)
    return np.concatenate([scale[:, :, None], qs], axis=2).reshape(rows, nb * 17)

# ---------------------------------------------------------------- the random model


def bf16_exact(a):
    """float32 values that BF16 holds exactly (so a BF16 checkpoint and an F32
    GGUF carry the same model)."""
    return ck.bf16_bits_to_f32(ck.f32_to_bf16_bits(a))


def ssm_a(a_log):
    """GGUF ssm_a: -exp(A_log) in float32, as the converter folds it."""
    return -np.exp(np.asarray(a_log, np.float32))


def exact_a_log(a):
    """The float32 near a whose trip through a GGUF is exact: A_log ->
    ssm_a = -exp(A_log) (f32) -> log(-A) (spill's import, correctly rounded)
    gives A_log back, so the HF and GGUF forms of one model import to the
    same container: the trip's fixed point from a (a moves by at most the
    f32 resolution of exp, ~6e-8 absolute)."""
    c = np.float32(a)
    for _ in range(16):
        n = np.float32(np.log(-np.float64(ssm_a(c))))
        if n == c:
            return c
        c = n
    raise SystemExit(f"no exactly round-tripping A_log near {a}")


def random_weights(var, seed):
    """({HF name below language_model.: float32 array, or (packed, scale) for
    an MXFP4 expert}, dims)."""
    c = dict(DIMS)
    v = VARIANTS[var]
    r = np.random.default_rng(seed)
    D, H, kd, K, dc, dn, dr, dv, E, F = (c[x] for x in ("D", "H", "kd", "K", "dc", "dn", "dr", "dv", "E", "F"))
    di = H * kd
    Dl = v["latent"] or D

    def mat(o, i, s=1.0):
        return bf16_exact(r.standard_normal((o, i)) * (s / np.sqrt(i)))

    def vec(m, mu=1.0, s=0.2):
        return bf16_exact(mu + s * r.standard_normal(m))

    w = {"model.embed_tokens.weight": bf16_exact(r.standard_normal((c["V"], D))),
         "model.norm.weight": vec(D), "lm_head.weight": mat(c["V"], D)}
    if v["bs"]:
        w["model.output_attn_res_norm.weight"] = vec(D)
        w["model.output_attn_res_proj.weight"] = mat(1, D, 0.5)
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = vec(D)
        w[p + "post_attention_layernorm.weight"] = vec(D)
        if v["bs"]:
            for x in ("self_attention_res", "mlp_res"):
                w[p + x + "_norm.weight"] = vec(D)
                w[p + x + "_proj.weight"] = mat(1, D, 0.5)
        a = p + "self_attn."
        if l + 1 not in c["full"]:  # KDA
            for x in "qkv":
                w[a + f"{x}_proj.weight"] = mat(di, D)
                w[a + f"{x}_conv1d.weight"] = bf16_exact(r.standard_normal((di, 1, K)) * 0.5)
            w[a + "f_a_proj.weight"] = mat(kd, D)
            w[a + "f_b_proj.weight"] = mat(di, kd)
            w[a + "dt_bias"] = (0.5 * r.standard_normal(di)).astype(np.float32)
            A = np.zeros(H + c["A_pad"], np.float32)  # padded storage, the rest zero
            A[:H] = [exact_a_log(a) for a in np.log(r.uniform(1, 16, H)) - 2.0]
            w[a + "A_log"] = A
            w[a + "b_proj.weight"] = mat(H, D)
            w[a + "g_proj.weight"] = mat(di, D)
            w[a + "o_norm.weight"] = vec(kd)
            w[a + "o_proj.weight"] = mat(D, di)
        else:  # MLA (NoPE)
            if v["qlora"]:
                w[a + "q_a_proj.weight"] = mat(v["qlora"], D)
                w[a + "q_a_layernorm.weight"] = vec(v["qlora"])
                w[a + "q_b_proj.weight"] = mat(H * (dn + dr), v["qlora"])
            else:
                w[a + "q_proj.weight"] = mat(H * (dn + dr), D)
            w[a + "kv_a_proj_with_mqa.weight"] = mat(dc + dr, D)
            w[a + "kv_a_layernorm.weight"] = vec(dc)
            w[a + "kv_b_proj.weight"] = mat(H * (dn + dv), dc)
            if v["gate"]:
                w[a + "g_proj.weight"] = mat(H * dv, D)
            w[a + "o_proj.weight"] = mat(D, H * dv)
        if l < c["dense"]:
            w[p + "mlp.gate_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.up_proj.weight"] = mat(c["Fd"], D)
            w[p + "mlp.down_proj.weight"] = mat(D, c["Fd"])
            continue
        m = p + "block_sparse_moe."
        w[m + "gate.weight"] = mat(E, D, 3.0)
        w[m + "gate.e_score_correction_bias"] = (0.3 * r.standard_normal(E)).astype(np.float32)
        for e in range(E):
            w[m + f"experts.{e}.w1.weight"] = ct_mxfp4_random(F, Dl, r)
            w[m + f"experts.{e}.w3.weight"] = ct_mxfp4_random(F, Dl, r)
            w[m + f"experts.{e}.w2.weight"] = ct_mxfp4_random(Dl, F, r)
        if v["latent"]:
            w[m + "routed_expert_down_proj.weight"] = mat(Dl, D)
            w[m + "routed_expert_up_proj.weight"] = mat(D, Dl)
            if v["rnorm"]:
                w[m + "routed_expert_norm.weight"] = vec(Dl)
        if v["S"]:
            S = v["S"] * F
            w[m + "shared_experts.gate_proj.weight"] = mat(S, D)
            w[m + "shared_experts.up_proj.weight"] = mat(S, D)
            w[m + "shared_experts.down_proj.weight"] = mat(D, S)
    return w, c


def hf_config(var, c):
    """config.json as released: the text model under text_config (its own
    architectures says KimiLinearForCausalLM), quantization_config at the top
    (where it sits in the released file is an assumption: llama.cpp merges
    text_config into the top level and reads it from there)."""
    v = VARIANTS[var]
    la = {"full_attn_layers": c["full"], "kda_layers": [l + 1 for l in range(c["L"]) if l + 1 not in c["full"]],
          "head_dim": c["kd"], "num_heads": c["H"], "short_conv_kernel_size": c["K"]}
    if v["lb"] is not None:
        la["gate_lower_bound"] = v["lb"]
    text = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": c["V"],
            "hidden_size": c["D"], "intermediate_size": c["Fd"], "num_hidden_layers": c["L"],
            "num_attention_heads": c["H"], "num_key_value_heads": c["H"], "rms_norm_eps": 1e-5,
            "max_position_embeddings": 4096, "linear_attn_config": la,
            "q_lora_rank": v["qlora"], "kv_lora_rank": c["dc"], "qk_nope_head_dim": c["dn"],
            "qk_rope_head_dim": c["dr"], "v_head_dim": c["dv"], "mla_use_nope": True,
            "num_experts": c["E"], "num_experts_per_token": c["k"], "moe_intermediate_size": c["F"],
            "num_shared_experts": v["S"], "first_k_dense_replace": c["dense"],
            "routed_scaling_factor": v["rsf"], "moe_renormalize": v["renorm"],
            "moe_router_activation_func": "sigmoid", "num_expert_group": 1, "topk_group": 1,
            "hidden_act": "situ", "activation_situ_beta": v["beta"], "activation_situ_linear_beta": v["lbeta"],
            "attn_res_block_size": v["bs"], "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    if v["latent"]:
        text["routed_expert_hidden_size"] = v["latent"]
    return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
            "text_config": text, "vision_config": {"hidden_size": 8},
            "quantization_config": {
                "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                    "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": True}}},
                "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\..*",
                           "re:vision_tower.*", "re:mm_projector.*"]}}


def make_hf(out, var, seed, dtype="BF16", scale_dtype="U8", shards=2):
    os.makedirs(out, exist_ok=True)
    w, c = random_weights(var, seed)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(var, c), f, indent=1)
    r = np.random.default_rng(seed + 1)
    ents = [("vision_tower.patch_embed.proj.weight", dtype, bf16_exact(r.standard_normal((8, 3, 2, 2)))),
            ("mm_projector.proj.linear_0.weight", dtype, bf16_exact(r.standard_normal((c["D"], 8))))]
    f32 = ("e_score_correction_bias", "A_log", "dt_bias")
    for n in sorted(w):
        x = w[n]
        if isinstance(x, tuple):
            base = "language_model." + n[:-len(".weight")]
            ents += [(base + ".weight_packed", "U8", x[0]), (base + ".weight_scale", scale_dtype, x[1])]
        else:
            ents.append(("language_model." + n, "F32" if n.endswith(f32) else dtype, x))
    wm = {}
    for s in range(shards):
        fn = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = ents[s::shards]
        ck.write_safetensors(os.path.join(out, fn), part)
        wm.update({n: fn for n, _, _ in part})
    if shards > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def read_hf(d):
    """(text config merged over the top level, {name below language_model.:
    float32 array, or (packed, scale)}) of a make-hf directory; the vision
    tower and projector skipped."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("architectures") != ["KimiK3ForConditionalGeneration"]:
        raise SystemExit(f"{d}: architectures {cfg.get('architectures')}, not KimiK3ForConditionalGeneration")
    hp = {**cfg, **cfg.get("text_config", {})}
    q = hp.get("quantization_config") or {}
    mx = q.get("quant_method") == "compressed-tensors" and q.get("format") == "mxfp4-pack-quantized"
    raw = ck.read_checkpoint_dir(d)
    w = {}
    for n, x in raw.items():
        if n.startswith(("vision_tower.", "mm_projector.")):
            continue
        n = n[len("language_model."):] if n.startswith("language_model.") else n
        if n.endswith(".weight_packed"):
            if not mx or ".block_sparse_moe.experts." not in n:
                raise SystemExit(f"{n}: packed MXFP4 outside the routed experts, or no mxfp4 quantization_config")
            base = n[:-len(".weight_packed")]
            sc = raw.get("language_model." + base + ".weight_scale", raw.get(base + ".weight_scale"))
            if sc is None:
                raise SystemExit(f"{base}.weight_scale is missing")
            w[base + ".weight"] = (x, sc)
        elif not n.endswith(".weight_scale"):
            w[n] = x
    return hp, w

# ---------------------------------------------------------------- HF -> GGUF


def hf_to_gguf(hp, w, experts="F32", vocab=True):
    """(kv list, tensor list) of GGUF kimi-k3 as conversion/kimi_k3.py lays it
    out. experts: "F32" (values dequantised from the compressed-tensors bytes)
    or "MXFP4" (the repack)."""
    a = ARCH
    L, H, E = hp["num_hidden_layers"], hp["num_attention_heads"], hp["num_experts"]
    la = hp["linear_attn_config"]
    full = set(la["full_attn_layers"])
    dn, dr, dv, dc = hp["qk_nope_head_dim"], hp["qk_rope_head_dim"], hp["v_head_dim"], hp["kv_lora_rank"]
    if hp.get("hidden_act") != "situ" or hp.get("moe_router_activation_func") != "sigmoid" or \
            not hp.get("mla_use_nope") or la["num_heads"] != H:
        raise SystemExit("not a kimi-k3 text config (situ, sigmoid routing, NoPE MLA, KDA heads = heads)")
    kv = [("general.architecture", a), ("general.name", "tiny-kimi-k3"), ("general.alignment", 32),
          (a + ".context_length", hp["max_position_embeddings"]), (a + ".embedding_length", hp["hidden_size"]),
          (a + ".block_count", L), (a + ".feed_forward_length", hp["intermediate_size"]),
          (a + ".attention.head_count", H),
          (a + ".attention.head_count_kv", [1 if l + 1 in full else 0 for l in range(L)]),
          (a + ".attention.layer_norm_rms_epsilon", float(hp["rms_norm_eps"])),
          (a + ".expert_count", E), (a + ".expert_used_count", hp["num_experts_per_token"]),
          (a + ".expert_gating_func", 2), (a + ".vocab_size", hp["vocab_size"]),
          (a + ".ssm.conv_kernel", la["short_conv_kernel_size"]), (a + ".kda.head_dim", la["head_dim"])]
    if la.get("gate_lower_bound") is not None:
        kv.append((a + ".kda.gate_lower_bound", float(la["gate_lower_bound"])))
    if hp.get("q_lora_rank") is not None:
        kv.append((a + ".attention.q_lora_rank", hp["q_lora_rank"]))
    kv += [(a + ".attention.kv_lora_rank", dc), (a + ".rope.dimension_count", dr),
           (a + ".attention.key_length", dc + dr), (a + ".attention.value_length", dc),
           (a + ".attention.key_length_mla", dn + dr), (a + ".attention.value_length_mla", dv),
           (a + ".expert_feed_forward_length", hp["moe_intermediate_size"]),
           (a + ".expert_shared_count", hp["num_shared_experts"]),
           (a + ".leading_dense_block_count", hp["first_k_dense_replace"]),
           (a + ".expert_weights_scale", float(hp["routed_scaling_factor"])),
           (a + ".expert_weights_norm", bool(hp["moe_renormalize"]))]
    if hp.get("routed_expert_hidden_size") is not None:
        kv.append((a + ".expert_latent_length", hp["routed_expert_hidden_size"]))
    kv += [(a + ".activation.situ_beta", float(hp["activation_situ_beta"])),
           (a + ".activation.situ_linear_beta", float(hp["activation_situ_linear_beta"])),
           (a + ".attn_res.block_size", hp["attn_res_block_size"])]
    kv += ir.gguf_tokenizer(hp["vocab_size"], vocab, False)
    f32 = ck.GGML_F32
    T = [("token_embd.weight", f32, w["model.embed_tokens.weight"]),
         ("output_norm.weight", f32, w["model.norm.weight"]),
         ("output.weight", f32, w["lm_head.weight"])]

    def res(prefix):  # res_norm * res_proj, one [D] score vector (their only use is the product)
        return (w[prefix + "_norm.weight"].astype(np.float32).ravel() *
                w[prefix + "_proj.weight"].astype(np.float32).ravel())

    if hp["attn_res_block_size"] > 0:
        T.append(("output_res_score.weight", f32, res("model.output_attn_res")))
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.f_a_proj.weight": "ssm_f_a.weight",
             "self_attn.f_b_proj.weight": "ssm_f_b.weight", "self_attn.b_proj.weight": "ssm_beta.weight",
             "self_attn.dt_bias": "ssm_dt.bias", "self_attn.o_norm.weight": "ssm_norm.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_a_proj.weight": "attn_q_a.weight",
             "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight", "self_attn.q_b_proj.weight": "attn_q_b.weight",
             "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
             "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight", "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
             "block_sparse_moe.gate.e_score_correction_bias": "exp_probs_b.bias",
             "block_sparse_moe.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
             "block_sparse_moe.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
             "block_sparse_moe.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
             "block_sparse_moe.routed_expert_down_proj.weight": "ffn_routed_down.weight",
             "block_sparse_moe.routed_expert_up_proj.weight": "ffn_routed_up.weight",
             "block_sparse_moe.routed_expert_norm.weight": "ffn_routed_norm.weight"}
    used = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
            "model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"}
    for l in range(L):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        kda = l + 1 not in full
        if hp["attn_res_block_size"] > 0:
            T.append((b + "attn_res_score.weight", f32, res(p + "self_attention_res")))
            T.append((b + "ffn_res_score.weight", f32, res(p + "mlp_res")))
        for x in ("self_attention_res", "mlp_res"):
            used |= {p + x + "_norm.weight", p + x + "_proj.weight"}
        for hn, gn in names.items():
            if p + hn in w:
                T.append((b + gn, f32, w[p + hn]))
                used.add(p + hn)
        sa = p + "self_attn."
        if kda:
            for x in "qkv":  # HF [di, 1, K] -> numpy (1, di, 1, K) (ggml {K, 1, di, 1})
                cw = w[sa + f"{x}_conv1d.weight"]
                T.append((b + f"ssm_conv1d_{x}.weight", f32, cw.reshape(1, cw.shape[0], 1, cw.shape[-1])))
                used.add(sa + f"{x}_conv1d.weight")
            A = w[sa + "A_log"].astype(np.float32).ravel()[:H]  # padded storage cut to the head count
            T.append((b + "ssm_a", f32, ssm_a(A)))
            T.append((b + "ssm_g.weight", f32, w[sa + "g_proj.weight"]))  # the full-rank KDA gate
            used |= {sa + "A_log", sa + "g_proj.weight"}
        else:
            if sa + "g_proj.weight" in w:
                T.append((b + "attn_gate.weight", f32, w[sa + "g_proj.weight"]))  # the MLA output gate
                used.add(sa + "g_proj.weight")
            kh = w[sa + "kv_b_proj.weight"].reshape(H, dn + dv, dc)  # per head: nope rows, then v rows
            T.append((b + "attn_k_b.weight", f32, np.ascontiguousarray(kh[:, :dn, :].transpose(0, 2, 1))))
            T.append((b + "attn_v_b.weight", f32, np.ascontiguousarray(kh[:, dn:, :])))
            used.add(sa + "kv_b_proj.weight")
        if l < hp["first_k_dense_replace"]:
            continue
        m = p + "block_sparse_moe.experts."
        for wid, gn in (("w1", "ffn_gate_exps"), ("w2", "ffn_down_exps"), ("w3", "ffn_up_exps")):
            xs = [w[m + f"{e}.{wid}.weight"] for e in range(E)]
            used |= {m + f"{e}.{wid}.weight" for e in range(E)}
            if not all(isinstance(x, tuple) for x in xs):
                T.append((b + gn + ".weight", f32, np.stack([np.asarray(x, np.float32) for x in xs])))
            elif experts == "MXFP4":
                rows, half = xs[0][0].shape
                raw = np.stack([ct_to_ggml_mxfp4(*x) for x in xs])
                T.append((b + gn + ".weight", ck.GGML_MXFP4, (raw.tobytes(), (E, rows, half * 2))))
            else:
                T.append((b + gn + ".weight", f32, np.stack([ct_mxfp4_dequant(*x) for x in xs])))
    left = sorted(set(w) - used)
    if left:
        raise SystemExit(f"tensors not part of kimi-k3: {left[:4]}")
    return kv, T


def make_gguf(out, var, seed, experts="F32", vocab=True):
    w, c = random_weights(var, seed)
    cfg = hf_config(var, c)
    kv, T = hf_to_gguf({**cfg, **cfg["text_config"]}, w, experts, vocab)
    ck.write_gguf(out, kv, T)

# ---------------------------------------------------------------- forward (llama.cpp's kimi-k3 graph)


def situ(g, u, beta, lbeta):
    """beta tanh(g / beta) sigmoid(g) * (lbeta tanh(u / lbeta) if lbeta > 0 else u)."""
    a = beta * np.tanh(g / beta) * sigmoid(g)
    return a * (lbeta * np.tanh(u / lbeta) if lbeta > 0 else u)


class Model:
    def __init__(self, src, ggml_act=False):
        self.ggml_act = ggml_act
        if src.endswith(".gguf"):
            kv, t = ck.read_gguf(src)
            if kv.get("general.architecture") != ARCH:
                raise SystemExit(f"{src}: general.architecture {kv.get('general.architecture')!r}, not {ARCH}")
            tensors = {n: (ty, ck.gguf_tensor_f32((ty, shape, raw))) for n, (ty, shape, raw) in t.items()}
        else:
            hp, w = read_hf(src)
            kv, T = hf_to_gguf(hp, w, "F32", False)
            # float keys as a GGUF holds them (f32), as llama.cpp's hparams are
            kv = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in kv}
            tensors = {n: (ty, np.asarray(x, np.float32)) for n, ty, x in T}
        self.ty = {n: ty for n, (ty, _) in tensors.items()}
        self.w = {n: x.astype(np.float64) for n, (_, x) in tensors.items()}
        g = lambda k, d=None: kv.get(f"{ARCH}.{k}", d)  # noqa: E731
        self.L, self.H, self.eps = g("block_count"), g("attention.head_count"), g("attention.layer_norm_rms_epsilon")
        hk = g("attention.head_count_kv")
        self.kda = [x == 0 for x in (hk if isinstance(hk, list) else [hk] * self.L)]
        self.kd, self.K = g("kda.head_dim"), g("ssm.conv_kernel")
        self.lb = g("kda.gate_lower_bound")
        self.dr, self.dc, self.dv = g("rope.dimension_count"), g("attention.kv_lora_rank"), g("attention.value_length_mla")
        self.dn = g("attention.key_length_mla") - self.dr
        self.E, self.k = g("expert_count"), g("expert_used_count")
        if g("expert_gating_func") != 2 or (g("expert_group_count", 1) or 1) > 1:
            raise SystemExit("only sigmoid gating without expert groups")
        self.renorm, self.rsf = bool(g("expert_weights_norm", False)), g("expert_weights_scale", 0.0)
        self.n_dense = g("leading_dense_block_count", 0)
        self.beta, self.lbeta = g("activation.situ_beta"), g("activation.situ_linear_beta")
        self.bs = g("attn_res.block_size")
        self.margins = []  # (position, layer, k-th minus (k+1)-th selection key)

    def t(self, l, n):
        return self.w.get(f"blk.{l}.{n}")

    def mm(self, x, l, n):
        """x (..., in) @ W.T, with ggml's Q8_0 activation rounding emulated for
        an MXFP4 weight under --ggml-act (its CPU vec_dot_type is Q8_0)."""
        W = self.w[n if l is None else f"blk.{l}.{n}"]
        ty = self.ty[n if l is None else f"blk.{l}.{n}"]
        return self.act(x, ty) @ W.T

    def act(self, x, ty):
        return kl.act_round(x, ck.GGML_Q8_0) if self.ggml_act and ty == ck.GGML_MXFP4 else x

    def mix(self, bank, v, score):
        """AttnRes: softmax over [banked entries..., v] of sum(rmsnorm(.) *
        score) (no norm weight, eps = rms eps), mixing the RAW entries."""
        if not bank:
            return v
        ent = bank + [v]
        s = np.stack([np.sum(rms(b, 1.0, self.eps) * score, axis=-1) for b in ent], axis=-1)  # (T, n+1)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return sum(p[:, i:i + 1] * b for i, b in enumerate(ent))

    def kda_layer(self, l, x):
        T_, H, d, K = x.shape[0], self.H, self.kd, self.K

        def conv(n):  # projection, causal depthwise conv (zero history), SiLU
            y = self.mm(x, l, f"attn_{n}.weight")
            wt = self.t(l, f"ssm_conv1d_{n}.weight").reshape(-1, K)
            pad = np.concatenate([np.zeros((K - 1, y.shape[1])), y])
            return ir.silu(np.stack([np.sum(pad[t:t + K].T * wt, axis=1) for t in range(T_)])).reshape(T_, H, d)

        q, k, v = conv("q"), conv("k"), conv("v")
        f = (self.mm(self.mm(x, l, "ssm_f_a.weight"), l, "ssm_f_b.weight") + self.t(l, "ssm_dt.bias")).reshape(T_, H, d)
        A = self.t(l, "ssm_a").reshape(H, 1)  # -exp(A_log)
        if self.lb is not None:  # K3: lb * sigmoid(exp(A_log) * f), no softplus
            gl = self.lb * sigmoid(-A * f)
        else:  # kimi-linear: -exp(A_log) * softplus(f)
            gl = A * softplus(f)
        beta = sigmoid(self.mm(x, l, "ssm_beta.weight"))  # (T, H)
        q, k = kl.l2norm(q, self.eps) * d ** -0.5, kl.l2norm(k, self.eps)  # x / sqrt(|x|^2 + eps)
        S = np.zeros((H, d, d))
        o = np.empty((T_, H, d))
        for t in range(T_):
            S = S * np.exp(gl[t])[..., None]
            u = v[t] - np.einsum("hk,hkv->hv", k[t], S)
            S = S + np.einsum("hk,hv->hkv", beta[t][:, None] * k[t], u)
            o[t] = np.einsum("hk,hkv->hv", q[t], S)
        gate = self.mm(x, l, "ssm_g.weight").reshape(T_, H, d)
        o = rms(o, self.t(l, "ssm_norm.weight"), self.eps) * sigmoid(gate)
        return self.mm(o.reshape(T_, H * d), l, "attn_output.weight")

    def mla_layer(self, l, x):
        """Absorbed NoPE MLA: scores c.(k_b q_nope) + k_pe.q_pe over
        sqrt(dn + dr), values v_b (softmax c); then the output gate."""
        T_, H, dn, dr, dc = x.shape[0], self.H, self.dn, self.dr, self.dc
        if self.t(l, "attn_q_a_norm.weight") is not None:
            q = self.mm(rms(self.mm(x, l, "attn_q_a.weight"), self.t(l, "attn_q_a_norm.weight"), self.eps),
                        l, "attn_q_b.weight")
        else:
            q = self.mm(x, l, "attn_q.weight")
        q = q.reshape(T_, H, dn + dr)
        kv = self.mm(x, l, "attn_kv_a_mqa.weight")
        c = rms(kv[:, :dc], self.t(l, "attn_kv_a_norm.weight"), self.eps)
        kb, vb = self.t(l, "attn_k_b.weight"), self.t(l, "attn_v_b.weight")  # (H, dc, dn), (H, dv, dc)
        o = np.empty((T_, H, self.dv))
        for j in range(H):
            qa = q[:, j, :dn] @ kb[j].T  # (T, dc)
            for t in range(T_):
                s = (c[:t + 1] @ qa[t] + kv[:t + 1, dc:] @ q[t, j, dn:]) * (dn + dr) ** -0.5
                o[t, j] = vb[j] @ (ir.softmax(s) @ c[:t + 1])
        o = o.reshape(T_, -1)
        if self.t(l, "attn_gate.weight") is not None:
            o = o * sigmoid(self.mm(x, l, "attn_gate.weight"))
        return self.mm(o, l, "attn_output.weight")

    def moe(self, l, h, pos):
        """Router on the full-width h; routed experts on ffn_routed_down h (no
        norm); their weighted sum RMS-normalised (ffn_routed_norm) then
        ffn_routed_up; shared experts on h."""
        probs = sigmoid(self.mm(h, l, "ffn_gate_inp.weight"))
        key = probs + self.t(l, "exp_probs_b.bias")
        order = np.argsort(-key, kind="stable")
        sel = order[:self.k]
        if self.k < self.E:
            self.margins.append((pos, l, float(key[order[self.k - 1]] - key[order[self.k]])))
        wt = probs[sel]
        if self.renorm:
            wt = wt / max(wt.sum(), 6.103515625e-5)
        if self.rsf and self.rsf != 1.0:
            wt = wt * self.rsf
        r = self.mm(h, l, "ffn_routed_down.weight") if self.t(l, "ffn_routed_down.weight") is not None else h
        y = 0
        for wi, e in zip(wt, sel):
            gw, uw, dw = (self.w[f"blk.{l}.ffn_{n}_exps.weight"][e] for n in ("gate", "up", "down"))
            ty = self.ty[f"blk.{l}.ffn_gate_exps.weight"]
            ra = self.act(r, ty)
            a = situ(gw @ ra, uw @ ra, self.beta, self.lbeta)
            y = y + wi * (dw @ self.act(a, self.ty[f"blk.{l}.ffn_down_exps.weight"]))
        if self.t(l, "ffn_routed_norm.weight") is not None:
            y = rms(y, self.t(l, "ffn_routed_norm.weight"), self.eps)
        if self.t(l, "ffn_routed_up.weight") is not None:
            y = self.mm(y, l, "ffn_routed_up.weight")
        if self.t(l, "ffn_gate_shexp.weight") is not None:
            y = y + self.mm(situ(self.mm(h, l, "ffn_gate_shexp.weight"), self.mm(h, l, "ffn_up_shexp.weight"),
                                 self.beta, self.lbeta), l, "ffn_down_shexp.weight")
        return y

    def forward(self, tokens):
        x = self.w["token_embd.weight"][tokens].copy()  # (T, D): the residual stream
        bank = []  # AttnRes: the raw layer inputs of layers 0, bs, 2 bs, ...
        for l in range(self.L):
            inp = x
            cur = self.mix(bank, inp, self.t(l, "attn_res_score.weight")) if self.bs else inp
            banked = bool(self.bs) and l % self.bs == 0
            if banked:
                bank.append(inp)
            h = rms(cur, self.t(l, "attn_norm.weight"), self.eps)
            a = self.kda_layer(l, h) if self.kda[l] else self.mla_layer(l, h)
            x = a if banked else inp + a  # a banked layer restarts the stream from its attention output
            cur = self.mix(bank, x, self.t(l, "ffn_res_score.weight")) if self.bs else x
            h = rms(cur, self.t(l, "ffn_norm.weight"), self.eps)
            if l < self.n_dense:
                f = self.mm(situ(self.mm(h, l, "ffn_gate.weight"), self.mm(h, l, "ffn_up.weight"),
                                 self.beta, self.lbeta), l, "ffn_down.weight")
            else:
                f = np.stack([self.moe(l, ht, p) for p, ht in enumerate(h)])
            x = x + f
        if self.bs:
            x = self.mix(bank, x, self.w["output_res_score.weight"])
        return rms(x, self.w["output_norm.weight"], self.eps) @ self.w["output.weight"].T


def tokens_for(seed, n=40, vocab=300):
    """The oracle's token ids (llama_oracle_test.sh draws them the same way)."""
    import random
    r = random.Random(seed)
    return [r.randrange(vocab) for _ in range(n)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf", help="the released checkpoint's layout")
    m.add_argument("out")
    m.add_argument("--variant", default="full", choices=sorted(VARIANTS))
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--dtype", default="BF16", choices=["F32", "BF16"], help="the non-expert tensors")
    m.add_argument("--scale-dtype", default="U8", choices=["U8", "F8_E8M0"], help="safetensors dtype of weight_scale")
    m.add_argument("--shards", type=int, default=2)
    gg = sub.add_parser("make-gguf", help="GGUF kimi-k3 in llama.cpp's layout")
    gg.add_argument("out")
    gg.add_argument("--variant", default="full", choices=sorted(VARIANTS))
    gg.add_argument("--seed", type=int, default=1)
    gg.add_argument("--experts", default="F32", choices=["F32", "MXFP4"])
    lg = sub.add_parser("logits", help="float64 logits of a .gguf or a make-hf directory")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True, help="comma-separated ids, or seed:N for tokens_for(N)")
    lg.add_argument("--out", help="all positions, f32 little-endian (n_pos x vocab)")
    lg.add_argument("--compare", help="another implementation's logits in the same layout")
    lg.add_argument("--tol", type=float, default=2e-5, help="max |diff| / max |ref|")
    lg.add_argument("--ggml-act", action="store_true",
                    help="round the inputs of MXFP4 matmuls to Q8_0 as ggml's CPU path does")
    a = ap.parse_args(argv)
    if a.cmd == "make-hf":
        make_hf(a.out, a.variant, a.seed, a.dtype, a.scale_dtype, a.shards)
        return 0
    if a.cmd == "make-gguf":
        make_gguf(a.out, a.variant, a.seed, a.experts)
        return 0
    toks = tokens_for(int(a.tokens[5:])) if a.tokens.startswith("seed:") else [int(x) for x in a.tokens.split(",")]
    model = Model(a.src, a.ggml_act)
    ref = model.forward(toks)
    scale = float(np.max(np.abs(ref)))
    mg = min(model.margins, key=lambda x: x[2]) if model.margins else None
    print(f"logits: {ref.shape[0]} x {ref.shape[1]}, max |logit| {scale:.4g}, min router margin "
          + (f"{mg[2]:.3g} (position {mg[0]}, layer {mg[1]})" if mg else "n/a"))
    if a.out:
        ref.astype("<f4").tofile(a.out)
    if a.compare:
        other = np.fromfile(a.compare, dtype="<f4").astype(np.float64)
        if other.size != ref.size:
            raise SystemExit(f"compare: {other.size} values vs {ref.size}")
        other = other.reshape(ref.shape)
        per = np.max(np.abs(other - ref), axis=1) / scale
        am = int(np.sum(np.argmax(ref, 1) == np.argmax(other, 1)))
        print(f"compare: max diff / max |logit| {per.max():.3e} (p90 {np.percentile(per, 90):.3e}), "
              f"argmax equal at {am}/{ref.shape[0]}")
        if per.max() > a.tol or am != ref.shape[0]:
            print(f"compare: FAIL (tol {a.tol:g}, every argmax)")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
