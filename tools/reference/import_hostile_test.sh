#!/usr/bin/env bash
# `spill import` / `verify` / `run` against hostile sources (issue 26, items
# 6, 13, 14; docs/RELIABILITY.md), each on a tiny checkpoint written by
# import_ref.py and edited in place by hostile_patch.py (same size):
#  - a source rewritten between a kill -9 and the resume is refused by name
#    (also when its times are put back, and when only the sampled content
#    differs: a journal edited to simulate it); a resumed DST's journal or
#    bank that is a symlink is refused, the tokenizer's temp file never a link
#    written through;
#  - a NaN / Inf source weight is refused by tensor and index in every path
#    (safetensors F32/F16/BF16, GGUF F32/F16/Q8_0/Q4_K; keep/q8/q4/rvq3);
#    finite weights that overflow make `spill run` refuse to sample, and
#    `spill eval` refuse to write or rank the logits, by name;
#  - an unusable tokenizer (unknown tokenizer.ggml.pre, EOS out of range, a
#    merge of unknown tokens) is refused by import and reported by verify.
set -uo pipefail
SPILL="$1"
REF="$2"
PATCH="$3"
TINYTOK="$4"
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init hostile

# expect_err PATTERN CMD...: CMD fails and its stderr matches PATTERN
expect_err() {
  local pat="$1"; shift
  if "$@" >/dev/null 2>"$TMP/err"; then bad "accepted: $*"; return 1; fi
  if grep -q -- "$pat" "$TMP/err"; then ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-160)"; return 0; fi
  bad "wrong error for $*: $(tail -1 "$TMP/err")"
  return 1
}
no_container() { # $1 = DST: nothing there that verify calls clean
  "$SPILL" verify "$1" >/dev/null 2>&1 && bad "verify accepts $1"
  return 0
}

HF="$TMP/hf"
$PY "$REF" make-hf "$HF" --arch qwen3_moe --dtype F32 --seed 7 || bad "make hf"
GG="$TMP/m.gguf"
$PY "$REF" make-gguf "$GG" --arch qwen3_moe --type F16 --seed 7 --vocab || bad "make gguf"

# ---- 6: a source rewritten between a kill and the resume
fresh() { rm -rf "$2"; cp -r "$1" "$2"; }
kill_import() { # SRC DST K [import options]: kill -9 after K units
  local s="$1" d="$2" k="$3"
  shift 3
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$s" "$d" "$@") >/dev/null 2>&1
  [ $? -eq 137 ] || bad "kill after $k units of $s: not killed"
}
fresh "$HF" "$TMP/s6"
kill_import "$TMP/s6" "$TMP/s6.spill" 25 --experts q8
touch -r "$TMP/s6/model.safetensors" "$TMP/stamp"
$PY "$PATCH" st "$TMP/s6/model.safetensors" model.layers.1.mlp.experts.7.down_proj.weight 0 0000803f
touch -r "$TMP/stamp" "$TMP/s6/model.safetensors" # the same size and mtime
expect_err "model.safetensors changed since the interrupted import" "$SPILL" import "$TMP/s6" "$TMP/s6.spill" --experts q8
no_container "$TMP/s6.spill"
# a GGUF source, the same
cp "$GG" "$TMP/g6.gguf"
kill_import "$TMP/g6.gguf" "$TMP/g6.spill" 12 --trunk q8
$PY "$PATCH" gguf "$TMP/g6.gguf" blk.1.ffn_down_exps.weight 2 0040
expect_err "g6.gguf changed since the interrupted import" "$SPILL" import "$TMP/g6.gguf" "$TMP/g6.spill" --trunk q8
no_container "$TMP/g6.spill"
# only the sampled content differs (a rewrite that kept size, times and
# inode: simulated in the journal): refused, naming the content
fresh "$HF" "$TMP/j6"
kill_import "$TMP/j6" "$TMP/j6.spill" 25
sed -i '1s/sample=[0-9a-f]*/sample=00000000/' "$TMP/j6.spill/import.journal"
expect_err "j6/model.safetensors changed since the interrupted import (content" "$SPILL" import "$TMP/j6" "$TMP/j6.spill"
# a source over 4 MiB is sampled, not read whole: the journal's crc32 is
# that of the regions import_run.c names (recomputed here)
fresh "$HF" "$TMP/b6"
$PY "$PATCH" st-pad "$TMP/b6/model.safetensors" 5000000
kill_import "$TMP/b6" "$TMP/b6.spill" 25
want=$($PY "$PATCH" sample "$TMP/b6/model.safetensors")
got=$(head -1 "$TMP/b6.spill/import.journal" | grep -o 'sample=[0-9a-f]*' | cut -d= -f2)
sz=$(stat -c %s "$TMP/b6/model.safetensors")
[ "$sz" -gt 4194304 ] && [ "$want" = "$got" ] && ok "a $sz-byte source: sampled crc32 $got as specified" ||
  bad "sampled crc32: journal $got, expected $want ($sz bytes)"
