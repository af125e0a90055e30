#!/bin/bash
# cli/cli_test_lib.sh: the setup that the `spill` command-line tests
# (cli_test.sh, reliability_cli_test.sh) share. Sourced, never run:
#   . "$(dirname "$0")/cli_test_lib.sh"; cli_test_init NAME "$1"
# gives $spill (absolute path of the binary), a fresh-named scratch $tmp with
# $tmp/cwd as the working directory, fail (counts into $fails) and run.
# Bazel: list this file in the sh_test's data (cli/BUILD).

# $1 = name of the scratch directory (the pid is appended), $2 = the spill binary
cli_test_init() {
  spill=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
  tmp=${TEST_TMPDIR:-/tmp}/$1.$$
  mkdir -p "$tmp/cwd"
  cd "$tmp/cwd" || exit 1
  fails=0
}

fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}

# run ARGS...: sets rc, out (stdout), err (stderr)
run() {
  "$spill" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}
