#!/bin/bash
# cli/cli_test.sh: the `spill` command's contract, for every row of its
# command table (`spill help --commands`, so a new command is covered without
# editing this file): -h and --help print the usage on stdout and exit 0 with
# nothing on stderr; an unknown flag and extra positional arguments are usage
# errors (exit 2, message and usage on stderr, nothing on stdout). Then the
# regressions of issue 19: extra arguments refused (`spill info MODEL EXTRA`
# ran), float knobs range-checked (`--temp abc`, `--top-p -1` ran), and a
# flag without its value named as such (`--results` said "unknown option").
# Usage: cli_test.sh SPILL
set -u
# shellcheck source=cli/cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"
cli_test_init cli_test "$1"

expect_help() { # CMD... : usage on stdout, exit 0, stderr empty
  local flag
  for flag in -h --help; do
    run "$@" "$flag"
    [ "$rc" = 0 ] || fail "spill $* $flag: exit $rc, want 0"
    case "$out" in "usage: spill $*"*) ;; *) fail "spill $* $flag: stdout does not start with 'usage: spill $*': ${out:0:80}" ;; esac
    [ -z "$err" ] || fail "spill $* $flag: stderr not empty: ${err:0:80}"
  done
}

expect_usage_error() { # DESC -- ARGS... : exit 2, usage on stderr, stdout empty
  local desc=$1
  shift
  run "$@"
  [ "$rc" = 2 ] || fail "$desc: spill $*: exit $rc, want 2"
  case "$err" in *"usage: spill"*) ;; *) fail "$desc: spill $*: no usage on stderr: ${err:0:120}" ;; esac
  [ -z "$out" ] || fail "$desc: spill $*: stdout not empty: ${out:0:80}"
}

# The top level.
run --help
[ "$rc" = 0 ] && [ -z "$err" ] || fail "spill --help: exit $rc"
run
[ "$rc" = 2 ] && [ -z "$out" ] || fail "spill (no command): exit $rc, want 2"
expect_usage_error "unknown command" no-such-command
run help --commands
[ "$rc" = 0 ] || fail "spill help --commands: exit $rc"
mapfile -t commands < <("$spill" help --commands)
[ "${#commands[@]}" -ge 10 ] || fail "only ${#commands[@]} commands listed"

