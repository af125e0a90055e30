"""kimi_k3_ref_test: self-test of kimi_k3_ref.py (no llama.cpp, no C engine).

What the llama.cpp oracle (tools/peers/kimi_k3_oracle_test.sh) cannot see
by itself: that the three forms of one random model (HF directory with
compressed-tensors MXFP4 experts, GGUF with F32 experts, GGUF with MXFP4
experts) hold the same values, so their float64 logits are bit-identical;
MXFP4 values by hand (ggml's e8m0 half scale, small exponents, 255
refused), the repack being a byte permutation, SiTU and the AttnRes mix on
hand-computable inputs, the absorbed MLA against the expanded one, and the
HF reader's refusals.
"""

import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_io as ck  # noqa: E402
import kimi_k3_ref as K  # noqa: E402

TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(prefix="kimi_k3_ref_test_")
TOKS = K.tokens_for(7, n=12)


def tmp(name):
    return tempfile.mkdtemp(prefix=name + "_", dir=TMP)


def unrepack(raw, rows, cols):
    """ggml block_mxfp4 rows -> compressed-tensors (packed, scale)."""
    b = raw.reshape(rows, cols // 32, 17)
    codes = np.concatenate([b[:, :, 1:] & 0xF, b[:, :, 1:] >> 4], axis=2).reshape(rows, cols)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), b[:, :, 0].copy()


class Mxfp4Test(unittest.TestCase):
    def test_values_by_hand(self):
        codes = np.arange(32, dtype=np.uint8) % 16  # element i has code i % 16
        packed = (codes[0::2] | (codes[1::2] << 4)).reshape(1, 16)
        e2m1 = [0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6]
        for e, scale in ((127, 1.0), (130, 8.0), (1, 2.0 ** -126), (0, 2.0 ** -127)):
            want = np.array([e2m1[c] * scale for c in codes], np.float32)
            sc = np.array([[e]], np.uint8)
            np.testing.assert_array_equal(K.ct_mxfp4_dequant(packed, sc)[0], want)
            raw = K.ct_to_ggml_mxfp4(packed, sc)
            np.testing.assert_array_equal(ck.dequant_ggml(ck.GGML_MXFP4, raw.tobytes(), 32), want)
        self.assertEqual(K.ct_to_ggml_mxfp4(packed, np.array([[9]], np.uint8))[0, 0], 9)  # the scale byte first
        bad = np.array([[255]], np.uint8)
        with self.assertRaises(ValueError):
            K.ct_mxfp4_dequant(packed, bad)
        with self.assertRaises(ValueError):
            ck.dequant_ggml(ck.GGML_MXFP4, K.ct_to_ggml_mxfp4(packed, bad).tobytes(), 32)

    def test_repack_is_a_byte_permutation(self):
        r = np.random.default_rng(3)
        p, s = K.ct_mxfp4_random(8, 96, r)
        raw = K.ct_to_ggml_mxfp4(p, s)
        self.assertEqual(raw.shape, (8, 3 * 17))
        p2, s2 = unrepack(raw, 8, 96)
        np.testing.assert_array_equal(p2, p)
        np.testing.assert_array_equal(s2, s)
        np.testing.assert_array_equal(ck.dequant_ggml(ck.GGML_MXFP4, raw.tobytes(), 8 * 96).reshape(8, 96),
                                      K.ct_mxfp4_dequant(p, s))


class BlocksTest(unittest.TestCase):
    def test_situ(self):
        g, u = np.array([0.5, -3.0, 10.0]), np.array([2.0, -1.0, 30.0])
        for beta, lb in ((4.0, 25.0), (1.5, 2.0), (2.0, 0.0), (2.0, -1.0)):
            got = K.situ(g, u, beta, lb)
            for i in range(3):
                a = beta * np.tanh(g[i] / beta) / (1 + np.exp(-g[i]))
                want = a * (lb * np.tanh(u[i] / lb) if lb > 0 else u[i])
                self.assertAlmostEqual(got[i], want, places=12)

    def test_attnres_mix(self):
        m = K.Model.__new__(K.Model)
        m.eps = 1e-5
        r = np.random.default_rng(1)
        v = r.standard_normal((3, 8))
        self.assertIs(m.mix([], v, np.ones(8)), v)  # nothing banked yet: the stream itself
        b = [r.standard_normal((3, 8)), r.standard_normal((3, 8))]
        np.testing.assert_allclose(m.mix(b, v, np.zeros(8)), (b[0] + b[1] + v) / 3, rtol=1e-13)
        # scored on the normalised entry, mixed raw: scaling an entry leaves the weights alone (eps 0)
        m.eps = 0.0
        w = r.standard_normal(8)
        p = m.mix([b[0], b[1]], v, w) - m.mix([b[0] * 5, b[1]], v, w)
        s = [np.sum(x / np.sqrt(np.mean(x * x, -1, keepdims=True)) * w, -1) for x in (b[0], b[1], v)]
        e = np.exp(np.stack(s, -1))
        pr = e / e.sum(-1, keepdims=True)
        np.testing.assert_allclose(p, -4 * pr[:, :1] * b[0], rtol=1e-10, atol=1e-12)

    def test_mla_absorbed_equals_expanded(self):
        g = os.path.join(tmp("mla"), "m.gguf")
        K.make_gguf(g, "full", 5)
        m = K.Model(g)
        x = np.random.default_rng(2).standard_normal((6, K.DIMS["D"]))
        l = 3  # 1-based layer 4: MLA with q LoRA and the output gate
        got = m.mla_layer(l, x)
        H, dn, dr, dv, dc = m.H, m.dn, m.dr, m.dv, m.dc
        q = m.mm(K.rms(m.mm(x, l, "attn_q_a.weight"), m.t(l, "attn_q_a_norm.weight"), m.eps), l, "attn_q_b.weight")
        q = q.reshape(6, H, dn + dr)
        kv = m.mm(x, l, "attn_kv_a_mqa.weight")
        c = K.rms(kv[:, :dc], m.t(l, "attn_kv_a_norm.weight"), m.eps)
        kb, vb = m.t(l, "attn_k_b.weight"), m.t(l, "attn_v_b.weight")
        o = np.zeros((6, H, dv))
        for j in range(H):
            keys = np.concatenate([c @ kb[j], kv[:, dc:]], axis=1)  # (T, dn + dr): expanded k_nope, shared k_pe
            vals = c @ vb[j].T
            for t in range(6):
                s = keys[:t + 1] @ q[t, j] / np.sqrt(dn + dr)
                p = np.exp(s - s.max())
                o[t, j] = (p / p.sum()) @ vals[:t + 1]
        o = o.reshape(6, -1) * (1 / (1 + np.exp(-m.mm(x, l, "attn_gate.weight"))))
        np.testing.assert_allclose(got, m.mm(o, l, "attn_output.weight"), rtol=1e-10, atol=1e-12)


