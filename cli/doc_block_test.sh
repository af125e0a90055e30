#!/usr/bin/env bash
# cli/doc_block_test.sh: a generated block of a document must equal what the
# command that owns its table prints now. The block sits between the lines
# "<!-- NAME: begin" and "<!-- NAME: end" of DOC; the command is SPILL ARGS...
# On a difference it prints the diff and how to regenerate the block.
# Usage: doc_block_test.sh DOC NAME SPILL ARGS...
# (knobs_doc_test: README.md's knob table = `spill knobs --markdown`;
#  import_archs_doc_test: docs/MODEL.md's architecture list =
#  `spill import --architectures`, engine/import/arch_registry.c;
#  k3_plan_doc_test / k3_mxfp4_plan_doc_test: docs/PLAN.md's K3 plans =
#  `spill plan --shape k3|k3-mxfp4 --threads 1 --usable-ram 64G`)
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: doc_block_test.sh DOC NAME SPILL ARGS..." >&2
  exit 2
fi
doc=$1 name=$2
shift 2
tmp=${TEST_TMPDIR:-/tmp}/doc_block_test.$$
mkdir -p "$tmp"
"$@" > "$tmp/table.md"
# (a block may sit in a code fence: a first and a last line of ``` are not part of it)
sed -n "/<!-- $name: begin/,/<!-- $name: end/p" "$doc" | sed '1d;$d' | sed '1{/^```$/d}' | sed '${/^```$/d}' > "$tmp/doc.md"
if [ ! -s "$tmp/doc.md" ]; then
  echo "FAIL: $doc has no <!-- $name: begin --> ... <!-- $name: end --> block" >&2
  exit 1
fi
if ! diff -u "$tmp/doc.md" "$tmp/table.md"; then
  echo "FAIL: the $name block of $doc differs from \`${*##*/}\`; regenerate it with: bazel-bin/cli/${1##*/} ${*:2}" >&2
  exit 1
fi
echo "$doc: the $name block matches \`spill ${*:2}\` ($(wc -l < "$tmp/table.md") lines)"
