#!/usr/bin/env bash
# Agreement of the C engine with the independent numpy reference (f64):
# for each attention mix of the K3 family (k3-family = 3 KDA : 1 MLA, mla,
# kda, gqa), qwen35 (3 GDN : 1 gated GQA), gqa-swa (gqa with a sliding window
# of 8 on the even layers and sinks: its ring of W - 1 + prefill_chunk rows
# wraps in the chunked case) (the default mix k3, Kimi K3 as
# released, is held to kimi_k3_ref.py by kimi_k3_import_test, since
# spill_ref.py refuses its parts by name) and each weight
# format pair (trunk/experts: f32/f32, q4/rvq3, f32/q8, q4/q4), a nano
# container is generated, 19 tokens (prefill and decode positions) are run
# token by token through `spill eval --all-positions` and through
# spill_ref.py, and every position's logits must agree within 1e-4 of the
# logit scale (max |diff| / max |ref|), with spill's activations in f32
# (--act-quant f32; the default q8 rounds the inputs of q8/q4 weights). The last position of chunked prefill
# is checked the same way. Prints one line per case.
set -uo pipefail
SPILL="$1"
REF="$2"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
TOKENS="256,72,101,108,108,111,32,119,111,114,108,100,33,32,84,104,101,32,113"
fail=0
cases=0
for mix in k3-family mla kda gqa qwen35 gqa-swa; do
  for pair in f32/f32 q4/rvq3 f32/q8 q4/q4; do
    trunk=${pair%/*}
    experts=${pair#*/}
    dir="$TMP/nano-$mix-$trunk-$experts"
    rm -rf "$dir"
    "$SPILL" gen --preset nano --attn "$mix" --trunk-dtype "$trunk" --expert-dtype "$experts" \
      "$dir" 2>/dev/null || { echo "FAIL $mix $pair: gen"; fail=1; continue; }
    "$SPILL" eval "$dir" --act-quant f32 --tokens "$TOKENS" --all-positions --logits-out "$TMP/all.f32" \
      >/dev/null 2>&1 || { echo "FAIL $mix $pair: eval"; fail=1; continue; }
    "$SPILL" eval "$dir" --act-quant f32 --tokens "$TOKENS" --logits-out "$TMP/last.f32" --prefill-chunk 8 \
      >/dev/null 2>&1 || { echo "FAIL $mix $pair: eval chunked"; fail=1; continue; }
    for what in all last; do
      cases=$((cases + 1))
      out=$(/usr/bin/python3 "$REF" "$dir" --tokens "$TOKENS" --compare "$TMP/$what.f32" \
        --tol 1e-4 2>&1)
      rc=$?
      line=$(printf "%s\n" "$out" | grep "max_abs_diff" | head -1)
      if [ $rc -eq 0 ]; then
        echo "ok   $mix trunk=$trunk experts=$experts positions=$what: $line"
      else
        echo "FAIL $mix trunk=$trunk experts=$experts positions=$what (rc $rc):"
        printf '%s\n' "$out" | tail -5
        fail=1
      fi
    done
  done
done
echo "$cases comparisons"
exit $fail
