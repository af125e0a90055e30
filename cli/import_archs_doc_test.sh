#!/bin/sh
# cli/import_archs_doc_test.sh: docs/MODEL.md's list of imported
# architectures (between the "import-archs: begin" and "import-archs: end"
# markers) must equal `spill import --architectures`, the importer's table
# (engine/import/arch_registry.c). On a difference it prints the diff;
# regenerate the block with
#   bazel-bin/cli/spill import --architectures
# Usage: import_archs_doc_test.sh SPILL MODEL.md
set -eu
spill=$1
doc=$2
tmp=${TEST_TMPDIR:-/tmp}/import_archs_doc_test.$$
mkdir -p "$tmp"
"$spill" import --architectures > "$tmp/table.md"
sed -n '/<!-- import-archs: begin/,/<!-- import-archs: end/p' "$doc" | sed '1d;$d' > "$tmp/doc.md"
if [ ! -s "$tmp/doc.md" ]; then
  echo "FAIL: $doc has no <!-- import-archs: begin --> ... <!-- import-archs: end --> block" >&2
  exit 1
fi
if ! diff -u "$tmp/doc.md" "$tmp/table.md"; then
  echo "FAIL: $doc's architecture list differs from the importer's (spill import --architectures)" >&2
  exit 1
fi
echo "$doc architecture list matches the importer's table ($(($(wc -l < "$tmp/table.md") - 2)) rows)"
