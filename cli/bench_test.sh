#!/bin/bash
# cli/bench_test.sh: `spill bench`'s workload (issue 28 item 3) on a nano
# model: the pp/tg token counts are exact (prompts cut and repeated to --pp
# tokens), cold requests miss, warm ones at a budget that holds every expert
# do not, each output format (md, csv, json) parses with the documented rows
# and columns, bad flags are usage errors, --json keeps its single request.
# Usage: bench_test.sh SPILL
set -u
# shellcheck source=cli/cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"
cli_test_init bench_test "$1"

run gen --preset nano "$tmp/nano"
[ "$rc" = 0 ] || { echo "FAIL: spill gen nano: $err" >&2; exit 1; }

# JSON: every figure, per prompt. 1500 > the longest prompt (1325 bytes), so
# the repeat path runs; 48 cache slots = all 3 x 16 experts of nano.
run bench "$tmp/nano" --pp 1500 --tg 6 --cache-slots 48 --output json
[ "$rc" = 0 ] || fail "bench -o json: exit $rc: $err"
echo "$out" >"$tmp/bench.json"
python3 - "$tmp/bench.json" <<'PY' || fail "bench -o json: checks above"
import json, sys
rows = json.load(open(sys.argv[1]))
bad = []
def check(ok, what):
    if not ok: bad.append(what)
check([r["phase"] for r in rows] == ["cold", "warm"], "phases")
fields = ["model_filename", "model_type", "model_size", "n_threads", "storage", "budget",
          "n_prompt", "n_gen", "test", "phase", "n_prompts", "pp_ts", "tg_ts", "ttft_ms",
          "gb_per_token", "bytes_read_per_token", "decode_hit_rate", "decode_misses",
          "hit_rate", "misses", "peak_rss_bytes", "read_bytes_per_s", "drive_bytes_per_s",
          "drive_share"]
for r in rows:
    check(all(f in r for f in fields), "fields " + str([f for f in fields if f not in r]))
    check(r["test"] == "pp1500+tg6" and r["n_prompt"] == 1500 and r["n_gen"] == 6, "test")
    check(r["n_prompts"] >= 4 and len(r["samples"]) == r["n_prompts"], "prompt count")
    check(len({s["prompt"] for s in r["samples"]}) == r["n_prompts"], "distinct prompts")
    for s in r["samples"]:
        check(s["n_prompt"] == 1500 and s["n_gen"] == 6, "exact counts %s" % s)
        check(s["pp_ts"] > 0 and s["tg_ts"] > 0 and s["ttft_ms"] > 0, "rates %s" % s)
        check(s["peak_rss_bytes"] > 1 << 20, "rss %s" % s)
    check(r["pp_ts"] > 0 and r["tg_ts"] > 0 and r["peak_rss_bytes"] > 0, "row rates")
    check(0 <= r["hit_rate"] <= 1 and 0 <= r["decode_hit_rate"] <= 1, "rates in [0, 1]")
    if r["drive_bytes_per_s"] > 0:
        check(abs(r["drive_share"] - r["read_bytes_per_s"] / r["drive_bytes_per_s"])
              <= 1e-3 * r["drive_share"] + 1e-9, "drive share")
    else:
        check(r["drive_share"] is None, "drive share without a probe")
cold, warm = rows
# cold: the expert cache starts empty, so every prompt's request misses
check(all(s["misses"] > 0 and s["bytes_read"] > 0 for s in cold["samples"]), "cold misses")
# warm, every expert cached: no miss, nothing read, a higher hit rate
check(all(s["misses"] == 0 and s["bytes_read"] == 0 for s in warm["samples"]), "warm misses")
check(warm["hit_rate"] > cold["hit_rate"] and warm["decode_hit_rate"] == 1, "warm hit rate")
check(warm["bytes_read_per_token"] == 0, "warm bytes/token")
if bad:
    print("FAIL: " + "; ".join(bad[:8]), file=sys.stderr)
    sys.exit(1)
PY

# CSV: a header of the same fields and one row per phase.
run bench "$tmp/nano" --pp 40 --tg 3 -o csv
[ "$rc" = 0 ] || fail "bench -o csv: exit $rc: $err"
echo "$out" >"$tmp/bench.csv"
python3 - "$tmp/bench.csv" <<'PY' || fail "bench -o csv: checks above"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["phase"] for r in rows] == ["cold", "warm"], rows
for r in rows:
    assert r["test"] == "pp40+tg3" and r["n_prompt"] == "40" and r["n_gen"] == "3", r
    assert float(r["pp_ts"]) > 0 and float(r["tg_ts"]) > 0 and float(r["ttft_ms"]) > 0, r
    assert None not in r and None not in r.values(), "ragged row %s" % r
assert float(rows[0]["misses"]) > 0, rows[0]
PY

# Markdown (the default; -p and -n are llama-bench's spellings).
run bench "$tmp/nano" -p 32 -n 2
[ "$rc" = 0 ] || fail "bench (md): exit $rc: $err"
mapfile -t md <<<"$out"
case "${md[0]}" in
  "| model | size | test | phase | pp t/s | tg t/s | TTFT ms | GB/tok | hit % | peak RSS | drive % |") ;;
  *) fail "bench md header: ${md[0]}" ;;
esac
case "${md[1]}" in "| ----- | ---: |"*) ;; *) fail "bench md rule: ${md[1]}" ;; esac
for i in 2 3; do
  IFS='|' read -r -a cell <<<"${md[$i]}"
  [ "${#cell[@]}" = 12 ] || fail "bench md row $i: ${#cell[@]} cells: ${md[$i]}"
  [ "$(echo ${cell[3]})" = "pp32+tg2" ] || fail "bench md row $i test: ${cell[3]}"
done
[ "$(echo "${md[2]}" | cut -d'|' -f5 | tr -d ' ')" = cold ] || fail "bench md: row 1 not cold"
[ "$(echo "${md[3]}" | cut -d'|' -f5 | tr -d ' ')" = warm ] || fail "bench md: row 2 not warm"
case "$out" in *"medians over 4 prompts (chat, code, prose, table)"*) ;; *) fail "bench md footer: $out" ;; esac

# --json is still the single request of before.
run bench "$tmp/nano" --json -n 3
[ "$rc" = 0 ] || fail "bench --json: exit $rc: $err"
echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["tokens"] == 3 and d["misses"] > 0, d' ||
  fail "bench --json: $out"

# Usage errors: exit 2, usage on stderr, nothing on stdout.
for bad in "--output xml" "-o" "--pp 0" "--pp abc" "--tg -1" "--json --pp 8" "--prompt hi -o csv"; do
  # shellcheck disable=SC2086
  run bench "$tmp/nano" $bad
  [ "$rc" = 2 ] || fail "bench $bad: exit $rc, want 2"
  case "$err" in *"usage: spill bench"*) ;; *) fail "bench $bad: no usage: ${err:0:100}" ;; esac
  [ -z "$out" ] || fail "bench $bad: stdout not empty"
done

run bench --help
for word in --pp --tg --output md csv json cold warm "time to" O_DIRECT; do
  case "$out" in *"$word"*) ;; *) fail "bench --help does not mention $word" ;; esac
done

[ "$fails" = 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "bench_test: ok"
