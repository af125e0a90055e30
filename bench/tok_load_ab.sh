#!/usr/bin/env bash
# bench/tok_load_ab.sh: tokenizer load time, two builds of bench/tok_bench
# interleaved (A B A B ...) in one run, so a shared/noisy machine affects both
# arms alike: per load case the median [min, max] of wall and CPU time per
# arm and the B/A ratio of the CPU medians (docs/PERFORMANCE.md, Tokenizers).
#   bench/tok_load_ab.sh OLD_BIN NEW_BIN [ROUNDS] [REPS]
# OLD_BIN: tok_bench built at the commit to compare against (e.g. copied to
# cache/ before checking out the change); vocabularies from SPILL_TOK_NPM
# (default cache/npm) and cache/{o200k,cl100k}_base.tiktoken
# (tools/tok/jstiktoken_ranks.js).
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [ROUNDS] [REPS]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${3:-5} REPS=${4:-3}
export SPILL_TOK_NPM=${SPILL_TOK_NPM:-cache/npm}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for arm in A B; do
    bin=$A; [ $arm = B ] && bin=$B
    "$bin" --benchmark_filter=Load --benchmark_repetitions="$REPS" \
      --benchmark_format=json >"$out/$arm.$r.json" 2>/dev/null
  done
done
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys, glob, os
d, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for arm in "AB":
    for f in sorted(glob.glob(os.path.join(d, arm + ".*.json"))):
        for b in json.load(open(f))["benchmarks"]:
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            name = b["run_name"].split("/")[0].replace("BM_Tok_Load", "")
            unit = {"ms": 1, "us": 1e-3, "ns": 1e-6}[b["time_unit"]]
            rows.setdefault(name, {}).setdefault(arm, []).append(
                (b["real_time"] * unit, b["cpu_time"] * unit))
def fmt(v):
    return "%.1f [%.1f, %.1f]" % (statistics.median(v), min(v), max(v))
print("| load | A wall ms | A CPU ms | B wall ms | B CPU ms | B/A CPU | B/A wall | n |")
print("|---|---|---|---|---|---|---|---|")
for name, arms in rows.items():
    a, b = arms.get("A", []), arms.get("B", [])
    if not a or not b:
        continue
    aw, ac = [x[0] for x in a], [x[1] for x in a]
    bw, bc = [x[0] for x in b], [x[1] for x in b]
    print("| %s | %s | %s | %s | %s | %.2f | %.2f | %d |" % (
        name, fmt(aw), fmt(ac), fmt(bw), fmt(bc),
        statistics.median(bc) / statistics.median(ac),
        statistics.median(bw) / statistics.median(aw), len(a)))
PY
