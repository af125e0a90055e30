#!/usr/bin/env bash
# cli/chat_test.sh: `spill chat` and `spill run --chat` end to end on a nano
# model given a tiny tokenizer with a chat template (tools/tok/tiny_tokenizer.py):
# two turns answered with per-turn stats on stderr, the conversation kept
# (turn 2's prompt is longer than turn 1's), /exit honoured; a model without
# a tokenizer is refused with a message; spill tokenize reads the model dir.
set -uo pipefail
SPILL="$1"
TINY="$2"
T="${TEST_TMPDIR:-/tmp}/chat_test"
rm -rf "$T"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$T"
"$SPILL" gen --preset nano "$T/nano" >"$T/gen.log" 2>&1 || { echo "FAIL: gen: $(tail -3 "$T/gen.log")"; exit 1; }
cp -r "$T/nano" "$T/bytes"
/usr/bin/python3 "$TINY" "$T/nano" || { echo "FAIL: tiny tokenizer"; exit 1; }
err=$(printf 'hello world\nsay hello\n/exit\nnot read\n' | "$SPILL" chat "$T/nano" -n 6 --temp 0 2>&1 >/dev/null)
rc=$?
[ $rc -eq 0 ] || fail "chat exit $rc: $err"
grep -q "turn 1:" <<<"$err" || fail "no turn 1 stats: $err"
grep -q "turn 2:" <<<"$err" || fail "no turn 2 stats: $err"
grep -q "turn 3:" <<<"$err" && fail "read past /exit: $err"
p1=$(sed -n 's/.*turn 1: \([0-9]*\) prompt tokens.*/\1/p' <<<"$err")
p2=$(sed -n 's/.*turn 2: \([0-9]*\) prompt tokens.*/\1/p' <<<"$err")
[ -n "$p1" ] && [ -n "$p2" ] && [ "$p2" -gt "$p1" ] || fail "conversation not kept ($p1 -> $p2)"
"$SPILL" run "$T/nano" "hello" --chat -n 4 >/dev/null 2>"$T/run.err" || fail "run --chat: $(cat "$T/run.err")"
out=$(printf 'hi\n' | "$SPILL" chat "$T/bytes" 2>&1)
[ $? -eq 1 ] || fail "chat without a tokenizer did not exit 1"
grep -q "no tokenizer" <<<"$out" || fail "no message for a model without tokenizer: $out"
ids=$("$SPILL" tokenize "$T/nano" "hello<|end|>" --json)
[ "$ids" = '{"ids": [260, 262], "offsets": [0, 5], "pieces": ["hello", "<|end|>"], "count": 2}' ] ||
  fail "tokenize via the model dir: $ids"
# Kimi K3's XTML format: the reply starts in the think channel, which goes
# to stderr after "[think] "; nano never closes it, so stdout (the
# response) is empty and the conversation keeps an empty reply
cp -r "$T/bytes" "$T/xtml"
/usr/bin/python3 "$TINY" "$T/xtml" --xtml || { echo "FAIL: tiny tokenizer --xtml"; exit 1; }
out=$("$SPILL" run "$T/xtml" "hello" --chat -n 8 --temp 0 2>"$T/xtml.err")
[ $? -eq 0 ] || fail "run --chat (xtml): $(cat "$T/xtml.err")"
[ "$out" = "" ] || fail "run --chat (xtml): the think channel reached stdout: '$out'"
grep -q '^\[think\] ' "$T/xtml.err" || fail "run --chat (xtml): no [think] line: $(cat "$T/xtml.err")"
[ $fails -eq 0 ] && echo "PASS" || exit 1
