#!/usr/bin/env bash
# `spill import` of the GLM-4.5 family end to end (docs/MODEL.md "GLM-4.5 /
# 4.6 / 4.7"): tiny random checkpoints written by glm4moe_ref.py in three
# variants (air: q/k/v biases, no q/k norm; full: q/k norm, routed scale 2.5,
# 4 expert groups, tied head; plain: no biases, a quarter of each head
# rotated, 2 dense layers, 2 shared experts), each with its MTP layer, as
# safetensors F32/F16/BF16 (sharded) and GGUF glm4moe F32/F16/Q8_0/Q4_K and
# llama.cpp's Q4_K_M mix (Q5_0 / Q8_0 down matrices, as GLM-4.5-Air's), are
# imported, `spill verify` must pass, and spill's logits (act_quant f32) at
# every position must agree with glm4moe_ref.py's float64 forward pass from
# the SOURCE file within 1e-4 of the logit scale. The summary names the
# skipped MTP layer; the manifest holds the new optional GQA fields. Logits
# bit-identical across storage modes, cache sizes, lookahead, threads and
# prefill chunk sizes. Hostile configs, keys and tensors: named errors.
set -uo pipefail
SPILL="$1"
REF="$2"
CREF="$3" # spill_ref.py
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init glm
EVAL_FLAGS="--act-quant f32"

for v in air full plain; do
  for src in F32:1 F16:2 BF16:3; do
    IFS=: read -r ty shards <<<"$src"
    in="$TMP/$v-$ty"
    $PY "$REF" make-hf "$in" --variant "$v" --dtype "$ty" --shards "$shards" --seed 7 || { bad "$v $ty: make"; continue; }
    import_check "$in" "hf $v $ty" "--tol 1e-4"
  done
  for ty in F32 F16 Q8_0 Q4_K Q4_K_M; do
    in="$TMP/$v-$ty.gguf"
    $PY "$REF" make-gguf "$in" --variant "$v" --type "$ty" --seed 7 || { bad "gguf $v $ty: make"; continue; }
    import_check "$in" "gguf $v $ty" "--tol 1e-4"
  done
  # Q4_K_M as llama-quantize writes GLM-4.5-Air: the down matrices (96 / 160
  # / 192 columns, not whole 256-blocks) fall back to Q5_0 (Q8_0 where Q6_K),
  # kept verbatim: a v3 container with per-bank section dtypes
  d=$(tr -d ' \t\n' <"$TMP/$v-Q4_K_M.gguf.spill/manifest.json" | grep -o '"dtypes":\[[^]]*\]' | tr '\n' ' ')
  want='"dtypes":["q4_k","q4_k","q5_0"] "dtypes":["q4_k","q4_k","q8"] '
  [ "$v" = plain ] && want='"dtypes":["q4_k","q4_k","q8"] "dtypes":["q4_k","q4_k","q5_0"] '
  [ "$d" = "$want" ] && ok "gguf $v Q4_K_M: per-bank section dtypes $d" || bad "gguf $v Q4_K_M: section dtypes '$d'"
done

# transformers >= 5 writes rope_theta and partial_rotary_factor inside
# rope_parameters: the same model, the same logits
mutate_dir() { # $1 = name, $2 = source directory, $3 = python statement on cfg
  rm -rf "$TMP/$1"
  cp -r "$2" "$TMP/$1"
  $PY - "$TMP/$1/config.json" "$3" <<'PY'
import json, sys
p = sys.argv[1]
cfg = json.load(open(p))
exec(sys.argv[2])
json.dump(cfg, open(p, "w"))
PY
}
mutate_dir rparams "$TMP/plain-F32" 'cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta"), "partial_rotary_factor": cfg.pop("partial_rotary_factor")}'
import_check "$TMP/rparams" "hf plain F32, rope in rope_parameters" "--tol 1e-4"

# The MTP layer is named in the summary; the arch carries the new GQA fields
"$SPILL" import "$TMP/air-F32.gguf" "$TMP/sum.spill" 2>"$TMP/err" >/dev/null
grep -q "skipped source layers 3..3 (next-token prediction, nextn/MTP)" "$TMP/err" &&
  ok "summary names the skipped MTP layer: $(grep skipped "$TMP/err")" || bad "summary: $(cat "$TMP/err")"
"$SPILL" import "$TMP/full-F32" "$TMP/sumj.spill" --json 2>/dev/null | grep -q '"skipped": "layers 3..3' &&
  ok "--json names the skipped MTP layer" || bad "--json: no skipped layers"
$PY - "$TMP/plain-F32.spill/manifest.json" "$TMP/air-F32.gguf.spill/manifest.json" <<'PY' && ok "manifest: rope_dim, qkv_bias, qk_norm" || bad "manifest fields"
import json, sys
p = json.load(open(sys.argv[1]))["arch"]
a = json.load(open(sys.argv[2]))["arch"]
assert p["gqa"]["rope_dim"] == 4 and "qkv_bias" not in p["gqa"] and p["gqa"]["qk_norm"] == "head", p["gqa"]
assert p["n_dense_layers"] == 2 and p["moe"]["n_shared"] == 2 and p["moe"]["router"] == "sigmoid", p
assert a["gqa"]["rope_dim"] == 8 and a["gqa"]["qkv_bias"] is True and "qk_norm" not in a["gqa"], a["gqa"]
assert "o_bias" not in a["gqa"] and a["moe"]["routed_scale"] == 1.0, a
PY

