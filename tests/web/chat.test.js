// streamChat and ChunkReader: a finished answer told apart from a stopped, failed or truncated one.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readFileSync } from 'node:fs';
import { streamChat, streamStats } from '../../src/tokenrelay/web/chat.js';
import { ChunkReader } from '../../src/tokenrelay/web/lib/reply_chat.js';
import { cutAt, encoder } from './helpers.js';

const chunk = (delta, finish = null) =>
  `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usage = (completion) =>
  `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: completion, total_tokens: 5 + completion } })}\n\n`;

const FINISHED =
  chunk({ role: 'assistant', content: '' }) +
  chunk({ content: 'Hel' }) +
  ': keep-alive\n\n' +
  chunk({ content: 'lo, ' }) +
  chunk({ content: '世界 👩‍💻' }) +
  chunk({}, 'stop') +
  usage(4) +
  'data: [DONE]\n\n';

/** A fetch that answers with `pieces` (byte arrays) as the body, and records the request. */
function fakeFetch(pieces, { status = 200, type = 'text/event-stream', hang = false } = {}) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    if (init.signal?.aborted) throw new DOMException('The operation was aborted.', 'AbortError');
    let next = 0;
    const body = new ReadableStream({
      start(controller) {
        init.signal?.addEventListener('abort', () =>
          controller.error(new DOMException('The operation was aborted.', 'AbortError')),
        );
      },
      pull(controller) {
        if (next < pieces.length) controller.enqueue(pieces[next++]);
        else if (!hang) controller.close();
        else return new Promise(() => {}); // a server still thinking
      },
    });
    return new Response(body, { status, headers: { 'Content-Type': type } });
  };
  return { fetch, calls };
}

async function run(pieces, options = {}, extra = {}) {
  const { fetch, calls } = fakeFetch(pieces, options);
  const deltas = [];
  const outcome = await streamChat({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    onDelta: (d) => deltas.push(d),
    fetch,
    ...extra,
  });
  return { outcome, deltas, calls };
}

describe('streamChat', () => {
  test('posts the whole conversation with stream and include_usage', async () => {
    const { calls } = await run([encoder.encode(FINISHED)]);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].url, '/v1/chat/completions');
    assert.equal(calls[0].init.method, 'POST');
    assert.deepEqual(JSON.parse(calls[0].init.body), {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test('a finished reply: deltas in order, usage, finish_reason; the same for every byte cut', async () => {
    const bytes = encoder.encode(FINISHED);
    for (let offset = 0; offset <= bytes.length; offset++) {
      const { outcome, deltas } = await run(cutAt(bytes, offset));
      assert.equal(deltas.join(''), 'Hello, 世界 👩‍💻', `cut at ${offset}`);
      assert.equal(outcome.status, 'finished');
      assert.equal(outcome.content, 'Hello, 世界 👩‍💻');
      assert.equal(outcome.finishReason, 'stop');
      assert.equal(outcome.tokens, 4);
      assert.equal(outcome.error, null);
    }
  });

  test('TTFT, tokens/s and total time come from the clock', async () => {
    const ticks = [1000, 1250, 1300, 1350, 1600]; // start, three deltas, end
    const { outcome } = await run([encoder.encode(FINISHED)], {}, { now: () => ticks.shift() });
    assert.equal(outcome.ttftMs, 250);
    assert.equal(outcome.totalMs, 600);
    // 4 tokens: 3 intervals between the first and the last delta (100 ms).
    assert.equal(outcome.tokensPerSecond, 30);
  });

  test('a stream that stops without finish_reason or [DONE] is truncated', async () => {
    const text = chunk({ content: 'The answer is' }) + chunk({ content: ' 4' });
    for (const body of [text, text + 'data: {"choices":[{"delta":{"content":"2"}', text + usage(2)]) {
      const { outcome } = await run([encoder.encode(body)]);
      assert.equal(outcome.status, 'truncated', body);
      assert.match(outcome.content, /^The answer is 4/);
    }
  });

  test('finish_reason without [DONE] is finished; [DONE] alone is finished', async () => {
    assert.equal((await run([encoder.encode(chunk({ content: 'a' }, 'length'))])).outcome.status, 'finished');
    assert.equal(
      (await run([encoder.encode(chunk({ content: 'a' }) + 'data: [DONE]\n\n')])).outcome.status,
      'finished',
    );
  });

  test('an error event mid-stream is an error, with the text that came before it', async () => {
    const body =
      chunk({ content: 'partial' }) +
      'data: {"error": {"message": "engine failed", "type": "server_error"}}\n\n' +
      chunk({ content: ' ignored' });
    const { outcome, deltas } = await run([encoder.encode(body)]);
    assert.equal(outcome.status, 'error');
    assert.equal(outcome.error, 'engine failed');
    assert.deepEqual(deltas, ['partial']);
  });

  test("an HTTP error shows the server's OpenAI error message", async () => {
    const body = JSON.stringify({ error: { message: 'model not found', type: 'not_found_error' } });
    const { outcome, deltas } = await run([encoder.encode(body)], { status: 404, type: 'application/json' });
    assert.equal(outcome.status, 'error');
    assert.equal(outcome.error, '404: model not found');
    assert.deepEqual(deltas, []);
  });

  test('a body that is not an event stream is an error', async () => {
    const { outcome } = await run([encoder.encode('<html>')], { type: 'text/html' });
    assert.equal(outcome.status, 'error');
    assert.match(outcome.error, /event stream/);
  });

  test('a chunk that is not JSON is an error', async () => {
    const { outcome } = await run([encoder.encode('data: {oops\n\n')]);
    assert.equal(outcome.status, 'error');
    assert.match(outcome.error, /bad chunk/);
  });

  test('a network failure is an error', async () => {
    const fetch = async () => {
      throw new TypeError('Failed to fetch');
    };
    const outcome = await streamChat({ model: 'm', messages: [], onDelta: () => {}, fetch });
    assert.equal(outcome.status, 'error');
    assert.match(outcome.error, /Failed to fetch/);
  });

  test('Stop aborts the fetch mid-stream: stopped, keeping what came', async () => {
    const controller = new AbortController();
    const { fetch } = fakeFetch([encoder.encode(chunk({ content: 'thinking' }))], { hang: true });
    const outcome = await streamChat({
      model: 'm',
      messages: [],
      fetch,
      signal: controller.signal,
      onDelta: () => controller.abort(),
    });
    assert.equal(outcome.status, 'stopped');
    assert.equal(outcome.content, 'thinking');
    assert.equal(outcome.error, null);
  });
});

describe('ChunkReader', () => {
  test('ignores chunks without text and everything after [DONE]', () => {
    const reader = new ChunkReader();
    assert.equal(reader.feed({ data: JSON.stringify({ choices: [{ delta: { role: 'assistant' } }] }) }), '');
    assert.equal(reader.feed({ data: JSON.stringify({ choices: [{ delta: { content: 'x' } }] }) }), 'x');
    assert.equal(reader.status(), 'truncated');
    assert.equal(reader.feed({ data: '[DONE]' }), '');
    assert.equal(reader.feed({ data: JSON.stringify({ choices: [{ delta: { content: 'y' } }] }) }), '');
    assert.equal(reader.status(), 'finished');
    assert.equal(reader.content, 'x');
  });

  // Shared with the Python decoder (tests/test_openai.py): the same rules for reading chunks on both sides.
  const VECTORS = JSON.parse(
    readFileSync(new URL('../vectors/chat_chunks.json', import.meta.url), 'utf8'),
  ).vectors;
  for (const vector of VECTORS) {
    test(`shared vector: ${vector.name}`, () => {
      const reader = new ChunkReader();
      const deltas = [];
      for (const data of vector.events) {
        const text = reader.feed({ data });
        if (reader.error !== null) break;
        if (text !== '') deltas.push(text);
      }
      const usage = reader.usage && {
        prompt_tokens: reader.usage.prompt_tokens,
        completion_tokens: reader.usage.completion_tokens,
      };
      assert.deepEqual(
        {
          deltas,
          finish_reason: reader.finishReason,
          usage,
          finished: reader.done || reader.finishReason !== null,
          error: reader.errorKind,
          not_chunks: reader.notChunks,
          tool_calls: reader.toolCalls,
        },
        {
          deltas: vector.deltas,
          finish_reason: vector.finish_reason,
          usage: vector.usage,
          finished: vector.finished,
          error: vector.error,
          not_chunks: vector.not_chunks,
          tool_calls: vector.tool_calls,
        },
      );
      assert.equal(reader.content, vector.deltas.join(''));
      assert.equal(reader.status(), vector.error ? 'error' : vector.finished ? 'finished' : 'truncated');
    });
  }
});

describe('streamChat for the page (issue 14)', () => {
  test('parameters go into the body, the key into a bearer header', async () => {
    const { calls } = await run(
      [encoder.encode(FINISHED)],
      {},
      {
        params: { temperature: 0.2, max_tokens: 7 },
        apiKey: 'sk-test',
      },
    );
    const body = JSON.parse(calls[0].init.body);
    assert.equal(body.temperature, 0.2);
    assert.equal(body.max_tokens, 7);
    assert.equal(body.stream, true);
    assert.equal(calls[0].init.headers.Authorization, 'Bearer sk-test');
    const { calls: keyless } = await run([encoder.encode(FINISHED)]);
    assert.equal('Authorization' in keyless[0].init.headers, false);
  });

  test('a refused request carries its HTTP status', async () => {
    const refusal = JSON.stringify({ error: { message: 'missing or invalid API key', type: 'x' } });
    const { outcome } = await run([encoder.encode(refusal)], { status: 401, type: 'application/json' });
    assert.equal(outcome.status, 'error');
    assert.equal(outcome.httpStatus, 401);
    assert.match(outcome.error, /^401: missing or invalid API key/);
    const { outcome: ok } = await run([encoder.encode(FINISHED)]);
    assert.equal(ok.httpStatus, null);
  });

  test('every delta comes with the numbers so far', async () => {
    const { fetch } = fakeFetch([encoder.encode(FINISHED)]);
    let clock = 0;
    const seen = [];
    await streamChat({
      model: 'm',
      messages: [],
      fetch,
      now: () => (clock += 100),
      onDelta: (text, stats) => seen.push(stats),
    });
    assert.equal(seen.length, 3);
    assert.deepEqual(
      seen.map((s) => s.tokens),
      [1, 2, 3],
    );
    assert.ok(seen.every((s) => s.ttftMs === seen[0].ttftMs && s.ttftMs > 0));
    assert.equal(seen[0].tokensPerSecond, null, 'one token: no rate yet');
    assert.ok(seen[2].tokensPerSecond > 0);
  });

  test('streamStats: the rate runs from the first token to the last', () => {
    assert.deepEqual(streamStats({ started: 0, firstAt: null, lastAt: null, tokens: 0 }), {
      ttftMs: null,
      tokens: 0,
      tokensPerSecond: null,
    });
    assert.deepEqual(streamStats({ started: 100, firstAt: 300, lastAt: 1300, tokens: 11 }), {
      ttftMs: 200,
      tokens: 11,
      tokensPerSecond: 10,
    });
  });
});
