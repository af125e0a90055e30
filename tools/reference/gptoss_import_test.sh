#!/usr/bin/env bash
# `spill import` of gpt-oss end to end (docs/MODEL.md "gpt-oss"): tiny random
# GGUF gpt-oss files written by gptoss_ref.py (q/k/v/o biases, a sink logit per
# head, a sliding window of 4 on the even layers, YaRN factor 32 over an
# original context of 64, the router bias with the softmax over the chosen
# logits, per-expert biases, the clamped SwiGLU; experts F32 or MXFP4) are
# imported, `spill verify` must pass, and spill's logits (act_quant f32) at
# every one of 24 positions must agree with gptoss_ref.py's float64 forward
# pass from the GGUF within 1e-4 of the logit scale, and the F32 container
# with spill_ref.py's (docs/MODEL.md's equations on the container). Each gpt-oss piece is
# shown to matter: the container with that manifest field turned off gives
# logits the reference refuses. Logits bit-identical across storage modes,
# cache sizes, lookahead, threads and prefill chunk sizes, and with drafts
# cut at every position (research/spec:spill_spec_measure --check). Hostile keys and
# tensors: named errors.
set -uo pipefail
SPILL="$1"
REF="$2"
CREF="$3" # spill_ref.py
SPEC="$4" # research/spec:spill_spec_measure
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init gptoss
EVAL_FLAGS="--act-quant f32"
TOK="1,5,9,200,33,7,299,0,17,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56" # 24 > the window 4

for ty in F32 MXFP4; do
  in="$TMP/oss-$ty.gguf"
  $PY "$REF" make-gguf "$in" --type "$ty" --seed 7 || { bad "gguf $ty: make"; continue; }
  import_check "$in" "gguf $ty" "--tol 1e-4"
done
# The same model as a Hugging Face checkpoint (MXFP4 *_blocks + *_scales,
# gate and up interleaved by rows): its experts repack byte for byte into
# the GGUF's ggml blocks (gptoss_ref.py repack, independent of spill), and
# spill's import of it gives logits bit-identical to the GGUF import's (the
# config's rope_scaling truncate true: llama.cpp's rounded YaRN range)
$PY "$REF" make-hf "$TMP/hf" --seed 7 || bad "hf: make"
r=$($PY "$REF" repack "$TMP/hf" "$TMP/oss-MXFP4.gguf" 2>&1) && ok "hf: $r" || bad "hf repack: $r"
import_check "$TMP/hf" "hf MXFP4" "--tol 1e-4"
"$SPILL" eval "$TMP/oss-MXFP4.gguf.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/g.f32" >/dev/null 2>&1
"$SPILL" eval "$TMP/hf.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/h.f32" >/dev/null 2>&1 &&
  cmp -s "$TMP/g.f32" "$TMP/h.f32" && ok "hf and gguf imports: logits bit-identical" ||
  bad "hf and gguf imports: logits differ"
# truncate false (the released configs): transformers' unrounded correction
# range, which the reference computes and the GGUF form cannot say
$PY "$REF" make-hf "$TMP/hfnt" --seed 7 --no-truncate || bad "hf truncate false: make"
import_check "$TMP/hfnt" "hf MXFP4 truncate false" "--tol 1e-4"
grep -q '"yarn_unrounded":.*true' "$TMP/hfnt.spill/manifest.json" && ok "truncate false: yarn_unrounded" ||
  bad "truncate false: no yarn_unrounded in the manifest"
"$SPILL" eval "$TMP/hfnt.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/n.f32" >/dev/null 2>&1
cmp -s "$TMP/n.f32" "$TMP/h.f32" && bad "truncate false computes as truncate true" || ok "truncate false changes the logits"

# MXFP4 experts are kept as MXFP4; q8 requantises them (and still agrees closely)
grep -q '"mxfp4"' "$TMP/oss-MXFP4.gguf.spill/manifest.json" &&
  ok "MXFP4 experts kept as mxfp4" || bad "MXFP4 experts not kept"
"$SPILL" import "$TMP/oss-MXFP4.gguf" "$TMP/q8.spill" --experts q8 >/dev/null 2>&1 &&
  "$SPILL" eval "$TMP/q8.spill" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/q8.f32" >/dev/null 2>&1 &&
  r=$($PY "$REF" logits "$TMP/oss-MXFP4.gguf" --tokens "$TOK" --compare "$TMP/q8.f32" --tol 5e-2 2>&1) &&
  ok "--experts q8 from MXFP4: $r" || bad "--experts q8 from MXFP4: ${r:-import/eval failed}"

