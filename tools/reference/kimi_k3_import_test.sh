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
EVAL_FLAGS="--act-quant f32" # the float reference: matvec inputs in f32 whatever the weights
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

# ---- The Hugging Face checkpoint as released (KimiK3ForConditionalGeneration:
# text_config, language_model. prefix, vision tower skipped, compressed-tensors
# MXFP4 experts): the same random models as the GGUFs above. With F32 trunk
# tensors the HF import and the GGUF import (MXFP4 experts kept) give
# bit-identical logits; BF16 (as released) and the scale stored as F8_E8M0
# agree with the reference; rvq3 / q8 requantise.
for v in full nolora plain released; do
  d="$TMP/hf-$v"
  $PY "$REF" make-hf "$d" --variant "$v" --seed 7 --dtype F32 || { bad "$v: make-hf"; continue; }
  import_check "$d" "kimi-k3 HF $v (F32 trunk, MXFP4 experts kept)" "--tol 2e-5" || continue
  grep -q "skipped source 2 tensors outside the text model (vision_tower.\*, mm_projector.\*)" "$TMP/err" ||
    bad "HF $v: the summary does not name the skipped vision tower: $(tail -1 "$TMP/err")"
  "$SPILL" eval "$d.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/hf.f32" >/dev/null 2>&1
  "$SPILL" eval "$TMP/$v-MXFP4.gguf.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/gg.f32" >/dev/null 2>&1
  cmp -s "$TMP/hf.f32" "$TMP/gg.f32" && [ -s "$TMP/hf.f32" ] && ok "HF $v and GGUF $v imports: logits bit-identical" ||
    bad "HF $v and GGUF $v imports give different logits"
  # the float hyper-parameters (rms_norm_eps, gate lower bound, SiTU betas,
  # routed scale) rounded to f32 as the GGUF keys hold them: the manifests'
  # arch objects are equal value for value, not merely close
  $PY - "$d.spill/manifest.json" "$TMP/$v-MXFP4.gguf.spill/manifest.json" <<'PY' &&
import json, sys
a, b = (json.load(open(f))["arch"] for f in sys.argv[1:3])
assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
PY
    ok "HF $v and GGUF $v manifests: arch identical (f32-rounded floats)" ||
    bad "HF $v and GGUF $v manifests: arch differs"
done
$PY "$REF" make-hf "$TMP/hf-bf16" --variant released --seed 101 --scale-dtype F8_E8M0 --shards 3 &&
  import_check "$TMP/hf-bf16" "kimi-k3 HF released BF16, scales F8_E8M0, 3 shards, seed 101" "--tol 2e-5"
$PY - "$TMP/hf-released.spill/manifest.json" <<'PY' && ok "HF MXFP4 experts kept as mxfp4" || bad "HF MXFP4 experts not kept"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["experts"]["dtype"] == "mxfp4", m["experts"]
assert m["arch"]["family"] == "kimi-k3" and m["arch"]["attn_res_block"] == 3, m["arch"]
PY
for tgt in rvq3 q8; do
  rm -rf "$TMP/hf-$tgt.spill"
  if "$SPILL" import "$TMP/hf-released" "$TMP/hf-$tgt.spill" --experts $tgt 2>"$TMP/err" >/dev/null &&
    "$SPILL" verify "$TMP/hf-$tgt.spill" >/dev/null 2>&1 &&
    "$SPILL" eval "$TMP/hf-$tgt.spill" --tokens "$TOK" --all-positions --logits-out "$TMP/l.f32" >/dev/null 2>&1 &&
    grep -q "requantised blk.1.ffn_gate_exps" "$TMP/err"; then
    # shellcheck disable=SC2086
    r=$($PY "$REF" logits "$TMP/hf-released" --tokens "$TOK" --compare "$TMP/l.f32" --tol 1 2>&1 | grep -o 'max diff.*argmax equal at [0-9/]*')
    ok "HF --experts $tgt: imported, verified, evaluated ($(grep -o 'max relative error.*' "$TMP/err"); $r)"
  else bad "HF --experts $tgt: $(tail -1 "$TMP/err")"; fi
done