# rewrite the last 4 bytes (always sampled), then give the journal the file's
# new times (a rewrite that kept them): the content sample alone refuses it
printf '\0\0\0\0' | dd of="$TMP/b6/model.safetensors" bs=1 seek=$((sz - 4)) conv=notrunc 2>/dev/null
t=$($PY -c 'import os, sys; s = os.stat(sys.argv[1]); print("mtime=%d:ctime=%d" % (s.st_mtime_ns, s.st_ctime_ns))' "$TMP/b6/model.safetensors")
sed -i "1s/mtime=[0-9]*:ctime=[0-9]*/$t/" "$TMP/b6.spill/import.journal"
expect_err "b6/model.safetensors changed since the interrupted import (content crc32 sample=$got" \
  "$SPILL" import "$TMP/b6" "$TMP/b6.spill"
# an unchanged source resumes
fresh "$HF" "$TMP/u6"
kill_import "$TMP/u6" "$TMP/u6.spill" 25
"$SPILL" import "$TMP/u6" "$TMP/u6.spill" 2>"$TMP/err" && grep -q "(25 resumed)" "$TMP/err" &&
  "$SPILL" verify "$TMP/u6.spill" >/dev/null 2>&1 && ok "an unchanged source resumes (25 units adopted)" ||
  bad "unchanged source resume: $(tail -1 "$TMP/err")"
# a resumed import never writes through a symlink in DST (docs/RELIABILITY.md,
# "Opening files"): DST a copy of an interrupted one whose journal, a bank or
# the tokenizer file links back to the original (a copied or shared tree):
# refused by name, the original's bytes unchanged
fresh "$HF" "$TMP/l6"
$PY "$TINYTOK" "$TMP/l6" || bad "l6: tokenizer"
kill_import "$TMP/l6" "$TMP/l6.spill" 25
bank=$(cd "$TMP/l6.spill" && ls experts-*.bin | head -1)
for f in import.journal "$bank"; do
  rm -rf "$TMP/l6b.spill" && cp -r "$TMP/l6.spill" "$TMP/l6b.spill" || bad "l6b: copy"
  ln -sf "$TMP/l6.spill/$f" "$TMP/l6b.spill/$f"
  before=$(md5sum <"$TMP/l6.spill/$f")
  expect_err "l6b.spill/$f: is a symbolic link; spill does not write through links" \
    "$SPILL" import "$TMP/l6" "$TMP/l6b.spill"
  [ "$(md5sum <"$TMP/l6.spill/$f")" = "$before" ] || bad "l6: $f written through the link"
