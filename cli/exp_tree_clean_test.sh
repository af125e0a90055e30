#!/usr/bin/env bash
# `spill exp` and the repository it runs in (issue 18): a plain run (what
# `./lab demo` does) leaves `git status` clean, its refuted verdict going to
# its own results directory; `--publish` is refused from a tree with
# uncommitted changes and, from a clean one, writes the entry into refuted/.
# Runs the demo's own config with the model swapped for the nano preset, a
# single budget and a hypothesis that is certainly refuted (lookahead reads
# fewer records: a deterministic counter), in a throwaway git repository
# holding copies of the repository's .gitignore and refuted/.
# Args: SPILL DEMO_JSON GITIGNORE REFUTED_FILES...
set -euo pipefail
spill="$(realpath "$1")"; demo="$(realpath "$2")"; ignore="$(realpath "$3")"; shift 3
repo="${TEST_TMPDIR:-$(mktemp -d)}/repo"
rm -rf "$repo"; mkdir -p "$repo/experiments/prompts" "$repo/refuted"
for f in "$@"; do cp "$f" "$repo/refuted/"; done
cp "$ignore" "$repo/.gitignore"
echo "a tiny prompt for the tree test" > "$repo/experiments/prompts/tiny.txt"
python3 - "$demo" "$repo/experiments/demo.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"] = {"preset": "nano"}
c["sweep"] = {"budget": ["64M"]}
c["workload"]["decode_tokens"] = 4
c["outputs"]["plots"] = []
c["hypothesis"].update(metric="reads", direction="decrease", min_effect=0.5,
                       claim="lookahead halves the records read")
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
cd "$repo"
g() { git -c user.name=test -c user.email=test@example.invalid "$@"; }
g init -q . && g add -A && g commit -qm fixture
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. a plain run: the verdict lands in its results directory, the tree stays clean
"$spill" exp experiments/demo.json > run1.log 2>&1 || { cat run1.log; fail "plain run failed"; }
rm run1.log
ls results/demo/*/refuted/0001-demo.md >/dev/null 2>&1 || fail "no refuted entry in the results directory"
entry=$(ls results/demo/*/refuted/0001-demo.md)
grep -q "^config: experiments/demo.json$" "$entry" || fail "config: line is not the config run: $(grep ^config: "$entry")"
grep -q "^written_by: spill exp$" "$entry" || fail "entry does not say it was written by the runner"
st=$(git status --porcelain --untracked-files=all)
[ -z "$st" ] || fail "a plain run left the tree dirty:
$st"

# 2. --publish from a tree with an uncommitted change to a tracked file: refused, nothing run
echo "edit" >> experiments/prompts/tiny.txt
n_before=$(ls results/demo | wc -l)
if "$spill" exp experiments/demo.json --publish > pub.log 2>&1; then fail "--publish ran from a dirty tree"; fi
grep -q "uncommitted changes" pub.log || { cat pub.log; fail "--publish refusal does not name the reason"; }
[ "$(ls results/demo | wc -l)" = "$n_before" ] || fail "--publish made a results directory before refusing"
rm pub.log
git checkout -q experiments/prompts/tiny.txt

# 3. --publish from a clean tree: the entry goes to refuted/, numbered after the copies
"$spill" exp experiments/demo.json --publish > pub.log 2>&1 || { cat pub.log; fail "--publish from a clean tree failed"; }
rm pub.log
new=$(git status --porcelain --untracked-files=all)
echo "$new" | grep -q "refuted/README.md" || fail "--publish did not regenerate refuted/README.md"
echo "$new" | grep -Eq '^\?\? refuted/[0-9]{4}-demo\.md$' || fail "--publish wrote no refuted/ entry: $new"
[ "$(echo "$new" | grep -v ' refuted/' || true)" = "" ] || fail "--publish changed more than refuted/: $new"
echo "ok"
