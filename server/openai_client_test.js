// server/openai_client_test.js: talks to a running `spill serve` with the
// official `openai` npm package (pinned by ./lab into cache/npm-openai), one phase
// per call; server/server_client_test.cc starts the server and runs it.
//
//   node openai_client_test.js PHASE BASE_URL ARGS...
//     basic  MODEL_ID                models, chat and completions (plain and
//                                    streamed), errors as the client sees them
//     same   KIND FILE PROMPT N TEMP TOP_K TOP_P SEED
//                                    stream KIND (completion|chat) and compare
//                                    the text with `spill run`'s stdout in FILE
//     load   CLIENTS REQUESTS        CLIENTS workers x REQUESTS each, greedy:
//                                    none lost or answered twice, all valid
//     queue  N                       N requests at once against --max-queue 1:
//                                    every one is a 200 or a 429, some are 429
// Prints one line per check and a last line "RESULT {json}"; exits 1 on the
// first failed check.
'use strict';
const assert = require('assert');
const fs = require('fs');
const { OpenAI } = require(process.env.SPILL_OPENAI_DIR);

const [phase, baseURL, ...args] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: baseURL + '/v1',
  apiKey: process.env.SPILL_TEST_KEY || 'none',
  maxRetries: 0, // a 429 must reach the test, not be retried
  timeout: 60000,
});

function ok(name) {
  console.log('ok - ' + name);
}

async function streamText(stream, kind) {
  let text = '', finish = null, usage = null, chunks = 0, id = null;
  for await (const ch of stream) {
    chunks++;
    id = id || ch.id;
    assert.strictEqual(ch.id, id, 'one id per stream');
    if (ch.usage) usage = ch.usage;
    if (!ch.choices.length) continue;
    const c = ch.choices[0];
    if (kind === 'chat') text += c.delta.content || '';
    else text += c.text || '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, chunks, id };
}

async function basic(model) {
  const models = await client.models.list();
  assert.strictEqual(models.data.length, 1);
  assert.strictEqual(models.data[0].id, model);
  ok('models.list');

  const chat = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
  });
  assert.strictEqual(chat.object, 'chat.completion');
  assert.strictEqual(chat.choices[0].message.role, 'assistant');
  assert.strictEqual(typeof chat.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
  assert.ok(chat.usage.prompt_tokens > 0);
  assert.ok(chat.usage.completion_tokens >= 1 && chat.usage.completion_tokens <= 8);
  ok('chat.completions (plain)');

  const s = await streamText(await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  }), 'chat');
  assert.strictEqual(s.text, chat.choices[0].message.content, 'streamed = plain (greedy)');
  assert.strictEqual(s.finish, chat.choices[0].finish_reason);
  assert.deepStrictEqual(s.usage, chat.usage);
  ok('chat.completions (stream, usage chunk)');

  const cmp = await client.completions.create({
    model, prompt: 'The quick brown fox', max_tokens: 12, temperature: 0.7, seed: 5, top_p: 0.9,
  });
  assert.strictEqual(cmp.object, 'text_completion');
  assert.strictEqual(typeof cmp.choices[0].text, 'string');
  const cs = await streamText(await client.completions.create({
    model, prompt: 'The quick brown fox', max_tokens: 12, temperature: 0.7, seed: 5, top_p: 0.9,
    stream: true,
  }), 'completion');
  assert.strictEqual(cs.text, cmp.choices[0].text, 'same seed, same text');
  ok('completions (plain and stream, seeded)');

  // stop sequence: the text ends before the first occurrence
  const full = cmp.choices[0].text;
  if (full.length >= 4) {
    const stop = full.slice(2, 4);
    const cut = await client.completions.create({
      model, prompt: 'The quick brown fox', max_tokens: 12, temperature: 0.7, seed: 5, top_p: 0.9,
      stop: [stop],
    });
    assert.strictEqual(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
    assert.strictEqual(cut.choices[0].finish_reason, 'stop');
    ok('stop sequence');
  }

  const errors = {};
  try {
    await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
                                           max_tokens: 'many' });
    assert.fail('wrong-typed max_tokens accepted');
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.strictEqual(e.status, 400);
    assert.strictEqual(e.error.type, 'invalid_request_error');
    assert.strictEqual(e.param, 'max_tokens');
    errors.wrong_type = e.status;
  }
  // strict like the OpenAI API: a field the endpoint does not define is a
  // 400 unknown_parameter naming it (the client passes extra fields through)
  for (const [params, param, create] of [
    [{ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, temprature: 0 },
     'temprature', (p) => client.chat.completions.create(p)],
    [{ model, messages: [{ role: 'user', content: 'x', nmae: 'a' }], max_tokens: 2 },
     'messages[0].nmae', (p) => client.chat.completions.create(p)],
    [{ model, prompt: 'x', max_tokens: 2, max_completion_tokens: 2 },
     'max_completion_tokens', (p) => client.completions.create(p)],
  ]) {
    try {
      await create(params);
      assert.fail(`unknown field ${param} accepted`);
    } catch (e) {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.strictEqual(e.error.type, 'invalid_request_error');
      assert.strictEqual(e.code, 'unknown_parameter');
      assert.strictEqual(e.param, param);
      assert.strictEqual(e.error.message, `Unknown parameter: '${param}'.`);
      errors.unknown = e.status;
    }
  }
  // the informational and neutral fields the client's types define pass
  const info = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello', name: 'u' }], max_tokens: 8, temperature: 0,
    user: 'u', metadata: { k: 'v' }, store: false, service_tier: 'auto', n: 1, logprobs: false,
    tool_choice: 'none', parallel_tool_calls: false, prompt_cache_key: 'k', safety_identifier: 's',
  });
  assert.strictEqual(info.choices[0].message.content, chat.choices[0].message.content);
  ok('unknown fields: 400 unknown_parameter naming them; informational fields accepted');
  try {
    await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] });
    assert.fail('unknown model accepted');
  } catch (e) {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.strictEqual(e.code, 'model_not_found');
    errors.model = e.status;
  }
  try {
    await client.completions.create({ model, prompt: 'x'.repeat(400), max_tokens: 4 });
    assert.fail('prompt longer than the context accepted');
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.strictEqual(e.code, 'context_length_exceeded');
    errors.ctx = e.status;
  }
  ok('errors: 400 wrong type, 400 unknown field, 404 model, 400 context');
  return { chat: chat.choices[0].message.content, completion: full, errors };
}