n=0
for line in "${commands[@]}"; do
  read -r -a cmd <<<"$line"
  n=$((n + 1))
  expect_help "${cmd[@]}"
  run help "${cmd[@]}"
  [ "$rc" = 0 ] && [ -n "$out" ] || fail "spill help $line: exit $rc"
  expect_usage_error "bad flag" "${cmd[@]}" --no-such-flag
  expect_usage_error "extra arguments" "${cmd[@]}" a1 a2 a3 a4 a5 a6 a7 a8 a9
  # no arguments: fine (0), a failure (1), or a usage error with the usage
  run "${cmd[@]}"
  if [ "$rc" = 2 ]; then
    case "$err" in *"usage: spill"*) ;; *) fail "spill $line (no args): exit 2 without usage" ;; esac
  elif [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
    fail "spill $line (no args): exit $rc"
  fi
  # a group answers --help with its subcommands
  if [ "${#cmd[@]}" = 2 ]; then
    run "${cmd[0]}" --help
    [ "$rc" = 0 ] && [[ "$out" == *"$line"* ]] || fail "spill ${cmd[0]} --help: exit $rc"
    expect_usage_error "group without subcommand" "${cmd[0]}"
    expect_usage_error "unknown subcommand" "${cmd[0]}" no-such-sub
  fi
done

# Issue 19 regressions, on a real model.
run gen --preset nano "$tmp/nano"
[ "$rc" = 0 ] || fail "spill gen --preset nano: exit $rc: $err"
[[ "$err" == *"routing: next-token reuse 0.411 asked"* ]] ||
  fail "spill gen does not print the reuse it solved for: ${err:0:300}"
# reuse needs a KDA layer 0: a GQA model accepts --reuse and says it is not carried
run gen --preset nano --attn gqa --reuse 0.3 "$tmp/nano-gqa"
[ "$rc" = 0 ] && [[ "$err" == *"reuse 0.300 asked, not carried"* ]] ||
  fail "spill gen --attn gqa --reuse 0.3: exit $rc, no 'not carried': ${err:0:300}"
run info "$tmp/nano"
[ "$rc" = 0 ] || fail "spill info MODEL: exit $rc: $err"
expect_usage_error "item 13: extra argument" info "$tmp/nano" EXTRA
expect_usage_error "extra argument" verify "$tmp/nano" EXTRA
expect_usage_error "extra argument" plan "$tmp/nano" EXTRA
expect_usage_error "extra argument" bench "$tmp/nano" EXTRA
for bad in "--temp abc" "--temp nan" "--temp -1" "--top-p -1" "--top-p 1.5" "--top-p inf" \
           "--top-k -2" "--budget 12Q" "--threads 0"; do
  # shellcheck disable=SC2086
  expect_usage_error "item 11: $bad" run "$tmp/nano" hello -n 2 $bad
  flag=${bad%% *}
  key=${flag#--}
  key=${key//-/_}
  [[ "$err" == *"$key"* ]] || fail "item 11: $bad: the error does not name $key: ${err:0:120}"
done
run run "$tmp/nano" hello -n 2 --temp 0.8 --top-p 0.9 --sample-seed 3
[ "$rc" = 0 ] || fail "spill run with valid sampling knobs: exit $rc: $err"
# spill run --session (issue 31): the first run saves, the second loads,
# reuses every saved token and prefills only its own; another ctx is refused
# by name and leaves the file as it was; --session with --chat is a usage error
ses="$tmp/run.session"
run run "$tmp/nano" hello -n 4 --ctx 512 --session "$ses" --json
[ "$rc" = 0 ] && [ -s "$ses" ] || fail "run --session: exit $rc, no session file: $err"
saved1=$(sed -n 's/.*"session_saved_tokens": \([0-9-]*\).*/\1/p' <<<"$err")
[ "${saved1:-0}" -ge 6 ] || fail "run --session: saved '$saved1' tokens: $err"
[[ "$err" == *'"tokens_cached": 0,'* ]] || fail "run --session (new): cached tokens: $err"
run run "$tmp/nano" " again" -n 3 --ctx 512 --session "$ses" --json
[ "$rc" = 0 ] || fail "run --session (resume): exit $rc: $err"
[[ "$err" == *"\"session_loaded_tokens\": $saved1,"* ]] || fail "run --session: not loaded: $err"
[[ "$err" == *"\"tokens_cached\": $saved1,"* ]] || fail "run --session: not reused: $err"
[[ "$err" == *'"tokens_prefill": 6,'* ]] || fail "run --session: prefilled other than ' again': $err"
cp "$ses" "$ses.before"
run run "$tmp/nano" more -n 2 --ctx 256 --session "$ses"
[ "$rc" = 1 ] && [[ "$err" == *SPILL_E_SESSION* ]] && [[ "$err" == *"saved at ctx 512"* ]] ||
  fail "run --session, another ctx: exit $rc: $err"
cmp -s "$ses" "$ses.before" || fail "run --session: a refused load changed the file"
expect_usage_error "run --session --chat" run "$tmp/nano" hi --chat --session "$ses"

# --draft (issue 31 item 3): greedy output is the same text with drafts on;
# the JSON summary counts them; a draft that does not fit a chunk is refused
run run "$tmp/nano-gqa" "abc abd abc abd abc abd abc ab" -n 24 --ctx 256 --json
[ "$rc" = 0 ] || fail "run (no draft): exit $rc: $err"
nodraft=$out
run run "$tmp/nano-gqa" "abc abd abc abd abc abd abc ab" -n 24 --ctx 256 --json --draft 4 --prefill-chunk 5
[ "$rc" = 0 ] || fail "run --draft 4: exit $rc: $err"
[ "$out" = "$nodraft" ] || fail "run --draft 4: other text than without drafts: '$out' vs '$nodraft'"
[[ "$err" == *'"draft_tokens": 0,'* ]] && fail "run --draft 4: nothing drafted: $err"
[[ "$err" == *'"decode_forwards": 24,'* ]] && fail "run --draft 4: a forward per token: $err"
run run "$tmp/nano-gqa" hi -n 2 --draft 4 --prefill-chunk 4
[ "$rc" = 1 ] && [[ "$err" == *"prefill_chunk >= draft + 1"* ]] || fail "run --draft 4 --prefill-chunk 4: exit $rc: $err"
expect_usage_error "item 14: --results without value" exp "$tmp/x.json" --results
[[ "$err" == *"--results needs a value"* ]] || fail "item 14: --results: ${err:0:120}"
[[ "$err" != *"unknown option"* ]] || fail "item 14: --results called an unknown option"
expect_usage_error "--refuted without value" exp "$tmp/x.json" --refuted
expect_usage_error "bench --roofline" bench --roofline "$tmp/nano"
# gen's number flags: empty, non-numeric, nan and out-of-range values are usage
# errors that name the flag (an empty value once read as 0: routers off)
for flag in --lookahead-precision --coact --reuse; do
  for bad in "" abc nan inf -0.1 1.5 0.5x; do
    expect_usage_error "gen $flag '$bad'" gen --preset nano "$flag" "$bad" "$tmp/gen-bad"
    [[ "$err" == *"$flag"* ]] || fail "gen $flag '$bad': the error does not name $flag: ${err:0:120}"
  done
done
[ ! -e "$tmp/gen-bad" ] || fail "gen with a bad number flag wrote $tmp/gen-bad"

if [ "$fails" != 0 ]; then
  echo "$fails failures over $n commands" >&2
  exit 1
fi
echo "ok: $n commands (help, bad flag, extra arguments) and the issue 19 regressions"
