#!/usr/bin/env bash
# tools/tok/oracle_corpus.sh: the full oracle run of docs/TOKENIZER.md: builds
# the >= 5 MB corpus (tools/tok/build_corpus.py, from text on this Debian
# machine + edge cases) into cache/, then runs //engine/tok:tok_oracle_test
# over it for every family (ids identical to the npm references for every
# document, decode == reference decode, round trip == normalize). Needs
# ./lab deps (node + cache/npm). Prints the per-family counts.
#
#   tools/tok/oracle_corpus.sh [MB]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
MB="${1:-5}"
CORPUS="$ROOT/cache/tok-corpus-${MB}mb.bin"
/usr/bin/python3 tools/tok/build_corpus.py "$CORPUS" --mb "$MB"
bazel build --noshow_progress //engine/tok:tok_oracle_test >&2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SPILL_TOK_NPM="$ROOT/cache/npm" SPILL_TOK_CORPUS="$CORPUS" TEST_TMPDIR="$TMP" \
  "$ROOT/bazel-bin/engine/tok/tok_oracle_test" 2>&1 |
  grep -E "documents identical|Failure|FAILED|PASSED|differ" || true
