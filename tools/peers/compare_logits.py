#!/usr/bin/python3
"""compare_logits: spill's all-position logits against llama.cpp's.

Both files are f32 little-endian, n_pos x n_vocab, row-major (`spill eval
--logits-out F --all-positions`, `llama_peer logits`). Passes when the argmax
agrees at every position and max |spill - llama| <= TOL[type] x max |llama|.

Tolerances, per GGUF weight type, relative to the largest |logit|. What
separates the engines is how each multiplies, not the weights (both use the
same dequantised values: tools/reference check-weights):
  F32   both multiply in f32. Strict: argmax equal at every position and
        max diff <= 1e-4 (measured: 3.2e-7 to 6.0e-7 over 3 archs x 3 seeds).
  F16   ggml's CPU path rounds activations to f16 before F16 dot products
        (vec_dot_type F16: 2^-11 relative per element); spill keeps f32.
  Q8_0, Q4_0  ggml quantises activations to Q8_0 blocks of 32 (scale =
        block max / 127) before the integer dot product; spill keeps f32.
  Rounded activations move logits a little everywhere (the bulk) and, where
  two experts' router scores are closer than the rounding, flip a top-k
  choice, which moves that position's logits a lot (an isolated outlier).
  So for these types: the 90th percentile of the per-position max diff is
  within BULK, at most 10% of positions exceed BULK (routing flips), and
  every argmax disagreement is a near tie (llama.cpp's own top-1 margin
  within TIE). Measured on seeds 11-13 (3 archs, 40 positions; the test runs
  other seeds): F16 bulk p90 3.9e-4..4.8e-4, one outlier of 3.4e-2 in 9 runs,
  one argmax flip at margin 7.9e-5; Q8_0/Q4_0 p90 1.0e-2..1.7e-2, at most 1
  outlier per run (up to 1.9e-1), argmax flips at margins 4.6e-4..1.2e-2.
  Q4_K, Q5_K (activations to Q8_K blocks of 256): p90 5.2e-4..7.9e-3, no
  outlier, no argmax flip on the same seeds; BULK 2.5e-2, TIE as Q8_0.
  BULK and TIE are about 3x and 2.5x the largest bulk and flip margin seen.
  Q6_K and Q4_K_M (which mixes Q4_K, Q5_K and Q6_K) are judged differently
  (type KQ_EMUL): the random Q6_K fixtures are so sensitive to that Q8_K
  rounding that llama.cpp differs from the float64 reference by 3-21% p90
  while spill matches it to ~1e-6. The first file is then NOT spill's but
  `import_ref.py logits --ggml-act`: the float64 reference with ggml's
  Q8_K activation rounding emulated before every K-quant matmul. Measured
  on seeds 11-12 (qwen3_moe Q4_K_M, olmoe/mixtral Q6_K): p90 1.6e-7..3.7e-6;
  at most 3 of 40 positions over 1e-4 (up to 8e-3: a value that f32 vs f64
  arithmetic puts on the other side of a Q8_K rounding boundary, then
  amplified); every argmax equal. BULK 1e-4 and TIE 2e-4 (as F16). spill
  itself is held to the plain reference at 1e-4 (llama_oracle_test.sh).
  kimi_k3_oracle_test.sh uses the same rule for MXFP4 experts (Q8_0
  activation rounding, emulated by `kimi_k3_ref.py logits --ggml-act`), and
  llama_oracle_test.sh for the glm4moe and qwen35moe Q4_K cases (held out:
  docs/PEERS.md "qwen35moe").
  Q5_0, Q5_1: ggml rounds their activations to Q8_0 (Q5_0) or Q8_1 (Q5_1:
  the same values and scale as Q8_0, plus each block's f16 sum) blocks of
  32, the rounding of Q8_0 / Q4_0, so their rule is Q8_0's (BULK 5e-2, TIE
  3e-2). llama_oracle_test.sh applies it to spill under act_quant q8, which
  makes the same rounding and the same integer dot products (kernels_q5.h):
  measured on seeds 11-13 (3 archs x 2 types, 40 positions), 15 of 18 runs
  bit-identical to llama.cpp, the other 3 p90 <= 6.6e-3, max 1.1e-2, one
  argmax flip at margin 2.2e-3 (one Q8_0 rounding boundary crossed by the
  f32 order of the attention, then carried by the KV cache). spill with f32
  activations is not held to llama.cpp for these types (measured: p90
  9.4e-3..3.0e-2, a routing flip at margin 6.2e-2 > TIE); it is held to the
  float64 reference at 1e-4 instead.

--arch deepseek2 (MLA, YaRN, sigmoid + bias + group routing): more rounded
activations per layer (q_a, q_b, kv_a, k_b, v_b, shared experts) and group
routing, where one flipped group replaces several experts at once. Measured
on seeds 11-13 (variants v2lite, v2, v3 of tools/reference/deepseek_ref.py,
40 positions): spill agrees with the float64 reference within 7.5e-7 in
every case, and llama.cpp differs from the reference exactly as much as
from spill, so the differences are llama.cpp's rounding. F16 bulk p90
5.6e-4..8.0e-4, one outlier (5.9e-2); Q8_0 bulk p90 1.8e-2..3.0e-2, at
most 2 outliers per run (up to 0.55, routing flips), argmax flips at
margins up to 0.20, every one at a position whose own diff is at least
half the margin. So for deepseek2: F32 strict as above; F16 / Q8_0 BULK
2.5e-3 / 9e-2 (about 3x), at most 10% of positions over BULK, and every
argmax disagreement explained by that position's diff (margin <= 2 x diff:
both top logits moved by up to diff).
"""