done
# the tokenizer is copied into DST through a temp file of its own (O_EXCL):
# a link at the old fixed temp name (tokenizer.json.tmp) is not written through
rm -rf "$TMP/l6b.spill" && cp -r "$TMP/l6.spill" "$TMP/l6b.spill" || bad "l6b: copy"
echo "keep me" >"$TMP/l6-victim.json"
ln -sf "$TMP/l6-victim.json" "$TMP/l6b.spill/tokenizer.json.tmp"
"$SPILL" import "$TMP/l6" "$TMP/l6b.spill" >/dev/null 2>"$TMP/err" || bad "l6b: resume: $(tail -1 "$TMP/err")"
[ "$(cat "$TMP/l6-victim.json")" = "keep me" ] && cmp -s "$TMP/l6/tokenizer.json" "$TMP/l6b.spill/tokenizer.json" &&
  ok "the tokenizer copied beside a linked tokenizer.json.tmp, its target kept" ||
  bad "l6b: the tokenizer was written through tokenizer.json.tmp"

# ---- 13: non-finite source weights, every source dtype and target
nonfinite() { # LABEL KIND(st|gguf) MAKE_ARGS TENSOR BYTE_OFFSET HEX PATTERN TARGET_OPTIONS...
  local label="$1" kind="$2" make="$3" tensor="$4" off="$5" hex="$6" pat="$7" src
  shift 7
  if [ "$kind" = st ]; then
    src="$TMP/nf-$label"
    # shellcheck disable=SC2086
    $PY "$REF" make-hf "$src" --arch qwen3_moe --seed 7 $make || { bad "$label: make"; return; }
    $PY "$PATCH" st "$src/model.safetensors" "$tensor" "$off" "$hex" || { bad "$label: patch"; return; }
  else
    src="$TMP/nf-$label.gguf"
    # shellcheck disable=SC2086
    $PY "$REF" make-gguf "$src" --arch qwen3_moe --seed 7 $make || { bad "$label: make"; return; }
    $PY "$PATCH" gguf "$src" "$tensor" "$off" "$hex" || { bad "$label: patch"; return; }
  fi
  local opts
  for opts in "$@"; do
    # shellcheck disable=SC2086
    expect_err "$pat" "$SPILL" import "$src" "$src.spill" $opts && no_container "$src.spill"
    rm -rf "$src.spill"
  done
}
E=model.layers.1.mlp.experts.3.up_proj.weight
Q=model.layers.0.self_attn.q_proj.weight
# F32 NaN at element 70 = (row 1, column 6) of a (32, 64) expert matrix
nonfinite st-f32-nan st "--dtype F32" "$E" 280 0000c07f "tensor $E: value nan at (row 1, column 6)" \
  "" "--experts q8" "--experts q4" "--experts rvq3"
nonfinite st-f32-inf st "--dtype F32" "$Q" 4 0000807f "tensor $Q: value inf at (row 0, column 1)" \
  "" "--trunk q8" "--trunk q4"
nonfinite st-f16-inf st "--dtype F16" "$E" 0 00fc "tensor $E: value -inf at (row 0, column 0)" "" "--experts q8"
nonfinite st-bf16-nan st "--dtype BF16" "$E" 2 c07f "tensor $E: value nan at (row 0, column 1)" "" "--experts q4"
nonfinite gg-f32-nan gguf "--type F32" blk.1.ffn_up_exps.weight 8448 0000c07f \
  "tensor blk.1.ffn_up_exps.weight expert 1: value nan at (row 1, column 0)" "" "--experts q8" "--experts rvq3"
nonfinite gg-f16-inf gguf "--type F16" blk.0.attn_q.weight 2 007c "tensor blk.0.attn_q.weight: value inf at" \
  "" "--trunk q4"
nonfinite gg-q8-inf gguf "--type Q8_0" blk.0.ffn_gate_exps.weight 0 007c \
  "tensor blk.0.ffn_gate_exps.weight expert 0: value [-a-z]* at (row 0, column [0-9]*)" "" "--experts q8" "--experts q4"
nonfinite gg-q4k-nan gguf "--type Q4_K" blk.1.ffn_down_exps.weight 0 007e \
  "tensor blk.1.ffn_down_exps.weight expert 0: value nan at (row 0, column" ""
