#!/usr/bin/env bash
# `spill import` of Kimi-Linear (model_type kimi_linear, docs/MODEL.md
# "Kimi-Linear") end to end: tiny random checkpoints written by
# kimi_linear_ref.py (KDA layers 1, 2, 4 and a NoPE MLA layer 3 of the
# published 1-based lists, a leading dense layer, sigmoid + bias routing with
# one group or 4 groups, shared expert) in safetensors F32/F16/BF16 (sharded)
# are imported, `spill verify` must pass, and spill's logits at every
# position must agree with kimi_linear_ref.py's float64 forward pass from the
# SOURCE files within 1e-4 of the logit scale, argmax equal. The "grouped"
# variant's latent is small enough that the MLA latent norm's eps (1e-6, not
# rms_norm_eps) decides the result. --trunk q8 keeps the conv weights f32.
# Logits bit-identical across storage modes, cache sizes, lookahead,
# threads and prefill chunk sizes (the KDA recurrence runs token by token).
# Hostile configs: named errors, nothing `spill verify` accepts.
# GGUF kimi-linear (llama.cpp's converter layout, F32/F16/Q8_0, both
# variants): agreement with the reference's reading of llama.cpp's graph
# from the .gguf, Q8_0 tensors bit-identical in the container, placement
# bit-identity, resume after kill -9, hostile metadata and tensors refused
# by name.
set -uo pipefail
SPILL="$1"
REF="$2"
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init kimi
check() { import_check "$1" "$2" "--tol $3"; } # $1 = source, $2 = label, $3 = tolerance

for v in base grouped; do
  for src in F32:1 F16:2 BF16:3; do
    IFS=: read -r ty shards <<<"$src"
    in="$TMP/$v-$ty"
    $PY "$REF" make-hf "$in" --variant "$v" --dtype "$ty" --shards "$shards" --seed 7 || { bad "$v $ty: make"; continue; }
    check "$in" "hf $v $ty" 1e-4
  done
done
# held-out seed
$PY "$REF" make-hf "$TMP/seed101" --variant grouped --dtype BF16 --seed 101 && check "$TMP/seed101" "hf grouped BF16 seed 101" 1e-4

# GGUF kimi-linear
for v in base grouped; do
  for ty in F32 F16 Q8_0; do
    in="$TMP/$v-$ty.gguf"
    $PY "$REF" make-gguf "$in" --variant "$v" --type "$ty" --seed 7 || { bad "gguf $v $ty: make"; continue; }
    check "$in" "gguf $v $ty" 1e-4
  done
done
$PY "$REF" make-gguf "$TMP/g101.gguf" --variant grouped --type Q8_0 --seed 101 && check "$TMP/g101.gguf" "gguf grouped Q8_0 seed 101" 1e-4
for g in base-Q8_0 grouped-Q8_0; do
  r=$($PY "$REF" check-weights "$TMP/$g.gguf" "$TMP/$g.gguf.spill" 2>&1) && ok "gguf $g: $r" || bad "gguf $g: $r"
done

# KDA q/k l2norm eps in the manifest: the GGUF import writes llama.cpp's
# (rms_norm_eps, an f32 in the GGUF), the checkpoint import none (= the
# engine's 1e-6, fla's l2norm)
$PY - "$TMP/base-F32.gguf.spill/manifest.json" "$TMP/base-F32.spill/manifest.json" "$TMP/base-F32/config.json" <<'PY' &&
import json, sys
import numpy as np
g, h, cfg = (json.load(open(p)) for p in sys.argv[1:])
eps = g["arch"]["kda"].get("l2norm_eps")
assert eps is not None and np.float32(eps) == np.float32(cfg["rms_norm_eps"]), (eps, cfg["rms_norm_eps"])
assert "l2norm_eps" not in h["arch"]["kda"], h["arch"]["kda"]
PY
  ok "kda.l2norm_eps: gguf rms_norm_eps (f32), checkpoint absent" || bad "kda.l2norm_eps in the manifests"

# --trunk q8 / --experts q8: the conv weights stay f32 (the engine reads them so), the rest requantised
in="$TMP/base-BF16"
rm -rf "$in.q8"
if "$SPILL" import "$in" "$in.q8" --trunk q8 --experts q8 --group 16 >/dev/null 2>"$TMP/err" && "$SPILL" verify "$in.q8" >/dev/null 2>&1 &&
    "$SPILL" eval "$in.q8" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/q8.f32" >/dev/null 2>&1; then
  $PY - "$in.q8/manifest.json" <<'PY' && ok "q8: conv weights f32, projections q8" || bad "q8: tensor dtypes"
import json, sys
t = {x["name"]: x["dtype"] for x in json.load(open(sys.argv[1]))["tensors"]}
assert t["blk.0.attn_q_conv"] == "f32" and t["blk.3.attn_v_conv"] == "f32", t
assert t["blk.0.attn_q"] == "q8" and t["blk.2.attn_kv_b"] == "q8", t
PY
else
  bad "q8 import: $(tail -1 "$TMP/err")"