async function same(kind, file, prompt, n, temp, topK, topP, seed) {
  const params = {
    model: (await client.models.list()).data[0].id, max_tokens: Number(n),
    temperature: Number(temp), top_p: Number(topP), seed: Number(seed), stream: true,
    stream_options: { include_usage: true },
  };
  if (Number(topK) > 0) params.top_k = Number(topK); // a server extension
  let s;
  if (kind === 'chat') {
    params.messages = [{ role: 'user', content: prompt }];
    s = await streamText(await client.chat.completions.create(params), 'chat');
  } else {
    params.prompt = prompt;
    s = await streamText(await client.completions.create(params), 'completion');
  }
  // `spill run` prints the generated bytes and one newline; decoded as
  // UTF-8 the way a browser / Node decodes a byte stream (U+FFFD for bad bytes)
  const raw = fs.readFileSync(file);
  assert.strictEqual(raw[raw.length - 1], 0x0a);
  const want = raw.subarray(0, raw.length - 1).toString('utf8');
  assert.strictEqual(s.text, want, 'streamed text equals spill run');
  ok(`streamed ${kind} text equals spill run (${s.usage.completion_tokens} tokens)`);
  return { text: s.text, usage: s.usage, finish: s.finish };
}

async function load(nClients, nReq) {
  const model = (await client.models.list()).data[0].id;
  // one expected answer per client prompt (greedy: the answer is a function
  // of the prompt alone), computed one at a time first
  const prompts = [], expect = [];
  for (let c = 0; c < nClients; c++) {
    prompts.push(`client ${c}: tell me about ${'abcdefgh'[c % 8]}`);
    const r = await client.completions.create({ model, prompt: prompts[c], max_tokens: 6, temperature: 0 });
    expect.push(r.choices[0].text);
  }
  const ids = new Set();
  let done = 0, dup = 0;
  async function worker(c) {
    for (let i = 0; i < nReq; i++) {
      const stream = i % 2 === 1;
      let text, id, usage;
      if (stream) {
        const s = await streamText(await client.completions.create({
          model, prompt: prompts[c], max_tokens: 6, temperature: 0, stream: true,
          stream_options: { include_usage: true } }), 'completion');
        text = s.text; id = s.id; usage = s.usage;
      } else {
        const r = await client.completions.create({ model, prompt: prompts[c], max_tokens: 6, temperature: 0 });
        text = r.choices[0].text; id = r.id; usage = r.usage;
      }
      assert.strictEqual(text, expect[c], `client ${c} request ${i}: its own answer`);
      assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= 6);
      if (ids.has(id)) dup++;
      ids.add(id);
      done++;
    }
  }
  const t0 = Date.now();
  await Promise.all([...Array(nClients).keys()].map(worker));
  assert.strictEqual(dup, 0, 'no response id seen twice');
  assert.strictEqual(done, nClients * nReq, 'every request answered');
  ok(`load: ${nClients} clients x ${nReq} requests, ${done} answers, ${ids.size} distinct ids, ${Date.now() - t0} ms`);
  return { done, distinct: ids.size, ms: Date.now() - t0, warmup: nClients };
}

async function queue(n) {
  const model = (await client.models.list()).data[0].id;
  const results = await Promise.all([...Array(Number(n)).keys()].map(async (i) => {
    try {
      const r = await client.completions.create({ model, prompt: `q${i}`, max_tokens: 200, temperature: 0 });
      assert.strictEqual(r.choices[0].finish_reason.length > 0, true);
      return 200;
    } catch (e) {
      assert.ok(e instanceof OpenAI.RateLimitError, String(e));
      assert.strictEqual(e.code, 'queue_full');
      return e.status;
    }
  }));
  const n200 = results.filter((x) => x === 200).length;
  const n429 = results.filter((x) => x === 429).length;
  assert.strictEqual(n200 + n429, Number(n));
  assert.ok(n429 >= 1, 'the queue limit refused some requests');
  assert.ok(n200 >= 1, 'the request that reached the engine was served');
  ok(`queue: ${n200} served, ${n429} refused with 429`);
  return { n200, n429 };
}

(async () => {
  let r;
  if (phase === 'basic') r = await basic(args[0]);
  else if (phase === 'same') r = await same(...args);
  else if (phase === 'load') r = await load(Number(args[0]), Number(args[1]));
  else if (phase === 'queue') r = await queue(args[0]);
  else throw new Error('unknown phase ' + phase);
  console.log('RESULT ' + JSON.stringify(r));
})().catch((e) => {
  console.log('FAILED: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
