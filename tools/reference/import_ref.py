#!/usr/bin/python3
"""import_ref: tiny random checkpoints of the imported architectures and
their logits computed from the SOURCE files.

Role: tests only (tools/reference/import_test.sh). `make-hf` writes a
Hugging Face checkpoint (config.json + safetensors, optionally sharded with an
index), `make-gguf` a GGUF file laid out as llama.cpp's converter writes it
(../shared/reference/llama-cpp.md: experts stacked, llama q/k rows permuted,
tied output by absence). `logits` reads either with ckpt_io's own readers and
dequantisers and runs each architecture's forward pass as its own modelling
code defines it, in float64: Hugging Face semantics for checkpoints
(rotate-half RoPE, Qwen3 per-head q/k RMSNorm, OLMoE full-projection q/k
norm, softmax router with top-k renormalised when norm_topk_prob), llama.cpp
semantics for GGUF (qwen3moe/olmoe NeoX RoPE; llama: interleaved RoPE on the
permuted q/k rows). Nothing here reads a spill container or imports the C
engine. `check-weights` compares a container's dequantised weights with the
GGUF's bit for bit (Q8_0/Q4_0 -> q8/q4; K-quants, Q5_0/Q5_1 kept).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402

DIMS = dict(V=300, D=64, L=2, H=4, Hk=2, d=16, E=8, F=32)


def dims(arch, kq=False):
    c = dict(DIMS)
    if kq:  # K-quant rows are whole 256-element super-blocks
        c.update(D=256, F=256, d=64)
    c["k"] = 2 if arch == "mixtral" else 3
    if arch == "olmoe":
        c["Hk"] = c["H"]  # llama.cpp's olmoe needs head_count_kv == head_count
        c["d"] = c["D"] // c["H"]
    return c


def random_weights(arch, seed, tied=False, kq=False):
    """{hf_name: f32 array} of a random model (HF names)."""
    c = dims(arch, kq)
    r = np.random.default_rng(seed)
    D, V, H, Hk, d, E, F = c["D"], c["V"], c["H"], c["Hk"], c["d"], c["E"], c["F"]

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": r.standard_normal((V, D)).astype(np.float32),
         "model.norm.weight": norm(D)}
    if not tied:
        w["lm_head.weight"] = mat(V, D)
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
        w[p + "self_attn.q_proj.weight"] = mat(H * d, D)
        w[p + "self_attn.k_proj.weight"] = mat(Hk * d, D)
        w[p + "self_attn.v_proj.weight"] = mat(Hk * d, D)
        w[p + "self_attn.o_proj.weight"] = mat(D, H * d)
        if arch == "qwen3_moe":
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        elif arch == "olmoe":
            w[p + "self_attn.q_norm.weight"] = norm(H * d)
            w[p + "self_attn.k_norm.weight"] = norm(Hk * d)
        moe = p + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
        w[moe + "gate.weight"] = mat(E, D) * 3
        names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        for e in range(E):
            w[moe + f"experts.{e}.{names[0]}.weight"] = mat(F, D)
            w[moe + f"experts.{e}.{names[1]}.weight"] = mat(F, D)
            w[moe + f"experts.{e}.{names[2]}.weight"] = mat(D, F)
    return w, c


def hf_config(arch, c, tied):
    base = {"architectures": ["X"], "model_type": arch, "vocab_size": c["V"], "hidden_size": c["D"],
            "num_hidden_layers": c["L"], "num_attention_heads": c["H"],
            "num_key_value_heads": c["Hk"], "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "num_experts_per_tok": c["k"], "tie_word_embeddings": tied, "hidden_act": "silu",
            "torch_dtype": "bfloat16", "max_position_embeddings": 4096, "eos_token_id": 2,
            "bos_token_id": 1, "use_cache": True, "initializer_range": 0.02}
    if arch == "qwen3_moe":
        base.update(head_dim=c["d"], num_experts=c["E"], moe_intermediate_size=c["F"],
                    intermediate_size=4 * c["F"], norm_topk_prob=True, attention_bias=False,
                    decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
                    sliding_window=None, max_window_layers=c["L"], rope_scaling=None,
                    router_aux_loss_coef=0.001, output_router_logits=False)
    elif arch == "olmoe":
        base.update(num_experts=c["E"], intermediate_size=c["F"], norm_topk_prob=False,
                    attention_bias=False, clip_qkv=None, rope_scaling=None, rms_norm_eps=1e-5,
                    rope_theta=10000.0, pad_token_id=1)
    else:
        base.update(num_local_experts=c["E"], intermediate_size=c["F"], sliding_window=None,
                    router_jitter_noise=0.0, rope_scaling=None, rms_norm_eps=1e-5)
    return base


FP8_BLOCK = 16
_E4M3 = ck.fp8_e4m3_to_f32(np.arange(256, dtype=np.uint8))


def to_e4m3(x):
    """Nearest e4m3fn byte of each value (|x| <= 448)."""
    pos = np.where(np.isnan(_E4M3), np.inf, _E4M3)[:127]  # bytes 0..126: +0 .. 448, ascending
    a = np.abs(x)
    i = np.clip(np.searchsorted(pos, a), 1, 126)
    i = np.where(np.abs(pos[i - 1] - a) <= np.abs(pos[i] - a), i - 1, i)
    return (i | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def fp8_blocks(w):
    """DeepSeek-style block FP8: (bytes, scale_inv (ceil(r/B), ceil(c/B)) f32)."""
    r, c = w.shape
    br, bc = -(-r // FP8_BLOCK), -(-c // FP8_BLOCK)
    s = np.zeros((br, bc), dtype=np.float32)
    q = np.zeros(w.shape, dtype=np.uint8)
    for i in range(br):
        for j in range(bc):
            blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            s[i, j] = max(np.abs(blk).max() / 448.0, 1e-12)
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = to_e4m3(blk / s[i, j])
    return q, s


def st_entries(w, names, dtype):
    out = []
    for n in names:
        if w[n].ndim != 2:
            out.append((n, "F32", w[n]))
        elif dtype == "F8_E4M3" and not n.endswith(("embed_tokens.weight", "lm_head.weight", "gate.weight")):
            q, s = fp8_blocks(w[n])  # DeepSeek keeps embeddings, head and router in bf16
            out += [(n, "F8_E4M3", q), (n + "_scale_inv", "F32", s)]
        else:
            out.append((n, "BF16" if dtype == "F8_E4M3" else dtype, w[n]))
    return out


def _byte_symbols():
    """GPT-2's byte-level alphabet: byte b -> its printable symbol."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_kvs():
    """A byte-level BPE of 262 tokens (256 bytes + 6 merges) as llama.cpp's
    converter writes it (tokenizer.ggml.*)."""
    sym = _byte_symbols()
    merges = ["h e", "l l", "he ll", "\u0120 w", "hell o", "l o"]
    tokens = [sym[b] for b in range(256)] + [m.replace(" ", "") for m in merges]
    return [("tokenizer.ggml.pre", "gpt-2"), ("tokenizer.ggml.tokens", tokens),
            ("tokenizer.ggml.token_type", [1] * len(tokens)), ("tokenizer.ggml.merges", merges)]


