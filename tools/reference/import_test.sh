#!/usr/bin/env bash
# `spill import` end to end (docs/MODEL.md "Imported architectures"): for
# each architecture (qwen3_moe, olmoe, mixtral) and source format
# (safetensors F32/F16/BF16, sharded with an index; GGUF F32/F16/BF16/Q8_0/
# Q4_0/Q4_K/Q5_K/Q6_K, llama.cpp's Q4_K_M mix and Q5_0/Q5_1 (quantised by
# ckpt_io.py's own ggml reference quantisers, kept verbatim)), a tiny random checkpoint written by import_ref.py is imported,
# `spill verify` must pass, and spill's logits at every position must agree
# with import_ref.py's float64 forward pass computed from the SOURCE file
# within 1e-4 of the logit scale. GGUF Q8_0/Q4_0 weights must dequantise
# bit-identically in the container. Then, on imported models: logits
# bit-identical across storage modes, cache sizes, lookahead and threads;
# resume after kill -9 at several points (and after a corrupted record)
# byte-identical to an uninterrupted import; refusals with named errors. The
# tokenizer travels: a GGUF's as DST/tokenizer.gguf, which the engine encodes
# prompts with (eval ids == the source's) and whose chat template run --chat uses.
set -uo pipefail
SPILL="$1"
REF="$2"
TINYTOK="${3:-}"   # tools/tok/tiny_tokenizer.py: the tokenizer-travels-along check
# shellcheck source=tools/reference/import_test_lib.sh
. "$(dirname "$0")/import_test_lib.sh"
import_test_init imp

