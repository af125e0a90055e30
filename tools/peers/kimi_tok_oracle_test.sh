#!/usr/bin/env bash
# Kimi K3's tokenizer files (tiktoken.model + tokenizer_config.json) read
# by spill against llama.cpp's tokenizer on the GGUF its converter makes of
# them (pre-tokenizer kimi-k2): tools/peers/kimi_tok_oracle.py, 13 documents
# with and without special-token parsing, ids equal.
# Needs the peer: SPILL_LLAMA_PEER=path/to/llama_peer (./lab test passes it
# when `./lab peers` has built it) with its `tokenize` mode. Without: SKIP.
set -uo pipefail
SPILL="$1"
ORACLE="$2"
PEER="${SPILL_LLAMA_PEER:-}"
if [ -z "$PEER" ] || [ ! -x "$PEER" ]; then
  echo "SKIP: llama.cpp peer not built (run ./lab peers; SPILL_LLAMA_PEER='$PEER')"
  exit 0
fi
if ! "$PEER" --help | grep -q "llama_peer tokenize"; then
  echo "SKIP: $PEER predates its tokenize mode (run ./lab peers on this checkout to rebuild it)"
  exit 0
fi
W="${TEST_TMPDIR:-$(mktemp -d)}/kimi_tok"
rm -rf "$W" && mkdir -p "$W"
/usr/bin/python3 "$ORACLE" "$SPILL" "$PEER" "$W"
