#!/bin/bash
# tools/lint/graph_check.sh: checks that the module graph of
# docs/ARCHITECTURE.md is enforced by Bazel, from outside the sandbox (it
# runs bazel itself; `./lab test` calls it after the suite).
#   1. the inference library //engine:spill depends on nothing under
#      research/, harness/, cli/ or server/ (bazel query);
#   2. a library under engine/ that asks for a research tool is refused by
#      visibility, and one that asks for the engine's testonly fixtures is
#      refused as a non-test target (the two manual probe targets in
#      engine/BUILD must fail analysis with those errors).
# Exit 0 if all hold; 1 with the reason otherwise.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
fail=0
bad=$(bazel query 'deps(//engine:spill)' 2>/dev/null | grep -E '^//(research|harness|cli|server)[/:]' || true)
if [ -n "$bad" ]; then
  echo "graph_check: //engine:spill depends on research tools or clients:" >&2
  echo "$bad" >&2
  fail=1
fi
probe() { # probe TARGET EXPECTED_MESSAGE
  local out
  if out=$(bazel build --nobuild "$1" 2>&1); then
    echo "graph_check: $1 was allowed; the graph is not enforced" >&2
    fail=1
  elif ! grep -q "$2" <<<"$out"; then
    echo "graph_check: $1 failed, but not with '$2':" >&2
    echo "$out" | tail -5 >&2
    fail=1
  fi
}
probe //engine:graph_probe_research "is not visible from target"
probe //engine:graph_probe_fixtures "non-test target '//engine:graph_probe_fixtures' depends on testonly target"
[ $fail -eq 0 ] && echo "graph_check: the module graph holds (engine links no research tool; visibility and testonly refuse the two probes)" >&2
exit $fail