import argparse
import sys

import numpy as np

STRICT = {"F32": 1e-4}
BULK = {"F16": 1.5e-3, "Q8_0": 5e-2, "Q4_0": 5e-2, "Q4_K": 2.5e-2, "Q5_K": 2.5e-2,
        "KQ_EMUL": 1e-4, "Q5_0": 5e-2, "Q5_1": 5e-2}
BULK_DS = {"F16": 2.5e-3, "Q8_0": 9e-2}
TIE = {"F16": 2e-4, "Q8_0": 3e-2, "Q4_0": 3e-2, "Q4_K": 3e-2, "Q5_K": 3e-2, "KQ_EMUL": 2e-4,
       "Q5_0": 3e-2, "Q5_1": 3e-2}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spill")
    ap.add_argument("llama")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--type", required=True, choices=sorted(list(STRICT) + list(BULK)))
    ap.add_argument("--tol", type=float, help="override the type's tolerance")
    ap.add_argument("--arch", default="", help="deepseek2: its own tolerances (see above)")
    a = ap.parse_args()
    s = np.fromfile(a.spill, dtype="<f4")
    g = np.fromfile(a.llama, dtype="<f4")
    if s.size != g.size or s.size % a.vocab:
        print(f"shape mismatch: spill {s.size} floats, llama.cpp {g.size}, vocab {a.vocab}")
        return 1
    s = s.reshape(-1, a.vocab).astype(np.float64)
    g = g.reshape(-1, a.vocab).astype(np.float64)
    if not np.isfinite(s).all() or not np.isfinite(g).all():
        print("non-finite logits")
        return 1
    scale = np.abs(g).max()
    sa, ga = s.argmax(axis=1), g.argmax(axis=1)
    bad = np.nonzero(sa != ga)[0]
    d = np.abs(s - g).max(axis=1) / scale  # per position
    gs = np.sort(g, axis=1)
    margin = (gs[:, -1] - gs[:, -2]) / scale
    n = s.shape[0]
    msg = (f"{n} positions, max |logit| {scale:.3g}, diff/max: max {d.max():.3g}, "
           f"p90 {np.percentile(d, 90):.3g}; argmax agrees at {n - bad.size}/{n}")
    if a.type in STRICT:
        tol = a.tol if a.tol is not None else STRICT[a.type]
        ok = d.max() <= tol and bad.size == 0
        msg += f" (strict: tol {tol:g}, every argmax)"
    elif a.arch == "deepseek2":
        if a.type not in BULK_DS:
            print(f"no deepseek2 tolerance measured for {a.type}")
            return 1
        bulk = a.tol if a.tol is not None else BULK_DS[a.type]
        over = int((d > bulk).sum())
        explained = all(margin[p] <= 2 * d[p] for p in bad)
        ok = np.percentile(d, 90) <= bulk and over <= n // 10 and explained
        msg += (f" (deepseek2 bulk tol {bulk:g}: {over} positions over, at most {n // 10}; flips at "
                f"(margin, diff) {[(float('%.2g' % margin[p]), float('%.2g' % d[p])) for p in bad]}, "
                f"each needs margin <= 2 diff)")
    else:
        bulk = a.tol if a.tol is not None else BULK[a.type]
        over = int((d > bulk).sum())
        ties = all(margin[p] <= TIE[a.type] for p in bad)
        ok = np.percentile(d, 90) <= bulk and over <= n // 10 and ties
        msg += (f" (bulk tol {bulk:g}: {over} positions over, at most {n // 10}; "
                f"flips at llama.cpp margins {[float('%.2g' % margin[p]) for p in bad]}, "
                f"tie tol {TIE[a.type]:g})")
    if bad.size and not ok:
        p = bad[0]
        msg += f"; first disagreement at position {p}: spill {sa[p]}, llama.cpp {ga[p]}"
    print(msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
