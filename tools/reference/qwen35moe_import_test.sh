#!/usr/bin/env bash
# spill import of Qwen3.5-MoE's GGUF (qwen35moe, tools/reference/qwen35moe_ref.py):
# - the imported container evaluated by spill (act_quant f32) and by the
#   float64 numpy reference of the container (spill_ref.py) agree within 1e-4
#   of the largest |logit| at every position, argmax equal, F32 and Q8_0;
# - K-quants (Q4_K, Q6_K: random super-blocks, rows of 256): spill
#   (act_quant f32) within 1e-4 of qwen35moe_ref.py's float64 forward of the
#   GGUF (its own dequantisation of the same blocks), argmax equal;
# - the layer kinds read from full_attention_interval and from the
#   attention.recurrent_layers array give byte-identical containers;
# - hostile GGUFs are refused by name.
set -uo pipefail
SPILL="$1"
QW="$2"
REF="$3"
PY=/usr/bin/python3
TMP="${TEST_TMPDIR:-$(mktemp -d)}/qwen35"
rm -rf "$TMP"
mkdir -p "$TMP"
fail=0
TOK=$($PY -c "import random; r=random.Random(7); print(','.join(str(r.randrange(300)) for _ in range(24)))")
for ty in F32 Q8_0; do
  g="$TMP/m-$ty.gguf"
  $PY "$QW" make-gguf "$g" --type "$ty" --seed 5 || { echo "FAIL $ty: make-gguf"; fail=1; continue; }
  "$SPILL" import "$g" "$g.spill" >/dev/null 2>"$TMP/err" || { echo "FAIL $ty: import: $(tail -1 "$TMP/err")"; fail=1; continue; }
  "$SPILL" eval "$g.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/s.f32" --act-quant f32 >/dev/null 2>"$TMP/err" ||
    { echo "FAIL $ty: eval: $(tail -1 "$TMP/err")"; fail=1; continue; }
  out=$($PY "$REF" "$g.spill" --tokens "$TOK" --compare "$TMP/s.f32" --tol 1e-4 2>&1) &&
    echo "ok   $ty: spill vs spill_ref.py: $(printf '%s\n' "$out" | grep max_abs_diff | head -1)" ||
    { echo "FAIL $ty: spill vs spill_ref.py: $out"; fail=1; }
done
for ty in Q4_K Q6_K; do
  g="$TMP/m-$ty.gguf"
  $PY "$QW" make-gguf "$g" --type "$ty" --seed 5 || { echo "FAIL $ty: make-gguf"; fail=1; continue; }
  "$SPILL" import "$g" "$g.spill" >/dev/null 2>"$TMP/err" || { echo "FAIL $ty: import: $(tail -1 "$TMP/err")"; fail=1; continue; }
  "$SPILL" eval "$g.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/s.f32" --act-quant f32 >/dev/null 2>"$TMP/err" ||
    { echo "FAIL $ty: eval: $(tail -1 "$TMP/err")"; fail=1; continue; }
  out=$($PY "$QW" logits "$g" --tokens "$TOK" --compare "$TMP/s.f32" --tol 1e-4 2>&1) &&
    echo "ok   $ty: spill vs qwen35moe_ref.py's forward of the GGUF: $out" ||
    { echo "FAIL $ty: spill vs qwen35moe_ref.py: $out"; fail=1; }
done
# the same model with its layer kinds as a bool array: the same container
$PY "$QW" make-gguf "$TMP/arr.gguf" --type F32 --seed 5 --recurrent-array &&
  "$SPILL" import "$TMP/arr.gguf" "$TMP/arr.spill" >/dev/null 2>&1 &&
  "$SPILL" eval "$TMP/arr.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/a.f32" --act-quant f32 >/dev/null 2>&1 &&
  "$SPILL" eval "$TMP/m-F32.gguf.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/b.f32" --act-quant f32 >/dev/null 2>&1 &&
  cmp -s "$TMP/a.f32" "$TMP/b.f32" && echo "ok   recurrent_layers array = full_attention_interval 4 (logits bit-identical)" ||
  { echo "FAIL recurrent_layers array vs interval"; fail=1; }
# hostile: each must be refused with a message naming the culprit
n=0
refuse() {
  local want="$1"
  shift
  n=$((n + 1))
  local g="$TMP/h$n.gguf"
  $PY "$QW" make-gguf "$g" --type F32 --seed 5 "$@" || { echo "FAIL hostile $n: make-gguf"; fail=1; return; }
  if "$SPILL" import "$g" "$g.spill" >/dev/null 2>"$TMP/err"; then
    echo "FAIL hostile $n ($*): imported"
    fail=1
  elif grep -q -- "$want" "$TMP/err"; then
    echo "ok   hostile $n: $(tail -1 "$TMP/err")"
  else
    echo "FAIL hostile $n ($*): message lacks '$want': $(tail -1 "$TMP/err")"
    fail=1
  fi
}
refuse "rope.dimension_sections" --set-kv 'qwen35moe.rope.dimension_sections=[2,0,0,0]'
refuse "rope.dimension_sections" --set-kv 'qwen35moe.rope.dimension_sections=null'
refuse "expert_shared_feed_forward_length" --set-kv 'qwen35moe.expert_shared_feed_forward_length=null'
refuse "ssm.inner_size" --set-kv 'qwen35moe.ssm.inner_size=63'
refuse "ssm.state_size" --set-kv 'qwen35moe.ssm.state_size=null'
refuse "multiple of" --set-kv 'qwen35moe.ssm.group_count=3'
refuse "recurrent_layers" --set-kv 'qwen35moe.attention.recurrent_layers=[true,false]'
refuse "rope.scaling.type" --set-kv 'qwen35moe.rope.scaling.type="yarn"'
refuse "expert_gating_func" --set-kv 'qwen35moe.expert_gating_func=2'
refuse "ffn_gate_inp_shexp" --drop blk.0.ffn_gate_inp_shexp.weight
refuse "ssm_a" --drop blk.1.ssm_a
refuse "attn_gate" --drop blk.2.attn_gate.weight
refuse "attn_q_norm" --drop blk.3.attn_q_norm.weight
exit $fail