for arch in qwen3_moe olmoe mixtral; do
  for src in hf:F32:1 hf:F16:2 hf:BF16:3 gguf:F32 gguf:F16 gguf:BF16 gguf:Q8_0 gguf:Q4_0 \
      gguf:Q4_K gguf:Q5_K gguf:Q6_K gguf:Q4_K_M gguf:Q5_0 gguf:Q5_1; do
    IFS=: read -r kind ty shards <<<"$src"
    if [ "$kind" = hf ]; then
      in="$TMP/$arch-$ty"
      $PY "$REF" make-hf "$in" --arch "$arch" --dtype "$ty" --shards "$shards" --seed 7 || { bad "$arch $src: make"; continue; }
    else
      in="$TMP/$arch-$ty.gguf"
      $PY "$REF" make-gguf "$in" --arch "$arch" --type "$ty" --seed 7 || { bad "$arch $src: make"; continue; }
    fi
    out="$in.spill"
    import_check "$in" "$arch $src" "--tol 1e-4" || continue
    # a GGUF's tokenizer travels as DST/tokenizer.gguf: same ids from both
    if [ "$kind" = gguf ] && [ "$ty" = F32 ]; then
      a=$("$SPILL" tokenize "$in" "hello world, hello" --json 2>&1) && b=$("$SPILL" tokenize "$out" "hello world, hello" --json 2>&1) &&
        [ "$a" = "$b" ] && [ -f "$out/tokenizer.gguf" ] && ok "$arch $src: tokenizer carried as tokenizer.gguf: $(echo "$b" | cut -c1-50)" ||
        bad "$arch $src: tokenizer: source '$a' container '$b'"
      # ... and the engine (spill eval/run/serve/chat) encodes prompts with it:
      # a text prompt's logits equal those of the source GGUF's ids (with BOS)
      t="hello world, hello"
      ids=$("$SPILL" tokenize "$in" "$t" --bos --json 2>/dev/null | $PY -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
      "$SPILL" eval "$out" "$t" --all-positions --logits-out "$TMP/t.f32" >/dev/null 2>&1 &&
        "$SPILL" eval "$out" --tokens "$ids" --all-positions --logits-out "$TMP/i.f32" >/dev/null 2>&1 &&
        cmp -s "$TMP/t.f32" "$TMP/i.f32" && ok "$arch $src: the engine encodes prompts with tokenizer.gguf ($ids)" ||
        bad "$arch $src: engine prompt ids differ from the source GGUF's ($ids; $(stat -c %s "$TMP/t.f32") vs $(stat -c %s "$TMP/i.f32") logit bytes)"
    fi
    if [ "$kind" = gguf ] && [ "${ty:0:1}" = Q ]; then
      r=$($PY "$REF" check-weights "$in" "$out" 2>&1) && ok "$arch $src: $r" || bad "$arch $src: $r"
    fi
    # llama.cpp's Q4_K_M mix (Q6_K ffn_down_exps in layer 1 only): a v3
    # container whose banks carry their own section dtypes
    if [ "$ty" = Q4_K_M ]; then
      d=$(tr -d ' \t\n' <"$out/manifest.json" | grep -o '"dtypes":\[[^]]*\]' | tr '\n' ' ')
      [ "$d" = '"dtypes":["q4_k","q4_k","q4_k"] "dtypes":["q4_k","q4_k","q6_k"] ' ] &&
        ok "$arch $src: per-bank section dtypes $d" || bad "$arch $src: section dtypes '$d'"
    fi
  done
done

# The checkpoint's tokenizer travels with the container (engine/tok): an HF
# checkpoint with tokenizer.json + tokenizer_config.json imports into a
# container holding both, and spill tokenize / run --chat on the container
# use them.
if [ -n "$TINYTOK" ]; then
  in="$TMP/tok-hf"
  $PY "$REF" make-hf "$in" --arch qwen3_moe --dtype F32 --shards 1 --seed 7 && $PY "$TINYTOK" "$in" &&
    "$SPILL" import "$in" "$in.spill" 2>"$TMP/err" || bad "tokenizer: import: $(tail -1 "$TMP/err")"
  [ -f "$in.spill/tokenizer.json" ] && [ -f "$in.spill/tokenizer_config.json" ] || bad "tokenizer: files not copied"
  ids=$("$SPILL" tokenize "$in.spill" "hello<|end|>" --json 2>/dev/null)
  [ "$ids" = '{"ids": [260, 262], "offsets": [0, 5], "pieces": ["hello", "<|end|>"], "count": 2}' ] &&
    ok "tokenizer: the container tokenizes with the checkpoint's tokenizer" || bad "tokenizer: $ids"
  "$SPILL" run "$in.spill" "hello" --chat -n 3 >/dev/null 2>"$TMP/err" &&
    ok "tokenizer: run --chat renders the checkpoint's template" || bad "tokenizer: run --chat: $(tail -1 "$TMP/err")"
fi

# A GGUF's tokenizer.chat_template travels in tokenizer.gguf and renders the
# prompt of `spill run --chat` (the reply equals that of the rendered text);
# only tokenizer.gguf is the container's tokenizer, not another *.gguf beside.
in="$TMP/chat.gguf"
$PY "$REF" make-gguf "$in" --arch qwen3_moe --type F32 --seed 7 --chat-template &&
  "$SPILL" import "$in" "$in.spill" 2>"$TMP/err" || bad "chat template: import: $(tail -1 "$TMP/err")"
b=""
a=$("$SPILL" run "$in.spill" "hello" --chat -n 4 2>"$TMP/err") &&
  b=$("$SPILL" run "$in.spill" "<user>hello</user><assistant>" -n 4 2>/dev/null) && [ "$a" = "$b" ] &&
  ok "chat template: run --chat renders the GGUF's tokenizer.chat_template" ||
  bad "chat template: run --chat '$a' vs rendered '$b': $(tail -1 "$TMP/err")"
# another GGUF (another vocabulary) copied into the container is not taken
$PY "$REF" make-gguf "$in.spill/aaa.gguf" --arch qwen3_moe --type F32 --seed 7 --vocab
t="hello world"
a=$("$SPILL" tokenize "$in" "$t" --bos --json 2>&1)
b=$("$SPILL" tokenize "$in.spill" "$t" --bos --json 2>&1)
c=$("$SPILL" tokenize "$in.spill/aaa.gguf" "$t" --bos --json 2>&1)
ids=$(echo "$a" | $PY -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
[ "$a" = "$b" ] && [ "$a" != "$c" ] &&
  "$SPILL" eval "$in.spill" "$t" --all-positions --logits-out "$TMP/t.f32" >/dev/null 2>&1 &&
  "$SPILL" eval "$in.spill" --tokens "$ids" --all-positions --logits-out "$TMP/i.f32" >/dev/null 2>&1 &&
  cmp -s "$TMP/t.f32" "$TMP/i.f32" && ok "tokenizer.gguf: a stray *.gguf beside tokenizer.gguf is not the tokenizer" ||
  bad "stray gguf: source '$a' container '$b' stray '$c'"

# FP8 e4m3 with block-wise weight_scale_inv (DeepSeek-V3 / Kimi K2 layout):
# keep is refused naming the tensor; q8 requantises value x scale (q8 rounding
# of random weights: about 0.5% per tensor, reported; logits within 5e-2 of
# the reference, which applies the scales itself; without the scales they
# would be off by orders of magnitude).
f8="$TMP/qwen3_moe-F8"
$PY "$REF" make-hf "$f8" --arch qwen3_moe --dtype F8_E4M3 --shards 2 --seed 7 || bad "fp8: make"
fp8_keep_refused "$f8"
if "$SPILL" import "$f8" "$f8.spill" --experts q8 --trunk q8 --json >"$TMP/f8.json" 2>/dev/null &&
    "$SPILL" eval "$f8.spill" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/l.f32" >/dev/null 2>&1; then
  r=$($PY "$REF" logits "$f8" --tokens "$TOK" --compare "$TMP/l.f32" --tol 5e-2 2>&1) && ok "fp8 -> q8: $r" || bad "fp8 -> q8: $r"
  $PY - "$TMP/f8.json" <<'PY' && ok "fp8 -> q8: every requantised tensor reported, max error < 1%" || bad "fp8 -> q8 error report"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["requantised"]) == 18 and 0 < j["max_rel_err"] < 0.01, j
PY
else bad "fp8 -> q8: import/eval"; fi

# Placement never changes numerics, on an imported model (q4 experts from Q4_0,
# f32 experts from safetensors, the Q4_K/Q6_K mix of a Q4_K_M file).
placements_bit_identical "$TMP/qwen3_moe-Q4_0.gguf.spill" "$TMP/olmoe-F32.spill" "$TMP/mixtral-BF16.spill" \
  "$TMP/olmoe-Q4_K_M.gguf.spill"

# --experts rvq3: k-means codebooks per (layer, matrix), trained from the
# source. The container runs; its logits match the reference computed from
# the container's own decoded experts (swap-experts); the reported relative
# error per tensor equals the decoded one and beats a random codebook's
# (rvq-check); training is deterministic (a second import is byte-identical).
for arch in qwen3_moe mixtral; do
  in="$TMP/$arch-F32"
  [ -d "$in" ] || { bad "rvq3 $arch: no source"; continue; }
  if "$SPILL" import "$in" "$in.rvq" --experts rvq3 --json >"$TMP/rvq.json" 2>"$TMP/err" &&
      "$SPILL" verify "$in.rvq" >/dev/null 2>&1 &&
      "$SPILL" eval "$in.rvq" --act-quant f32 --tokens "$TOK" --all-positions --logits-out "$TMP/rvq.f32" >/dev/null 2>&1; then
    rm -rf "$in.rvqref"
    r=$($PY "$REF" swap-experts "$in" "$in.rvq" "$in.rvqref" 2>&1 &&
        $PY "$REF" logits "$in.rvqref" --tokens "$TOK" --compare "$TMP/rvq.f32" --tol 1e-4 2>&1) &&
      ok "rvq3 $arch: logits vs reference on the decoded experts: $r" || bad "rvq3 $arch: $r"
    r=$($PY "$REF" rvq-check "$in" "$in.rvq" "$TMP/rvq.json" 2>&1) &&
      ok "rvq3 $arch: $(echo "$r" | head -1) ..." || bad "rvq3 $arch: $r"
    "$SPILL" import "$in" "$in.rvq2" --experts rvq3 >/dev/null 2>&1 &&
      diff -r -q -x import.journal "$in.rvq" "$in.rvq2" >/dev/null &&
      ok "rvq3 $arch: a second import is byte-identical" || bad "rvq3 $arch: not deterministic"
  else
    bad "rvq3 $arch: import/verify/eval: $(tail -1 "$TMP/err")"
  fi
done

# The config key lists against real checkpoints' config.json files: each
# family's real key set (values of the tiny model, the real ones for keys
# that do not change the maths) must import. Key sets from
# Qwen/Qwen3-30B-A3B/config.json (transformers 4.51.0),
# allenai/OLMoE-1B-7B-0125-Instruct/config.json and
# mistralai/Mixtral-8x7B-v0.1/config.json (transformers 4.36.0.dev0).
for arch in qwen3_moe olmoe mixtral; do
  in="$TMP/$arch-F32"
  rm -rf "$TMP/real-$arch" && cp -r "$in" "$TMP/real-$arch"
  $PY - "$TMP/real-$arch/config.json" "$arch" <<'PYEOF'
import json, sys
p, arch = sys.argv[1], sys.argv[2]
c = json.load(open(p))
real = {
    "qwen3_moe": dict(architectures=["Qwen3MoeForCausalLM"], attention_bias=False, attention_dropout=0.0,
                      bos_token_id=1, decoder_sparse_step=1, eos_token_id=2, hidden_act="silu",
                      initializer_range=0.02, intermediate_size=6144, max_position_embeddings=40960,
                      max_window_layers=48, mlp_only_layers=[], norm_topk_prob=True, output_router_logits=False,
                      rope_scaling=None, router_aux_loss_coef=0.001, sliding_window=None,
                      tie_word_embeddings=False, torch_dtype="bfloat16", transformers_version="4.51.0",
                      use_cache=True, use_sliding_window=False),
    "olmoe": dict(architectures=["OlmoeForCausalLM"], attention_bias=False, attention_dropout=0.0,
                  bos_token_id=None, clip_qkv=None, eos_token_id=2, hidden_act="silu", initializer_range=0.02,
                  max_position_embeddings=4096, norm_topk_prob=False, output_router_logits=False,
                  pad_token_id=1, rope_scaling=None, router_aux_loss_coef=0.01, tie_word_embeddings=False,
                  torch_dtype="bfloat16", transformers_version="4.47.1", use_cache=True),
    "mixtral": dict(architectures=["MixtralForCausalLM"], attention_dropout=0.0, bos_token_id=1,
                    eos_token_id=2, hidden_act="silu", initializer_range=0.02, max_position_embeddings=32768,
                    output_router_logits=False, router_aux_loss_coef=0.02, sliding_window=None,
                    tie_word_embeddings=False, torch_dtype="bfloat16", transformers_version="4.36.0.dev0",
                    use_cache=True),
}[arch]
for k, v in real.items():
    c.setdefault(k, v)
json.dump(c, open(p, "w"), indent=1)
PYEOF
  "$SPILL" import "$TMP/real-$arch" "$TMP/real-$arch.spill" >/dev/null 2>"$TMP/err" &&
    ok "$arch: the real config.json key set imports" || bad "$arch: real config keys: $(tail -1 "$TMP/err")"
done

# Resume after kill -9: at several points, then re-run; the container must be
# byte-identical to an uninterrupted import (requantising, so units are work).
SRC="$TMP/qwen3_moe-F32"
"$SPILL" import "$SRC" "$TMP/full" --experts q4 --trunk q8 --json >"$TMP/full.json" 2>/dev/null || bad "resume: reference import"
grep -q '"max_rel_err"' "$TMP/full.json" || bad "resume: --json summary"
same() { # container files of $1 equal those of $TMP/full
  for f in manifest.json trunk.bin experts-000.bin experts-001.bin; do
    cmp -s "$1/$f" "$TMP/full/$f" || return 1
  done
}
for k in 1 10 21 22 30 37; do
  d="$TMP/kill$k"
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$SRC" "$d" --experts q4 --trunk q8) >/dev/null 2>&1
  rc=$?
  [ $rc -eq 137 ] || [ $k -ge 37 ] || { bad "resume: kill after $k units: rc $rc"; continue; }
  if [ -f "$d/manifest.json" ] && [ $k -lt 37 ]; then bad "resume: manifest after kill at $k"; fi
  "$SPILL" verify "$d" >/dev/null 2>&1 && [ $k -lt 37 ] && bad "resume: verify accepts a killed import ($k)"
  "$SPILL" import "$SRC" "$d" --experts q4 --trunk q8 2>"$TMP/err" || { bad "resume $k: $(tail -1 "$TMP/err")"; continue; }
  grep -q "resumed" "$TMP/err" || bad "resume $k: no resume count"
  same "$d" && "$SPILL" verify "$d" >/dev/null 2>&1 && ok "resume after kill -9 at unit $k: byte-identical ($(grep -o '([0-9]* resumed)' "$TMP/err" | tail -1))" || bad "resume after kill at $k: differs"
done
# --experts rvq3 after kill -9 (21 trunk units, then 8 records per layer): in
# the trunk (5), trunk done before layer 0's codebooks (21), after layer 0's
# first record (22), inside layer 0 (27) and inside layer 1 (33); a resumed
# run re-trains the same codebooks. Re-run on 1 thread, the uninterrupted
# reference on 2: byte-identical, and equal to a SPILL_ISA=ref import.
"$SPILL" import "$SRC" "$TMP/rfull" --experts rvq3 --threads 2 >/dev/null 2>&1 || bad "rvq3 resume: reference import"
SPILL_ISA=ref "$SPILL" import "$SRC" "$TMP/rref" --experts rvq3 --threads 1 >/dev/null 2>&1 &&
  ok "rvq3: scalar reference, 1 thread == avx2, 2 threads" || bad "rvq3 scalar import"
for k in 5 21 22 27 33; do
  d="$TMP/rkill$k"
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$SRC" "$d" --experts rvq3) >/dev/null 2>&1
  rc=$?
  [ $rc -eq 137 ] || { bad "rvq3 resume: kill after $k units: rc $rc"; continue; }
  "$SPILL" verify "$d" >/dev/null 2>&1 && bad "rvq3 resume: verify accepts a killed import ($k)"
  "$SPILL" import "$SRC" "$d" --experts rvq3 --threads 1 2>"$TMP/err" || { bad "rvq3 resume $k: $(tail -1 "$TMP/err")"; continue; }
  grep -q "resumed" "$TMP/err" || bad "rvq3 resume $k: no resume count"
  n=0
  for f in manifest.json trunk.bin experts-000.bin experts-001.bin; do
    cmp -s "$d/$f" "$TMP/rfull/$f" && cmp -s "$TMP/rref/$f" "$TMP/rfull/$f" && n=$((n + 1))
  done
  [ $n -eq 4 ] && "$SPILL" verify "$d" >/dev/null 2>&1 &&
    ok "rvq3 resume after kill -9 at unit $k: byte-identical ($(grep -o '([0-9]* resumed)' "$TMP/err" | tail -1))" ||
    bad "rvq3 resume after kill at $k: differs ($n of 4 files equal)"
done

# a torn / corrupted record listed in the journal is redone, not adopted
d="$TMP/kill-corrupt"
(SPILL_IMPORT_TEST_KILL_AFTER=30 exec "$SPILL" import "$SRC" "$d" --experts q4 --trunk q8) >/dev/null 2>&1
printf '\xff' | dd of="$d/experts-000.bin" bs=1 seek=$((4096 + 200)) conv=notrunc 2>/dev/null
printf '\x00' | dd of="$d/trunk.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
"$SPILL" import "$SRC" "$d" --experts q4 --trunk q8 >/dev/null 2>&1 && same "$d" && ok "resume redoes corrupted journaled units" || bad "resume with corrupted units"

# Refusals, each a named error, nothing verify accepts
expect_err() { # $1 = grep pattern, rest = command
  local pat="$1"; shift
  if "$@" >/dev/null 2>"$TMP/err"; then bad "accepted: $*"; return; fi
  grep -q -- "$pat" "$TMP/err" && ok "refused ($pat): $(tail -1 "$TMP/err" | cut -c1-150)" || bad "wrong error for $*: $(tail -1 "$TMP/err")"
}
expect_err "experts=q4" "$SPILL" import "$SRC" "$TMP/full" --experts q8 --trunk q8
expect_err "files=" "$SPILL" import "$TMP/olmoe-F32" "$TMP/full" --experts q4 --trunk q8
expect_err "not overwriting" "$SPILL" import "$SRC" "$TMP"
cp -r "$SRC" "$TMP/bad"
sed -i 's/"qwen3_moe"/"qwen2_moe"/' "$TMP/bad/config.json"
expect_err 'model_type "qwen2_moe"' "$SPILL" import "$TMP/bad" "$TMP/bad.spill"
cp "$SRC/config.json" "$TMP/bad/config.json"
sed -i 's/"use_cache"/"partial_rotary_factor": 0.5, "use_cache"/' "$TMP/bad/config.json"
expect_err "partial_rotary_factor" "$SPILL" import "$TMP/bad" "$TMP/bad2.spill"
cp "$SRC/config.json" "$TMP/bad/config.json"
sed -i 's/"attention_bias": false/"attention_bias": true/' "$TMP/bad/config.json"
expect_err "attention_bias" "$SPILL" import "$TMP/bad" "$TMP/bad3.spill"
cp "$SRC/config.json" "$TMP/bad/config.json"
sed -i 's/"moe_intermediate_size": 32/"moe_intermediate_size": 48/' "$TMP/bad/config.json"
expect_err "shape" "$SPILL" import "$TMP/bad" "$TMP/bad4.spill"
cp "$SRC/config.json" "$TMP/bad/config.json"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$TMP/bad/config.json"
expect_err "model.layers.2.input_layernorm.weight is missing" "$SPILL" import "$TMP/bad" "$TMP/bad5.spill"
[ -f "$TMP/bad5.spill/manifest.json" ] && bad "a manifest after a failed import"
"$SPILL" verify "$TMP/bad5.spill" >/dev/null 2>&1 && bad "verify accepts a failed import"
expect_err "expected keep, q8 or q4" "$SPILL" import "$SRC" "$TMP/rvq.spill" --trunk rvq3
expect_err "usage" "$SPILL" import "$SRC"
"$SPILL" import --help | grep -q "usage: spill import" || bad "import --help"
exit $fail