# The container reference (spill_ref.py: our container reader, docs/MODEL.md's
# equations) computes the imported F32 container as the engine does
"$SPILL" eval "$TMP/oss-F32.gguf.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/c.f32" --act-quant f32 >/dev/null 2>&1
r=$($PY "$CREF" "$TMP/oss-F32.gguf.spill" --tokens "$TOK" --compare "$TMP/c.f32" --tol 1e-4 2>&1) &&
  ok "spill_ref.py oss-F32: $(echo "$r" | tail -1)" || bad "spill_ref.py oss-F32: $(echo "$r" | tail -1)"

# Each piece matters: switching it off in the manifest moves the logits
# beyond the tolerance (so the agreement above exercises all of them).
matters() { # $1 = label, $2 = python statement on a (the manifest's arch)
  rm -rf "$TMP/mut.spill"
  cp -r "$TMP/oss-F32.gguf.spill" "$TMP/mut.spill"
  $PY - "$TMP/mut.spill/manifest.json" "$2" <<'PY'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
a = m["arch"]
exec(sys.argv[2])
json.dump(m, open(p, "w"))
PY
  "$SPILL" eval "$TMP/mut.spill" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/m.f32" \
    >/dev/null 2>"$TMP/err" || { bad "$1: eval: $(tail -1 "$TMP/err")"; return; }
  if r=$($PY "$REF" logits "$TMP/oss-F32.gguf" --tokens "$TOK" --compare "$TMP/m.f32" --tol 1e-4 2>&1); then
    bad "$1 off: logits still agree ($r)"
  else
    ok "$1 off: the reference disagrees ($(echo "$r" | tail -1 | cut -c1-60))"
  fi
}
matters "sinks" 'del a["gqa"]["sinks"]'
matters "sliding window" 'del a["gqa"]["swa_window"]; del a["gqa"]["swa_pattern"]'
matters "window on odd layers" 'a["gqa"]["swa_pattern"] = 0'
matters "yarn" 'del a["gqa"]["yarn_factor"]; del a["gqa"]["yarn_orig_ctx"]; del a["gqa"]["yarn_beta_fast"]; del a["gqa"]["yarn_beta_slow"]'
matters "rope_mscale" 'del a["gqa"]["rope_mscale"]'
matters "softmax_topk router" 'a["moe"]["router"] = "softmax"'
matters "router_bias" 'del a["moe"]["router_bias"]'
matters "clamped swiglu" 'a["activation"] = "swiglu"'

# Placement never changes numerics (sliding window, sinks, biases, MXFP4
# experts under act_quant q8 and f32); nor does the prefill chunk size
placements_bit_identical "$TMP/oss-MXFP4.gguf.spill" "$TMP/oss-F32.gguf.spill"
for m in "$TMP/oss-MXFP4.gguf.spill"; do
  for aq in q8 f32; do
    "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/base.f32" --act-quant $aq >/dev/null 2>&1
    for c in 1 5; do
      "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/k.f32" --prefill-chunk $c \
        --act-quant $aq >/dev/null 2>&1 && cmp -s "$TMP/base.f32" "$TMP/k.f32" &&
        ok "$(basename "$m") act_quant $aq: --prefill-chunk $c: logits bit-identical" ||
        bad "$(basename "$m") act_quant $aq: --prefill-chunk $c changes the logits"
    done
  done
done

# Drafts cut at every position (the sliding-window layers' cache rolled back
# by position): tokens and every logit bit-identical to a run without drafts
for m in "$TMP/oss-F32.gguf.spill" "$TMP/oss-MXFP4.gguf.spill"; do
  "$SPEC" "$m" -n 24 --draft 4 --check --prompt "spill drafts" >"$TMP/spec.out" 2>&1 &&
    grep -q '"mode": "cut-at-2".*"accepted": [1-9]' "$TMP/spec.out" &&
    ok "$(basename "$m"): drafts cut at every position: tokens and logits bit-identical" ||
    bad "$(basename "$m"): drafts change the output: $(grep -v '"same_tokens": true' "$TMP/spec.out" | head -2)"
done