def make_hf(out, arch, dtype, seed, shards=1, tied=False):
    os.makedirs(out, exist_ok=True)
    w, c = random_weights(arch, seed, tied)
    cfg = hf_config(arch, c, tied)
    if dtype == "F8_E4M3":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    names = sorted(w)
    if shards <= 1:
        ck.write_safetensors(os.path.join(out, "model.safetensors"), st_entries(w, names, dtype))
        return
    wm = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        ents = st_entries(w, part, dtype)
        ck.write_safetensors(os.path.join(out, fn), ents)
        for n, _, _ in ents:
            wm[n] = fn
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=1)


def llama_permute(wt, n_head):
    """llama.cpp convert_hf_to_gguf.LlamaModel.permute (q/k rows)."""
    return (wt.reshape(n_head, 2, wt.shape[0] // n_head // 2, *wt.shape[1:])
            .swapaxes(1, 2).reshape(wt.shape))


GG_TYPES = {"F32": ck.GGML_F32, "F16": ck.GGML_F16, "BF16": ck.GGML_BF16, "Q8_0": ck.GGML_Q8_0,
            "Q4_0": ck.GGML_Q4_0, "Q4_K": ck.GGML_Q4_K, "Q5_K": ck.GGML_Q5_K, "Q6_K": ck.GGML_Q6_K,
            "Q4_K_M": ck.GGML_Q4_K, "Q5_0": ck.GGML_Q5_0, "Q5_1": ck.GGML_Q5_1}


def q4_k_m_type(name, n_layers, n_expert):
    """The type llama.cpp's quantizer gives `name` in a Q4_K_M file
    (src/llama-quant.cpp, llama_tensor_get_type, llama.cpp de3ff81): Q4_K by
    default; output Q6_K; attn_v and ffn_down(_exps) Q6_K in the layers where
    use_more_bits(i, n) holds; attn_output Q5_K with 8 experts; the router
    ffn_gate_inp is never quantised (F32)."""
    def more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2
    if name == "output.weight":
        return ck.GGML_Q6_K
    if ".ffn_gate_inp." in name:
        return ck.GGML_F32
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if (".attn_v." in name or ".ffn_down" in name) and more_bits(layer, n_layers):
        return ck.GGML_Q6_K
    if ".attn_output." in name and n_expert == 8:
        return ck.GGML_Q5_K
    return ck.GGML_Q4_K


def gguf_tokenizer(n, vocab, add_bos):
    """The tokenizer.ggml.* keys of the GGUF writers: with vocab, one token per
    embedding row (n) and i32 token types, what llama.cpp loads; else the
    small tokenizer_kvs(). eos 2, bos 1."""
    if vocab:
        toks, merges = byte_level_vocab(n)
        kv = [("tokenizer.ggml.pre", "gpt-2"), ("tokenizer.ggml.tokens", toks),
              ("tokenizer.ggml.token_type", np.ones(len(toks), dtype=np.int32)),
              ("tokenizer.ggml.merges", merges)]
    else:
        kv = tokenizer_kvs()
    return kv + [("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.eos_token_id", 2),
                 ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.add_bos_token", add_bos)]


def byte_level_vocab(n):
    """A valid GPT-2 byte-level BPE vocabulary of n >= 256 tokens: the 256
    byte symbols, then two-letter merges ("a a", "a b", ...). llama.cpp
    refuses a gpt2 tokenizer without tokens or merges (docs/PEERS.md)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    sym = dict(zip(bs, (chr(c) for c in cs)))
    toks = [sym[b] for b in range(256)]
    merges = []
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(n - 256):
        x, y = letters[(i // 26) % 26], letters[i % 26]
        toks.append(x + y)
        merges.append(x + " " + y)
    return toks, merges


# `make-gguf --chat-template`: a template of its own (no model's), so a reply
# rendered with it shows the GGUF's template reached `spill run --chat`.
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>"
                 "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def make_gguf(out, arch, ty, seed, tied=False, vocab=False, chat_template=False):
    hf = {"qwen3_moe": "qwen3moe", "olmoe": "olmoe", "mixtral": "llama"}[arch]
    kq = ty in ("Q4_K", "Q5_K", "Q6_K", "Q4_K_M")
    w, c = random_weights(arch, seed, tied and arch != "olmoe", kq)
    gt = GG_TYPES[ty]
    krng = np.random.default_rng(seed + 1000)
    a = hf
    kv = [("general.architecture", a), ("general.name", "tiny-" + a), ("general.alignment", 32),
          (a + ".context_length", 4096), (a + ".embedding_length", c["D"]),
          (a + ".block_count", c["L"]), (a + ".attention.head_count", c["H"]),
          (a + ".attention.head_count_kv", c["Hk"]), (a + ".attention.key_length", c["d"]),
          (a + ".attention.value_length", c["d"]), (a + ".rope.dimension_count", c["d"]),
          (a + ".rope.freq_base", 1000000.0 if arch == "qwen3_moe" else 10000.0),
          (a + ".attention.layer_norm_rms_epsilon", 1e-6 if arch == "qwen3_moe" else 1e-5),
          (a + ".expert_count", c["E"]), (a + ".expert_used_count", c["k"])]
    if arch == "qwen3_moe":
        kv += [(a + ".expert_feed_forward_length", c["F"]), (a + ".feed_forward_length", 4 * c["F"])]
    else:
        kv += [(a + ".feed_forward_length", c["F"])]
    kv += gguf_tokenizer(c["V"], vocab, arch == "mixtral")
    if chat_template:
        kv += [("tokenizer.chat_template", CHAT_TEMPLATE)]
    T = []

    def mat(name, arr):
        # K-quants: random super-blocks of the array's shape (no quantiser needed:
        # the reference dequantises the same blocks); Q4_K_M: llama.cpp's mix
        t = q4_k_m_type(name, c["L"], c["E"]) if ty == "Q4_K_M" else gt
        if t == ck.GGML_F32:
            T.append((name, t, arr))
        else:
            T.append((name, t, ck.random_kquant(t, arr.shape, krng, 1.0 / np.sqrt(arr.shape[-1])) if kq else arr))

    mat("token_embd.weight", w["model.embed_tokens.weight"])
    T.append(("output_norm.weight", ck.GGML_F32, w["model.norm.weight"]))
    if "lm_head.weight" in w:
        mat("output.weight", w["lm_head.weight"])
    for l in range(c["L"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        T.append((b + "attn_norm.weight", ck.GGML_F32, w[p + "input_layernorm.weight"]))
        q, k = w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"]
        if arch == "mixtral":
            q, k = llama_permute(q, c["H"]), llama_permute(k, c["Hk"])
        mat(b + "attn_q.weight", q)
        mat(b + "attn_k.weight", k)
        mat(b + "attn_v.weight", w[p + "self_attn.v_proj.weight"])
        mat(b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])
        if arch != "mixtral":
            T.append((b + "attn_q_norm.weight", ck.GGML_F32, w[p + "self_attn.q_norm.weight"]))
            T.append((b + "attn_k_norm.weight", ck.GGML_F32, w[p + "self_attn.k_norm.weight"]))
        T.append((b + "ffn_norm.weight", ck.GGML_F32, w[p + "post_attention_layernorm.weight"]))
        moe = p + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
        mat(b + "ffn_gate_inp.weight", w[moe + "gate.weight"])
        names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        for nm, g in zip(names, ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")):
            mat(b + g + ".weight", np.stack([w[moe + f"experts.{e}.{nm}.weight"] for e in range(c["E"])]))
    ck.write_gguf(out, kv, T)


# ------------------------------------------------------------------ forward

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def rope_neox(v, p, theta):
    d = v.shape[-1]
    half = d // 2
    a = p * theta ** (-2.0 * np.arange(half) / d)
    c, s = np.cos(a), np.sin(a)
    lo, hi = v[..., :half], v[..., half:]
    return np.concatenate([lo * c - hi * s, lo * s + hi * c], axis=-1)


def rope_interleaved(v, p, theta):
    """llama.cpp's normal RoPE: pairs (2i, 2i+1)."""
    d = v.shape[-1]
    a = p * theta ** (-2.0 * np.arange(d // 2) / d)
    c, s = np.cos(a), np.sin(a)
    x0, x1 = v[..., 0::2], v[..., 1::2]
    out = np.empty_like(v)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def q8_k_round(x):
    """x as ggml's CPU backend hands it to a K-quant dot product: rounded to
    Q8_K blocks of 256 (ggml-quants.c quantize_row_q8_K_ref, in f32: the
    element of largest |x| gives iscale = -127/x, q = min(127, nearest(iscale
    x)) with ties to even, value q/iscale), returned as float64."""
    x = np.asarray(x, dtype=np.float32)
    out = np.zeros(x.size, dtype=np.float64)
    for b in range(0, x.size, 256):
        blk = x[b:b + 256]
        mx = blk[int(np.argmax(np.abs(blk)))]
        if mx == 0:
            continue
        isc = np.float32(-127.0) / mx
        q = np.minimum(127.0, np.rint(isc * blk))
        out[b:b + 256] = q * np.float64(np.float32(1.0) / isc)
    return out


class GgmlAct:
    """A K-quant weight applied the way ggml's CPU backend applies it (its
    vec_dot_type for Q4_K/Q5_K/Q6_K is Q8_K: the activation is rounded to
    Q8_K first). Only for `logits --ggml-act`, which explains llama.cpp's
    logits; the plain reference (what spill must match) keeps f64 inputs."""

    def __init__(self, w):
        self.w = w

    def __matmul__(self, x):
        return self.w @ q8_k_round(x)


class Model:
    """Weights in a neutral layout: per layer dict of f64 arrays."""

    def __init__(self, src, ggml_act=False):
        self.ggml_act = ggml_act
        if src.endswith(".gguf"):
            self._load_gguf(src)
        else:
            self._load_hf(src)

    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = {k: v.astype(np.float64) for k, v in ck.read_checkpoint_dir(d).items()}
        bs = cfg.get("quantization_config", {}).get("weight_block_size")
        for n in [n for n in w if n.endswith("_scale_inv")]:  # FP8: value x its block's scale_inv
            s = w.pop(n)
            t = n[:-len("_scale_inv")]
            full = np.kron(s, np.ones((bs[0], bs[1])))[:w[t].shape[0], :w[t].shape[1]]
            w[t] = w[t] * full
        self.arch = cfg["model_type"]
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg.get("rope_theta", 10000.0)
        self.H = cfg["num_attention_heads"]
        self.Hk = cfg.get("num_key_value_heads", self.H)
        self.d = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.k = cfg["num_experts_per_tok"]
        self.norm_topk = cfg.get("norm_topk_prob", self.arch == "mixtral")
        self.rope = rope_neox
        self.qk_norm = {"qwen3_moe": "head", "olmoe": "full"}.get(self.arch, "none")
        self.emb = w["model.embed_tokens.weight"]
        self.out = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        self.norm = w["model.norm.weight"]
        mix = self.arch == "mixtral"
        E = cfg["num_local_experts"] if mix else cfg["num_experts"]
        names = ("w1", "w3", "w2") if mix else ("gate_proj", "up_proj", "down_proj")
        self.layers = []
        for l in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            moe = p + ("block_sparse_moe." if mix else "mlp.")
            L = dict(attn_norm=w[p + "input_layernorm.weight"], ffn_norm=w[p + "post_attention_layernorm.weight"],
                     q=w[p + "self_attn.q_proj.weight"], k=w[p + "self_attn.k_proj.weight"],
                     v=w[p + "self_attn.v_proj.weight"], o=w[p + "self_attn.o_proj.weight"],
                     router=w[moe + "gate.weight"],
                     experts=[tuple(w[moe + f"experts.{e}.{n}.weight"] for n in names) for e in range(E)])
            if self.qk_norm != "none":
                L["q_norm"], L["k_norm"] = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
            self.layers.append(L)

    def _load_gguf(self, path):
        kv, t = ck.read_gguf(path)
        a = kv["general.architecture"]
        kq = (ck.GGML_Q4_K, ck.GGML_Q5_K, ck.GGML_Q6_K)

        def f(n):  # a matrix; with --ggml-act a K-quant one rounds its input to Q8_K
            w = ck.gguf_tensor_f32(t[n]).astype(np.float64)
            if self.ggml_act and t[n][0] in kq and w.ndim == 2 and not n.startswith("token_embd"):
                return GgmlAct(w)
            return w

        def fx(n):  # stacked experts: one matrix per expert
            w = ck.gguf_tensor_f32(t[n]).astype(np.float64)
            if self.ggml_act and t[n][0] in kq:
                return [GgmlAct(m) for m in w]
            return list(w)
        self.arch = a
        self.eps = kv[a + ".attention.layer_norm_rms_epsilon"]
        self.theta = kv.get(a + ".rope.freq_base", 10000.0)
        self.H = kv[a + ".attention.head_count"]
        self.Hk = kv.get(a + ".attention.head_count_kv", self.H)
        self.d = kv.get(a + ".attention.key_length", kv[a + ".embedding_length"] // self.H)
        self.k = kv[a + ".expert_used_count"]
        self.norm_topk = kv.get(a + ".expert_weights_norm", a != "olmoe")
        self.rope = rope_interleaved if a == "llama" else rope_neox
        self.qk_norm = {"qwen3moe": "head", "olmoe": "full"}.get(a, "none")
        self.emb = f("token_embd.weight")
        if "output.weight" in t:
            self.out = f("output.weight")
        elif self.ggml_act and t["token_embd.weight"][0] in kq:
            self.out = GgmlAct(self.emb)
        else:
            self.out = self.emb
        self.norm = f("output_norm.weight")
        self.layers = []
        for l in range(kv[a + ".block_count"]):
            b = f"blk.{l}."
            ex = [fx(b + n + ".weight") for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
            L = dict(attn_norm=f(b + "attn_norm.weight"), ffn_norm=f(b + "ffn_norm.weight"),
                     q=f(b + "attn_q.weight"), k=f(b + "attn_k.weight"), v=f(b + "attn_v.weight"),
                     o=f(b + "attn_output.weight"), router=f(b + "ffn_gate_inp.weight"),
                     experts=[(ex[0][e], ex[1][e], ex[2][e]) for e in range(len(ex[0]))])
            if self.qk_norm != "none":
                L["q_norm"], L["k_norm"] = f(b + "attn_q_norm.weight"), f(b + "attn_k_norm.weight")
            self.layers.append(L)

    def forward(self, tokens):
        H, Hk, d, eps = self.H, self.Hk, self.d, self.eps
        cache = [([], []) for _ in self.layers]
        out = []
        for p, tok in enumerate(tokens):
            x = self.emb[tok].copy()
            for l, L in enumerate(self.layers):
                h = rmsnorm(x, L["attn_norm"], eps)
                q, k, v = L["q"] @ h, L["k"] @ h, L["v"] @ h
                if self.qk_norm == "full":
                    q, k = rmsnorm(q, L["q_norm"], eps), rmsnorm(k, L["k_norm"], eps)
                q, k, v = q.reshape(H, d), k.reshape(Hk, d), v.reshape(Hk, d)
                if self.qk_norm == "head":
                    q = np.stack([rmsnorm(r, L["q_norm"], eps) for r in q])
                    k = np.stack([rmsnorm(r, L["k_norm"], eps) for r in k])
                q, k = self.rope(q, p, self.theta), self.rope(k, p, self.theta)
                cache[l][0].append(k)
                cache[l][1].append(v)
                K, V = np.stack(cache[l][0]), np.stack(cache[l][1])
                o = np.empty((H, d))
                for j in range(H):
                    kh = j // (H // Hk)
                    a = softmax(K[:, kh, :] @ q[j] / np.sqrt(d))
                    o[j] = a @ V[:, kh, :]
                x = x + L["o"] @ o.reshape(-1)
                h = rmsnorm(x, L["ffn_norm"], eps)
                probs = softmax(L["router"] @ h)
                sel = np.argsort(-probs, kind="stable")[:self.k]
                wts = probs[sel]
                if self.norm_topk:
                    wts = wts / wts.sum()
                y = np.zeros_like(x)
                for wi, e in zip(wts, sel):
                    g, u, dn = L["experts"][e]
                    y += wi * (dn @ (silu(g @ h) * (u @ h)))
                x = x + y
            out.append(self.out @ rmsnorm(x, self.norm, eps))
        return np.stack(out)


def check_weights(gguf_path, container, rename=None):
    """Every Q8_0/Q4_0 tensor and expert of the GGUF dequantises bit-identically
    to the container's (our GGUF dequantiser vs spill_ref's container reader).
    rename(gguf name) -> container name, or None to skip a tensor the import
    transforms (default: the name without .weight); blocks without experts
    (leading dense layers) are skipped."""
    import spill_ref
    kv, t = ck.read_gguf(gguf_path)
    c = spill_ref.Container(container)
    a = kv["general.architecture"]
    n = 0
    for name, (ty, shape, raw) in t.items():
        if ty not in (ck.GGML_Q8_0, ck.GGML_Q4_0, ck.GGML_Q4_K, ck.GGML_Q5_K, ck.GGML_Q6_K, ck.GGML_Q5_0,
                      ck.GGML_Q5_1) or "_exps" in name:
            continue
        if a == "llama" and (".attn_q." in name or ".attn_k." in name):
            continue  # rows un-permuted by the import; covered by the logits
        dst = {"token_embd.weight": "tok_embd", "output.weight": "output"}.get(name, name[:-len(".weight")])
        if rename:
            dst = rename(name)
            if dst is None:
                continue
        got = c.tensor(dst).astype(np.float32)
        want = ck.gguf_tensor_f32(t[name])
        if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            raise SystemExit(f"check-weights: {name}: dequantised values differ")
        n += 1
    for l in range(kv[a + ".block_count"]):
        if f"blk.{l}.ffn_gate_exps.weight" not in t:
            continue
        ex = [ck.gguf_tensor_f32(t[f"blk.{l}.{g}.weight"]) for g in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
        for e in range(ex[0].shape[0]):
            mats = c.expert(l, e)
            for s in range(3):
                if not np.array_equal(mats[s].astype(np.float32).view(np.uint32), ex[s][e].view(np.uint32)):
                    raise SystemExit(f"check-weights: layer {l} expert {e} section {s}: values differ")
                n += 1
    print(f"check-weights: {n} tensors bit-identical")


def _hf_expert_names(arch, l, e):
    moe = f"model.layers.{l}." + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
    names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    return [moe + f"experts.{e}.{n}.weight" for n in names]


def swap_experts(src, container, out):
    """A copy of HF checkpoint `src` (F32) whose routed experts are the
    container's decoded ones (spill_ref's reader: e.g. rvq3 codebooks x
    indices x row scales), so `logits` on it is the reference for a
    requantised container's own weights."""
    import shutil
    import spill_ref
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = ck.read_checkpoint_dir(src)
    c = spill_ref.Container(container)
    E = cfg.get("num_local_experts", cfg.get("num_experts"))
    for l in range(cfg["num_hidden_layers"]):
        for e in range(E):
            for n, m in zip(_hf_expert_names(cfg["model_type"], l, e), c.expert(l, e)):
                w[n] = m.astype(np.float32)
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(out, "config.json"))
    ck.write_safetensors(os.path.join(out, "model.safetensors"),
                         [(n, "F32", np.asarray(a, dtype=np.float32)) for n, a in sorted(w.items())])


def rvq_check(src, container, summary):
    """For every (layer, matrix) of an rvq3 container imported from HF
    checkpoint `src`: the relative error of the container's decoded experts
    against the source, which must equal the one the import reported, and
    the error a random codebook (Gaussian entries, each stage with the
    spread of the trained one) gives with the same greedy encoder, which the
    trained codebook must beat."""
    import spill_ref
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = ck.read_checkpoint_dir(src)
    c = spill_ref.Container(container)
    rep = {x["name"]: x["rel_err"] for x in json.load(open(summary))["requantised"]}
    E = cfg.get("num_local_experts", cfg.get("num_experts"))
    rng = np.random.default_rng(5)
    for l in range(cfg["num_hidden_layers"]):
        for k, mat in enumerate(("gate", "up", "down")):
            cb = c.tensor(f"blk.{l}.ffn_{mat}_exps.codebook").reshape(3, 256, 8)
            rnd = np.stack([rng.standard_normal((256, 8)) * cb[t].std() for t in range(3)])
            num = den = rnum = 0.0
            for e in range(E):
                a = w[_hf_expert_names(cfg["model_type"], l, e)[k]].astype(np.float64)
                num += float(np.sum((c.expert(l, e)[k] - a) ** 2))
                den += float(np.sum(a * a))
                s = np.float16(np.sqrt(np.mean(a * a, axis=1))).astype(np.float64)[:, None]
                res = (a / np.where(s > 0, s, 1)).reshape(-1, 8)
                rec = np.zeros_like(res)
                for t in range(3):
                    i = np.argmin(((res[:, None, :] - rnd[t][None]) ** 2).sum(-1), axis=1)
                    rec += rnd[t][i]
                    res = res - rnd[t][i]
                rnum += float(np.sum((rec.reshape(a.shape) * s - a) ** 2))
            got, want, base = np.sqrt(num / den), rep[f"blk.{l}.ffn_{mat}_exps"], np.sqrt(rnum / den)
            if abs(got - want) > 1e-5 * max(1.0, want):
                raise SystemExit(f"rvq-check: blk.{l} {mat}: decoded error {got:.6f}, reported {want:.6f}")
            if not got < base:
                raise SystemExit(f"rvq-check: blk.{l} {mat}: k-means {got:.4f} does not beat random {base:.4f}")
            print(f"rvq-check: blk.{l} {mat}: rel err {got:.4f} (reported {want:.4f}), random codebook {base:.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("out")
    m.add_argument("--arch", required=True, choices=["qwen3_moe", "olmoe", "mixtral"])
    m.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16", "F8_E4M3"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--tied", action="store_true")
    m.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("make-gguf")
    g.add_argument("out")
    g.add_argument("--arch", required=True, choices=["qwen3_moe", "olmoe", "mixtral"])
    g.add_argument("--type", default="F32", choices=sorted(GG_TYPES))
    g.add_argument("--tied", action="store_true")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--vocab", action="store_true",
                   help="write a byte-level BPE vocabulary (llama.cpp needs one to load the file)")
    g.add_argument("--chat-template", action="store_true", help="write tokenizer.chat_template")
    lg = sub.add_parser("logits")
    lg.add_argument("src")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out")
    lg.add_argument("--compare")
    lg.add_argument("--tol", type=float, default=1e-4)
    lg.add_argument("--ggml-act", action="store_true",
                    help="round the input of every K-quant matmul to Q8_K as ggml's CPU "
                         "backend does (explains llama.cpp's logits; not spill's)")
    cw = sub.add_parser("check-weights")
    cw.add_argument("gguf")
    cw.add_argument("container")
    sw = sub.add_parser("swap-experts")
    sw.add_argument("src")
    sw.add_argument("container")
    sw.add_argument("out")
    rc = sub.add_parser("rvq-check")
    rc.add_argument("src")
    rc.add_argument("container")
    rc.add_argument("summary")
    a = ap.parse_args(argv)
    if a.cmd == "make-hf":
        make_hf(a.out, a.arch, a.dtype, a.seed, a.shards, a.tied)
    elif a.cmd == "make-gguf":
        make_gguf(a.out, a.arch, a.type, a.seed, a.tied, a.vocab, a.chat_template)
    elif a.cmd == "check-weights":
        check_weights(a.gguf, a.container)
    elif a.cmd == "swap-experts":
        swap_experts(a.src, a.container, a.out)
    elif a.cmd == "rvq-check":
        rvq_check(a.src, a.container, a.summary)
    else:
        toks = [int(x) for x in a.tokens.split(",")]
        ref = Model(a.src, a.ggml_act).forward(toks)
        if a.out:
            ref.astype("<f4").tofile(a.out)
        if a.compare:
            other = np.fromfile(a.compare, dtype="<f4").astype(np.float64).reshape(-1, ref.shape[1])
            if other.shape != ref.shape:
                raise SystemExit(f"compare: shapes {other.shape} vs {ref.shape}")
            diff = float(np.max(np.abs(other - ref)))
            scale = float(np.max(np.abs(ref)))
            rel = diff / scale
            am = bool(np.all(np.argmax(ref, 1) == np.argmax(other, 1)))
            print(f"compare: max_abs_diff {diff:.3e} scale {scale:.3f} rel {rel:.3e} argmax_agree {am}")
            if rel > a.tol:
                raise SystemExit(f"compare: relative difference {rel:.3e} > {a.tol}")


if __name__ == "__main__":
    main()
