#!/usr/bin/env bash
# traces/convert.sh: regenerates the converted real traces of traces/ from
# the original files other tools wrote (../shared/traces/real, README there)
# with `spill trace convert`. Deterministic: the same inputs give the same
# bytes. Usage: traces/convert.sh [SRC_DIR] (default ../shared/traces/real
# relative to the repository), after `bazel build //cli:spill`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${1:-$ROOT/../shared/traces/real}"
[ -d "$SRC" ] || SRC=/work/shared/traces/real
SPILL="${SPILL:-$ROOT/bazel-bin/cli/spill}"
T="$ROOT/traces"

BMOE="github.com/Helldez/BigMoeOnEdge docs/bench-data/2026-07-15-route-trace"
BMOE_C="commit 36020f2f127f061f837fa2ff430e9d1d745438f9"
"$SPILL" trace convert --from bmoe-csv --top-k-native 8 --model Gemma-4-26B-A4B-it \
  --source "$BMOE/gemma.route.csv, $BMOE_C (llama.cpp-based engine --route-trace, Q4_K_M, phone)" \
  -o "$T/bigmoeonedge/gemma-4-26b-a4b.jsonl" "$SRC/bigmoeonedge/gemma.route.csv"
"$SPILL" trace convert --from bmoe-csv --top-k-native 4 --model gpt-oss-120b \
  --source "$BMOE/gptoss.route.csv, $BMOE_C (llama.cpp-based engine --route-trace, Q4_K_M, phone)" \
  -o "$T/bigmoeonedge/gpt-oss-120b.jsonl" "$SRC/bigmoeonedge/gptoss.route.csv"

FP="github.com/AmanPriyanshu/GPT-OSS-MoE-ExpertFingerprinting data/"
FP_C="commit 72b368f60045221f21eeb65debb27d58de92e565"
for f in "$SRC"/gpt-oss-20b-fingerprinting/*_examples.json; do
  b="$(basename "$f" .json)"
  short="${b%%__*}" # dataset name
  "$SPILL" trace convert --from hf-router-json --experts 32 --model gpt-oss-20b \
    --source "$FP${b//__//}.json, $FP_C (transformers, greedy decode)" \
    -o "$T/gpt-oss-20b-fingerprinting/gpt-oss-20b-$short.jsonl" "$f"
done

"$SPILL" trace convert --from sorted-ids-txt --layers 32 --experts 8 \
  --model Mixtral-8x7B-Instruct-v0.1 \
  --source "github.com/h39s/mlsys active_experts.txt, branch global_lfy, commit be84cfb19914c62e6fe282396fa6087b4796902c (mixtral-offloading fork, 2-bit experts)" \
  -o "$T/mixtral-offloading/mixtral-8x7b.jsonl" "$SRC/mixtral-offloading/active_experts.txt"
