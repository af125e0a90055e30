#!/usr/bin/env bash
# fuzz/build.sh: builds the libFuzzer targets with clang-14 outside Bazel
# (Bazel's autodetected toolchain here is gcc, which has no libFuzzer).
#
#   fuzz/build.sh OUT_DIR      -> OUT_DIR/fuzz_{manifest,record,exp_config,trace,trace_convert,runs,safetensors,gguf,server_request,tok,jinja}
#
# The library sources the targets need are compiled once with
# -fsanitize=fuzzer-no-link,address,undefined into a static archive; each
# target links it with -fsanitize=fuzzer so only the objects it uses are
# pulled in. cJSON comes from Debian's libcjson-dev (not instrumented).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/fuzz/out}"
CC="${CC_FUZZ:-clang-14}"
mkdir -p "$OUT/obj"

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-std=c11 -O1 -g -I$ROOT $SAN -DSPILL_FUZZ_MANIFEST=\"$ROOT/fuzz/data/nano_manifest.json\""
SRCS=(
  research/trace/trace_convert.c engine/trace/trace_read.c research/trace/trace_replay.c
  research/trace/trace_stats.c engine/trace/trace_write.c
  engine/spill_config.c engine/spill_routing.c
  engine/spill_info.c
  harness/exp_config.c harness/exp_metrics.c harness/exp_rows.c harness/exp_report.c
  harness/exp_files.c harness/exp_env.c harness/stats.c harness/gnuplot_text.c
  harness/bench_stats.c
  engine/import/source.c engine/import/safetensors.c engine/import/gguf.c
  engine/quant/kernels_kquant_ref.c
  server/request_parse.c server/completion_text.c server/chat_prompt.c server/reply_channels.c
)
# engine/base, engine/format, engine/cache, engine/tok, engine/model,
# engine/quant and engine/plan: every library source of the package (their tests are C++),
# so a file added there cannot be left out of the archive (the dtype table's
# dtype_traits.c and the manifest's field table once were, and every target
# failed to link). engine/model and engine/quant come with the planner: its
# memory formula is the model's own (engine/model/model_memory.c, which
# sizes attention state through the attention-kind table and the kernels'
# scratch sizes).
for s in "$ROOT"/engine/base/*.c "$ROOT"/engine/format/*.c "$ROOT"/engine/cache/*.c \
         "$ROOT"/engine/tok/*.c "$ROOT"/engine/model/*.c "$ROOT"/engine/quant/*.c \
         "$ROOT"/engine/plan/*.c; do
  case "$s" in *_test.c) continue ;; esac
  SRCS+=("${s#"$ROOT"/}")
done
# Files with their own ISA flags (as their Bazel targets give them); chosen
# at run time by CPUID, so the targets still run on any x86-64.
declare -A ISA=(
  [engine/base/crc32_vpclmul.c]="-mavx512f -mvpclmulqdq -mpclmul"
)
for s in "${SRCS[@]}"; do
  case "$s" in
    engine/quant/*_avx2.c) ISA[$s]="-mavx2 -mfma -mf16c" ;;
    engine/quant/*_avx512.c) ISA[$s]="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c" ;;
  esac
done
# An object is rebuilt when it, its dependency list (clang -MMD) or any file
# in that list (the source and every header it includes) is missing or newer:
# a struct changed in a header must not leave objects built with the old layout.
stale() {
  local o="$1" d="$1.d" f
  [ -f "$o" ] && [ -f "$d" ] || return 0
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$d"); do
    [ -e "$f" ] && [ ! "$f" -nt "$o" ] || return 0
  done
  return 1
}
# The bench workload's prompt table (exp_config checks workload.bench's
# prompt names against it), generated as //harness:bench_prompts does.
mkdir -p "$OUT/gen/harness"
"$ROOT/harness/embed_prompts.sh" "$OUT/gen/harness/bench_prompts.c" "$ROOT"/bench/prompts/*.txt
objs=("$OUT/obj/bench_prompts.o")
$CC $CFLAGS -fsanitize=fuzzer-no-link -c "$OUT/gen/harness/bench_prompts.c" -o "$OUT/obj/bench_prompts.o"
for s in "${SRCS[@]}"; do
  o="$OUT/obj/$(echo "$s" | tr / _).o"
  if stale "$o"; then
    # shellcheck disable=SC2086
    $CC $CFLAGS ${ISA[$s]:-} -fsanitize=fuzzer-no-link -MMD -MF "$o.d" \
      -c "$ROOT/$s" -o "$o"
  fi
  objs+=("$o")
done
rm -f "$OUT/libspill_fuzz.a"
ar rcs "$OUT/libspill_fuzz.a" "${objs[@]}"
for t in manifest record exp_config trace trace_convert runs safetensors gguf server_request tok jinja; do
  $CC $CFLAGS -fsanitize=fuzzer "$ROOT/fuzz/fuzz_$t.c" "$OUT/libspill_fuzz.a" \
    -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -o "$OUT/fuzz_$t"
done
echo "fuzz/build.sh: built $OUT/fuzz_{manifest,record,exp_config,trace,trace_convert,runs,safetensors,gguf,server_request,tok,jinja}" >&2