# The container reference (spill_ref.py: our container reader, docs/MODEL.md's
# equations) computes the imported containers as the engine does
for m in "$TMP/full-F32.spill" "$TMP/plain-F32.gguf.spill" "$TMP/air-Q8_0.gguf.spill"; do
  "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/c.f32" --act-quant f32 >/dev/null 2>&1
  r=$($PY "$CREF" "$m" --tokens "$TOK" --compare "$TMP/c.f32" --tol 1e-4 2>&1) &&
    ok "spill_ref.py $(basename "$m"): $(echo "$r" | tail -1)" || bad "spill_ref.py $(basename "$m"): $(echo "$r" | tail -1)"
done

# Placement never changes numerics (biases, partial RoPE, groups, shared
# experts, q8 experts from Q8_0); nor does the prefill chunk size
placements_bit_identical "$TMP/full-Q8_0.gguf.spill" "$TMP/air-BF16.spill"
for m in "$TMP/full-Q8_0.gguf.spill" "$TMP/air-BF16.spill"; do
  "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/base.f32" >/dev/null 2>&1
  for c in 1 4; do
    "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/k.f32" --prefill-chunk $c >/dev/null 2>&1 &&
      cmp -s "$TMP/base.f32" "$TMP/k.f32" && ok "$(basename "$m"): --prefill-chunk $c: logits bit-identical" ||
      bad "$(basename "$m"): --prefill-chunk $c changes the logits"
  done
done

# Refusals, each a named error
expect_err() { # $1 = grep pattern, $2 = source
  local pat="$1" src="$2"
  rm -rf "$src.spill"
  if "$SPILL" import "$src" "$src.spill" >/dev/null 2>"$TMP/err"; then bad "accepted: $src ($pat)"; return; fi
  grep -q -- "$pat" "$TMP/err" && ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-150)" || bad "wrong error for $pat: $(tail -1 "$TMP/err")"
  "$SPILL" verify "$src.spill" >/dev/null 2>&1 && bad "verify accepts a failed import ($pat)"
}
mutate() { # $1 = name, $2 = variant, $3 = python statement on cfg (the parsed config.json)
  mutate_dir "$1" "$TMP/$2-F32" "$3"
}
mutate key air 'cfg["sliding_window"] = 4096'; expect_err '"sliding_window" is not understood for glm4_moe' "$TMP/key"
mutate rs air 'cfg["rope_scaling"] = {"type": "yarn", "factor": 4.0}'; expect_err "rope_scaling = .*RoPE scaling" "$TMP/rs"
mutate rp air 'del cfg["rope_theta"]; del cfg["partial_rotary_factor"]; cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6}'
expect_err 'rope_parameters.rope_type = "yarn"' "$TMP/rp"
mutate act air 'cfg["hidden_act"] = "gelu"'; expect_err 'hidden_act = "gelu"' "$TMP/act"
mutate prf air 'cfg["partial_rotary_factor"] = 0.05'; expect_err "partial_rotary_factor 0.05 of head_dim 16" "$TMP/prf"
mutate qkn air 'cfg["use_qk_norm"] = True'; expect_err "model.layers.0.self_attn.q_norm.weight" "$TMP/qkn"
mutate nob air 'cfg["attention_bias"] = False'; expect_err "self_attn.*_proj.bias is not part of the glm4_moe model" "$TMP/nob"
mutate mtp air 'cfg["num_nextn_predict_layers"] = 0'; expect_err "model.layers.3.* is not part" "$TMP/mtp"
mutate ng full 'cfg["n_group"] = 3'; expect_err "3 expert groups do not split 8 experts" "$TMP/ng"
mutate tg full 'cfg["topk_group"] = 1'; expect_err "top-k 3 > the 2 experts of the used groups" "$TMP/tg"
mutate dense air 'cfg["first_k_dense_replace"] = 3'; expect_err "every layer dense" "$TMP/dense"
mutate hd air 'cfg["head_dim"] = 8'; expect_err "shape" "$TMP/hd"
# GGUF: keys and tensors as llama.cpp reads them
gg() { # $1 = name, rest = make-gguf options
  local n="$1"
  shift
  $PY "$REF" make-gguf "$TMP/$n.gguf" --variant air --seed 7 "$@" || bad "gguf $n: make"
}
gg nonextn --set-kv 'glm4moe.nextn_predict_layers=null'; expect_err "blk.3.* is not part of the glm4moe model" "$TMP/nonextn.gguf"
gg allnextn --set-kv 'glm4moe.nextn_predict_layers=4'; expect_err "glm4moe.nextn_predict_layers = 4 out of range" "$TMP/allnextn.gguf"
gg rdodd --set-kv 'glm4moe.rope.dimension_count=7'; expect_err "rope.dimension_count 7 is odd" "$TMP/rdodd.gguf"
gg rdbig --set-kv 'glm4moe.rope.dimension_count=32'; expect_err "rope.dimension_count = 32 out of range" "$TMP/rdbig.gguf"
gg gate --set-kv 'glm4moe.expert_gating_func=1'; expect_err "expert_gating_func 1 is not supported" "$TMP/gate.gguf"
gg yarn --set-kv 'glm4moe.rope.scaling.type="yarn"'; expect_err "glm4moe.rope.scaling.type changes the maths" "$TMP/yarn.gguf"
gg mrope --set-kv 'glm4moe.rope.dimension_sections=[4,4,0,0]'; expect_err "rope.dimension_sections changes the maths" "$TMP/mrope.gguf"
gg groups --set-kv 'glm4moe.expert_group_count=3'; expect_err "3 expert groups do not split" "$TMP/groups.gguf"
gg nobias --drop blk.2.exp_probs_b.bias; expect_err "blk.2.exp_probs_b.bias" "$TMP/nobias.gguf"
gg kbias --drop blk.1.attn_k.bias; expect_err "blk.1.attn_k.bias" "$TMP/kbias.gguf"
exit $fail
