#!/usr/bin/env bash
# harness/exp_slurm_cluster_test.sh: `spill exp --slurm` on a real private
# Slurm cluster (harness/slurm_cluster.sh: slurmctld + slurmd of Debian 12's
# slurm-wlm, loopback, free ports, stopped by PID with no process left).
#   1. a small nano experiment run locally;
#   2. the same with --slurm --array-max 1, cancelled (scancel) once its first
#      row exists: --status shows the missing units, --resume DIR --slurm
#      resubmits only those and the merged rows equal the local ones in every
#      deterministic counter (tokens, hits, misses, reads, bytes) with the same
#      verdict, each cell naming its node;
#   3. a task forced to fail (its rows file made a directory): the merge is
#      cancelled by the dependency, --status and --merge mark the unit
#      missing (verdict withheld), --resume DIR --slurm reruns only that unit
#      (before it: flags override the config's "cluster" defaults); a row
#      another node left in unit 2's file is moved aside, the unit rerun here;
#   4. the time limit: once its unit has a row, the task gets the signal
#      Slurm sends 60 s before the limit (#SBATCH --signal=B:USR1@60; sent
#      with scancel --signal=USR1 --batch, as slurmd does), requeues itself,
#      and the next instance (Slurm's requeue delay, about 2 min, lifted with
#      scontrol update StartTime=now) resumes the unit: its rows equal a
#      local run's and the merge completes;
#   5. stopping the cluster leaves no daemon, job step or task behind.
# Skipped (reported as skipped in the test XML) only when Slurm cannot start
# here (not installed, not root).
set -euo pipefail
SPILL="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
CLUSTER="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
W="${TEST_TMPDIR:-$(mktemp -d)}/w"
mkdir -p "$W"
cd "$W"
T0=$(date +%s)

skip() {
  echo "SKIPPED: $*"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="exp_slurm_cluster_test" tests="1" skipped="1">
<testcase name="SlurmCluster" classname="exp_slurm_cluster_test" result="skipped"><skipped message="$*"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}
fail() { echo "FAIL: $*" >&2; exit 1; }

# The cluster lives under a short path (unix sockets) and always stops.
CDIR="$(mktemp -d /tmp/spill-slurm-XXXXXX)"
cleanup() { "$CLUSTER" stop "$CDIR/c" >/dev/null 2>&1 || true; rm -rf "$CDIR"; }
trap cleanup EXIT
set +e
out="$("$CLUSTER" start "$CDIR/c" 2>&1)"
rc=$?
set -e
[ $rc -eq 3 ] && skip "Slurm cannot start here: $out"
[ $rc -eq 0 ] || fail "private cluster did not start: $out"
export "${out##*$'\n'}" # SLURM_CONF=...
echo "cluster up after $(( $(date +%s) - T0 )) s: $SLURM_CONF"

cat >exp.json <<'EOF'
{"name": "slurm-nano", "model": {"preset": "nano"},
 "workload": {"prompt": "the cluster test prompt", "decode_tokens": 12},
 "base": {"storage": "pagecache", "lookahead": 0, "io_throttle": "4M"},
 "sweep": {"cache_slots": [8, 12, 16]},
 "arms": [{"name": "lru", "set": {"policy": "lru"}},
          {"name": "lfru", "set": {"policy": "lfru"}, "exact": true}],
 "repeats": 3, "order": "abba",
 "hypothesis": {"claim": "lfru reads at least 5% fewer bytes than lru", "metric": "bytes_read",
                "direction": "decrease", "min_effect": 0.05, "alpha": 0.05,
                "control": "lru", "treatment": "lfru"},
 "cluster": {"time": "10", "cpus_per_task": 1},
 "outputs": {"tables": ["md"], "plots": []}}
EOF

# wait_state DIR REGEX SECONDS: until `--status DIR` matches REGEX
wait_state() {
  local i
  for i in $(seq 1 $(( $3 * 5 ))); do
    "$SPILL" exp --status "$1" >status.txt 2>&1 || true
    grep -q -E "$2" status.txt && return 0
    sleep 0.2
  done
  cat status.txt
  fail "no '$2' in --status $1 within $3 s"
}

