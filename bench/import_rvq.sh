#!/usr/bin/env bash
# bench/import_rvq.sh: `spill import --experts rvq3` throughput on a mid-size
# random checkpoint, arms interleaved (a benchmark, not a test: minutes).
#
#   bench/import_rvq.sh SPILL [BASE_SPILL|-] [OUT_DIR] [LAYERS] [EXPERTS] [REPS]
#
# Writes a bf16 checkpoint with Qwen3-30B-A3B's expert shape (d_model 2048,
# experts of d_expert 768; vocab 32000 so the trunk stays small) with LAYERS
# MoE layers (default 2) of EXPERTS experts (default 8), then runs REPS
# rounds (default 3) of the arms in turn: BASE_SPILL (an older binary, if
# given), SPILL --threads 1, SPILL --threads 2, SPILL_ISA=ref SPILL --threads 1.
# Prints per arm the median wall time with min..max and MB/s of expert
# source bytes, checks every container is byte-identical to the first arm's,
# and the projection to Qwen3-30B-A3B (48 layers x 128 experts: 18432 expert
# matrices) from the per-matrix time. Deletes everything at the end.
set -euo pipefail
SPILL="$(realpath "$1")"
BASE="${2:--}"
[ "$BASE" = "-" ] || BASE="$(realpath "$BASE")"
OUT="${3:-cache/import-rvq}"
LAYERS="${4:-2}"
E="${5:-8}"
REPS="${6:-3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rm -rf "$OUT"
mkdir -p "$OUT"
SRC="$OUT/src"
/usr/bin/python3 - "$SRC" "$LAYERS" "$E" "$ROOT/tools/reference" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[4])
import ckpt_io as ck
out, L, E = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out)
V, D, H, Hk, d, F = 32000, 2048, 32, 4, 128, 768
cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": V,
       "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hk,
       "head_dim": d, "num_experts": E, "num_experts_per_tok": 2, "moe_intermediate_size": F,
       "intermediate_size": 6144, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "norm_topk_prob": True,
       "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
       "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
       "sliding_window": None, "max_window_layers": L, "rope_scaling": None, "torch_dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
rng = np.random.default_rng(1)
t = [("model.embed_tokens.weight", (V, D)), ("lm_head.weight", (V, D)), ("model.norm.weight", (D,))]
for l in range(L):
    p = f"model.layers.{l}."
    t += [(p + "input_layernorm.weight", (D,)), (p + "post_attention_layernorm.weight", (D,)),
          (p + "self_attn.q_proj.weight", (H * d, D)), (p + "self_attn.k_proj.weight", (Hk * d, D)),
          (p + "self_attn.v_proj.weight", (Hk * d, D)), (p + "self_attn.o_proj.weight", (D, H * d)),
          (p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,)),
          (p + "mlp.gate.weight", (E, D))]
    for e in range(E):
        t += [(p + f"mlp.experts.{e}.gate_proj.weight", (F, D)), (p + f"mlp.experts.{e}.up_proj.weight", (F, D)),
              (p + f"mlp.experts.{e}.down_proj.weight", (D, F))]
ck.write_safetensors(os.path.join(out, "model.safetensors"),
                     [(n, "BF16" if len(s) == 2 else "F32",
                       (rng.standard_normal(s) * (0.02 if len(s) == 2 else 1)).astype(np.float32)) for n, s in t])
PY
exp_bytes=$((LAYERS * E * 3 * 768 * 2048 * 2))
arms=()
[ "$BASE" = "-" ] || arms+=("base")
arms+=("t1" "t2" "ref1")
for r in $(seq 1 "$REPS"); do
  for a in "${arms[@]}"; do
    d="$OUT/$a.$r"
    case $a in
      base) cmd=("$BASE" import "$SRC" "$d" --experts rvq3) ;;
      t1) cmd=("$SPILL" import "$SRC" "$d" --experts rvq3 --threads 1) ;;
      t2) cmd=("$SPILL" import "$SRC" "$d" --experts rvq3 --threads 2) ;;
      ref1) cmd=(env SPILL_ISA=ref "$SPILL" import "$SRC" "$d" --experts rvq3 --threads 1) ;;
    esac
    s0=$(date +%s.%N)
    "${cmd[@]}" >/dev/null 2>"$OUT/err" || { echo "import_rvq: $a failed: $(tail -1 "$OUT/err")"; exit 1; }
    s1=$(date +%s.%N)
    echo "$a $(echo "$s1 - $s0" | bc)" >>"$OUT/times"
    first="$OUT/${arms[0]}.1"
    for f in manifest.json trunk.bin experts-000.bin; do
      [ -f "$d/$f" ] || continue
      cmp -s "$d/$f" "$first/$f" || { echo "import_rvq: $a rep $r: $f differs from ${arms[0]}"; exit 1; }
    done
    [ "$d" = "$first" ] || rm -rf "$d"
  done
done
echo "import_rvq: $LAYERS layers x $E experts, expert source $((exp_bytes / 1000000)) MB bf16, $REPS rounds, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); containers byte-identical across arms"
/usr/bin/python3 - "$OUT/times" "$exp_bytes" "$((LAYERS * E * 3))" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    a, s = line.split(); t.setdefault(a, []).append(float(s))
b, n = int(sys.argv[2]), int(sys.argv[3])
for a, v in t.items():
    m = statistics.median(v)
    print(f"import_rvq: {a:5s} median {m:7.1f} s ({min(v):.1f}..{max(v):.1f}), {b / m / 1e6:6.2f} MB/s, "
          f"{m / n * 1000:6.0f} ms per expert matrix -> Qwen3-30B-A3B (18432 matrices) {m / n * 18432 / 3600:5.2f} h")
PY
rm -rf "$OUT"
