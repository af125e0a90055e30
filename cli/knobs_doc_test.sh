#!/bin/sh
# cli/knobs_doc_test.sh: README.md's knob table (between the "knobs: begin"
# and "knobs: end" markers) must equal `spill knobs --markdown`, the engine's
# knob table. On a difference it prints the diff; regenerate the block with
#   bazel-bin/cli/spill knobs --markdown
# Usage: knobs_doc_test.sh SPILL README.md
set -eu
spill=$1
readme=$2
tmp=${TEST_TMPDIR:-/tmp}/knobs_doc_test.$$
mkdir -p "$tmp"
"$spill" knobs --markdown > "$tmp/table.md"
sed -n '/<!-- knobs: begin/,/<!-- knobs: end/p' "$readme" | sed '1d;$d' > "$tmp/readme.md"
if [ ! -s "$tmp/readme.md" ]; then
  echo "FAIL: $readme has no <!-- knobs: begin --> ... <!-- knobs: end --> block" >&2
  exit 1
fi
if ! diff -u "$tmp/readme.md" "$tmp/table.md"; then
  echo "FAIL: README.md's knob table differs from the engine's (spill knobs --markdown)" >&2
  exit 1
fi
echo "README knob table matches the engine's ($(wc -l < "$tmp/table.md") lines)"
