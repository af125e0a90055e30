#!/usr/bin/env bash
# spill import of Qwen3.5-MoE's Hugging Face checkpoint as released
# (Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe; and the flat
# Qwen3_5MoeForCausalLM, qwen3_5_moe_text), written by qwen35moe_ref.py
# make-hf as the same tiny random model make-gguf writes:
# - the HF import and the GGUF import give the same trunk.bin (norms 1 + w,
#   A = -exp(A_log), v heads grouped -> tiled in qkv / z / a / b / dt_bias /
#   A_log / conv / out_proj) and bit-identical logits; so do the flat form
#   and per-expert tensors instead of the fused gate_up_proj / down_proj;
# - the logits agree with qwen35moe_ref.py's float64 forward pass of the HF
#   files in transformers' own conventions (F32 and BF16), and that forward
#   of the GGUF (the reference's own reader) gives the same logits;
# - the MTP layer and the vision tower are skipped and named; a kill -9
#   resumes to a byte-identical container; hostile configs and tensors are
#   refused by name.
set -uo pipefail
SPILL="$1"
QW="$2"
PY=/usr/bin/python3
TMP="${TEST_TMPDIR:-$(mktemp -d)}/qwen35hf"
rm -rf "$TMP"
mkdir -p "$TMP"
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
TOK=$($PY -c "import random; r=random.Random(7); print(','.join(str(r.randrange(300)) for _ in range(24)))")
logits() { # MODEL OUT
  "$SPILL" eval "$1" --tokens "$TOK" --all-positions --logits-out "$2" --act-quant f32 >/dev/null 2>"$TMP/err"
}
imp() { # SRC DST [options]
  local s="$1" d="$2"
  shift 2
  rm -rf "$d"
  "$SPILL" import "$s" "$d" "$@" >/dev/null 2>"$TMP/imp.err" && "$SPILL" verify "$d" >/dev/null 2>&1
}

$PY "$QW" make-gguf "$TMP/m.gguf" --seed 5 && imp "$TMP/m.gguf" "$TMP/g.spill" && logits "$TMP/g.spill" "$TMP/g.f32" ||
  bad "GGUF import: $(tail -1 "$TMP/imp.err")"
$PY "$QW" make-hf "$TMP/hf" --seed 5 && imp "$TMP/hf" "$TMP/h.spill" && logits "$TMP/h.spill" "$TMP/h.f32" ||
  bad "HF import: $(tail -1 "$TMP/imp.err")"
grep -q "skipped source 4 tensors outside the text model (mtp.\*, model.visual.\*)" "$TMP/imp.err" &&
  ok "MTP layer and vision tower skipped and named" || bad "skipped tensors not named: $(cat "$TMP/imp.err")"
cmp -s "$TMP/g.spill/trunk.bin" "$TMP/h.spill/trunk.bin" && ok "HF and GGUF imports: trunk.bin byte-identical" ||
  bad "trunk.bin differs between the HF and the GGUF import"
cmp -s "$TMP/g.f32" "$TMP/h.f32" && ok "HF and GGUF imports: logits bit-identical" || bad "HF vs GGUF logits differ"
out=$($PY "$QW" logits "$TMP/hf" --tokens "$TOK" --compare "$TMP/h.f32" --tol 1e-4 2>&1) &&
  ok "F32 HF import vs float64 HF forward: $out" || bad "F32 HF import vs float64 HF forward: $out"
# the reference's own GGUF reader (dequantise, tiled -> grouped v heads,
# w + 1 -> w, ssm_a -> A_log, in float64) gives the HF forward's logits
out=$($PY "$QW" logits "$TMP/m.gguf" --tokens "$TOK" --out "$TMP/r.f32" 2>&1 &&
  $PY "$QW" logits "$TMP/hf" --tokens "$TOK" --compare "$TMP/r.f32" --tol 1e-6 2>&1) &&
  ok "float64 forward of the GGUF vs of the HF files (1e-6): $out" || bad "GGUF vs HF float64 forward: $out"

for v in flat per-expert; do
  $PY "$QW" make-hf "$TMP/hf-$v" --seed 5 --$v && imp "$TMP/hf-$v" "$TMP/$v.spill" &&
    logits "$TMP/$v.spill" "$TMP/$v.f32" && cmp -s "$TMP/$v.f32" "$TMP/h.f32" &&
    ok "--$v: logits bit-identical to the released form" || bad "--$v: $(tail -1 "$TMP/imp.err")"
done

$PY "$QW" make-hf "$TMP/hf-bf16" --seed 5 --dtype BF16 && imp "$TMP/hf-bf16" "$TMP/b.spill" &&
  logits "$TMP/b.spill" "$TMP/b.f32" || bad "BF16 import: $(tail -1 "$TMP/imp.err")"
