#!/bin/sh
# research/session:resume_measure_test: spill_resume_measure on a nano model
# with a 300-token history: exit 0 (the resumed and the re-prefilled turn
# generate the same tokens), the resumed runs keep the held conversation
# (tokens_cached = held, only the follow-up prefilled), the re-prefilled ones
# run all of it; a bad flag is a usage error (exit 2).
set -eu
SPILL="$1"
MEASURE="$2"
T="${TEST_TMPDIR:-/tmp}/resume-measure"
rm -rf "$T" && mkdir -p "$T"
"$SPILL" gen --preset nano "$T/nano" > /dev/null
"$MEASURE" "$T/nano" --history 300 --follow 12 -n 4 --pairs 2 --ctx 512 --dir "$T" > "$T/out.jsonl"
cat "$T/out.jsonl"
grep -q '"history_tokens": 300, "prefill_s"' "$T/out.jsonl"
held=$(sed -n 's/.*"held_tokens": \([0-9]*\), "session_bytes".*/\1/p' "$T/out.jsonl")
[ "$held" = 301 ] || { echo "held $held, want 301 (history + the reply token)"; exit 1; }
[ "$(grep -c "\"arm\": \"resume\", .*\"tokens_cached\": 301, \"tokens_prefill\": 12," "$T/out.jsonl")" = 2 ]
[ "$(grep -c "\"arm\": \"reprefill\", .*\"tokens_cached\": 0, \"tokens_prefill\": 313," "$T/out.jsonl")" = 2 ]
grep -q '"summary": true, .*"same_tokens": true}' "$T/out.jsonl"
[ ! -e "$T/resume-measure.session" ] || { echo "session file left behind"; exit 1; }
rc=0
"$MEASURE" "$T/nano" --pairs 0 2> /dev/null || rc=$?
[ "$rc" = 2 ] || { echo "usage error exit $rc, want 2"; exit 1; }
"$MEASURE" --help | grep -q '^usage: spill_resume_measure MODEL'
echo PASS
