#!/bin/bash
# cli/reliability_cli_test.sh: issue 19's command-line regressions outside
# the argument contract (cli_test.sh): listing refuted entries never writes
# (item 10), `spill trace replay --tokens` outside the trace fails before
# printing anything (item 12), a directory given as a config or prompt_file
# is named as such (item 14), duplicate keys and invalid UTF-8 in a config are
# refused (item 13), and `spill run` with a prompt over ctx prints the error
# alone (item 14). Usage: reliability_cli_test.sh SPILL
set -u
# shellcheck source=cli/cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"
cli_test_init rel_cli "$1"

# item 10: `spill refuted list --dir DIR` reads only
mkdir -p "$tmp/ref"
printf 'my own notes\n' >"$tmp/ref/README.md"
run refuted list --dir "$tmp/ref"
[ "$rc" = 0 ] || fail "refuted list: exit $rc: $err"
[ "$(cat "$tmp/ref/README.md")" = "my own notes" ] || fail "refuted list rewrote README.md"
[ "$(ls "$tmp/ref")" = "README.md" ] || fail "refuted list wrote files: $(ls "$tmp/ref")"
# ... unless asked: --index rewrites the index (an entry written by hand)
run refuted list --dir "$tmp/ref" --index
[ "$rc" = 0 ] || fail "refuted list --index: exit $rc: $err"
head -n 1 "$tmp/ref/README.md" | grep -qx '# Refuted hypotheses' || fail "refuted list --index did not write the index"

# item 12: a --tokens window past the end of the trace
cat >"$tmp/t.jsonl" <<'T'
{"tok": 1, "layers": [[1, 2], [0, 3]]}
{"tok": 2, "layers": [[2, 3], [1, 3]]}
{"tok": 3, "layers": [[1, 3], [0, 2]]}
T
run trace replay --policy lru --slots 2 "$tmp/t.jsonl"
if [ "$rc" = 0 ]; then
  for w in 1000: 2:1000 3:; do
    run trace replay --policy lru --slots 2 --tokens "$w" "$tmp/t.jsonl"
    [ "$rc" = 1 ] || fail "trace replay --tokens $w: exit $rc, want 1"
    [ -z "$out" ] || fail "trace replay --tokens $w: printed before the error: ${out:0:80}"
    [[ "$err" == *"outside the trace's 3 tokens"* ]] || fail "trace replay --tokens $w: ${err:0:120}"
  done
else
  fail "trace replay on a 3-token trace: exit $rc: ${err:0:200}"
fi

# item 14: a directory as the config, as the prompt_file
mkdir -p "$tmp/adir"
run exp "$tmp/adir" --validate
[ "$rc" != 0 ] || fail "spill exp DIR: exit 0"
[[ "$err" == *"is a directory"* ]] || fail "spill exp DIR: ${err:0:160}"
[[ "$err" != *"larger than"* ]] || fail "spill exp DIR said 'larger than'"
run gen --preset nano "$tmp/nano"
[ "$rc" = 0 ] || fail "gen: $err"
cat >"$tmp/pf.json" <<J
{"name": "pf", "model": "$tmp/nano", "workload": {"prompt_file": "$tmp/adir", "decode_tokens": 2}}
J
run exp "$tmp/pf.json" --validate
[ "$rc" != 0 ] || fail "prompt_file DIR: exit 0"
[[ "$err" == *"workload.prompt_file"*"is a directory"* ]] || fail "prompt_file DIR: ${err:0:160}"

# item 13: duplicate keys, invalid UTF-8
cat >"$tmp/dup.json" <<J
{"name": "a", "name": "b", "model": "$tmp/nano", "workload": {"prompt": "x", "decode_tokens": 2}}
J
run exp "$tmp/dup.json" --validate
[ "$rc" != 0 ] || fail "duplicate key: exit 0"
[[ "$err" == *"name: duplicate key"* ]] || fail "duplicate key: ${err:0:160}"
printf '{"name": "u", "model": "%s", "workload": {"prompt": "caf\xc3 x", "decode_tokens": 2}}\n' \
  "$tmp/nano" >"$tmp/utf.json"
run exp "$tmp/utf.json" --validate
[ "$rc" != 0 ] || fail "invalid UTF-8: exit 0"
[[ "$err" == *"invalid UTF-8"* ]] || fail "invalid UTF-8: ${err:0:160}"

# item 14: a prompt over ctx: the error alone, no summary line first
run run "$tmp/nano" "a prompt that is longer than eight tokens for sure" --ctx 8 -n 2
[ "$rc" = 1 ] || fail "prompt over ctx: exit $rc"
[[ "$err" == *"exceed ctx 8"* ]] || fail "prompt over ctx: ${err:0:160}"
[[ "$err" != *"generated tokens"* ]] || fail "prompt over ctx: a summary was printed: ${err:0:160}"

# issue 26 item 3: file names and output paths never run as code in the
# scripts given to gnuplot (`trace replay --plot`) or to a shell (`roofline
# --fio`): each hostile name below would create a PWNED* file if injected
if command -v gnuplot >/dev/null; then
  mkdir -p "$tmp/gp" && cd "$tmp/gp" || exit 1
  hostile="x'; system(\"touch PWNED1\"); print 'y.jsonl"
  cp "$tmp/t.jsonl" "$hostile"
  run trace replay --policy lru --curve 1:3:1 --plot "o'; system(\"touch PWNED2\"); print 'p" "$hostile"
  [ "$rc" = 0 ] || fail "trace replay --plot, hostile names: exit $rc: ${err:0:200}"
  [ -s "o'; system(\"touch PWNED2\"); print 'p.svg" ] || fail "trace replay --plot: no svg for the quoted name"
  for o in '|touch PWNED3' '<touch PWNED4' "q
!touch PWNED5"; do
    run trace replay --policy lru --curve 1:3:1 --plot "$o" "$hostile"
  done
  found=$(ls "$tmp/gp" | grep "^PWNED")
  [ -z "$found" ] || fail "trace replay --plot ran code from a name: $found"
  cd "$tmp/cwd" || exit 1
else
  echo "gnuplot not installed: the --plot injection cases are not run (./lab deps installs it)"
fi
if command -v fio >/dev/null; then
  mkdir -p "$tmp/fio" && cd "$tmp/fio" || exit 1
  m="m'; touch PWNED6; echo '"
  cp -r "$tmp/nano" "$m"
  run roofline --fio -n 2 --repeats 1 --probe-seconds 1 --storage pagecache "$m"
  [[ "$out$err" == *fio* ]] || fail "roofline --fio: fio not reached: ${err:0:200}"
  found=$(ls "$tmp/fio" | grep "^PWNED")
  [ -z "$found" ] || fail "roofline --fio ran code from the model's name: $found"
  cd "$tmp/cwd" || exit 1
fi

if [ "$fails" != 0 ]; then
  echo "$fails failures" >&2
  exit 1
fi
echo "ok"
