#!/usr/bin/env bash
# bench/reader_vs_fio.sh [ROUNDS] [OUT.jsonl]: the issue-7 reader target,
# "the reader at >= 90% of what fio's randread achieves at the same record
# size and depth on the same file", measured interleaved: each round runs
# engine/io (bench/reader_bench) and then fio on the same 1.5 GiB file, at
# 256 KiB and 1540 KiB records, io_uring depth 32 and a pread pool of 8
# threads (fio: psync, 8 jobs). A shared disk drifts by 2x within minutes, so
# only rounds compare with each other: the summary is the median over rounds
# of the per-round ratio reader / fio. Writes one JSON line per measurement
# ({"round", "tool", "name", "bw"}) to OUT (default
# results/published/bench/reader-vs-fio.jsonl) and prints the ratios.
# Needs bazel-bin/bench/reader_bench (bazel build //bench:reader_bench) and fio.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-5}"
OUT="${2:-results/published/bench/reader-vs-fio.jsonl}"
BIN="${READER_BENCH:-bazel-bin/bench/reader_bench}"
F="$PWD/cache/bench-reader.bin"
[ -x "$BIN" ] || { echo "reader_vs_fio: $BIN missing: bazel build //bench:reader_bench" >&2; exit 2; }
command -v fio >/dev/null || { echo "reader_vs_fio: fio missing: apt-get install fio" >&2; exit 2; }
mkdir -p cache "$(dirname "$OUT")"
created=0
[ -f "$F" ] || created=1
cleanup() { [ "$created" = 1 ] && rm -f "$F"; rm -f "$OUT.tmp"; }
trap cleanup EXIT
: > "$OUT.tmp"
for r in $(seq "$ROUNDS"); do
  echo "reader_vs_fio: round $r/$ROUNDS" >&2
  SPILL_BENCH_FILE="$F" SPILL_BENCH_KEEP=1 "$BIN" --benchmark_min_time=2 --benchmark_format=json \
    --benchmark_filter='BM_Read(Uring_Direct/32|Pread_Direct/8/8)/(256|1540)/' 2>/dev/null |
    python3 -c '
import json, sys
r = int(sys.argv[1])
for b in json.load(sys.stdin)["benchmarks"]:
    if "error_message" in b: sys.exit("reader_bench: " + b["error_message"])
    print(json.dumps({"round": r, "tool": "reader", "name": b["name"], "bw": b["bytes_per_second"]}))
' "$r" >> "$OUT.tmp"
  for kb in 256 1540; do
    bs=$((kb * 1024))
    for cfg in "io_uring d32 j1:--ioengine=io_uring --iodepth=32 --numjobs=1" \
               "psync d1 j8:--ioengine=psync --iodepth=1 --numjobs=8"; do
      name="${cfg%%:*} ${kb}k"
      # shellcheck disable=SC2086
      fio --name=rvf --filename="$F" --readonly --rw=randread --bs=$bs --direct=1 ${cfg#*:} \
          --group_reporting --time_based --runtime=2 --output-format=json 2>/dev/null |
        python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
print(json.dumps({"round": int(sys.argv[1]), "tool": "fio", "name": sys.argv[2], "bw": j["read"]["bw_bytes"]}))
' "$r" "$name" >> "$OUT.tmp"
    done
  done
done
mv "$OUT.tmp" "$OUT"
python3 - "$OUT" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
pairs = (("BM_ReadUring_Direct/32/{kb}/real_time", "io_uring d32 j1 {kb}k", "io_uring depth 32"),
         ("BM_ReadPread_Direct/8/8/{kb}/real_time", "psync d1 j8 {kb}k", "pread pool x8 vs fio psync x8"))
for kb in (256, 1540):
    for ours, theirs, what in pairs:
        by = {}
        for x in rows:
            if x["name"] in (ours.format(kb=kb), theirs.format(kb=kb)):
                by.setdefault(x["round"], {})[x["tool"]] = x["bw"]
        ratios = sorted(v["reader"] / v["fio"] for v in by.values() if "reader" in v and "fio" in v)
        if ratios:
            print(f"{what}, {kb} KiB: reader/fio median {st.median(ratios):.2f} "
                  f"(rounds {', '.join(f'{q:.2f}' for q in ratios)})")
PY
