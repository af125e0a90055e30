#!/bin/bash
# tools/lint/long_functions.sh: fails when a C or C++ function in the given
# directories is longer than MAX lines (issue 17: none over 120 in engine/,
# harness/, cli/, server/). A function's length is counted from the first
# line of its signature to its closing brace, both included; the tree is
# clang-formatted (.clang-format), so a definition starts at column 0 and its
# closing brace is a lone "}" at column 0.
#
# Usage: long_functions.sh [--max N] [--allow FILE] DIR...
#   --allow FILE: "path:function" lines (# comments) allowed to stay long;
#   each must still exist and still be long, so the list can only shrink.
# Prints every offender as "path:line: function: N lines" on stderr.
set -euo pipefail
max=120
allow=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --max) max="$2"; shift 2 ;;
    --allow) allow="$2"; shift 2 ;;
    --) shift; break ;;
    -*) echo "long_functions.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: long_functions.sh [--max N] [--allow FILE] DIR..." >&2; exit 2; }
files=$(find -L "$@" -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort)
[ -n "$files" ] || { echo "long_functions.sh: no C/C++ file under $*" >&2; exit 2; }
# awk: a definition starts at a column-0 line that begins an identifier, is
# not a preprocessor line, a typedef, a declaration ending in ";" or an
# initialiser ("= {"), and whose signature (this line and the next ones up to
# the first "{") ends in "{"; it ends at the next line that is exactly "}".
found=$(awk -v max="$max" '
  function report() {
    n = FNR - start + 1
    if (n > max) printf "%s:%d: %s: %d lines\n", FILENAME, start, name, n
  }
  FNR == 1 { infn = 0; insig = 0 }
  infn { if ($0 ~ /^}/) { report(); infn = 0 } ; next }
  insig {
    sig = sig " " $0
    if ($0 ~ /;[ \t]*$/ || $0 ~ /^}/) { insig = 0; next }
    if ($0 ~ /\{[ \t]*$/) { insig = 0; if (sig !~ /=[ \t]*\{[ \t]*$/) { infn = 1 } }
    next
  }
  /^[A-Za-z_]/ && !/^(typedef|struct [A-Za-z_0-9]+ *\{|enum|union|extern "C"|#)/ && /\(/ {
    start = FNR; sig = $0
    s = $0; sub(/\(.*/, "", s); k = split(s, w, /[ \t*&]+/); name = w[k]
    if ($0 ~ /;[ \t]*$/) next
    if ($0 ~ /\{[ \t]*$/) { if ($0 !~ /=[ \t]*\{[ \t]*$/) infn = 1; next }
    if ($0 ~ /\)[ \t]*$/ || $0 ~ /,[ \t]*$/ || $0 ~ /\([^)]*$/) insig = 1
    next
  }
' $files)
rc=0
if [ -n "$allow" ]; then
  while IFS= read -r entry; do
    entry="${entry%%#*}"; entry="$(echo "$entry" | tr -d '[:space:]')"
    [ -n "$entry" ] || continue
    f="${entry%%:*}"; fn="${entry#*:}"
    if ! grep -q "^[^:]*${f}:[0-9]*: ${fn}:" <<<"$found"; then
      echo "long_functions.sh: allowed $entry is no longer over $max lines (or gone): remove it from $allow" >&2
      rc=1
    fi
    found=$(grep -v "^[^:]*${f}:[0-9]*: ${fn}:" <<<"$found" || true)
  done < "$allow"
fi
if [ -n "$found" ]; then
  echo "functions over $max lines (split them along their own comments):" >&2
  echo "$found" >&2
  rc=1
fi
exit $rc
