#!/usr/bin/env bash
# gpt-oss's tokenizer (o200k_harmony) as the Hugging Face checkpoint ships it
# and as llama.cpp's converter writes it (GGUF, pre-tokenizer gpt-4o), read by
# spill, against js-tiktoken and llama.cpp's tokenizer:
# tools/peers/gptoss_tok_oracle.py (24 held-out documents).
# Needs the peer (SPILL_LLAMA_PEER, with its `tokenize` mode), the npm oracle
# (SPILL_TOK_NPM: ./lab test passes both) and node. Without: SKIP.
set -uo pipefail
SPILL="$1"
ORACLE="$2"
PEER="${SPILL_LLAMA_PEER:-}"
NPM="${SPILL_TOK_NPM:-}"
if [ -z "$PEER" ] || [ ! -x "$PEER" ]; then
  echo "SKIP: llama.cpp peer not built (run ./lab peers; SPILL_LLAMA_PEER='$PEER')"
  exit 0
fi
if ! "$PEER" --help | grep -q "llama_peer tokenize"; then
  echo "SKIP: $PEER predates its tokenize mode (run ./lab peers on this checkout to rebuild it)"
  exit 0
fi
if [ -z "$NPM" ] || [ ! -d "$NPM/node_modules/js-tiktoken" ]; then
  echo "SKIP: SPILL_TOK_NPM='$NPM' has no js-tiktoken (./lab deps installs it; ./lab test passes it)"
  exit 0
fi
if ! command -v node >/dev/null; then
  echo "SKIP: node is not installed"
  exit 0
fi
W="${TEST_TMPDIR:-$(mktemp -d)}/gptoss_tok"
rm -rf "$W" && mkdir -p "$W"
/usr/bin/python3 "$ORACLE" "$SPILL" "$PEER" "$NPM" "$W"