# first_row DIR: until unit 0 of DIR has a row (30 s)
first_row() {
  local i
  for i in $(seq 1 300); do
    [ -s "$1/slurm/rows/u000.jsonl" ] && return 0
    sleep 0.1
  done
  fail "unit 0 of $1 wrote no row"
}

# compare LOCAL_DIR SLURM_DIR [ROWS]: every planned row (18), same
# deterministic counters and token hash; same verdict; every row names a node.
compare() {
  python3 - "$1" "$2" "${3:-18}" <<'PY'
import json, sys
def rows(d):
    return {r["key"]: r for r in map(json.loads, open(d + "/runs.jsonl"))}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
n = int(sys.argv[3])
assert len(a) == n, len(a)
assert set(a) == set(b), (sorted(set(a) ^ set(b)))
counters = ["tokens_prefill", "tokens_decode", "experts_requested", "demand_hits", "demand_misses",
            "decode_hits", "decode_misses", "reads", "bytes_read", "evictions"]
for k in a:
    assert a[k]["tokens"] == b[k]["tokens"], (k, a[k]["tokens"], b[k]["tokens"])
    for c in counters:
        assert a[k]["metrics"][c] == b[k]["metrics"][c], (k, c, a[k]["metrics"][c], b[k]["metrics"][c])
    assert "node" not in a[k] and b[k]["node"], k
sa = json.load(open(sys.argv[1] + "/summary.json"))
sb = json.load(open(sys.argv[2] + "/summary.json"))
va = vb = "(no hypothesis)"
if sa.get("hypothesis") or sb.get("hypothesis"):
    va, vb = sa["hypothesis"]["verdict"], sb["hypothesis"]["verdict"]
    assert va == vb, (va, vb)
    cells = lambda s: [(c["cell"], c["ratio"], c["verdict"]) for c in s["hypothesis"]["cells"]]
    assert cells(sa) == cells(sb), (cells(sa), cells(sb))
    va += " (cells: %s)" % ", ".join("%s %s" % (c, v) for c, _, v in cells(sa))
print("same %d rows (tokens and %d counters each) and verdict %s" % (n, len(counters), va))
PY
}

# 1. local
"$SPILL" exp exp.json --results local --no-refuted >local.txt 2>&1 || { cat local.txt; fail "local run"; }
LOCAL="$(ls -d "$W"/local/slurm-nano/*/)"
echo "local run done after $(( $(date +%s) - T0 )) s"

# 2. --slurm, cancelled mid-run, resumed
"$SPILL" exp exp.json --slurm --array-max 1 --results sl --no-refuted >submit.txt 2>&1 ||
  { cat submit.txt; fail "submit"; }
