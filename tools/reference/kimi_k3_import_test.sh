#!/usr/bin/env bash
# Kimi K3 as released (GGUF `kimi-k3`, docs/MODEL.md "Kimi K3 as released")
# through `spill import` and the engine: tiny random models written by
# kimi_k3_ref.py in llama.cpp's layout, the 4 variants that together exercise
# every optional part (AttnRes with 2-3 banked checkpoints or none, q LoRA or
# not, MLA output gate or not, KDA gate lower bound or the softplus decay,
# latent MoE with and without its norm, 0-2 shared experts, a dense leading
# layer, SiTU with linear beta 2, 25, 0 and -1, renormalisation and scale),
# experts F32 and MXFP4 (kept as MXFP4: bytes identical in the container).
# Each is imported, `spill verify` passes, and spill's logits at every one of
# 24 positions (two prefill chunks) agree with kimi_k3_ref.py's float64
# forward pass from the same GGUF within 2e-5 of the largest |logit| (the F32
# oracle's tolerance, docs/PEERS.md "kimi-k3"), argmax equal everywhere.
# Engine invariants on K3: logits bit-identical across storage modes, cache
# sizes, lookahead, threads and prefill chunk sizes, and with drafts cut at
# every position (research/spec:spill_spec_measure --check). Resume after kill -9.
# Hostile metadata and tensors refused by name.
set -uo pipefail
SPILL="$1"
REF="$2"
SPEC="$3" # research/spec:spill_spec_measure
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init k3
TOK=$($PY -c "import random; r=random.Random(11); print(','.join(str(r.randrange(300)) for _ in range(24)))")
check() { import_check "$1" "$2" "--tol 2e-5"; }

for v in full nolora plain released; do
  for ex in F32 MXFP4; do
    in="$TMP/$v-$ex.gguf"
    $PY "$REF" make-gguf "$in" --variant "$v" --experts "$ex" --seed 7 || { bad "$v $ex: make-gguf"; continue; }
    check "$in" "kimi-k3 $v experts $ex seed 7"
  done
done
# held-out seed
$PY "$REF" make-gguf "$TMP/s101.gguf" --variant full --experts MXFP4 --seed 101 &&
  check "$TMP/s101.gguf" "kimi-k3 full experts MXFP4 seed 101"

# MXFP4 experts keep their bytes: the container's expert sections are mxfp4
$PY - "$TMP/full-MXFP4.gguf.spill/manifest.json" <<'PY' && ok "MXFP4 experts kept as mxfp4" || bad "MXFP4 experts not kept"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["experts"]["dtype"] == "mxfp4", m["experts"]
a = m["arch"]
assert a["activation"] == "situ" and a["attn_res_block"] == 2 and a["mla"]["out_gate"] is True, a
assert a["kda"]["gate_lower_bound"] == -5.0 and a["moe"]["latent_norm"] == "output", a
PY

# Placement never changes numerics (AttnRes bank, KDA state, NoPE MLA, latent MoE)
for m in "$TMP/full-MXFP4.gguf.spill" "$TMP/plain-MXFP4.gguf.spill"; do
  placements_bit_identical "$m"
  for c in 1 5; do
    "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/k.f32" --prefill-chunk $c >/dev/null 2>&1 &&
      cmp -s "$TMP/base.f32" "$TMP/k.f32" && ok "$(basename "$m"): --prefill-chunk $c: logits bit-identical" ||
      bad "$(basename "$m"): --prefill-chunk $c changes the logits"
  done
done

# Drafts (docs/MODEL.md "Drafts"): the model's own continuation drafted 4 at
# a time and every chunk cut at each position in turn gives the tokens and the
# logits after every token of a run without drafts (AttnRes bank, KDA
# rollback, MLA with the output gate)
for m in "$TMP/full-MXFP4.gguf.spill" "$TMP/released-F32.gguf.spill"; do
  "$SPEC" "$m" -n 24 --draft 4 --check --prompt "spill drafts" >"$TMP/spec.out" 2>&1 &&
    grep -q '"mode": "cut-at-2".*"accepted": [1-9]' "$TMP/spec.out" &&
    ok "$(basename "$m"): drafts cut at every position: tokens and logits bit-identical" ||
    bad "$(basename "$m"): drafts change the output: $(grep -v '"same_tokens": true' "$TMP/spec.out" | head -2)"
done

