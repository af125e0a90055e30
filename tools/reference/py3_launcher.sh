#!/bin/sh
# tools/reference/py3_launcher.sh: runs TARGET.py with Debian's /usr/bin/python3,
# where TARGET is the name this launcher was invoked as (spill_ref,
# spill_ref_test). Bazel 4's native py rules take the first python3 on PATH,
# which on the dev machines is a pyenv interpreter without numpy; the
# reference needs python3-numpy from Debian, so the sh_binary/sh_test targets
# in BUILD use this launcher instead. Finds the .py in the runfiles tree (bazel
# run / bazel test / bazel-bin direct), else beside the resolved script, and
# runs from the caller's directory under `bazel run` so relative paths work.
set -eu
name="$(basename "$0" .sh)"
py=""
for r in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
  if [ -n "$r" ] && [ -f "$r/spill/tools/reference/$name.py" ]; then
    py="$r/spill/tools/reference/$name.py"
    break
  fi
done
if [ -z "$py" ]; then
  py="$(dirname "$(readlink -f "$0")")/$name.py"
fi
case "$py" in /*) ;; *) py="$(pwd)/$py" ;; esac
if [ ! -x /usr/bin/python3 ]; then
  echo "$name: /usr/bin/python3 not found (apt-get install python3 python3-numpy)" >&2
  exit 1
fi
if [ -n "${BUILD_WORKING_DIRECTORY:-}" ]; then
  cd "$BUILD_WORKING_DIRECTORY"
fi
exec /usr/bin/python3 "$py" "$@"