class FormsTest(unittest.TestCase):
    def test_every_form_same_logits(self):
        for var in sorted(K.VARIANTS):
            d = tmp(var)
            K.make_gguf(os.path.join(d, "f32.gguf"), var, 11, "F32")
            K.make_gguf(os.path.join(d, "mx.gguf"), var, 11, "MXFP4")
            K.make_hf(os.path.join(d, "hf"), var, 11, "BF16", "U8", 2)
            K.make_hf(os.path.join(d, "hf8"), var, 11, "F32", "F8_E8M0", 1)
            ref = K.Model(os.path.join(d, "f32.gguf")).forward(TOKS)
            self.assertTrue(np.isfinite(ref).all())
            for src in ("mx.gguf", "hf", "hf8"):
                np.testing.assert_array_equal(K.Model(os.path.join(d, src)).forward(TOKS), ref, err_msg=f"{var} {src}")
            kv, t = ck.read_gguf(os.path.join(d, "mx.gguf"))
            self.assertEqual(t["blk.1.ffn_down_exps.weight"][0], ck.GGML_MXFP4)
            self.assertEqual(kv["general.architecture"], "kimi-k3")
            v = K.VARIANTS[var]
            self.assertEqual("output_res_score.weight" in t, v["bs"] > 0)
            self.assertEqual("kimi-k3.kda.gate_lower_bound" in kv, v["lb"] is not None)
            self.assertEqual("blk.3.attn_q_a_norm.weight" in t, v["qlora"] is not None)
            self.assertEqual("blk.5.attn_gate.weight" in t, v["gate"])
            self.assertEqual("blk.1.ffn_routed_norm.weight" in t, v["rnorm"])
            self.assertEqual("blk.2.ffn_up_shexp.weight" in t, v["S"] > 0)

    def test_a_log_padding_is_cut(self):
        d = tmp("pad")
        K.make_hf(d, "full", 3, "F32", "U8", 1)
        ref = K.Model(d).forward(TOKS)
        p = os.path.join(d, "model.safetensors")
        t = ck.read_safetensors(p)
        n = "language_model.model.layers.0.self_attn.A_log"
        t[n] = t[n].copy()
        t[n][K.DIMS["H"]:] = 7.0
        ck.write_safetensors(p, [(k, "U8" if v.dtype == np.uint8 else "F32", v) for k, v in t.items()])
        np.testing.assert_array_equal(K.Model(d).forward(TOKS), ref)

    def test_hf_refusals(self):
        d = tmp("bad")
        K.make_hf(d, "nolora", 3, "F32", "U8", 1)
        p = os.path.join(d, "model.safetensors")
        t0 = ck.read_safetensors(p)

        def write(t):
            ck.write_safetensors(p, [(k, "U8" if v.dtype == np.uint8 else "F32", v) for k, v in t.items()])

        cases = {
            "weight_scale is missing": lambda t: t.pop(
                "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"),
            "outside the routed experts": lambda t: t.update(
                {"language_model.model.layers.1.self_attn.o_proj.weight_packed": np.zeros((4, 4), np.uint8)}),
            "not part of kimi-k3": lambda t: t.update(
                {"language_model.model.layers.1.self_attn.extra.weight": np.zeros(4, np.float32)}),
        }
        for msg, f in cases.items():
            t = dict(t0)
            f(t)
            write(t)
            with self.assertRaises(SystemExit) as e:
                K.Model(d)
            self.assertIn(msg, str(e.exception))
        write(t0)


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        if not os.environ.get("TEST_TMPDIR"):
            shutil.rmtree(TMP, True)