# Resume after kill -9 from the HF checkpoint: byte-identical
SRC="$TMP/hf-released"
rm -rf "$TMP/hfull"
"$SPILL" import "$SRC" "$TMP/hfull" >/dev/null 2>&1 || bad "HF resume: reference import"
for k in 20 100; do
  d="$TMP/hkill$k"
  rm -rf "$d"
  (SPILL_IMPORT_TEST_KILL_AFTER=$k exec "$SPILL" import "$SRC" "$d") >/dev/null 2>&1
  [ $? -eq 137 ] || { bad "HF resume: kill after $k units did not happen"; continue; }
  "$SPILL" import "$SRC" "$d" >/dev/null 2>&1 || { bad "HF resume $k failed"; continue; }
  same=1
  for f in "$TMP/hfull"/*; do
    [ "$(basename "$f")" = import.journal ] || cmp -s "$f" "$d/$(basename "$f")" || same=0
  done
  [ $same = 1 ] && ok "HF resume after kill -9 at unit $k: byte-identical" || bad "HF resume after kill at $k: differs"
done

# Hostile HF checkpoints, each refused by name: $2 = python statements on cfg
# (config.json), tx (the text config) and t (name -> [dtype, shape, raw bytes])
$PY "$REF" make-hf "$TMP/hf-one" --variant full --seed 7 --shards 1 || bad "make-hf one shard"
hmutate() { # $1 = name, $2 = statements
  $PY - "$TMP/hf-one" "$TMP/$1" "$2" <<'PY'
import json, os, shutil, struct, sys
src, dst, code = sys.argv[1:]
shutil.rmtree(dst, ignore_errors=True)
os.makedirs(dst)
cfg = json.load(open(os.path.join(src, "config.json")))
tx = cfg["text_config"]
data = open(os.path.join(src, "model.safetensors"), "rb").read()
(n,) = struct.unpack_from("<Q", data, 0)
hdr = json.loads(data[8:8 + n])
hdr.pop("__metadata__", None)
t = {k: [v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]] for k, v in hdr.items()}
L = "language_model.model.layers."
exec(code)
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
h, blobs, off = {}, [], 0
for k, (dt, sh, raw) in t.items():
    h[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
PY
}
hexp() { # $1 = name, $2 = statements, $3 = expected message
  hmutate "$1" "$2" && expect_err "$3" "$TMP/$1"
}
X="language_model.model.layers.1.block_sparse_moe.experts.3"
hexp h_noscale "del t['$X.w1.weight_scale']" "experts.3.w1.weight_scale is missing"
hexp h_shape "t['$X.w3.weight_packed'][1] = [t['$X.w3.weight_packed'][1][0] * 2, t['$X.w3.weight_packed'][1][1] // 2]" \
  "experts.3.w3.weight_packed: shape \[64, 8\], the config implies \[32, 16\]"
hexp h_e255 "b = bytearray(t['$X.w2.weight_scale'][2]); b[5] = 255; t['$X.w2.weight_scale'][2] = bytes(b)" \
  "experts.3.w2.weight_scale: e8m0 scale 255 (NaN) at row 5, block 0"
hexp h_scdt "t['$X.w1.weight_scale'][0] = 'I8'" "experts.3.w1.weight_scale: dtype I8, MXFP4 scales are e8m0 bytes"
hexp h_pkdt "t['$X.w1.weight_packed'][0] = 'I8'" "experts.3.w1.weight_packed: dtype I8, compressed-tensors MXFP4 packs into U8"
hexp h_stray "t[L + '0.mlp.extra.weight_packed'] = ['U8', [2, 2], bytes(4)]" "mlp.extra.weight_packed: a compressed-tensors MXFP4 tensor outside the routed experts"
hexp h_noq "del cfg['quantization_config']" "packed MXFP4 experts, but config.json has no compressed-tensors"
hexp h_qfmt "cfg['quantization_config']['format'] = 'nvfp4-pack-quantized'" "quantization_config.format is not \"mxfp4-pack-quantized\""
hexp h_qact "cfg['quantization_config']['config_groups']['group_0']['input_activations'] = {'num_bits': 8}" \
  "input_activations is set: activation quantisation is not supported"
hexp h_qbits "cfg['quantization_config']['config_groups']['group_0']['weights']['group_size'] = 16" "group_size 16: MXFP4 is 4 bits in groups of 32"
hexp h_qkey "cfg['quantization_config']['config_groups']['group_0']['weights']['zero_point_shift'] = 1" "weights.zero_point_shift is not understood"
hexp h_key "tx['attn_res_temperature'] = 2.0" "key \"attn_res_temperature\" is not understood for kimi_k3"
hexp h_top "cfg['logit_softcap'] = 30.0" "key \"logit_softcap\" is not understood for kimi_k3"
hexp h_lakey "tx['linear_attn_config']['gate_upper_bound'] = 1" "linear_attn_config.gate_upper_bound is not understood"
hexp h_act "tx['hidden_act'] = 'silu'" "hidden_act changes the maths"
hexp h_nope "tx['mla_use_nope'] = False" "mla_use_nope changes the maths"
hexp h_heads "tx['linear_attn_config']['num_heads'] = 4" "linear_attn_config.num_heads 4 != num_attention_heads 2"
hexp h_lb "tx['linear_attn_config']['gate_lower_bound'] = 1.0" "linear_attn_config.gate_lower_bound: 1 out of range"
hexp h_proj "del t[L + '2.mlp_res_proj.weight']" "layers.2.mlp_res_proj.weight is missing"
hexp h_alog "a = L + '0.self_attn.A_log'; t[a] = ['F32', [1], t[a][2][:4]]" "layers.0.self_attn.A_log: shape is not \[2, 1\] (or a longer vector)"
hexp h_gate "del t[L + '5.self_attn.g_proj.weight']" "language_model.model.layers.5.self_attn.g_proj.weight: the MLA output gate is on some"
hexp h_qlora "tx['q_lora_rank'] = None" "q_a_proj.weight: present or absent against q_lora_rank"
hexp h_extra "t['language_model.model.extra.weight'] = t['vision_tower.patch_embed.proj.weight']" \
  "source tensor language_model.model.extra.weight is not part of the KimiK3ForConditionalGeneration model"
exit $fail