grep -q '^#SBATCH --array=0-2%1$' submit.txt || { cat submit.txt; fail "array spec"; }
grep -q '^#SBATCH --time=10$' submit.txt || fail "cluster.time from the config"
grep -q '^#SBATCH --kill-on-invalid-dep=yes$' submit.txt || fail "merge script"
SL="$(sed -n 's/^results: //p' submit.txt)"
ARRAY="$(sed -n 's/^# submitted: array job \([0-9]*\) .*/\1/p' submit.txt)"
[ -n "$ARRAY" ] || fail "no array job id"
first_row "$SL"
scancel "$ARRAY"
wait_state "$SL" '^merge job [0-9]+: CANCELLED' 30
wait_state "$SL" 'runs done; [1-9][0-9]* missing \(resubmit' 30
cat status.txt
grep -q -E '^u002 .* 0/6 .*(CANCELLED|gone)' status.txt || fail "unit 2 not shown cancelled/missing"
"$SPILL" exp --resume "$SL" --slurm --no-refuted >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
grep -q 'resubmitting' resume.txt || fail "resume did not resubmit"
wait_state "$SL" '^merge job [0-9]+: (COMPLETED|FAILED|CANCELLED)' 60
grep -q -E '^merge job [0-9]+: COMPLETED' status.txt || { cat status.txt "$SL"/slurm/logs/*; fail "merge"; }
grep -q '| node |' "$SL/table.md" || fail "table names no node"
compare "$LOCAL" "$SL"
echo "cancel + resume done after $(( $(date +%s) - T0 )) s"

# flags override the config's "cluster" defaults (time 10, cpus_per_task 1)
"$SPILL" exp exp.json --slurm-script-only --results ov --no-refuted --time 7 --partition main \
  --mem 512M --constraint 'nvme&avx2' --cpus-per-task 2 --array-max 2 >ov.txt 2>&1 ||
  { cat ov.txt; fail "script-only with flags"; }
for l in '--time=7' '--partition=main' '--mem=512M' '--constraint=nvme&avx2' '--cpus-per-task=2' \
  '--array=0-2%2'; do
  grep -q -F -x "#SBATCH $l" ov.txt || { cat ov.txt; fail "flag not in the script: $l"; }
done
! grep -q -e '--time=10$' -e '--cpus-per-task=1$' ov.txt || { cat ov.txt; fail "config value not overridden"; }

# 3. a failing task
"$SPILL" exp exp.json --slurm-script-only --results fl --no-refuted >script.txt 2>&1 ||
  { cat script.txt; fail "script-only"; }
FL="$(sed -n 's/^results: //p' script.txt)"
grep -q 'ARRAY=$(sbatch --parsable' script.txt || fail "script-only prints the submit commands"
[ ! -e "$FL/slurm/jobs.jsonl" ] || fail "script-only submitted"
# unit 1's rows file is a symlink: read (the submission's count, 0 rows) but
# never written through, so its task fails (docs/RELIABILITY.md)
mkdir -p "$FL/slurm/rows"
: >"$PWD/u001-empty.jsonl"
ln -s "$PWD/u001-empty.jsonl" "$FL/slurm/rows/u001.jsonl"
# unit 2 holds a row another node left (its task killed there): the task here
# moves it aside (uNNN.jsonl.stale-NODE) and runs the whole unit, so the cell
# keeps one node
python3 - "$LOCAL" "$FL/slurm/rows/u002.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1] + "/runs.jsonl")]
r = [x for x in r if x["key"] == "cache_slots=16/lru/r0"][0]
r["node"] = "othernode"
open(sys.argv[2], "w").write(json.dumps(r) + "\n")
PY
"$SPILL" exp --resume "$FL" --slurm --no-refuted >sub2.txt 2>&1 || { cat sub2.txt; fail "submit 2"; }
wait_state "$FL" '^merge job [0-9]+: CANCELLED' 60
wait_state "$FL" '^u001 .* 0/6 .*FAILED' 10
grep -q -E '^u000 .* 6/6 .*done' status.txt || { cat status.txt; fail "unit 0"; }
set +e
"$SPILL" exp --merge "$FL" --no-refuted >merge.txt 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat merge.txt; fail "--merge with missing runs exits 1 (got $rc)"; }
grep -q 'withheld (incomplete)' merge.txt || { cat merge.txt; fail "verdict not withheld"; }
grep -q '| 0 (missing) |' "$FL/table.md" || { cat "$FL/table.md"; fail "missing cells not marked"; }
rm "$FL/slurm/rows/u001.jsonl"
"$SPILL" exp --resume "$FL" --slurm --no-refuted >resume2.txt 2>&1 || { cat resume2.txt; fail "resume 2"; }
python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert r[-1]["units"]=="1", r[-1]' \
  "$FL/slurm/jobs.jsonl" || fail "resume must resubmit only unit 1"
wait_state "$FL" '^merge job [0-9]+: (COMPLETED|FAILED|CANCELLED)' 60
grep -q -E '^merge job [0-9]+: COMPLETED' status.txt || { cat status.txt; fail "merge 2"; }
compare "$LOCAL" "$FL"
[ -s "$FL/slurm/rows/u002.jsonl.stale-othernode" ] || fail "the other node's row was not moved aside"
! grep -q othernode "$FL/runs.jsonl" || fail "the other node's row was merged"
echo "failed task + resume done after $(( $(date +%s) - T0 )) s"

# 4. the time limit: one unit of 6 runs of about a second each (expert reads
#    throttled), signalled as Slurm does 60 s before the limit
cat >tl.json <<'EOF'
{"name": "slurm-nano-tl", "model": {"preset": "nano"},
 "workload": {"prompt": "the cluster test prompt", "decode_tokens": 24},
 "base": {"storage": "pagecache", "lookahead": 0, "io_throttle": "1M", "cache_slots": 8},
 "arms": [{"name": "lru", "set": {"policy": "lru"}},
          {"name": "lfru", "set": {"policy": "lfru"}, "exact": true}],
 "repeats": 3, "order": "abba", "cluster": {"time": "10"},
 "outputs": {"tables": ["md"], "plots": []}}
EOF
"$SPILL" exp tl.json --results tl-local --no-refuted >tl-local.txt 2>&1 || { cat tl-local.txt; fail "local tl"; }
TL_LOCAL="$(ls -d "$W"/tl-local/slurm-nano-tl/*/)"
"$SPILL" exp tl.json --slurm --results tl --no-refuted >tl-submit.txt 2>&1 ||
  { cat tl-submit.txt; fail "submit tl"; }
