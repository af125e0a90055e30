// tools/tok/jstiktoken_ranks.js: writes the o200k / cl100k ranks that npm's
// js-tiktoken ships as a standard tiktoken rank file ("base64 rank" lines),
// the format engine/tok reads (Kimi's tiktoken.model is the same format).
//   node jstiktoken_ranks.js NPM_DIR o200k|cl100k OUT
'use strict';
const fs = require('fs');
const path = require('path');
const [npmDir, family, out] = process.argv.slice(2);
if (!npmDir || !family || !out) {
  console.error('usage: node jstiktoken_ranks.js NPM_DIR o200k|cl100k OUT');
  process.exit(2);
}
const mod = require(path.resolve(npmDir, 'node_modules/js-tiktoken/dist/ranks', `${family}_base.cjs`));
const ranks = mod.default || mod;
const lines = [];
for (const line of ranks.bpe_ranks.split('\n')) {
  if (!line) continue;
  const [, offsetStr, ...tokens] = line.split(' ');
  const offset = parseInt(offsetStr, 10);
  tokens.forEach((tok, i) => lines.push(`${tok} ${offset + i}`));
}
fs.writeFileSync(out + '.tmp', lines.join('\n') + '\n');
fs.renameSync(out + '.tmp', out);