out=$($PY "$QW" logits "$TMP/hf-bf16" --tokens "$TOK" --compare "$TMP/b.f32" --tol 1e-4 2>&1) &&
  ok "BF16 HF import vs float64 HF forward: $out" || bad "BF16 HF import vs float64 HF forward: $out"

# kill -9 after 30 units (trunk done, some records), then resume
rm -rf "$TMP/k.spill"
(SPILL_IMPORT_TEST_KILL_AFTER=30 exec "$SPILL" import "$TMP/hf" "$TMP/k.spill" --experts q8) >/dev/null 2>&1
[ $? -eq 137 ] || bad "kill after 30 units: not killed"
imp "$TMP/hf" "$TMP/q.spill" --experts q8 || bad "q8 import: $(tail -1 "$TMP/imp.err")"
"$SPILL" import "$TMP/hf" "$TMP/k.spill" --experts q8 >/dev/null 2>"$TMP/err" && grep -q "(30 resumed)" "$TMP/err" &&
  for f in manifest.json trunk.bin experts-000.bin experts-003.bin; do cmp -s "$TMP/k.spill/$f" "$TMP/q.spill/$f" || exit 9; done &&
  ok "resume after kill -9 at unit 30: byte-identical" || bad "resume: $(tail -1 "$TMP/err")"

# hostile: each refused with a message naming the culprit
n=0
refuse() { # WANT make-hf options...
  local want="$1"
  shift
  n=$((n + 1))
  $PY "$QW" make-hf "$TMP/x$n" --seed 5 "$@" || { bad "hostile $n: make-hf"; return; }
  if "$SPILL" import "$TMP/x$n" "$TMP/x$n.spill" >/dev/null 2>"$TMP/err"; then
    bad "hostile $n ($*): imported"
  elif grep -q -- "$want" "$TMP/err"; then
    ok "hostile $n: $(tail -1 "$TMP/err")"
  else
    bad "hostile $n ($*): message lacks '$want': $(tail -1 "$TMP/err")"
  fi
}
refuse '"foo_scale"' --set-cfg 'foo_scale=2'
refuse '"bar"' --set-cfg 'top.bar=1'
refuse "rope_parameters.rope_type" --set-cfg 'rope_parameters={"rope_type":"yarn","rope_theta":1e6}'
refuse "rope_parameters.factor" --set-cfg 'rope_parameters={"rope_type":"default","rope_theta":1e6,"factor":4}'
refuse "rope_scaling" --set-cfg 'rope_scaling={"type":"linear","factor":2}'
refuse "attention_bias" --set-cfg 'attention_bias=true'
refuse "attn_output_gate" --set-cfg 'attn_output_gate=false'
refuse "hidden_act" --set-cfg 'hidden_act="gelu"'
refuse "mamba_ssm_dtype" --set-cfg 'mamba_ssm_dtype="bfloat16"'
refuse "norm_topk_prob" --set-cfg 'norm_topk_prob=false'
refuse "mlp_only_layers" --set-cfg 'mlp_only_layers=[1]'
refuse "layer_types\[1\]" --set-cfg 'layer_types=["linear_attention","sliding_attention","linear_attention","full_attention"]'
refuse "layer_types" --set-cfg 'layer_types=["linear_attention"]'
refuse "linear_value_head_dim" --set-cfg 'linear_value_head_dim=8'
refuse "partial_rotary_factor" --set-cfg 'partial_rotary_factor=0.25'
refuse "text_config is not qwen3_5_moe_text" --set-cfg 'model_type="qwen3_next"'
refuse "tie_word_embeddings" --set-cfg 'tie_word_embeddings=true'
refuse "quantization_config" --set-cfg 'top.quantization_config={"quant_method":"fp8"}'
refuse "linear_attn.A_log is missing" --drop model.language_model.layers.1.linear_attn.A_log
refuse "shared_expert_gate.weight is missing" --drop model.language_model.layers.0.mlp.shared_expert_gate.weight
refuse "mlp.experts.0.gate_proj.weight is missing" --drop model.language_model.layers.2.mlp.experts.gate_up_proj
refuse "self_attn.q_norm.weight is missing" --drop model.language_model.layers.3.self_attn.q_norm.weight
refuse "lm_head.weight is missing" --drop lm_head.weight
refuse "linear_attn.in_proj_qkvz.weight is not part" --add model.language_model.layers.0.linear_attn.in_proj_qkvz.weight
refuse "o_proj.bias is not part" --add model.language_model.layers.3.self_attn.o_proj.bias
exit $fail
