#!/bin/bash
# cli/knob_flags_test.sh: `spill run` and `spill serve` take the engine's
# knob flags through one layer (spill_knob_flag / spill_knob_flag_set,
# engine/spill.h): for every engine knob of the table (`spill knobs`) the
# two accept and refuse the same spellings and values. Accepted: the flag
# parses and the command goes on to open the model, which does not exist
# (exit 1); refused: a usage error (exit 2). spill serve's documented
# exceptions: --profile and --trace are per request there (--trace-dir), and
# sampling knobs are per request (the body's fields).
# Usage: knob_flags_test.sh SPILL
set -u
spill=$1
tmp=${TEST_TMPDIR:-/tmp}/knob_flags.$$
mkdir -p "$tmp"
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
nomodel=$tmp/no-such-model
verdict() { # verdict CMD ARGS...: exit status of spill CMD with the args
  if [ "$1" = run ]; then
    shift
    "$spill" run "$nomodel" prompt "$@" >/dev/null 2>"$tmp/err"
  else
    shift
    "$spill" serve "$nomodel" "$@" >/dev/null 2>"$tmp/err"
  fi
  echo $?
}
n=0
# key, flag, default, when: columns 1, 2, 4, 5 of `spill knobs --markdown`
while IFS=$'\t' read -r key flag def when; do
  case $key in profile | trace) continue ;; esac
  case $when in *sampling*) continue ;; esac
  [ "$def" = "(none)" ] && def=""
  case $key in routing_trace) def=$tmp/none.jsonl ;; esac
  under=--$key
  for args in "$flag ${def:-x}" "$under ${def:-x}" "$flag" "$flag not-a-value-%%" "${flag}X 1"; do
    # shellcheck disable=SC2086
    r=$(verdict run $args)
    # shellcheck disable=SC2086
    s=$(verdict serve $args)
    [ "$r" = "$s" ] || fail "'$args': spill run exits $r, spill serve $s"
    n=$((n + 1))
  done
  # the default value is accepted by both (the model is what fails)
  if [ -n "$def" ]; then
    r=$(verdict run "$flag" "$def")
    [ "$r" = 1 ] || fail "spill run $flag $def: exit $r, want 1 (flag accepted, no model): $(cat "$tmp/err")"
  fi
done < <("$spill" knobs --markdown | tail -n +3 |
  awk -F'|' '{ gsub(/\\\|/, "/")  # an escaped | inside a cell (choices)
               for (i = 2; i <= 6; i++) { gsub(/^ +| +$/, "", $i); gsub(/`/, "", $i) }
               print $2 "\t" $3 "\t" $5 "\t" $6 }')
[ "$n" -gt 50 ] || fail "only $n cases ran"
if [ "$fails" != 0 ]; then
  echo "$fails failures" >&2
  exit 1
fi
echo "ok: $n flag spellings, same verdict from spill run and spill serve"