# Refusals, each a named error
expect_err() { # $1 = grep pattern, $2 = source
  local pat="$1" src="$2"
  rm -rf "$src.spill"
  if "$SPILL" import "$src" "$src.spill" >/dev/null 2>"$TMP/err"; then bad "accepted: $src ($pat)"; return; fi
  grep -q -- "$pat" "$TMP/err" && ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-150)" || bad "wrong error for $pat: $(tail -1 "$TMP/err")"
  "$SPILL" verify "$src.spill" >/dev/null 2>&1 && bad "verify accepts a failed import ($pat)"
}
gg() { # $1 = name, rest = make-gguf options
  local n="$1"
  shift
  $PY "$REF" make-gguf "$TMP/$n.gguf" --seed 7 "$@" || bad "gguf $n: make"
}
gg bf --set-kv 'gpt-oss.rope.scaling.yarn_beta_fast=16.0'; expect_err "yarn_beta_fast = 16 changes the maths" "$TMP/bf.gguf"
gg bs --set-kv 'gpt-oss.rope.scaling.yarn_beta_slow=2.0'; expect_err "yarn_beta_slow = 2 changes the maths" "$TMP/bs.gguf"
gg af --set-kv 'gpt-oss.rope.scaling.attn_factor=0.5'; expect_err "attn_factor = 0.5 changes the maths" "$TMP/af.gguf"
gg lin --set-kv 'gpt-oss.rope.scaling.type="linear"'; expect_err 'rope.scaling.type = linear is not supported' "$TMP/lin.gguf"
gg fac --set-kv 'gpt-oss.rope.scaling.factor=0.5'; expect_err "rope.scaling.factor 0.5 out of range" "$TMP/fac.gguf"
gg swab --set-kv 'gpt-oss.rope.freq_base_swa=10000.0'; expect_err "freq_base_swa = 10000 differs" "$TMP/swab.gguf"
gg swap --set-kv 'gpt-oss.attention.sliding_window_pattern=[true,false,true]'; expect_err "sliding_window_pattern as a per-layer array" "$TMP/swap.gguf"
gg nowin --set-kv 'gpt-oss.attention.sliding_window=null'; expect_err "gpt-oss.attention.sliding_window" "$TMP/nowin.gguf"
gg ws --set-kv 'gpt-oss.expert_weights_scale=2.0'; expect_err "expert_weights_scale changes the maths" "$TMP/ws.gguf"
gg vl --set-kv 'gpt-oss.attention.value_length=8'; expect_err "value_length 8 != key_length 16" "$TMP/vl.gguf"
gg qbias --drop blk.1.attn_q.bias; expect_err "blk.1.attn_q.bias" "$TMP/qbias.gguf"
gg sinks --drop blk.0.attn_sinks.weight; expect_err "blk.0.attn_sinks.weight" "$TMP/sinks.gguf"
gg rbias --drop blk.2.ffn_gate_inp.bias; expect_err "blk.2.ffn_gate_inp.bias" "$TMP/rbias.gguf"
gg ebias --drop blk.0.ffn_down_exps.bias; expect_err "blk.0.ffn_down_exps.bias" "$TMP/ebias.gguf"
gg out --drop output.weight; expect_err "output.weight" "$TMP/out.gguf"
# HF: config keys and tensors
hfm() { # $1 = name, rest = make-hf options
  local n="$1"
  shift
  $PY "$REF" make-hf "$TMP/$n" --seed 7 "$@" || bad "hf $n: make"
}
hfm hkey --set-cfg 'num_experts_per_token=2'; expect_err '"num_experts_per_token" is not understood for gpt_oss' "$TMP/hkey"
hfm hlim --set-cfg 'swiglu_limit=8.0'; expect_err "swiglu_limit = 8" "$TMP/hlim"
hfm hlt --set-cfg 'layer_types=["full_attention","full_attention","full_attention"]'; expect_err "layer_types\[0\]" "$TMP/hlt"
hfm hrt --set-cfg 'rope_scaling={"rope_type":"linear","factor":2.0}'; expect_err "rope_scaling.rope_type" "$TMP/hrt"
hfm hrk --set-cfg 'rope_scaling={"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":64,"mscale":2.0}'
expect_err "rope_scaling.mscale is not understood" "$TMP/hrk"
hfm hq --set-cfg 'quantization_config={"quant_method":"fp8"}'; expect_err "quantization_config.quant_method" "$TMP/hq"
hfm hab --set-cfg 'attention_bias=false'; expect_err "attention_bias = false" "$TMP/hab"
hfm hsc --drop model.layers.1.mlp.experts.down_proj_scales; expect_err "model.layers.1.mlp.experts.down_proj_scales" "$TMP/hsc"
hfm hsk --drop model.layers.0.self_attn.sinks; expect_err "model.layers.0.self_attn.sinks" "$TMP/hsk"
hfm hgb --drop model.layers.2.mlp.experts.gate_up_proj_bias; expect_err "gate_up_proj_bias" "$TMP/hgb"
exit $fail
