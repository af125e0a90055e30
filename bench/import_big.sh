#!/usr/bin/env bash
# bench/import_big.sh: peak memory and throughput of `spill import` on a large
# random checkpoint (a benchmark, not a test: minutes and ~2x SIZE of disk).
#
#   bench/import_big.sh SPILL [OUT_DIR] [LAYERS]
#
# Measured (2-vCPU AMD EPYC VM, 24 GiB, shared/noisy: load average ~19 from
# other jobs; spill built from 8d0ba6f): 18 layers, 23,678 MB of safetensors
# imported in 153.8 s (153.9 MB/s), peak RSS 1196 MiB (the bound: 2 x the
# 622 MB bf16 embedding + one expert), `spill verify` clean.
#
# Writes a Qwen3-30B-A3B-shaped checkpoint (d_model 2048, 128 experts of
# d_expert 768, 32/4 heads of 128, vocab 151936, bf16, 2 GB-ish shards with an
# index) with LAYERS layers (default 18: 23.7 GB; 8 layers give ~10.9 GB) through
# tools/reference/ckpt_io.py, imports it with /usr/bin/time -v (peak RSS =
# "Maximum resident set size"), verifies the container, prints one summary
# line, and deletes both. Values are random bf16 draws (a 64 MiB pool sliced
# at random offsets: the import copies bytes, so their distribution does not
# matter for the measurement).
set -euo pipefail
SPILL="$(realpath "$1")"
OUT="${2:-cache/import-big}"
LAYERS="${3:-18}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rm -rf "$OUT"
mkdir -p "$OUT"
SRC="$OUT/src"
t0=$(date +%s)
/usr/bin/python3 - "$SRC" "$LAYERS" "$ROOT/tools/reference" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import ckpt_io as ck
out, L = sys.argv[1], int(sys.argv[2])
os.makedirs(out)
V, D, H, Hk, d, E, F = 151936, 2048, 32, 4, 128, 128, 768
cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": V,
       "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hk,
       "head_dim": d, "num_experts": E, "num_experts_per_tok": 8, "moe_intermediate_size": F,
       "intermediate_size": 6144, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "norm_topk_prob": True,
       "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
       "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
       "sliding_window": None, "max_window_layers": L, "rope_scaling": None, "torch_dtype": "bfloat16",
       "bos_token_id": 151643, "eos_token_id": 151645}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
rng = np.random.default_rng(1)
pool = (rng.standard_normal(32 << 20) * 0.02).astype(np.float32)
def rnd(*shape):
    n = int(np.prod(shape)); o = int(rng.integers(0, pool.size - n)) if n < pool.size else 0
    a = pool[o:o + n] if n <= pool.size else np.resize(pool, n)
    return a.reshape(shape)
names = [("model.embed_tokens.weight", (V, D)), ("lm_head.weight", (V, D)), ("model.norm.weight", (D,))]
for l in range(L):
    p = f"model.layers.{l}."
    names += [(p + "input_layernorm.weight", (D,)), (p + "post_attention_layernorm.weight", (D,)),
              (p + "self_attn.q_proj.weight", (H * d, D)), (p + "self_attn.k_proj.weight", (Hk * d, D)),
              (p + "self_attn.v_proj.weight", (Hk * d, D)), (p + "self_attn.o_proj.weight", (D, H * d)),
              (p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,)),
              (p + "mlp.gate.weight", (E, D))]
    for e in range(E):
        names += [(p + f"mlp.experts.{e}.gate_proj.weight", (F, D)), (p + f"mlp.experts.{e}.up_proj.weight", (F, D)),
                  (p + f"mlp.experts.{e}.down_proj.weight", (D, F))]
shard, size, wm, k = [], 0, {}, 0
def flush():
    global shard, size, k
    if not shard: return
    k += 1
    fn = f"model-{k:05d}.safetensors"
    ck.write_safetensors(os.path.join(out, fn), [(n, "BF16" if len(s) == 2 else "F32", rnd(*s)) for n, s in shard])
    for n, _ in shard: wm[n] = fn
    shard, size = [], 0
for n, s in names:
    shard.append((n, s)); size += 2 * int(np.prod(s))
    if size > (1 << 31): flush()
flush()
json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
PY
t1=$(date +%s)
src_bytes=$(du -sb "$SRC" | cut -f1)
/usr/bin/time -v "$SPILL" import "$SRC" "$OUT/dst" --json >"$OUT/summary.json" 2>"$OUT/time.txt"
rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/time.txt")
wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$OUT/time.txt")
"$SPILL" verify "$OUT/dst" >/dev/null 2>&1 && verdict=clean || verdict=DEFECT
echo "import_big: layers $LAYERS, source $((src_bytes / 1000000)) MB (written in $((t1 - t0)) s), peak RSS $((rss_kb / 1024)) MiB, wall $wall, verify $verdict"
echo "import_big: summary $(cat "$OUT/summary.json")"
rm -rf "$OUT"
