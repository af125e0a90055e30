// tools/tok/gptoss_tokenizer.js: writes gpt-oss's tokenizer files
// (o200k_harmony: tiktoken's o200k_base ranks plus the harmony special
// tokens at 199998..201087) in the layout of the Hugging Face checkpoint
// directory, built at test time from the ranks npm's js-tiktoken ships (the
// 27 MB file is never committed):
//   OUT_DIR/tokenizer.json         transformers' TikTokenConverter layout:
//     BPE (ignore_merges, byte-level strings as the vocabulary, every split of
//     a token into two tokens as a merge, ordered by the token's rank then the
//     halves' ranks), pre-tokenizer Sequence[Split(o200k regex, Isolated),
//     ByteLevel(use_regex false)], ByteLevel decoder, the specials as added
//     tokens
//   OUT_DIR/tokenizer_config.json  bos <|startoftext|>, eos <|return|>, pad
//     <|endoftext|>, added_tokens_decoder
//   OUT_DIR/specials.json          {text: id} of o200k_harmony as tiktoken
//     defines it (the oracle's extended special tokens), except that tiktoken
//     also names 200018 <|reserved_200018|> (and so decodes it that way): the
//     checkpoint's files know it as <|endofprompt|> only, and so does this
//
//   node gptoss_tokenizer.js NPM_DIR OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, outDir] = process.argv.slice(2);
if (!npmDir || !outDir) {
  console.error('usage: node gptoss_tokenizer.js NPM_DIR OUT_DIR');
  process.exit(2);
}
const mod = require(path.resolve(npmDir, 'node_modules/js-tiktoken/dist/ranks/o200k_base.cjs'));
const ranksSrc = mod.default || mod;

// o200k_base's split pattern (tiktoken's pat_str; tokenizer.json's Split regex)
const PAT =
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?" +
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" +
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// tiktoken_ext/openai_public.py o200k_harmony: o200k_base's specials, then
// these, then <|reserved_N|> for 200013..201087 (200018 keeps the base's
// <|endofprompt|> in the Hugging Face files).
const NAMED = {
  199998: '<|startoftext|>', 199999: '<|endoftext|>', 200000: '<|reserved_200000|>',
  200001: '<|reserved_200001|>', 200002: '<|return|>', 200003: '<|constrain|>',
  200004: '<|reserved_200004|>', 200005: '<|channel|>', 200006: '<|start|>', 200007: '<|end|>',
  200008: '<|message|>', 200009: '<|reserved_200009|>', 200010: '<|reserved_200010|>',
  200011: '<|reserved_200011|>', 200012: '<|call|>',
};
const VOCAB = 201088;
const hfSpecial = {};
const tkSpecial = { '<|endoftext|>': 199999, '<|endofprompt|>': 200018 };
for (let id = 199998; id < VOCAB; id++) {
  const text = NAMED[id] || (id === 200018 ? '<|endofprompt|>' : `<|reserved_${id}|>`);
  hfSpecial[id] = text;
  if ((id >= 200013 && id !== 200018) || NAMED[id]) tkSpecial[NAMED[id] || `<|reserved_${id}|>`] = id;
}

// GPT-2's bytes_to_unicode
const b2u = [];
{
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  bs.forEach((b, i) => { b2u[b] = String.fromCodePoint(cs[i]); });
}

// ranks: token bytes (as a latin1 string) -> rank
const rank = new Map();
const byRank = [];
for (const line of ranksSrc.bpe_ranks.split('\n')) {
  if (!line) continue;
  const [, offsetStr, ...toks] = line.split(' ');
  const offset = parseInt(offsetStr, 10);
  toks.forEach((b64, i) => {
    const s = Buffer.from(b64, 'base64').toString('latin1');
    rank.set(s, offset + i);
    byRank[offset + i] = s;
  });
}
const mapped = (s) => { let o = ''; for (let i = 0; i < s.length; i++) o += b2u[s.charCodeAt(i)]; return o; };

const vocab = {};
const merges = [];
for (let r = 0; r < byRank.length; r++) {
  const s = byRank[r];
  if (s === undefined) continue;
  vocab[mapped(s)] = r;
  if (s.length < 2) continue;
  const local = [];
  for (let k = 1; k < s.length; k++) {
    const a = rank.get(s.slice(0, k)), b = rank.get(s.slice(k));
    if (a !== undefined && b !== undefined) local.push([a, b]);
  }
  local.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  for (const [a, b] of local) merges.push([mapped(byRank[a]), mapped(byRank[b])]);
}

const added = Object.keys(hfSpecial).map((id) => ({
  id: Number(id), content: hfSpecial[id], single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true,
}));
const tj = {
  version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: PAT }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
    vocab, merges,
  },
};
const decoder = {};
for (const a of added)
  decoder[a.id] = { content: a.content, lstrip: false, normalized: false, rstrip: false,
                    single_word: false, special: true };
const cfg = {
  added_tokens_decoder: decoder, bos_token: '<|startoftext|>', eos_token: '<|return|>',
  pad_token: '<|endoftext|>', clean_up_tokenization_spaces: false, model_max_length: 1000000000,
  tokenizer_class: 'PreTrainedTokenizerFast',
};
fs.mkdirSync(outDir, { recursive: true });
const put = (name, obj) => {
  const p = path.join(outDir, name);
  fs.writeFileSync(p + '.tmp', JSON.stringify(obj));
  fs.renameSync(p + '.tmp', p);
};
put('tokenizer.json', tj);
put('tokenizer_config.json', cfg);
put('specials.json', tkSpecial);
console.log(`${byRank.length} ranks, ${merges.length} merges, ${added.length} added tokens`);
