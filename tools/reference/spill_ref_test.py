"""spill_ref_test: self-test of the numpy reference, no C engine needed.

Builds tiny containers by hand (write_container.py, byte layout straight
from docs/FORMAT.md) under $TEST_TMPDIR and checks the reference against
hand-computable facts: dequantisers on known bytes, building blocks, the
container reader (including corruption), and every attention kind and the
MoE against a second, deliberately naive formulation (explicit loops, the
non-absorbed MLA, the per-channel KDA recurrence).
"""

import io
import math
import os
import struct
import sys
import tempfile
import unittest
import zlib
from contextlib import redirect_stdout

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spill_ref as R  # noqa: E402
import write_container as W  # noqa: E402

TMP = os.environ.get("TEST_TMPDIR")
if not TMP:  # run outside Bazel: a private directory, removed at exit
    import atexit
    import shutil
    TMP = tempfile.mkdtemp(prefix="spill_ref_test_")
    atexit.register(shutil.rmtree, TMP, True)


def tmpdir(name):
    d = tempfile.mkdtemp(prefix=name + "_", dir=TMP)
    return d


# ---------------------------------------------------------------------------
# Naive scalar helpers (independent of spill_ref's vectorised code)
# ---------------------------------------------------------------------------


def n_rmsnorm(x, w, eps):
    ms = sum(v * v for v in x) / len(x)
    return [x[i] / math.sqrt(ms + eps) * w[i] for i in range(len(x))]