# Resume after kill -9 (trunk units, then expert records): the re-run
# container's files equal an uninterrupted import's
SRC="$TMP/released-MXFP4.gguf"
rm -rf "$TMP/kfull"
"$SPILL" import "$SRC" "$TMP/kfull" >/dev/null 2>&1 || bad "resume: reference import"
for k in 1 30 90 110; do
  d="$TMP/kkill$k"
  rm -rf "$d"
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$SRC" "$d") >/dev/null 2>&1
  rc=$?
  [ $rc -eq 137 ] || { bad "resume: kill after $k units: rc $rc"; continue; }
  "$SPILL" import "$SRC" "$d" 2>"$TMP/err" >/dev/null || { bad "resume $k: $(tail -1 "$TMP/err")"; continue; }
  same=1
  for f in "$TMP/kfull"/*; do
    [ "$(basename "$f")" = import.journal ] || cmp -s "$f" "$d/$(basename "$f")" || same=0
  done
  [ $same = 1 ] && "$SPILL" verify "$d" >/dev/null 2>&1 &&
    ok "resume after kill -9 at unit $k: byte-identical ($(grep -o '([0-9]* resumed)' "$TMP/err" | tail -1))" ||
    bad "resume after kill at $k: differs"
done

# Refusals, each a named error
expect_err() { # $1 = grep pattern, $2 = source
  local pat="$1" src="$2"
  rm -rf "$src.spill"
  if "$SPILL" import "$src" "$src.spill" >/dev/null 2>"$TMP/err"; then bad "accepted: $src ($pat)"; return; fi
  grep -q -- "$pat" "$TMP/err" && ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-150)" || bad "wrong error for $pat: $(tail -1 "$TMP/err")"
  "$SPILL" verify "$src.spill" >/dev/null 2>&1 && bad "verify accepts a failed import ($pat)"
}
gmutate() { # $1 = name, $2 = python statements on kv and t (name -> (ggml type, numpy shape, raw))
  $PY - "$TMP/full-MXFP4.gguf" "$TMP/$1.gguf" "$2" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.environ["REF"]))
import ckpt_io as ck
kv, t = ck.read_gguf(sys.argv[1])
A = "kimi-k3."
exec(sys.argv[3])
ck.write_gguf(sys.argv[2], list(kv.items()), [(n, ty, (raw, shape)) for n, (ty, shape, raw) in t.items()])
PY
}
export REF
gmutate gate 'kv[A + "expert_gating_func"] = 1'; expect_err "expert_gating_func 1: only 2 (sigmoid)" "$TMP/gate.gguf"
gmutate grp 'kv[A + "expert_group_count"] = 2'; expect_err "expert_group_count 2: kimi-k3 has no group-limited routing" "$TMP/grp.gguf"
gmutate beta 'del kv[A + "activation.situ_beta"]'; expect_err "kimi-k3.activation.situ_beta is missing" "$TMP/beta.gguf"
gmutate lb 'kv[A + "kda.gate_lower_bound"] = 0.5'; expect_err "kda.gate_lower_bound = 0.5 out of range" "$TMP/lb.gguf"
gmutate bs 'kv[A + "attn_res.block_size"] = 9'; expect_err "attn_res.block_size" "$TMP/bs.gguf"
gmutate ogate 'del t["blk.5.attn_gate.weight"]'; expect_err "blk.5.attn_gate.weight: the MLA output gate is on some" "$TMP/ogate.gguf"
gmutate rnorm 'del t["blk.2.ffn_routed_norm.weight"]'; expect_err "blk.1.ffn_routed_norm.weight: on some MoE layers\|blk.2.ffn_routed_norm.weight: on some MoE layers" "$TMP/rnorm.gguf"
gmutate score 'del t["blk.3.ffn_res_score.weight"]'; expect_err "blk.3.ffn_res_score.weight" "$TMP/score.gguf"
gmutate ors 'del t["output_res_score.weight"]'; expect_err "output_res_score.weight" "$TMP/ors.gguf"
gmutate kvb 't["blk.3.attn_kv_b.weight"] = t["blk.3.attn_v_b.weight"]'; expect_err "blk.3.attn_kv_b.weight: the unsplit kv_b" "$TMP/kvb.gguf"
gmutate xtra 't["blk.0.ssm_extra.weight"] = t["blk.0.ssm_norm.weight"]'; expect_err "blk.0.ssm_extra.weight" "$TMP/xtra.gguf"
gmutate e255 'ty, sh, raw = t["blk.1.ffn_up_exps.weight"]; b = bytearray(raw); b[17 * 5] = 255; t["blk.1.ffn_up_exps.weight"] = (ty, sh, bytes(b))'
expect_err "non-finite weight\|255" "$TMP/e255.gguf"
exit $fail
