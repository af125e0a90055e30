#!/bin/bash
# cli/tune_test.sh: `spill tune` end to end on nano (issue 28 item 2): one
# axis through the experiment runner, the profile saved where SPILL_TUNE_DIR
# says, bound to this machine and model; spill run / bench / serve print
# "tuned: ..." and apply it under the flags given; --no-tuned ignores it; a
# profile of another machine or another model is refused by name; usage
# errors. Speed is not judged here (the runner's statistics are tested in
# harness/); the decision rule is: no evidence, no change.
. "$(dirname "$0")/cli_test_lib.sh"
cli_test_init tune "$1"
export SPILL_TUNE_DIR="$tmp/tune"

run gen --preset nano nano || fail "gen nano: $err"
run gen --preset nano --seed 2 nano2 || fail "gen nano seed 2: $err"

# one axis, two ABBA pairs, two decode tokens
run tune nano --axes lookahead --pairs 2 --tokens 2 --results "$tmp/results" --quick-env --json
[ "$rc" = 0 ] || fail "tune: rc $rc: $err"
prof=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["profile"])' "$out" 2>/dev/null)
[ -f "$prof" ] || fail "tune --json names no profile file: $out"
case "$prof" in "$SPILL_TUNE_DIR"/*) ;; *) fail "profile $prof not under SPILL_TUNE_DIR" ;; esac
python3 - "$prof" "$out" <<'PY' || fail "profile content"
import json, sys
p = json.load(open(sys.argv[1])); o = json.loads(sys.argv[2])
assert p["version"] == 1
assert list(p["knobs"]) == ["lookahead"], p["knobs"]
chosen = p["knobs"]["lookahead"]
assert chosen in ("0", "4", "8"), chosen
ev = p["evidence"]; assert len(ev) == 1 and ev[0]["axis"] == "lookahead"
x = ev[0]
assert x["control"] == "0" and x["chosen"] == chosen
# the rule: a change only with evidence (CI above 1 and p < 0.05)
if chosen != "0":
    assert x["best"] == chosen and x["ci_lo"] > 1 and x["mann_whitney_p"] < 0.05, x
else:
    assert "kept 0" in x["note"], x
assert o["knobs"] == p["knobs"]
import os; assert os.path.isfile(os.path.join(x["results"], "summary.json"))
PY
chosen=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["knobs"]["lookahead"])' "$prof")

# run applies it and says so; a flag given wins; --no-tuned ignores it
run run nano "hi" -n 2
[ "$rc" = 0 ] || fail "run with profile: $err"
grep -q "spill run: tuned: lookahead=$chosen ($prof, measured " <<<"$err" || fail "run: no tuned line: $err"
grep -q "lookahead $chosen" <<<"$err" || fail "run: lookahead $chosen not applied: $err"
run run nano "hi" -n 2 --lookahead 3
grep -q "tuned: nothing (every knob set by you)" <<<"$err" || fail "run --lookahead: $err"
grep -q "lookahead 3" <<<"$err" || fail "run --lookahead 3 not kept: $err"
run run nano "hi" -n 2 --no-tuned
grep -q "tuned" <<<"$err" && fail "run --no-tuned printed a tuned line: $err"
run bench nano --prompt hi -n 2
grep -q "spill bench: tuned: lookahead=$chosen" <<<"$err" || fail "bench: no tuned line: $err"
# another model (nano seed 2) has no profile: nothing printed
run run nano2 "hi" -n 2
[ "$rc" = 0 ] || fail "nano2: $err"
grep -q "tuned" <<<"$err" && fail "nano2 used nano's profile: $err"
# nano's profile named for nano2: another model
run run nano2 "hi" -n 2 --tuned "$prof"
[ "$rc" = 1 ] && grep -q "measured for another model" <<<"$err" || fail "another model: rc $rc: $err"
# another machine (RAM differs): refused, the run does not start
python3 - "$prof" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["machine"]["ram"] += 4096
json.dump(p, open(sys.argv[1], "w"))
PY
run run nano "hi" -n 2
[ "$rc" = 1 ] || fail "other machine: rc $rc"
grep -q "measured on another machine (RAM differs" <<<"$err" || fail "other machine: $err"
grep -q "SPILL_E_CONFIG" <<<"$err" || fail "other machine: no status: $err"
run run nano "hi" -n 2 --no-tuned
[ "$rc" = 0 ] || fail "--no-tuned with a foreign profile: $err"
# serve refuses it too, before listening
run serve nano --port 0
[ "$rc" = 1 ] && grep -q "measured on another machine" <<<"$err" || fail "serve: rc $rc: $err"

# usage errors
run tune
[ "$rc" = 2 ] || fail "tune without model: rc $rc"
run tune nano --axes threads,warp
[ "$rc" = 1 ] && grep -q '"warp" is not an axis' <<<"$err" || fail "--axes warp: rc $rc: $err"
run tune nano --pairs 0
[ "$rc" = 2 ] || fail "--pairs 0: rc $rc"
run tune nope
[ "$rc" = 1 ] || fail "tune nope: rc $rc"
run run nano hi --tuned a.json --no-tuned
[ "$rc" = 2 ] || fail "--tuned with --no-tuned: rc $rc: $err"

[ "$fails" = 0 ] && echo "tune_test: ok" || { echo "tune_test: $fails failures"; exit 1; }