def n_rope(v, p, theta):
    d = len(v)
    out = list(v)
    for i in range(d // 2):
        a = p * theta ** (-2.0 * i / d)
        out[i] = v[i] * math.cos(a) - v[i + d // 2] * math.sin(a)
        out[i + d // 2] = v[i] * math.sin(a) + v[i + d // 2] * math.cos(a)
    return out


def n_sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def n_matvec(W_, x):
    return [sum(W_[r][c] * x[c] for c in range(len(x))) for r in range(len(W_))]


def n_softmax(s):
    m = max(s)
    e = [math.exp(v - m) for v in s]
    z = sum(e)
    return [v / z for v in e]


def n_swiglu(x, G, U, Dn):
    g = n_matvec(G, x)
    u = n_matvec(U, x)
    a = [g[i] * n_sigmoid(g[i]) * u[i] for i in range(len(g))]
    return n_matvec(Dn, a)


# ---------------------------------------------------------------------------
# A tiny model generator: every MODEL.md tensor, f32 values (or a chosen dtype)
# ---------------------------------------------------------------------------


def arch_for(kinds, n_dense=1, router="sigmoid", d_latent=0, n_shared=1, mla_rope=True,
             q_lora=6, out_gate_rank=0, decay_floor=-5.0, bos_id=1, conv_kernel=3):
    D = 16
    return {
        "family": "test", "vocab_size": 260, "d_model": D, "n_layers": len(kinds),
        "n_dense_layers": n_dense, "d_ff": 24, "norm_eps": 1e-5, "activation": "swiglu",
        "bos_id": bos_id, "eos_id": -1, "layer_attn": list(kinds),
        "gqa": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 4, "rope_theta": 10000.0},
        "mla": {"n_heads": 2, "q_lora_rank": q_lora, "kv_lora_rank": 8, "qk_nope_dim": 4,
                "qk_rope_dim": 4, "v_head_dim": 6, "use_rope": mla_rope, "rope_theta": 500.0},
        "kda": {"n_heads": 2, "head_dim": 4, "conv_kernel": conv_kernel, "gate_rank": 3,
                "out_gate_rank": out_gate_rank, "decay_floor": decay_floor},
        "moe": {"n_experts": 6, "top_k": 2, "d_expert": 8, "n_shared": n_shared,
                "d_shared": 4, "d_latent": d_latent, "router": router, "norm_topk": True,
                "routed_scale": 1.5},
    }


def model_shapes(a):
    """(name, shape, kind) for every trunk tensor MODEL.md names; kind is
    'norm' (around 1), 'mat' or 'vec' (small)."""
    D, V = a["d_model"], a["vocab_size"]
    out = [("tok_embd", (V, D), "mat"), ("output_norm", (D,), "norm"), ("output", (V, D), "mat")]
    for l, kind in enumerate(a["layer_attn"]):
        b = f"blk.{l}."
        out += [(b + "attn_norm", (D,), "norm"), (b + "ffn_norm", (D,), "norm")]
        if kind == "gqa":
            g = a["gqa"]
            H, Hk, d = g["n_heads"], g["n_kv_heads"], g["head_dim"]
            out += [(b + "attn_q", (H * d, D), "mat"), (b + "attn_k", (Hk * d, D), "mat"),
                    (b + "attn_v", (Hk * d, D), "mat"), (b + "attn_output", (D, H * d), "mat")]
        elif kind == "mla":
            m = a["mla"]
            H, dn, dr, dv, dc, ql = (m["n_heads"], m["qk_nope_dim"], m["qk_rope_dim"],
                                     m["v_head_dim"], m["kv_lora_rank"], m["q_lora_rank"])
            if ql > 0:
                out += [(b + "attn_q_a", (ql, D), "mat"), (b + "attn_q_a_norm", (ql,), "norm"),
                        (b + "attn_q_b", (H * (dn + dr), ql), "mat")]
            else:
                out += [(b + "attn_q", (H * (dn + dr), D), "mat")]
            out += [(b + "attn_kv_a", (dc + dr, D), "mat"), (b + "attn_kv_a_norm", (dc,), "norm"),
                    (b + "attn_kv_b", (H * (dn + dv), dc), "mat"),
                    (b + "attn_output", (D, H * dv), "mat")]
        else:
            k = a["kda"]
            H, d, K, r, rg = (k["n_heads"], k["head_dim"], k["conv_kernel"], k["gate_rank"],
                              k["out_gate_rank"])
            for n in "qkv":
                out += [(b + f"attn_{n}", (H * d, D), "mat"),
                        (b + f"attn_{n}_conv", (H * d, K), "mat")]
            out += [(b + "attn_f_a", (r, D), "mat"), (b + "attn_f_b", (H * d, r), "mat"),
                    (b + "attn_dt_bias", (H * d,), "vec"), (b + "attn_a_log", (H,), "vec"),
                    (b + "attn_b", (H, D), "mat")]
            if rg == 0:
                out += [(b + "attn_g", (H * d, D), "mat")]
            else:
                out += [(b + "attn_g_a", (rg, D), "mat"), (b + "attn_g_b", (H * d, rg), "mat")]
            out += [(b + "attn_o_norm", (d,), "norm"), (b + "attn_output", (D, H * d), "mat")]
        if l < a["n_dense_layers"]:
            F = a["d_ff"]
            out += [(b + "ffn_gate", (F, D), "mat"), (b + "ffn_up", (F, D), "mat"),
                    (b + "ffn_down", (D, F), "mat")]
        else:
            mo = a["moe"]
            E, dl = mo["n_experts"], mo["d_latent"]
            out += [(b + "ffn_gate_inp", (E, D), "mat")]
            if mo["router"] == "sigmoid":
                out += [(b + "exp_probs_b", (E,), "vec")]
            if dl > 0:
                out += [(b + "moe_down_proj", (dl, D), "mat"),
                        (b + "moe_latent_norm", (dl,), "norm"), (b + "moe_up_proj", (D, dl), "mat")]
            if mo["n_shared"] > 0:
                S = mo["n_shared"] * mo["d_shared"]
                out += [(b + "ffn_gate_shexp", (S, D), "mat"), (b + "ffn_up_shexp", (S, D), "mat"),
                        (b + "ffn_down_shexp", (D, S), "mat")]
    return out


def quantised_matrix(rng, dtype, rows, cols, scale, group=0, codebook=None):
    """Random matrix exactly representable in dtype: (bytes, float64 values)."""
    if dtype == "f32":
        w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        return W.enc_f32(w), w.astype(np.float64)
    if dtype == "f16":
        w = (rng.standard_normal((rows, cols)) * scale).astype(np.float16)
        return W.enc_f16(w), w.astype(np.float64)
    if dtype == "bf16":
        w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        w = (w.view(np.uint32) & 0xFFFF0000).view(np.float32)
        return W.enc_bf16(w), w.astype(np.float64)
    if dtype == "q8":
        q = rng.integers(-127, 128, (rows, cols))
        s = (rng.uniform(0.5, 1.5, (rows, cols // group)) * scale / 64).astype(np.float16)
        return W.enc_q8(q, s), q * np.repeat(s.astype(np.float64), group, axis=1)
    if dtype == "q4":
        nib = rng.integers(0, 16, (rows, cols))
        s = (rng.uniform(0.5, 1.5, (rows, cols // group)) * scale / 4).astype(np.float16)
        return W.enc_q4(nib, s), (nib - 8) * np.repeat(s.astype(np.float64), group, axis=1)
    if dtype == "rvq3":
        idx = rng.integers(0, 256, (rows, cols // 8, 3))
        s = (rng.uniform(0.5, 1.5, rows) * scale).astype(np.float16)
        cb = codebook.reshape(3, 256, 8).astype(np.float64)
        w = np.zeros((rows, cols))
        for r in range(rows):  # naive loop: the definition in FORMAT.md
            for g in range(cols // 8):
                for j in range(8):
                    w[r, 8 * g + j] = float(s[r]) * sum(cb[t][idx[r, g, t]][j] for t in range(3))
        return W.enc_rvq3(idx, s), w
    raise ValueError(dtype)


def build_model(path, a, seed=1, trunk_dtypes=("f32",), expert_dtype="f32", group=4,
                expert_group=4, overrides=None):
    """Writes a container with random weights; returns {name: float64 values}
    (experts under ('expert', layer, e))."""
    rng = np.random.default_rng(seed)
    overrides = overrides or {}
    tensors, values = [], {}
    for i, (name, shape, kind) in enumerate(model_shapes(a)):
        rows, cols = (shape if len(shape) == 2 else (1, shape[0]))
        if name in overrides:
            w = np.asarray(overrides[name], dtype=np.float32).reshape(rows, cols)
            tensors.append((name, "f32", shape, W.enc_f32(w), 0))
            values[name] = w.astype(np.float64).reshape(shape)
            continue
        if kind == "norm":
            w = (1.0 + 0.1 * rng.standard_normal((rows, cols))).astype(np.float32)
            data, v, dt = W.enc_f32(w), w.astype(np.float64), "f32"
        elif kind == "vec":
            w = (0.5 * rng.standard_normal((rows, cols))).astype(np.float32)
            data, v, dt = W.enc_f32(w), w.astype(np.float64), "f32"
        else:
            dt = trunk_dtypes[i % len(trunk_dtypes)]
            if dt in ("q8", "q4") and cols % group != 0:
                dt = "f32"  # e.g. conv weights (H*d, K): K is not a multiple of the group
            g = group if dt in ("q8", "q4") else 0
            data, v = quantised_matrix(rng, dt, rows, cols, 1.0 / math.sqrt(cols), g)
        tensors.append((name, dt, shape, data, group if dt in ("q8", "q4") else 0))
        values[name] = v.reshape(shape)
    experts = {}
    if a["n_layers"] > a["n_dense_layers"]:
        mo = a["moe"]
        d_in = mo["d_latent"] or a["d_model"]
        dims = [(mo["d_expert"], d_in), (mo["d_expert"], d_in), (d_in, mo["d_expert"])]
        for l in range(a["n_dense_layers"], a["n_layers"]):
            cbs = []
            if expert_dtype == "rvq3":
                for sname in R.SECTIONS:
                    cb = (0.3 * rng.standard_normal((768, 8))).astype(np.float32)
                    cbs.append(cb)
                    tensors.append((f"blk.{l}.ffn_{sname}_exps.codebook", "f32", (768, 8),
                                    W.enc_f32(cb), 0))
            recs = []
            for e in range(mo["n_experts"]):
                mats, vals = [], []
                for si, (rows, cols) in enumerate(dims):
                    g = expert_group if expert_dtype in ("q8", "q4") else 0
                    data, v = quantised_matrix(rng, expert_dtype, rows, cols,
                                               1.0 / math.sqrt(cols), g,
                                               cbs[si] if cbs else None)
                    mats.append(data)
                    vals.append(v)
                recs.append(mats)
                values[("expert", l, e)] = vals
            experts[l] = recs
    W.write(path, a, tensors, experts, expert_dtype, expert_group)
    return values


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


class DequantTest(unittest.TestCase):
    def test_f16_known_bits(self):
        buf = struct.pack("<4H", 0x3C00, 0xC000, 0x0001, 0x7BFF)
        np.testing.assert_array_equal(R.deq_f16(buf, 2, 2),
                                      [[1.0, -2.0], [2.0 ** -24, 65504.0]])

    def test_bf16_known_bits(self):
        buf = struct.pack("<3H", 0x3F80, 0xC040, 0x3E20)
        np.testing.assert_array_equal(R.deq_bf16(buf, 1, 3), [[1.0, -3.0, 0.15625]])

    def test_f32_little_endian(self):
        buf = struct.pack("<2f", 1.5, -0.25)
        np.testing.assert_array_equal(R.deq_f32(buf, 2, 1), [[1.5], [-0.25]])

    def test_q8_values_then_group_scales(self):
        # rows 2, cols 4, group 2: scales [r][g] at r*2+g
        q = [1, -2, 3, -128, 127, 0, -1, 5]
        s = [0x3800, 0x4000, 0x3C00, 0xB400]  # 0.5, 2.0, 1.0, -0.25
        buf = struct.pack("<8b", *q) + struct.pack("<4H", *s)
        want = [[0.5, -1.0, 6.0, -256.0], [127.0, 0.0, 0.25, -1.25]]
        np.testing.assert_array_equal(R.deq_q8(buf, 2, 4, 2), want)

    def test_q4_low_nibble_is_even_element(self):
        # byte 0x9F: element 0 = 0xF -> 7, element 1 = 0x9 -> 1; byte 0x08: 0, -8
        buf = bytes([0x9F, 0x08]) + struct.pack("<H", 0x3800)  # scale 0.5
        np.testing.assert_array_equal(R.deq_q4(buf, 1, 4, 4), [[3.5, 0.5, 0.0, -4.0]])

    def test_q4_scales_at_odd_offset(self):
        # rows 3, cols 2: 3 value bytes, so the scales start at offset 3 (unaligned)
        buf = bytes([0x19, 0x8F, 0x70]) + struct.pack("<3H", 0x3C00, 0x4000, 0x3400)
        want = [[1.0, -7.0], [14.0, 0.0], [-2.0, -0.25]]
        np.testing.assert_array_equal(R.deq_q4(buf, 3, 2, 2), want)

    def test_rvq3_sums_three_stages_times_row_scale(self):
        rng = np.random.default_rng(7)
        cb = rng.standard_normal((768, 8)).astype(np.float32)
        rows, cols = 2, 16
        idx = bytes(rng.integers(0, 256, rows * (cols // 8) * 3, dtype=np.uint8))
        scales = [0x3800, 0xC000]  # 0.5, -2
        buf = idx + struct.pack("<2H", *scales)
        got = R.deq_rvq3(buf, rows, cols, cb.astype(np.float64))
        sv = [0.5, -2.0]
        for r in range(rows):
            for g in range(cols // 8):
                for j in range(8):
                    want = sv[r] * sum(float(cb[256 * t + idx[(r * 2 + g) * 3 + t]][j])
                                       for t in range(3))
                    self.assertEqual(got[r, 8 * g + j], want)

    def test_rvq3_scales_at_odd_offset(self):
        cb = np.zeros((768, 8))
        cb[5] = np.arange(8)           # stage 0 entry 5
        cb[256 + 1] = 1.0              # stage 1 entry 1
        cb[512 + 255] = -0.5           # stage 2 entry 255
        buf = bytes([5, 1, 255]) + struct.pack("<H", 0x4000)  # 3 index bytes, scale 2
        np.testing.assert_array_equal(R.deq_rvq3(buf, 1, 8, cb)[0], 2 * (np.arange(8) + 0.5))

    def test_short_buffer_is_a_format_error(self):
        with self.assertRaises(R.FormatError):
            R.deq_q8(bytes(9), 2, 4, 2)

    def test_sizes_match_format_table(self):
        self.assertEqual(R.dtype_matrix_bytes("q4", 3072, 3584, 128), 3072 * 1792 + 2 * 3072 * 28)
        self.assertEqual(R.dtype_matrix_bytes("rvq3", 3072, 3584), 4134912)  # FORMAT.md K3 gate
        self.assertEqual(R.dtype_matrix_bytes("rvq3", 3584, 3072), 4135936)  # K3 down
        self.assertEqual(zlib.crc32(b"123456789"), 0xCBF43926)


class LayoutTest(unittest.TestCase):
    def test_k3_record_layout_matches_format_md_example(self):
        a = {"d_model": 7168, "moe": {"d_latent": 3584, "d_expert": 3072}}
        sec, payload, rec = R.record_layout(a, "rvq3")
        self.assertEqual([sec[s]["offset"] for s in R.SECTIONS], [64, 4134976, 8269888])
        self.assertEqual([sec[s]["bytes"] for s in R.SECTIONS], [4134912, 4134912, 4135936])
        self.assertEqual((payload, rec), (12405760, 12406784))

    def test_tiny_f32_layout_matches_format_md_example(self):
        a = {"d_model": 16, "moe": {"d_latent": 0, "d_expert": 8}}
        sec, payload, rec = R.record_layout(a, "f32")
        self.assertEqual([sec[s]["offset"] for s in R.SECTIONS], [64, 576, 1088])
        self.assertEqual((payload, rec), (1536, 4096))


class BlocksTest(unittest.TestCase):
    def test_rmsnorm_by_hand(self):
        got = R.rmsnorm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.5)
        r = math.sqrt(12.5 + 0.5)
        np.testing.assert_allclose(got, [3 / r, 8 / r], rtol=1e-15)

    def test_rope_position_zero_is_identity(self):
        v = np.arange(1.0, 7.0)
        np.testing.assert_array_equal(R.rope(v, 0, 10000.0), v)

    def test_rope_rotates_pairs_i_and_i_plus_half(self):
        v = np.array([1.0, 2.0, 3.0, 4.0])
        p, theta = 3, 100.0
        a0, a1 = p * 1.0, p * theta ** -0.5
        want = [1 * math.cos(a0) - 3 * math.sin(a0), 2 * math.cos(a1) - 4 * math.sin(a1),
                1 * math.sin(a0) + 3 * math.cos(a0), 2 * math.sin(a1) + 4 * math.cos(a1)]
        np.testing.assert_allclose(R.rope(v, p, theta), want, rtol=1e-14)
        np.testing.assert_allclose(R.rope(v, p, theta), n_rope(list(v), p, theta), rtol=1e-14)

    def test_rope_scores_depend_on_distance_only(self):
        rng = np.random.default_rng(3)
        q, k = rng.standard_normal(8), rng.standard_normal(8)
        s1 = R.rope(q, 7, 50.0) @ R.rope(k, 4, 50.0)
        s2 = R.rope(q, 13, 50.0) @ R.rope(k, 10, 50.0)
        self.assertAlmostEqual(s1, s2, places=12)

    def test_topk_descending_ties_to_lower_id(self):
        s = np.array([0.1, 0.7, 0.3, 0.7, 0.3, 0.9])
        self.assertEqual(list(R.topk(s, 4)), [5, 1, 3, 2])
        self.assertEqual(list(R.topk(np.zeros(5), 3)), [0, 1, 2])

    def test_softplus_threshold_and_sigmoid(self):
        self.assertEqual(float(R.softplus(25.0)), 25.0)
        self.assertAlmostEqual(float(R.softplus(0.0)), math.log(2.0), places=15)
        self.assertAlmostEqual(float(R.softplus(20.0)), math.log1p(math.exp(20.0)), places=12)
        self.assertEqual(float(R.sigmoid(0.0)), 0.5)

    def test_l2norm(self):
        np.testing.assert_allclose(R.l2norm(np.array([3.0, 4.0])),
                                   [3 / math.sqrt(25 + 1e-6), 4 / math.sqrt(25 + 1e-6)])

    def test_tokenize_bytes_with_bos(self):
        self.assertEqual(R.tokenize("hé", 257), [257, 104, 195, 169])
        self.assertEqual(R.tokenize("a", -1), [97])


class ContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = arch_for(["gqa", "mla"], n_dense=1)
        cls.dir = tmpdir("dtypes")
        cls.values = build_model(cls.dir, cls.a, seed=5,
                                 trunk_dtypes=("f32", "f16", "bf16", "q8", "q4"),
                                 expert_dtype="q4", expert_group=4)

    def test_trunk_tensors_of_every_dtype_read_back_exactly(self):
        c = R.Container(self.dir)
        dts = {t["dtype"] for t in c.tensors.values()}
        self.assertEqual(dts, {"f32", "f16", "bf16", "q8", "q4"})
        for name, shape, _ in model_shapes(self.a):
            np.testing.assert_array_equal(c.tensor(name), self.values[name], err_msg=name)

    def test_expert_records_read_back_exactly(self):
        c = R.Container(self.dir)
        for e in range(self.a["moe"]["n_experts"]):
            for got, want in zip(c.expert(1, e), self.values[("expert", 1, e)]):
                np.testing.assert_array_equal(got, want)

    def test_rvq3_experts_use_the_layer_codebooks(self):
        a = arch_for(["kda", "gqa", "gqa"], n_dense=1)
        d = tmpdir("rvq3")
        vals = build_model(d, a, seed=9, expert_dtype="rvq3")
        c = R.Container(d)
        for l in (1, 2):
            for e in (0, 5):
                for got, want in zip(c.expert(l, e), vals[("expert", l, e)]):
                    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)

    def test_corrupt_payload_names_layer_and_expert(self):
        d = tmpdir("corrupt")
        build_model(d, self.a, seed=5, expert_dtype="f32")
        c = R.Container(d)
        rb = c.record_bytes
        path = os.path.join(d, "experts-001.bin")
        with open(path, "r+b") as f:
            f.seek(4096 + 3 * rb + 100)
            b = f.read(1)
            f.seek(4096 + 3 * rb + 100)
            f.write(bytes([b[0] ^ 1]))
        c = R.Container(d)
        c.expert(1, 2)  # a neighbour is fine
        with self.assertRaisesRegex(R.FormatError, "layer 1 expert 3: payload crc"):
            c.expert(1, 3)

    def test_swapped_records_are_caught(self):
        d = tmpdir("swap")
        build_model(d, self.a, seed=5, expert_dtype="f32")
        rb = R.Container(d).record_bytes
        path = os.path.join(d, "experts-001.bin")
        with open(path, "r+b") as f:
            blob = bytearray(f.read())
            r0 = blob[4096:4096 + rb]
            blob[4096:4096 + rb] = blob[4096 + rb:4096 + 2 * rb]
            blob[4096 + rb:4096 + 2 * rb] = r0
            f.seek(0)
            f.write(blob)
        with self.assertRaisesRegex(R.FormatError, "expert 0: record header fields"):
            R.Container(d).expert(1, 0)

    def test_truncated_bank_and_bad_bank_header(self):
        d = tmpdir("trunc")
        build_model(d, self.a, seed=5, expert_dtype="f32")
        path = os.path.join(d, "experts-001.bin")
        with open(path, "r+b") as f:
            f.seek(16)
            f.write(struct.pack("<I", 7))  # n_experts field
        with self.assertRaisesRegex(R.FormatError, "bank header crc"):
            R.Container(d).expert(1, 0)
        os.truncate(path, 4096)
        with self.assertRaisesRegex(R.FormatError, "size 4096"):
            R.Container(d)

    def test_manifest_layout_disagreement_is_rejected(self):
        import json
        d = tmpdir("layout")
        build_model(d, self.a, seed=5, expert_dtype="f32")
        mp = os.path.join(d, "manifest.json")
        with open(mp) as f:
            m = json.load(f)
        m["experts"]["sections"][1]["offset"] += 64
        with open(mp, "w") as f:
            json.dump(m, f)
        with self.assertRaisesRegex(R.FormatError, "computed"):
            R.Container(d)

    def test_kimi_k3_parts_are_refused_not_ignored(self):
        # a container naming a part of Kimi K3 as released (attention
        # residuals, MLA output gate, bounded KDA decay, latent norm on the
        # routed sum, the renormalisation clamp) is refused: this reference
        # does not compute them, and must not compute the model without them
        import json
        d = tmpdir("k3parts")
        build_model(d, self.a, seed=5, expert_dtype="f32")
        mp = os.path.join(d, "manifest.json")
        with open(mp) as f:
            base = json.load(f)
        R.Container(d)  # as written: accepted
        cases = [(("arch",), "attn_res_block", 2), (("arch", "mla"), "out_gate", True),
                 (("arch", "kda"), "gate_lower_bound", -5.0),
                 (("arch", "moe"), "latent_norm", "output"), (("arch", "moe"), "norm_min", 6.1e-05)]
        for path, key, value in cases:
            m = json.loads(json.dumps(base))
            obj = m
            for p in path:
                obj = obj.setdefault(p, {})
            obj[key] = value
            with open(mp, "w") as f:
                json.dump(m, f)
            with self.assertRaisesRegex(R.FormatError, key + ".*Kimi K3"):
                R.Container(d)
        with open(mp, "w") as f:
            json.dump(base, f)

    def test_same_weights_in_other_dtypes_give_identical_logits(self):
        # Write the dequantised values of the mixed-dtype container as f32 (all
        # are exactly representable) and compare full forward passes.
        d = tmpdir("asf32")
        c = R.Container(self.dir)
        tensors = []
        for name, shape, _ in model_shapes(self.a):
            tensors.append((name, "f32", shape, W.enc_f32(self.values[name]), 0))
        experts = {1: [[W.enc_f32(m) for m in self.values[("expert", 1, e)]]
                       for e in range(self.a["moe"]["n_experts"])]}
        W.write(d, self.a, tensors, experts, "f32")
        toks = [1, 72, 105, 33]
        np.testing.assert_array_equal(R.forward_all(c, toks), R.forward_all(d, toks))


def layer_inputs(n, D, seed):
    return [np.random.default_rng(seed + t).standard_normal(D) for t in range(n)]


class AttentionTest(unittest.TestCase):
    def fresh(self, kinds, **kw):
        a = arch_for(kinds, n_dense=len(kinds), **kw)
        d = tmpdir("attn")
        build_model(d, a, seed=11)
        c = R.Container(d)
        return c, R.Forward(c), a

    def check_mla_against_expanded(self, **kw):
        c, fw, a = self.fresh(["mla"], **kw)
        m = a["mla"]
        H, dn, dr, dv, dc = (m["n_heads"], m["qk_nope_dim"], m["qk_rope_dim"], m["v_head_dim"],
                             m["kv_lora_rank"])
        T = c.tensor
        eps = a["norm_eps"]
        hs = layer_inputs(4, a["d_model"], 100)
        keys, vals = [[] for _ in range(H)], [[] for _ in range(H)]
        kvb = T("blk.0.attn_kv_b")
        for p, h in enumerate(hs):
            got = fw.attn_mla(0, h, p)
            # Non-absorbed MLA: expand kv_b into per-head keys and values.
            if m["q_lora_rank"] > 0:
                cq = n_rmsnorm(n_matvec(T("blk.0.attn_q_a"), h), T("blk.0.attn_q_a_norm"), eps)
                q = n_matvec(T("blk.0.attn_q_b"), cq)
            else:
                q = n_matvec(T("blk.0.attn_q"), h)
            kv = n_matvec(T("blk.0.attn_kv_a"), h)
            cl = n_rmsnorm(kv[:dc], T("blk.0.attn_kv_a_norm"), eps)
            kr = kv[dc:]
            if m["use_rope"]:
                kr = n_rope(kr, p, m["rope_theta"])
            o = []
            for j in range(H):
                qj = q[j * (dn + dr):(j + 1) * (dn + dr)]
                qn, qr = qj[:dn], qj[dn:]
                if m["use_rope"]:
                    qr = n_rope(qr, p, m["rope_theta"])
                rows = kvb[j * (dn + dv):(j + 1) * (dn + dv)]
                k_nope = n_matvec(rows[:dn], cl)          # Wuk c
                v = n_matvec(rows[dn:], cl)               # Wuv c
                keys[j].append(k_nope + kr)
                vals[j].append(v)
                qfull = qn + qr
                sc = [sum(x * y for x, y in zip(qfull, k)) / math.sqrt(dn + dr) for k in keys[j]]
                at = n_softmax(sc)
                o += [sum(at[t] * vals[j][t][i] for t in range(p + 1)) for i in range(dv)]
            want = n_matvec(T("blk.0.attn_output"), o)
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12, err_msg=f"pos {p}")
        self.assertEqual(len(fw.state[0]["c"][0]), dc)  # the cache holds the latent only

    def test_mla_absorbed_equals_expanded_with_rope_and_q_lora(self):
        self.check_mla_against_expanded()

    def test_mla_absorbed_equals_expanded_nope_full_rank_q(self):
        self.check_mla_against_expanded(mla_rope=False, q_lora=0)

    def test_mla_one_token_output_is_wuv_of_own_latent(self):
        # At p = 0 softmax over one key is 1, so o_j = Wuv_j c_0 for every head.
        c, fw, a = self.fresh(["mla"])
        m = a["mla"]
        h = layer_inputs(1, a["d_model"], 5)[0]
        got = fw.attn_mla(0, h, 0)
        cl = fw.state[0]["c"][0]
        kvb = c.tensor("blk.0.attn_kv_b").reshape(m["n_heads"], -1, m["kv_lora_rank"])
        o = np.concatenate([kvb[j, m["qk_nope_dim"]:] @ cl for j in range(m["n_heads"])])
        np.testing.assert_allclose(got, c.tensor("blk.0.attn_output") @ o, rtol=1e-13)

    def check_kda_against_loops(self, **kw):
        c, fw, a = self.fresh(["kda"], **kw)
        k_ = a["kda"]
        H, d, K = k_["n_heads"], k_["head_dim"], k_["conv_kernel"]
        T, eps = c.tensor, a["norm_eps"]
        hs = layer_inputs(5, a["d_model"], 200)
        pre = {n: [] for n in "qkv"}
        S = [[[0.0] * d for _ in range(d)] for _ in range(H)]
        for p, h in enumerate(hs):
            got = fw.attn_kda(0, h, p)
            post = {}
            for n in "qkv":
                pre[n].append(n_matvec(T(f"blk.0.attn_{n}"), h))
                wc = T(f"blk.0.attn_{n}_conv")
                out = []
                for ch in range(H * d):
                    acc = 0.0
                    for i in range(K):
                        t = p - K + 1 + i
                        acc += wc[ch][i] * (pre[n][t][ch] if t >= 0 else 0.0)
                    out.append(acc * n_sigmoid(acc))
                post[n] = out
            fa = n_matvec(T("blk.0.attn_f_a"), h)
            f = n_matvec(T("blk.0.attn_f_b"), fa)
            beta = [n_sigmoid(v) for v in n_matvec(T("blk.0.attn_b"), h)]
            if k_["out_gate_rank"] == 0:
                go = n_matvec(T("blk.0.attn_g"), h)
            else:
                go = n_matvec(T("blk.0.attn_g_b"), n_matvec(T("blk.0.attn_g_a"), h))
            o = []
            for j in range(H):
                q = post["q"][j * d:(j + 1) * d]
                kk = post["k"][j * d:(j + 1) * d]
                v = post["v"][j * d:(j + 1) * d]
                qn = math.sqrt(sum(x * x for x in q) + 1e-6)
                kn = math.sqrt(sum(x * x for x in kk) + 1e-6)
                q = [x / qn / math.sqrt(d) for x in q]
                kk = [x / kn for x in kk]
                alpha = []
                for i in range(d):
                    ch = j * d + i
                    x = f[ch] + T("blk.0.attn_dt_bias")[ch]
                    sp = x if x > 20 else math.log(1 + math.exp(x))
                    g = -math.exp(T("blk.0.attn_a_log")[j]) * sp
                    if k_["decay_floor"] < 0:
                        g = max(g, k_["decay_floor"])
                    alpha.append(math.exp(g))
                Sj = S[j]
                for i in range(d):
                    for jj in range(d):
                        Sj[i][jj] *= alpha[i]
                pred = [sum(Sj[i][jj] * kk[i] for i in range(d)) for jj in range(d)]
                for i in range(d):
                    for jj in range(d):
                        Sj[i][jj] += kk[i] * beta[j] * (v[jj] - pred[jj])
                oj = [sum(Sj[i][jj] * q[i] for i in range(d)) for jj in range(d)]
                oj = n_rmsnorm(oj, T("blk.0.attn_o_norm"), eps)
                o += [oj[i] * n_sigmoid(go[j * d + i]) for i in range(d)]
            want = n_matvec(T("blk.0.attn_output"), o)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"pos {p}")

    def test_kda_matches_per_channel_loops(self):
        self.check_kda_against_loops()

    def test_kda_low_rank_out_gate_no_floor_kernel_1(self):
        self.check_kda_against_loops(out_gate_rank=2, decay_floor=0.0, conv_kernel=1)

    def test_kda_decay_floor_is_active(self):
        # With a large a_log every channel's g is below -5: alpha == exp(-5).
        a = arch_for(["kda"], n_dense=1)
        H, d = a["kda"]["n_heads"], a["kda"]["head_dim"]
        d_ = tmpdir("floor")
        build_model(d_, a, seed=3, overrides={"blk.0.attn_a_log": [8.0] * H,
                                              "blk.0.attn_dt_bias": [5.0] * (H * d)})
        c = R.Container(d_)
        fw = R.Forward(c)
        hs = layer_inputs(2, a["d_model"], 1)
        fw.attn_kda(0, hs[0], 0)
        S0 = fw.state[0]["S"].copy()
        # Second step with beta forced ~0 is not possible via weights alone; check
        # the decay directly: S1 = exp(-5) S0 + rank-1 update, so S1 - exp(-5) S0
        # has rank 1 per head.
        fw.attn_kda(0, hs[1], 1)
        for j in range(H):
            resid = fw.state[0]["S"][j] - math.exp(-5.0) * S0[j]
            sv = np.linalg.svd(resid, compute_uv=False)
            self.assertLess(sv[1], 1e-12 * max(sv[0], 1.0))

    def test_gqa_two_tokens_causal_softmax(self):
        c, fw, a = self.fresh(["gqa"])
        g = a["gqa"]
        H, Hk, d, th = g["n_heads"], g["n_kv_heads"], g["head_dim"], g["rope_theta"]
        T = c.tensor
        h0, h1 = layer_inputs(2, a["d_model"], 300)
        out0 = fw.attn_gqa(0, h0, 0)
        out1 = fw.attn_gqa(0, h1, 1)
        k = [np.array(T("blk.0.attn_k") @ h).reshape(Hk, d) for h in (h0, h1)]
        v = [np.array(T("blk.0.attn_v") @ h).reshape(Hk, d) for h in (h0, h1)]
        k = [np.array([n_rope(list(kk[i]), p, th) for i in range(Hk)]) for p, kk in enumerate(k)]
        # position 0: a single key, weight 1: o_j = v_0 of its kv head
        o0 = np.concatenate([v[0][j // (H // Hk)] for j in range(H)])
        np.testing.assert_allclose(out0, T("blk.0.attn_output") @ o0, rtol=1e-12)
        q1 = (T("blk.0.attn_q") @ h1).reshape(H, d)
        o1 = []
        for j in range(H):
            kv = j // (H // Hk)
            qr = n_rope(list(q1[j]), 1, th)
            s0 = np.dot(qr, k[0][kv]) / math.sqrt(d)
            s1 = np.dot(qr, k[1][kv]) / math.sqrt(d)
            w0 = 1.0 / (1.0 + math.exp(s1 - s0))
            o1.append(w0 * v[0][kv] + (1 - w0) * v[1][kv])
        np.testing.assert_allclose(out1, T("blk.0.attn_output") @ np.concatenate(o1),
                                   rtol=1e-11, atol=1e-13)


class MoeTest(unittest.TestCase):
    def run_moe(self, **kw):
        a = arch_for(["gqa", "gqa"], n_dense=1, **kw)
        d = tmpdir("moe")
        vals = build_model(d, a, seed=21)
        c = R.Container(d)
        fw = R.Forward(c)
        return a, c, fw, vals

    def naive_moe(self, a, c, h, bias=None):
        mo, T, eps = a["moe"], c.tensor, a["norm_eps"]
        E = mo["n_experts"]
        s = n_matvec(T("blk.1.ffn_gate_inp"), h)
        if mo["router"] == "sigmoid":
            score = [n_sigmoid(x) for x in s]
            b = T("blk.1.exp_probs_b") if bias is None else bias
            key = [score[e] + b[e] for e in range(E)]
        else:
            score = n_softmax(s)
            key = score
        sel = sorted(range(E), key=lambda e: (-key[e], e))[:mo["top_k"]]
        w = [score[e] for e in sel]
        if mo["norm_topk"]:
            z = sum(w)
            w = [x / z for x in w]
        w = [x * mo["routed_scale"] for x in w]
        if mo["d_latent"]:
            u = n_rmsnorm(n_matvec(T("blk.1.moe_down_proj"), h), T("blk.1.moe_latent_norm"), eps)
        else:
            u = list(h)
        y = [0.0] * len(u)
        for wi, e in zip(w, sel):
            G, U, Dn = c.expert(1, e)
            ye = n_swiglu(u, G, U, Dn)
            y = [y[i] + wi * ye[i] for i in range(len(y))]
        if mo["d_latent"]:
            y = n_matvec(T("blk.1.moe_up_proj"), y)
        if mo["n_shared"]:
            ys = n_swiglu(h, T("blk.1.ffn_gate_shexp"), T("blk.1.ffn_up_shexp"),
                          T("blk.1.ffn_down_shexp"))
            y = [y[i] + ys[i] for i in range(len(y))]
        return np.array(y), sel

    def test_sigmoid_router_latent_shared_matches_naive(self):
        a, c, fw, _ = self.run_moe(router="sigmoid", d_latent=8, n_shared=2)
        for t, h in enumerate(layer_inputs(3, a["d_model"], 400)):
            want, _ = self.naive_moe(a, c, h)
            np.testing.assert_allclose(fw.moe(1, h), want, rtol=1e-11, atol=1e-13)

    def test_softmax_router_no_latent_no_shared_matches_naive(self):
        a, c, fw, _ = self.run_moe(router="softmax", d_latent=0, n_shared=0)
        for h in layer_inputs(3, a["d_model"], 500):
            want, _ = self.naive_moe(a, c, h)
            np.testing.assert_allclose(fw.moe(1, h), want, rtol=1e-11, atol=1e-13)

    def test_bias_selects_but_does_not_weight(self):
        a = arch_for(["gqa", "gqa"], n_dense=1, router="sigmoid", n_shared=0)
        E, D = a["moe"]["n_experts"], a["d_model"]
        bias = [0.0, 0.0, 0.0, 0.0, 10.0, 20.0]  # experts 5 then 4 always win
        d = tmpdir("bias")
        build_model(d, a, seed=4, overrides={"blk.1.exp_probs_b": bias})
        c = R.Container(d)
        fw = R.Forward(c)
        h = layer_inputs(1, D, 9)[0]
        s = c.tensor("blk.1.ffn_gate_inp") @ h
        sc = 1 / (1 + np.exp(-s))
        w = sc[[5, 4]] / (sc[5] + sc[4]) * a["moe"]["routed_scale"]
        want = sum(wi * R.swiglu(h, *c.expert(1, e)) for wi, e in zip(w, [5, 4]))
        np.testing.assert_allclose(fw.moe(1, h), want, rtol=1e-12)

    def test_tied_router_scores_pick_lower_ids(self):
        # All router rows equal: every score ties, so experts 0 and 1 are picked.
        a = arch_for(["gqa", "gqa"], n_dense=1, router="softmax", n_shared=0)
        E, D = a["moe"]["n_experts"], a["d_model"]
        row = np.random.default_rng(2).standard_normal(D)
        d = tmpdir("tie")
        build_model(d, a, seed=4, overrides={"blk.1.ffn_gate_inp": np.tile(row, (E, 1))})
        c = R.Container(d)
        fw = R.Forward(c)
        h = layer_inputs(1, D, 3)[0]
        want = a["moe"]["routed_scale"] * 0.5 * (R.swiglu(h, *c.expert(1, 0))
                                                  + R.swiglu(h, *c.expert(1, 1)))
        np.testing.assert_allclose(fw.moe(1, h), want, rtol=1e-12)
        self.assertEqual(fw.router_margins, [(0, 1, 0.0)])


class ForwardTest(unittest.TestCase):
    def test_every_mix_is_causal_and_cli_writes_all_positions(self):
        for kinds in (["kda", "kda", "kda", "mla"], ["mla", "mla"], ["kda", "kda"],
                      ["gqa", "gqa", "gqa"]):
            a = arch_for(kinds, n_dense=1, d_latent=8 if kinds[0] == "kda" else 0)
            d = tmpdir("fw_" + "_".join(kinds))
            build_model(d, a, seed=31, expert_dtype="q8", expert_group=4)
            c = R.Container(d)
            full = R.forward_all(c, [1, 10, 20, 30])
            self.assertEqual(full.shape, (4, a["vocab_size"]))
            self.assertTrue(np.all(np.isfinite(full)))
            prefix = R.forward_all(c, [1, 10, 99])
            np.testing.assert_array_equal(full[:2], prefix[:2])   # later tokens unseen
            self.assertFalse(np.allclose(full[2], prefix[2]))     # the token matters
            # The first position's logits equal a fresh one-token run.
            np.testing.assert_array_equal(full[0], R.forward_all(c, [1])[0])
            out = os.path.join(d, "logits.f32")
            with redirect_stdout(io.StringIO()) as so:
                rc = R.main([d, "--tokens", "1,10,20,30", "--all-positions",
                             "--logits-out", out])
            self.assertEqual(rc, 0)
            self.assertIn(f"shape 4x{a['vocab_size']}", so.getvalue())
            raw = np.fromfile(out, dtype="<f4").reshape(4, a["vocab_size"])
            np.testing.assert_array_equal(raw, full.astype(np.float32))

    def test_cli_prompt_prepends_bos_and_writes_npy(self):
        a = arch_for(["gqa", "gqa"], n_dense=1, bos_id=257)
        d = tmpdir("cli")
        build_model(d, a, seed=2)
        out = os.path.join(d, "last.npy")
        with redirect_stdout(io.StringIO()):
            self.assertEqual(R.main([d, "--prompt", "hi", "--logits-out", out]), 0)
        np.testing.assert_array_equal(
            np.load(out), R.forward_all(d, [257, 104, 105])[-1].astype(np.float32))

    def test_cli_compare_accepts_small_and_rejects_large_differences(self):
        a = arch_for(["kda", "mla"], n_dense=1)
        d = tmpdir("cmp")
        build_model(d, a, seed=8)
        ref = R.forward_all(d, [1, 5, 9])
        scale = np.max(np.abs(ref))
        cases = [("near.f32", ref + 0.5e-4 * scale, 0), ("far.f32", ref + 3e-4 * scale, 2),
                 ("last.f32", ref[-1] - 0.2e-4 * scale, 0), ("bad.f32", ref[:, :7], 1)]
        for name, arr, want_rc in cases:
            path = os.path.join(d, name)
            arr.astype("<f4").tofile(path)
            from contextlib import redirect_stderr
            with redirect_stdout(io.StringIO()) as so, redirect_stderr(io.StringIO()):
                rc = R.main([d, "--tokens", "1,5,9", "--compare", path])
            self.assertEqual(rc, want_rc, name + so.getvalue())

    def test_cli_reports_bad_container(self):
        d = tmpdir("bad")
        with open(os.path.join(d, "manifest.json"), "w") as f:
            f.write('{"format": "spill", "version": 4}')
        from contextlib import redirect_stderr
        with redirect_stderr(io.StringIO()) as se:
            self.assertEqual(R.main([d, "--tokens", "1"]), 1)
        self.assertIn("version 4", se.getvalue())


class _JUnitResult(unittest.TextTestResult):
    """Also records each case for a JUnit XML file (Bazel's XML_OUTPUT_FILE),
    so the repository's test summary counts every case, not one per target."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.cases = []

    def _add(self, test, kind, text=""):
        cls, _, name = test.id().rpartition(".")
        self.cases.append((cls, name, kind, text))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skipped", reason)


def _write_junit(path, cases):
    from xml.sax.saxutils import escape, quoteattr
    n_fail = sum(k == "failure" for _, _, k, _ in cases)
    n_err = sum(k == "error" for _, _, k, _ in cases)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>",
             f'<testsuite name="spill_ref_test" tests="{len(cases)}" failures="{n_fail}" '
             f'errors="{n_err}">']
    for cls, name, kind, text in cases:
        lines.append(f"<testcase classname={quoteattr(cls)} name={quoteattr(name)}>")
        if kind in ("failure", "error"):
            lines.append(f"<{kind} message={quoteattr(kind)}>{escape(text)}</{kind}>")
        elif kind == "skipped":
            lines.append(f"<skipped message={quoteattr(text)}/>")
        lines.append("</testcase>")
    lines += ["</testsuite>", "</testsuites>"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    if len(sys.argv) > 1:  # run only the named tests, e.g. AttentionTest.test_kda_...
        suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:], sys.modules[__name__])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_JUnitResult)
    result = runner.run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        _write_junit(os.environ["XML_OUTPUT_FILE"], result.cases)
    print(f"{result.testsRun - len(result.failures) - len(result.errors) - len(result.skipped)}"
          f" passed, {len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