TL="$(sed -n 's/^results: //p' tl-submit.txt)"
TA="$(sed -n 's/^# submitted: array job \([0-9]*\) .*/\1/p' tl-submit.txt)"
[ -n "$TA" ] || fail "no tl array job id"
first_row "$TL"
scancel --signal=USR1 --batch "${TA}_0"
# requeued: pending on its begin time (Slurm's requeue delay), one restart
for i in $(seq 1 150); do
  scontrol show job "${TA}_0" >tl-job.txt 2>&1 || true
  grep -q 'JobState=PENDING Reason=BeginTime' tl-job.txt && break
  sleep 0.2
done
grep -q 'JobState=PENDING Reason=BeginTime' tl-job.txt || { cat tl-job.txt "$TL"/slurm/logs/*; fail "task not requeued"; }
grep -q 'Restarts=1' tl-job.txt || { cat tl-job.txt; fail "no restart counted"; }
done1="$(wc -l <"$TL/slurm/rows/u000.jsonl")"
{ [ "$done1" -ge 1 ] && [ "$done1" -lt 6 ]; } || fail "rows before the requeue: $done1 (want 1-5)"
grep -q "time limit near after $done1 runs; requeued" "$TL/slurm/logs/u0-j$TA.out" ||
  { cat "$TL"/slurm/logs/*; fail "no requeue message"; }
scontrol update JobId="${TA}_0" StartTime=now
wait_state "$TL" '^merge job [0-9]+: (COMPLETED|FAILED|CANCELLED)' 60
grep -q -E '^merge job [0-9]+: COMPLETED' status.txt || { cat status.txt "$TL"/slurm/logs/*; fail "merge tl"; }
grep -q "^\[$((done1 + 1))/6\]" "$TL/slurm/logs/u0-j$TA.out" ||
  { cat "$TL"/slurm/logs/*; fail "the new instance did not resume at run $((done1 + 1))"; }
compare "$TL_LOCAL" "$TL" 6
echo "time limit: requeued after $done1 runs, resumed at run $((done1 + 1)), 6 rows as local"

# 5. the private cluster stops by PID and leaves no process behind: neither
#    daemon, no job step (its socket in the spool directory), no task
dpids="$(cat "$CDIR/c/run/slurmctld.dpid" "$CDIR/c/run/slurmd.dpid")"
"$CLUSTER" stop "$CDIR/c"
for p in $dpids; do
  ! kill -0 "$p" 2>/dev/null || fail "daemon $p still running after stop"
done
steps="$(ls -A "$CDIR/c/spool" | grep -E '_[0-9]+\.[0-9]+$' || true)"
[ -z "$steps" ] || fail "job steps left: $steps"
left="$(pgrep -f -- "exp --slurm-task $W" || true)"
[ -z "$left" ] || fail "task processes left: $left"
echo "PASS after $(( $(date +%s) - T0 )) s"
