#!/usr/bin/python3
"""gptoss_ref: tiny random gpt-oss GGUF files and Hugging Face checkpoints and
their logits computed from the SOURCE (float64 numpy).

Role: tests only (tools/reference/gptoss_import_test.sh and the llama.cpp
oracle, tools/peers/llama_oracle_test.sh). `make-gguf` writes a GGUF
`gpt-oss` laid out as llama.cpp's converter (conversion/gpt_oss.py) writes
it: q/k/v/o projections with biases, attn_sinks, post_attention_norm as the
FFN norm, the router with its bias, gate/up/down experts (F32, or MXFP4
blocks as the released checkpoints ship them) with per-expert biases.
`logits` reads it with ckpt_io's own reader and dequantiser and runs the
forward pass as llama.cpp's openai-moe.cpp defines it: NeoX RoPE over the
whole head with YaRN (frequencies ramped between theta^(-2i/d) and it /
factor over the correction range of beta_fast 32 / beta_slow 1 turns in the
original context, floored and ceiled as ggml; cos/sin times 1 + 0.1
ln(factor)), softmax(q.k / sqrt(d)) with the head's sink logit in the
denominator, a sliding window (key t seen from position p iff p - t <
window) on the layers l with l % 2 == 0 (llama.cpp's pattern 2), the router
top-k of logits + bias weighted by the softmax over the k chosen logits, and
experts g = min(Wg h + bg, 7), u = clamp(Wu h + bu, -7, 7),
Wd (g sigmoid(1.702 g) (u + 1)) + bd. `make-hf` writes the same model as
a Hugging Face gpt_oss checkpoint as released (config.json, safetensors with
the experts as MXFP4 *_blocks (U8 [E, rows, cols/32, 16], element 2m in the
low nibble of byte m) + *_scales (e8m0 U8), gate and up interleaved by rows,
gate_up_proj_bias interleaved likewise); `logits` on it runs transformers'
GptOss semantics, which differ from llama.cpp's only in the YaRN correction
range (unrounded with rope_scaling truncate false, --truncate). `repack`
turns a checkpoint's MXFP4 experts back into ggml blocks and compares them
byte for byte with a GGUF's (tests the importer's repack from the outside).
Nothing here reads a spill container.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import import_ref as ir  # noqa: E402

# D and F multiples of 32 (MXFP4 blocks); window 4 so a 24-token prompt slides
DIMS = dict(V=300, D=64, L=3, H=4, Hk=2, d=16, E=8, k=3, F=32, window=4, factor=32.0, orig=64,
            theta=150000.0)


def random_weights(seed, mxfp4=False):
    """{gguf_name: f32 array, or (raw bytes, shape) for MXFP4 experts}."""
    c = dict(DIMS)
    r = np.random.default_rng(seed)
    D, H, Hk, d, E, F = (c[x] for x in ("D", "H", "Hk", "d", "E", "F"))

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def vec(n, s=0.3):
        return (s * r.standard_normal(n)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    def experts(o, i):
        if not mxfp4:
            return np.stack([mat(o, i) for _ in range(E)])
        nb = E * o * i // 32
        blk = np.empty((nb, 17), dtype=np.uint8)
        # e8m0 scales near 2^-4..2^-2 (values up to 12 * 2^-3 halved), random codes
        blk[:, 0] = r.integers(122, 126, size=nb, dtype=np.uint8)
        blk[:, 1:] = r.integers(0, 256, size=(nb, 16), dtype=np.uint8)
        return (blk.tobytes(), (E, o, i))

    w = {"token_embd.weight": r.standard_normal((c["V"], D)).astype(np.float32),
         "output_norm.weight": norm(D), "output.weight": mat(c["V"], D)}
    for l in range(c["L"]):
        b = f"blk.{l}."
        w[b + "attn_norm.weight"] = norm(D)
        w[b + "post_attention_norm.weight"] = norm(D)
        w[b + "attn_q.weight"], w[b + "attn_q.bias"] = mat(H * d, D), vec(H * d)
        w[b + "attn_k.weight"], w[b + "attn_k.bias"] = mat(Hk * d, D), vec(Hk * d)
        w[b + "attn_v.weight"], w[b + "attn_v.bias"] = mat(Hk * d, D), vec(Hk * d)
        w[b + "attn_output.weight"], w[b + "attn_output.bias"] = mat(D, H * d), vec(D)
        w[b + "attn_sinks.weight"] = vec(H, 1.0)
        w[b + "ffn_gate_inp.weight"], w[b + "ffn_gate_inp.bias"] = mat(E, D) * 3, vec(E)
        w[b + "ffn_gate_exps.weight"], w[b + "ffn_gate_exps.bias"] = experts(F, D), vec(E * F).reshape(E, F)
        w[b + "ffn_up_exps.weight"], w[b + "ffn_up_exps.bias"] = experts(F, D), vec(E * F).reshape(E, F)
        w[b + "ffn_down_exps.weight"], w[b + "ffn_down_exps.bias"] = experts(D, F), vec(E * D).reshape(E, D)
    return w, c


def ggml_to_hf_mxfp4(raw, shape):
    """ggml MXFP4 blocks (scale byte + 16 bytes, byte j = element j | element
    j + 16 << 4) of numpy shape (E, rows, cols) -> HF (blocks [E, rows,
    cols/32, 16], element 2m | element 2m+1 << 4; scales [E, rows, cols/32])."""
    E, rows, cols = shape
    b = np.frombuffer(raw, dtype=np.uint8).reshape(E, rows, cols // 32, 17)
    sc = b[..., 0].copy()
    q = b[..., 1:]
    codes = np.concatenate([q & 0xF, q >> 4], axis=-1)  # (.., 32) element order
    hf = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return hf, sc


def hf_to_ggml_mxfp4(blocks, scales):
    """The inverse: HF blocks/scales -> ggml MXFP4 bytes."""
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    q = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    return np.concatenate([scales[..., None], q], axis=-1).tobytes()


def interleave(a, b, axis):
    """Rows (axis) of a at even, of b at odd positions."""
    out = np.stack([a, b], axis=axis + 1)
    sh = list(a.shape)
    sh[axis] *= 2
    return out.reshape(sh)


def make_hf(out, seed, truncate=True, set_cfg=(), drop=()):
    """The make-gguf MXFP4 model as a Hugging Face gpt_oss checkpoint."""
    w, c = random_weights(seed, True)
    os.makedirs(out, exist_ok=True)
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": c["V"],
           "hidden_size": c["D"], "intermediate_size": c["F"], "num_hidden_layers": c["L"],
           "num_attention_heads": c["H"], "num_key_value_heads": c["Hk"], "head_dim": c["d"],
           "num_local_experts": c["E"], "num_experts_per_tok": c["k"], "experts_per_token": c["k"],
           "rms_norm_eps": 1e-5, "rope_theta": c["theta"], "sliding_window": c["window"],
           "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(c["L"])],
           "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": c["factor"],
                            "original_max_position_embeddings": c["orig"], "rope_type": "yarn",
                            "truncate": truncate},
           "swiglu_limit": 7.0, "attention_bias": True, "hidden_act": "silu", "tie_word_embeddings": False,
           "initial_context_length": c["orig"], "max_position_embeddings": 4096, "attention_dropout": 0.0,
           "initializer_range": 0.02, "output_router_logits": False, "router_aux_loss_coef": 0.9,
           "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16", "transformers_version": "4.55.0",
           "use_cache": True,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    for item in set_cfg:
        key, val = item.split("=", 1)
        val = json.loads(val)
        if val is None:
            cfg.pop(key, None)
        else:
            cfg[key] = val
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    T = [("model.embed_tokens.weight", "F32", w["token_embd.weight"]), ("model.norm.weight", "F32", w["output_norm.weight"]),
         ("lm_head.weight", "F32", w["output.weight"])]
    for l in range(c["L"]):
        b, p = f"blk.{l}.", f"model.layers.{l}."
        T += [(p + "input_layernorm.weight", "F32", w[b + "attn_norm.weight"]),
              (p + "post_attention_layernorm.weight", "F32", w[b + "post_attention_norm.weight"]),
              (p + "self_attn.sinks", "F32", w[b + "attn_sinks.weight"]),
              (p + "mlp.router.weight", "F32", w[b + "ffn_gate_inp.weight"]),
              (p + "mlp.router.bias", "F32", w[b + "ffn_gate_inp.bias"])]
        for x, y in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")):
            T += [(p + f"self_attn.{y}_proj.weight", "F32", w[b + f"attn_{x}.weight"]),
                  (p + f"self_attn.{y}_proj.bias", "F32", w[b + f"attn_{x}.bias"])]
        gb, gs = ggml_to_hf_mxfp4(*w[b + "ffn_gate_exps.weight"])
        ub, us = ggml_to_hf_mxfp4(*w[b + "ffn_up_exps.weight"])
        db, ds = ggml_to_hf_mxfp4(*w[b + "ffn_down_exps.weight"])
        e = p + "mlp.experts."
        T += [(e + "gate_up_proj_blocks", "U8", interleave(gb, ub, 1)),
              (e + "gate_up_proj_scales", "U8", interleave(gs, us, 1)),
              (e + "gate_up_proj_bias", "F32", interleave(w[b + "ffn_gate_exps.bias"], w[b + "ffn_up_exps.bias"], 1)),
              (e + "down_proj_blocks", "U8", db), (e + "down_proj_scales", "U8", ds),
              (e + "down_proj_bias", "F32", w[b + "ffn_down_exps.bias"])]
    ck.write_safetensors(os.path.join(out, "model.safetensors"), [t for t in T if t[0] not in drop])


def make_gguf(out, ty, seed, vocab=False, set_kv=(), drop=()):
    """GGUF gpt-oss as llama.cpp's converter writes it. ty: F32 (every
    tensor) or MXFP4 (experts MXFP4, the rest F32). Hostile fixtures: set_kv
    "KEY=JSON" sets or adds a key (JSON null drops it), drop names tensors
    left out."""
    w, c = random_weights(seed, ty == "MXFP4")
    a = "gpt-oss"
    kv = [("general.architecture", a), ("general.name", "tiny-gpt-oss"), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]), (a + ".block_count", c["L"]),
          (a + ".feed_forward_length", c["F"]), (a + ".attention.head_count", c["H"]),
          (a + ".attention.head_count_kv", c["Hk"]), (a + ".attention.key_length", c["d"]),
          (a + ".attention.value_length", c["d"]), (a + ".rope.freq_base", c["theta"]),
          (a + ".attention.layer_norm_rms_epsilon", 1e-5), (a + ".expert_count", c["E"]),
          (a + ".expert_used_count", c["k"]), (a + ".attention.sliding_window", c["window"]),
          (a + ".expert_feed_forward_length", c["F"]), (a + ".rope.scaling.type", "yarn"),
          (a + ".rope.scaling.factor", c["factor"]), (a + ".rope.scaling.original_context_length", c["orig"]),
          (a + ".rope.scaling.yarn_beta_fast", 32.0), (a + ".rope.scaling.yarn_beta_slow", 1.0)]
    kv += ir.gguf_tokenizer(c["V"], vocab, False)
    for item in set_kv:
        key, val = item.split("=", 1)
        val = json.loads(val)
        kv = [(k, x) for k, x in kv if k != key] + ([] if val is None else [(key, val)])
    T = []
    for name, arr in w.items():
        T.append((name, ck.GGML_MXFP4 if isinstance(arr, tuple) else ck.GGML_F32, arr))
    ck.write_gguf(out, kv, [t for t in T if t[0] not in drop])


# ------------------------------------------------------------------ forward

def yarn_table(d, p, theta, factor, orig, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """cos, sin (d/2 each) of position p: ggml's rope_yarn in float64
    (transformers' with truncate false: the correction range unrounded)."""
    half = d // 2
    lo = hi = 0.0
    if factor > 1.0:
        lt = 2.0 * math.log(theta)
        lo = d * math.log(orig / (2 * math.pi * beta_fast)) / lt
        hi = d * math.log(orig / (2 * math.pi * beta_slow)) / lt
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
    ms = 1.0 + 0.1 * math.log(factor) if factor > 1.0 else 1.0
    f = theta ** (-2.0 * np.arange(half) / d)
    if factor > 1.0:
        ramp = np.clip((np.arange(half) - lo) / max(hi - lo, 0.001), 0, 1)
        f = f * (1 - ramp) + f / factor * ramp
    return np.cos(p * f) * ms, np.sin(p * f) * ms


def rope(v, cs):
    c, s = cs
    h = v.shape[-1] // 2
    a, b = v[..., :h], v[..., h:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def swiglu_oai(g, u):
    g = np.minimum(g, 7.0)
    u = np.clip(u, -7.0, 7.0)
    return g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)


class Model:
    def __init__(self, path):
        self.truncate, self.beta = True, (32.0, 1.0)
        if not path.endswith(".gguf"):
            self._load_hf(path)
            return
        kv, t = ck.read_gguf(path)
        a = "gpt-oss"

        def f(n):
            return ck.gguf_tensor_f32(t[n]).astype(np.float64) if n in t else None
        self.eps = kv[a + ".attention.layer_norm_rms_epsilon"]
        self.H, self.Hk = kv[a + ".attention.head_count"], kv[a + ".attention.head_count_kv"]
        self.d = kv[a + ".attention.key_length"]
        self.theta = kv[a + ".rope.freq_base"]
        self.factor = kv.get(a + ".rope.scaling.factor", 1.0) if kv.get(a + ".rope.scaling.type") == "yarn" else 1.0
        self.orig = kv.get(a + ".rope.scaling.original_context_length", kv[a + ".context_length"])
        self.window = kv[a + ".attention.sliding_window"]
        self.k = kv[a + ".expert_used_count"]
        self.emb, self.fnorm, self.out = f("token_embd.weight"), f("output_norm.weight"), f("output.weight")
        self.layers = []
        for l in range(kv[a + ".block_count"]):
            b = f"blk.{l}."
            L = {n: f(b + n) for n in (
                "attn_norm.weight", "post_attention_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight",
                "attn_k.bias", "attn_v.weight", "attn_v.bias", "attn_output.weight", "attn_output.bias",
                "attn_sinks.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias", "ffn_gate_exps.weight",
                "ffn_gate_exps.bias", "ffn_up_exps.weight", "ffn_up_exps.bias", "ffn_down_exps.weight",
                "ffn_down_exps.bias")}
            L["swa"] = l % 2 < 1
            self.layers.append(L)

    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = ck.read_checkpoint_dir(d)
        raw = {}
        for fn in os.listdir(d):  # the MXFP4 bytes as stored
            if fn.endswith(".safetensors"):
                for n, (dt, shape, b) in read_raw_safetensors(os.path.join(d, fn)).items():
                    raw[n] = np.frombuffer(b, dtype=np.uint8).reshape(shape) if dt == "U8" else None
        rs = cfg.get("rope_scaling") or {}
        self.eps, self.H, self.Hk = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.d, self.theta, self.k = cfg["head_dim"], cfg["rope_theta"], cfg["num_experts_per_tok"]
        self.factor, self.orig = rs.get("factor", 1.0), rs.get("original_max_position_embeddings", 1)
        self.truncate, self.beta = rs.get("truncate", True), (rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0))
        self.window = cfg["sliding_window"]
        f64 = lambda n: np.asarray(w[n], dtype=np.float64)  # noqa: E731
        self.emb, self.fnorm, self.out = f64("model.embed_tokens.weight"), f64("model.norm.weight"), f64("lm_head.weight")
        self.layers = []
        for l in range(cfg["num_hidden_layers"]):
            p, e = f"model.layers.{l}.", f"model.layers.{l}.mlp.experts."
            L = {"attn_norm.weight": f64(p + "input_layernorm.weight"),
                 "post_attention_norm.weight": f64(p + "post_attention_layernorm.weight"),
                 "attn_sinks.weight": f64(p + "self_attn.sinks"), "ffn_gate_inp.weight": f64(p + "mlp.router.weight"),
                 "ffn_gate_inp.bias": f64(p + "mlp.router.bias")}
            for x, y in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")):
                L[f"attn_{x}.weight"] = f64(p + f"self_attn.{y}_proj.weight")
                L[f"attn_{x}.bias"] = f64(p + f"self_attn.{y}_proj.bias")
            gu = mxfp4_values(raw[e + "gate_up_proj_blocks"], raw[e + "gate_up_proj_scales"])  # (E, 2F, D)
            L["ffn_gate_exps.weight"], L["ffn_up_exps.weight"] = gu[:, 0::2], gu[:, 1::2]
            L["ffn_down_exps.weight"] = mxfp4_values(raw[e + "down_proj_blocks"], raw[e + "down_proj_scales"])
            gb = f64(e + "gate_up_proj_bias")
            L["ffn_gate_exps.bias"], L["ffn_up_exps.bias"] = gb[:, 0::2], gb[:, 1::2]
            L["ffn_down_exps.bias"] = f64(e + "down_proj_bias")
            L["swa"] = cfg.get("layer_types", ["sliding_attention" if i % 2 == 0 else "full_attention"
                                               for i in range(l + 1)])[l] == "sliding_attention"
            self.layers.append(L)

    def forward(self, tokens):
        H, Hk, d, eps = self.H, self.Hk, self.d, self.eps
        caches = [([], []) for _ in self.layers]
        out = []
        for p, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            cs = yarn_table(d, p, self.theta, self.factor, self.orig, *self.beta, self.truncate)
            for l, L in enumerate(self.layers):
                h = ir.rmsnorm(x, L["attn_norm.weight"], eps)
                q = (L["attn_q.weight"] @ h + L["attn_q.bias"]).reshape(H, d)
                k = (L["attn_k.weight"] @ h + L["attn_k.bias"]).reshape(Hk, d)
                v = (L["attn_v.weight"] @ h + L["attn_v.bias"]).reshape(Hk, d)
                q, k = rope(q, cs), rope(k, cs)
                K, V = caches[l]
                K.append(k)
                V.append(v)
                t0 = max(0, p + 1 - self.window) if L["swa"] else 0
                Ks, Vs = np.stack(K[t0:]), np.stack(V[t0:])
                o = np.empty((H, d))
                for j in range(H):
                    kh = j // (H // Hk)
                    s = Ks[:, kh, :] @ q[j] / np.sqrt(d)
                    sink = L["attn_sinks.weight"][j]
                    m = max(s.max(), sink)
                    e = np.exp(s - m)
                    a = e / (e.sum() + np.exp(sink - m))
                    o[j] = a @ Vs[:, kh, :]
                x = x + L["attn_output.weight"] @ o.reshape(-1) + L["attn_output.bias"]
                h = ir.rmsnorm(x, L["post_attention_norm.weight"], eps)
                logit = L["ffn_gate_inp.weight"] @ h + L["ffn_gate_inp.bias"]
                sel = np.argsort(-logit, kind="stable")[:self.k]
                w = ir.softmax(logit[sel])
                y = np.zeros_like(x)
                for wi, e in zip(w, sel):
                    g = L["ffn_gate_exps.weight"][e] @ h + L["ffn_gate_exps.bias"][e]
                    u = L["ffn_up_exps.weight"][e] @ h + L["ffn_up_exps.bias"][e]
                    y += wi * (L["ffn_down_exps.weight"][e] @ swiglu_oai(g, u) + L["ffn_down_exps.bias"][e])
                x = x + y
            out.append(self.out @ ir.rmsnorm(x, self.fnorm, eps))
        return np.stack(out)