fi

# Placement never changes numerics (KDA state + NoPE MLA + groups), nor does
# the prefill chunk size (the recurrence runs token by token in any chunk)
m="$TMP/grouped-BF16.spill"
placements_bit_identical "$m"
for c in 1 4; do
  "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/k.f32" --prefill-chunk $c >/dev/null 2>&1 &&
    cmp -s "$TMP/base.f32" "$TMP/k.f32" && ok "--prefill-chunk $c: logits bit-identical" ||
    bad "--prefill-chunk $c changes the logits"
done
placements_bit_identical "$TMP/grouped-Q8_0.gguf.spill"

# Resume after kill -9 of a GGUF import (the ssm_a -> log(-A) transform and
# the attn_k_b/attn_v_b join are trunk units; 79 trunk units, then 24
# expert records): the re-run container's files equal an uninterrupted
# import's
SRC="$TMP/grouped-Q8_0.gguf"
rm -rf "$TMP/kfull"
"$SPILL" import "$SRC" "$TMP/kfull" >/dev/null 2>&1 || bad "resume: reference import"
for k in 1 14 40 52 79 90; do
  d="$TMP/kkill$k"
  rm -rf "$d"
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$SRC" "$d") >/dev/null 2>&1
  rc=$?
  [ $rc -eq 137 ] || { bad "resume: kill after $k units: rc $rc"; continue; }
  "$SPILL" verify "$d" >/dev/null 2>&1 && bad "resume: verify accepts a killed import ($k)"
  "$SPILL" import "$SRC" "$d" 2>"$TMP/err" >/dev/null || { bad "resume $k: $(tail -1 "$TMP/err")"; continue; }
  same=1
  for f in "$TMP/kfull"/*; do # the container's files (the journal records the run, not the container)
    [ "$(basename "$f")" = import.journal ] || cmp -s "$f" "$d/$(basename "$f")" || same=0
  done
  [ $same = 1 ] && "$SPILL" verify "$d" >/dev/null 2>&1 &&
    ok "gguf resume after kill -9 at unit $k: byte-identical ($(grep -o '([0-9]* resumed)' "$TMP/err" | tail -1))" ||
    bad "gguf resume after kill at $k: differs"
done

# Refusals, each a named error
expect_err() { # $1 = grep pattern, $2 = source dir
  local pat="$1" src="$2"
  rm -rf "$src.spill"
  if "$SPILL" import "$src" "$src.spill" >/dev/null 2>"$TMP/err"; then bad "accepted: $src ($pat)"; return; fi
  grep -q -- "$pat" "$TMP/err" && ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-150)" || bad "wrong error for $pat: $(tail -1 "$TMP/err")"
  "$SPILL" verify "$src.spill" >/dev/null 2>&1 && bad "verify accepts a failed import ($pat)"
}
mutate() { # $1 = name, $2 = python statement on cfg (the parsed config.json)
  rm -rf "$TMP/$1"
  cp -r "$TMP/grouped-F32" "$TMP/$1"
  $PY - "$TMP/$1/config.json" "$2" <<'PY'
import json, sys
p = sys.argv[1]
cfg = json.load(open(p))
exec(sys.argv[2])
json.dump(cfg, open(p, "w"))
PY
}
la='cfg["linear_attn_config"]'
mutate key 'cfg["rope_interleave"] = True'; expect_err '"rope_interleave" is not understood' "$TMP/key"
mutate lak "$la[\"gate_lower_bound\"] = -5"; expect_err "linear_attn_config.gate_lower_bound is not understood" "$TMP/lak"
mutate nope 'cfg["mla_use_nope"] = False'; expect_err "mla_use_nope" "$TMP/nope"
mutate qlora 'cfg["q_lora_rank"] = 16'; expect_err "q_lora_rank" "$TMP/qlora"
mutate soft 'cfg["moe_router_activation_func"] = "softmax"'; expect_err "moe_router_activation_func" "$TMP/soft"
mutate rs 'cfg["rope_scaling"] = {"type": "yarn", "factor": 4}'; expect_err "rope_scaling" "$TMP/rs"
mutate mtp 'cfg["num_nextn_predict_layers"] = 1'; expect_err "num_nextn_predict_layers" "$TMP/mtp"
mutate freq 'cfg["moe_layer_freq"] = 2'; expect_err "moe_layer_freq" "$TMP/freq"
mutate l0 "$la[\"kda_layers\"] = [0, 1, 2]"; expect_err "kda_layers holds" "$TMP/l0"
mutate dup "$la[\"kda_layers\"] = [1, 2, 2, 4]"; expect_err "kda_layers lists layer 2 twice" "$TMP/dup"
mutate both "$la[\"full_attn_layers\"] = [2, 3]"; expect_err "layer 2 is in both" "$TMP/both"
mutate none "$la[\"kda_layers\"] = [1, 2]"; expect_err "layer 4 is in neither" "$TMP/none"
mutate conv "$la[\"short_conv_kernel_size\"] = 3"; expect_err "q_conv1d.weight: shape is not \[32, 3\]" "$TMP/conv"
mutate grp 'cfg["num_expert_group"] = 3'; expect_err "num_expert_group 3 does not divide" "$TMP/grp"
mutate tg 'cfg["topk_group"] = 1'; expect_err "num_experts_per_token 3 >" "$TMP/tg"
# every layer MLA without linear_attn_config: the KDA tensors are left over
mutate nola 'cfg["linear_attn_config"] = None'; expect_err "shape\|is not part\|is missing" "$TMP/nola"

# GGUF refusals: a copy of grouped-F32.gguf with its metadata (kv) or tensors
# (t: name -> (ggml type, numpy shape, raw bytes)) changed
gmutate() { # $1 = name, $2 = python statements on kv and t
  $PY - "$TMP/grouped-F32.gguf" "$TMP/$1.gguf" "$2" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.environ["REF"]))
import ckpt_io as ck
kv, t = ck.read_gguf(sys.argv[1])
A = "kimi-linear."
exec(sys.argv[3])
ck.write_gguf(sys.argv[2], list(kv.items()), [(n, ty, (raw, shape)) for n, (ty, shape, raw) in t.items()])
PY
}
export REF
gmutate gate 'kv[A + "expert_gating_func"] = 1'; expect_err "expert_gating_func 1: only 2 (sigmoid)" "$TMP/gate.gguf"
gmutate hkv 'kv[A + "attention.head_count_kv"] = [0, 0, 1]'; expect_err "head_count_kv has 3 entries, block_count is 4" "$TMP/hkv.gguf"
gmutate kdh 'del kv[A + "kda.head_dim"]'; expect_err "kimi-linear.kda.head_dim is missing" "$TMP/kdh.gguf"
gmutate cnv 'kv[A + "ssm.conv_kernel"] = 3'; expect_err "blk.0.ssm_conv1d_q.weight: shape is not \[32, 3\]" "$TMP/cnv.gguf"
gmutate qlr 'kv[A + "attention.q_lora_rank"] = 16'; expect_err "q_lora_rank 16: q LoRA is not supported" "$TMP/qlr.gguf"
gmutate klm 'kv[A + "attention.key_length_mla"] = 8'; expect_err "key_length_mla 8 <= rope.dimension_count 8" "$TMP/klm.gguf"
gmutate vlm 'kv[A + "attention.value_length_mla"] = 8'; expect_err "attn_k_b / attn_v_b: shapes are not" "$TMP/vlm.gguf"
gmutate kl 'kv[A + "attention.key_length"] = 24'; expect_err "key_length 24 / value_length 32 are not" "$TMP/kl.gguf"
gmutate grp 'kv[A + "expert_group_used_count"] = 4'; expect_err "expert_group_used_count 4 not in \[1, 4)" "$TMP/grp.gguf"
gmutate eps 'del kv[A + "attention.layer_norm_rms_epsilon"]'; expect_err "layer_norm_rms_epsilon is missing" "$TMP/eps.gguf"
gmutate out 'del t["output.weight"]'; expect_err "output.weight is missing" "$TMP/out.gguf"
gmutate bias 'del t["blk.1.exp_probs_b.bias"]'; expect_err "blk.1.exp_probs_b.bias" "$TMP/bias.gguf"
gmutate kvb 't["blk.2.attn_kv_b.weight"] = t["blk.2.attn_v_b.weight"]'; expect_err "blk.2.attn_kv_b.weight: the unsplit (legacy) kv_b" "$TMP/kvb.gguf"
gmutate qkv 't["blk.0.attn_qkv.weight"] = t["blk.0.attn_q.weight"]'; expect_err "blk.0.attn_qkv.weight: a fused q/k/v projection" "$TMP/qkv.gguf"
gmutate xtra 't["blk.3.ssm_extra.weight"] = t["blk.3.ssm_norm.weight"]'; expect_err "blk.3.ssm_extra.weight" "$TMP/xtra.gguf"
gmutate apos 'ty, sh, raw = t["blk.3.ssm_a"]; t["blk.3.ssm_a"] = (ty, sh, np.abs(np.frombuffer(raw, "<f4")).tobytes())'
expect_err "blk.3.ssm_a: value .* is not finite and negative" "$TMP/apos.gguf"
gmutate exps 'ty, sh, raw = t["blk.1.ffn_up_exps.weight"]; t["blk.1.ffn_up_exps.weight"] = (ty, (4,) + sh[1:], raw[:len(raw) // 2])'
expect_err "blk.1.ffn_up_exps.weight: shape is not \[8, 32, 64\]" "$TMP/exps.gguf"
exit $fail