# finite weights that overflow (the final norm's weights and lm_head's row 5
# all 3e38: every product overflows): the logits are not finite, and `spill
# run` refuses to sample from them, by name
src="$TMP/overflow"
big=$(printf 'e6b1617f%.0s' $(seq 64))
$PY "$REF" make-hf "$src" --arch qwen3_moe --seed 7 && $PY "$PATCH" st "$src/model.safetensors" model.norm.weight 0 "$big" &&
  $PY "$PATCH" st "$src/model.safetensors" lm_head.weight 1280 "$big" &&
  "$SPILL" import "$src" "$src.spill" >/dev/null 2>&1 || bad "overflow: import"
expect_err "logits .*not finite" "$SPILL" run "$src.spill" "hi" -n 2 &&
  grep -q "SPILL_E_NONFINITE" "$TMP/err" && grep -q "NOT FINITE: the logits at position" "$TMP/err" ||
  bad "overflow: not SPILL_E_NONFINITE with the summary's note: $(cat "$TMP/err")"
# `spill eval` neither writes nor ranks them: refused by position and id,
# no --logits-out file left (last position and every position)
for ap in "" --all-positions; do
  rm -f "$TMP/over.f32"
  expect_err "logits not finite: position [0-9]*, token id [0-9]* is .*nothing written (SPILL_E_NONFINITE)" \
    "$SPILL" eval "$src.spill" --tokens 1,2,3 $ap --logits-out "$TMP/over.f32" &&
    { [ ! -e "$TMP/over.f32" ] || bad "overflow: eval $ap wrote non-finite logits"; }
done

# ---- 14: an unusable tokenizer is refused at import and reported by verify
tok_bad() { # LABEL PATTERN PATCH_ARGS...
  local label="$1" pat="$2"
  shift 2
  cp "$GG" "$TMP/tok-$label.gguf"
  $PY "$PATCH" "$1" "$TMP/tok-$label.gguf" "${@:2}" || { bad "$label: patch"; return; }
  expect_err "$pat" "$SPILL" import "$TMP/tok-$label.gguf" "$TMP/tok-$label.spill"
  no_container "$TMP/tok-$label.spill"
}
tok_bad pre 'tokenizer.ggml.pre "bogus"' gguf-str tokenizer.ggml.pre bogus
tok_bad eos 'eos.*99999' gguf-u32 tokenizer.ggml.eos_token_id 99999
# HF: a merge of tokens the vocabulary does not have
fresh "$HF" "$TMP/tokm"
$PY "$TINYTOK" "$TMP/tokm" && sed -i 's/"l o"\]/"l zq"]/' "$TMP/tokm/tokenizer.json" || bad "tokm: make"
expect_err "merge" "$SPILL" import "$TMP/tokm" "$TMP/tokm.spill"
no_container "$TMP/tokm.spill"
# verify: a container whose tokenizer file is replaced by an unusable one
"$SPILL" import "$GG" "$TMP/v.spill" >/dev/null 2>&1 && "$SPILL" verify "$TMP/v.spill" >/dev/null 2>&1 ||
  bad "verify: the good GGUF import"
$PY "$PATCH" gguf-str "$TMP/v.spill/tokenizer.gguf" tokenizer.ggml.pre bogus
expect_err 'DEFECT: .*tokenizer.ggml.pre "bogus"' "$SPILL" verify "$TMP/v.spill"
fresh "$HF" "$TMP/vh"
$PY "$TINYTOK" "$TMP/vh" && "$SPILL" import "$TMP/vh" "$TMP/vh.spill" >/dev/null 2>&1 || bad "verify: the good HF import"
sed -i 's/"l o"\]/"l zq"]/' "$TMP/vh.spill/tokenizer.json"
expect_err 'DEFECT: .*merge' "$SPILL" verify "$TMP/vh.spill"
exit $fail