def read_raw_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in h.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            f.seek(base + a)
            out[k] = (v["dtype"], v["shape"], f.read(b - a))
    return out


def mxfp4_values(blocks, scales):
    """HF MXFP4 -> float64 [.., rows, cols]: element 2m = low nibble of byte m,
    value FP4(code) * 2^(scale - 127)."""
    if np.any(scales == 255):
        raise ValueError("MXFP4 scale 255 (e8m0 NaN)")
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    v = ck.MXFP4_VALUES[codes].astype(np.float64) / 2 * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], -1)


def repack_check(hf_dir, gguf):
    """The checkpoint's MXFP4 experts repacked into ggml blocks equal the
    GGUF's expert tensors byte for byte."""
    raw = {}
    for fn in os.listdir(hf_dir):
        if fn.endswith(".safetensors"):
            raw.update(read_raw_safetensors(os.path.join(hf_dir, fn)))
    _, t = ck.read_gguf(gguf)
    n = 0
    for name in t:
        if not name.endswith("_exps.weight"):
            continue
        l = int(name.split(".")[1])
        e = f"model.layers.{l}.mlp.experts."
        u8 = lambda k: np.frombuffer(raw[e + k][2], dtype=np.uint8).reshape(raw[e + k][1])  # noqa: E731
        if "down" in name:
            b, s = u8("down_proj_blocks"), u8("down_proj_scales")
        else:
            first = 0 if "gate" in name else 1
            b, s = u8("gate_up_proj_blocks")[:, first::2], u8("gate_up_proj_scales")[:, first::2]
        if hf_to_ggml_mxfp4(b, s) != bytes(t[name][2]):
            raise SystemExit(f"repack: {name} differs")
        n += 1
    print(f"repack: {n} expert tensors byte-identical")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--type", default="F32", choices=["F32", "MXFP4"])
    g.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary llama.cpp loads")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--set-kv", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    g.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    h = sub.add_parser("make-hf")
    h.add_argument("out")
    h.add_argument("--seed", type=int, default=1)
    h.add_argument("--no-truncate", action="store_true", help="rope_scaling truncate false (the released configs)")
    h.add_argument("--set-cfg", action="append", default=[], metavar="KEY=JSON", help="hostile fixture")
    h.add_argument("--drop", action="append", default=[], metavar="TENSOR", help="hostile fixture")
    rp = sub.add_parser("repack")
    rp.add_argument("hf")
    rp.add_argument("gguf")
    lg = sub.add_parser("logits")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out")
    lg.add_argument("--compare")
    lg.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if a.cmd == "make-gguf":
        make_gguf(a.out, a.type, a.seed, a.vocab, a.set_kv, a.drop)
        return
    if a.cmd == "make-hf":
        make_hf(a.out, a.seed, not a.no_truncate, a.set_cfg, a.drop)
        return
    if a.cmd == "repack":
        repack_check(a.hf, a.gguf)
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
        am = bool(np.all(np.argmax(ref, 1) == np.argmax(other, 1)))
        print(f"compare: rel {rel:.3e} argmax_agree {am}")
        if rel > a.tol or not am:
            raise SystemExit(f"compare: relative difference {rel:.3e} > {a.tol} or argmax differs")


if __name__ == "__main__":
    main()
