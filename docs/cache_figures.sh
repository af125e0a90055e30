#!/usr/bin/env bash
# docs/cache_figures.sh: regenerates the policy table and the miss-ratio
# curves of docs/CACHE.md from the real traces of traces/ with
# `spill trace replay` (the engine's own cache code; Belady's MIN offline).
#
#   docs/cache_figures.sh [POLICIES]   (after `bazel build //cli:spill`)
#
# Writes docs/cache-policy-table.md (markdown: per trace, the tuning half and
# the held-out half, hit rate at 3/6/12% of the pool) and, per trace,
# docs/cache-mrc-NAME.{tsv,png,svg} (miss ratio vs slots from 1% to 25% of
# the pool, every policy and Belady on one gnuplot plot). Halves: OLMoE tunes
# on tokens 0-149 and reports on 150-298 (issue 14); every other family
# tunes on its first half and reports on the second. gpt-oss-20b is the
# concatenation of its six sequences (sorted file names). Deterministic
# (seed 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SPILL="${SPILL:-$ROOT/bazel-bin/cli/spill}"
POLS="${1:-lru,lfru,wtinylfu,arc,s3fifo,nextuse,nextuse-coact,nextuse-opt,gap-hd,mix-hd-opt,belady}"
cd "$ROOT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p cache
cat traces/gpt-oss-20b-fingerprinting/gpt-oss-20b-*.jsonl > cache/gpt-oss-20b-all.jsonl

# name file tuning_end
TRACES=(
  "olmoe traces/olmoe-1b-7b-299.jsonl 150"
  "gemma-4-26b-a4b traces/bigmoeonedge/gemma-4-26b-a4b.jsonl half"
  "gpt-oss-120b traces/bigmoeonedge/gpt-oss-120b.jsonl half"
  "gpt-oss-20b cache/gpt-oss-20b-all.jsonl half"
  "mixtral-8x7b traces/mixtral-offloading/mixtral-8x7b.jsonl half"
)

out="$TMP/table.md"
{
  echo "| trace | pool | half (tokens) | policy | 3% | 6% | 12% |"
  echo "|---|---|---|---|---|---|---|"
} > "$out"
for row in "${TRACES[@]}"; do
  read -r name file cut <<<"$row"
  # shape from stats --json: tokens, layers, experts
  json="$("$SPILL" trace stats --json "$file")"
  tokens=$(sed -n 's/.*"tokens": \([0-9]*\),.*/\1/p' <<<"$json" | head -1)
  pool=$(sed -n 's/.*"pool": \([0-9]*\),.*/\1/p' <<<"$json" | head -1)
  [ "$cut" = half ] && cut=$((tokens / 2))
  slots=""
  for f in 3 6 12; do
    s=$(( (pool * f + 50) / 100 )); [ "$s" -lt 1 ] && s=1
    slots="$slots${slots:+,}$s"
  done
  for half in "0:$cut tuning" "$cut: held-out"; do
    read -r win label <<<"$half"
    a=${win%%:*}; b=${win#*:}; n=$(( ${b:-$tokens} - a ))
    "$SPILL" trace replay --policy "$POLS" --slots "$slots" --tokens "$win" "$file" |
      awk -v t="$name" -v p="$pool ($slots slots)" -v h="$label $a-$(( ${b:-$tokens} - 1 )) ($n)" \
        'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s |\n", t, p, h, $1, $2, $3, $4 }' >> "$out"
  done
  lo=$(( pool / 100 )); [ "$lo" -lt 1 ] && lo=1
  hi=$(( pool / 4 )); step=$(( (hi - lo) / 40 )); [ "$step" -lt 1 ] && step=1
  "$SPILL" trace replay --policy "$POLS" --curve "$lo:$hi:$step" --plot "docs/cache-mrc-$name" \
    "$file" > /dev/null
done
mv "$out" docs/cache-policy-table.md
echo "wrote docs/cache-policy-table.md and docs/cache-mrc-*.{tsv,png,svg}" >&2
