#!/usr/bin/env bash
# import_test_lib.sh: the setup and the steps that every `spill import` end-to-end
# test (import_test.sh, deepseek_import_test.sh) shares. Sourced, never run:
#   SPILL=... REF=...   (the spill binary, the reference script: import_ref.py, deepseek_ref.py)
#   . "$(dirname "$0")/import_test_lib.sh"; import_test_init NAME
# then the steps below; the test ends with `exit $fail`. Bazel: list this file
# in the sh_test's data (tools/reference/BUILD).

# Fresh $TMP (below TEST_TMPDIR), the interpreter with numpy, the token ids
# every logits comparison uses, and the pass/fail reporting.
import_test_init() { # $1 = name of the scratch directory
  TMP="${TEST_TMPDIR:-$(mktemp -d)}/$1"
  rm -rf "$TMP"
  mkdir -p "$TMP"
  PY=/usr/bin/python3
  TOK="1,5,9,200,33,7,299,0,17"
  fail=0
}
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# Import SRC into SRC.spill, `spill verify` it, and compare its logits at every
# position of $TOK with the reference's float64 forward pass from SRC.
# spill runs with --act-quant f32 here: the engine's default q8 rounds the
# matvec inputs of quantised weights as llama.cpp does, the reference does not.
# EVAL_FLAGS (word-split, may be unset) go to `spill eval` after it.
# LOGITS_OPTS (word-split) go to the reference's `logits` command, e.g.
# "--tol 1e-4" or "--tol 5e-2 --max-outliers 1". Returns 1 when the import,
# verify or eval fails (the logits verdict is reported, not returned).
import_check() { # $1 = SRC, $2 = label, $3 = LOGITS_OPTS, rest = import options
  local in="$1" label="$2" lopts="$3" r
  shift 3
  rm -rf "$in.spill"
  "$SPILL" import "$in" "$in.spill" "$@" 2>"$TMP/err" >/dev/null || { bad "$label: import: $(tail -1 "$TMP/err")"; return 1; }
  "$SPILL" verify "$in.spill" >/dev/null 2>&1 || { bad "$label: verify"; return 1; }
  # shellcheck disable=SC2086
  "$SPILL" eval "$in.spill" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/l.f32" ${EVAL_FLAGS:-} >/dev/null 2>&1 || { bad "$label: eval"; return 1; }
  # shellcheck disable=SC2086
  r=$($PY "$REF" logits "$in" --tokens "$TOK" --compare "$TMP/l.f32" $lopts 2>&1) && ok "$label: $r" || bad "$label: $r"
  return 0
}

# FP8 e4m3 source (block-wise weight_scale_inv): importing with the weights
# kept is refused with a named error (no container dtype holds e4m3).
fp8_keep_refused() { # $1 = FP8 source; the refusals name the targets that take it
  if "$SPILL" import "$1" "$1.keep" 2>"$TMP/err"; then bad "fp8: keep accepted"; else
    grep -q "F8_E4M3 has no container format.*name a target (--trunk q8|q4)" "$TMP/err" &&
      ok "fp8 keep refused: $(tail -1 "$TMP/err" | cut -c1-120)" || bad "fp8 keep: $(tail -1 "$TMP/err")"
  fi
  # with the trunk requantised, the experts' refusal names every expert target
  if "$SPILL" import "$1" "$1.keepx" --trunk q8 2>"$TMP/err"; then bad "fp8: keep experts accepted"; else
    grep -q "expert tensor .*F8_E4M3 has no container format.*name a target (--experts q8|q4|rvq3)" "$TMP/err" &&
      ! "$SPILL" verify "$1.keepx" >/dev/null 2>&1 &&
      ok "fp8 --experts keep refused: $(tail -1 "$TMP/err" | cut -c1-120)" || bad "fp8 --experts keep: $(tail -1 "$TMP/err")"
  fi
}

# Placement never changes numerics: each imported MODEL's logits are
# bit-identical under every storage mode, cache size, lookahead and thread count.
placements_bit_identical() { # MODEL...
  local m knobs n
  for m in "$@"; do
    "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/base.f32" >/dev/null 2>&1
    n=0
    for knobs in "--storage direct" "--storage pagecache" "--storage mmap" "--cache-slots 0" \
        "--cache-slots 3" "--lookahead 4" "--lookahead 4 --lookahead-depth 2 --cache-slots 5" \
        "--threads 1" "--threads 2 --storage direct --verify"; do
      # shellcheck disable=SC2086
      "$SPILL" eval "$m" --tokens "$TOK" --all-positions --logits-out "$TMP/k.f32" $knobs >/dev/null 2>&1 &&
        cmp -s "$TMP/base.f32" "$TMP/k.f32" || { bad "$(basename "$m"): $knobs changes the logits"; continue; }
      n=$((n + 1))
    done
    ok "$(basename "$m"): logits bit-identical under $n placements"
  done
}
