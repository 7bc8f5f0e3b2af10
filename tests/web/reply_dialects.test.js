// The Responses and Messages readers of `tokenrelay/reply` (lib/reply_responses.js, lib/reply_messages.js),
// twins of the Python readers on the same vectors: tests/vectors/reply_dialects.json holds real streams written
// by the server's writers and what the Python readers read from them (tests/vectors/reply_dialects.py makes
// it). The JS readers must read the same, for every cut of the bytes, and end a cut stream with an error.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { MessagesReader, ReplyError, ResponsesReader, readReply } from 'tokenrelay/reply';
import { SSEParser } from 'tokenrelay/sse';
import { cuttings, encoder, seeded } from './helpers.js';

const VECTORS = JSON.parse(readFileSync(new URL('../vectors/reply_dialects.json', import.meta.url), 'utf8'));
const READER = { responses: () => new ResponsesReader(), messages: () => new MessagesReader() };

/** The reply events of `pieces` read by a fresh reader of `dialect` (sans-I/O: the SSE parser, the reader). */
function readPieces(dialect, pieces) {
  const parser = new SSEParser();
  const reader = READER[dialect]();
  const out = [];
  for (const piece of pieces) {
    for (const event of parser.feed(piece)) if (!reader.done) out.push(...reader.feed(event));
  }
  parser.close();
  out.push(...reader.finish());
  return out;
}

/** A fetch Response whose body is `pieces`. */
function responseOf(pieces) {
  let next = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (next < pieces.length) controller.enqueue(pieces[next++]);
      else controller.close();
    },
  });
  return new Response(body, { headers: { 'Content-Type': 'text/event-stream' } });
}

async function readResponse(response) {
  const out = [];
  for await (const event of readReply(response)) out.push(event);
  return out;
}

/** The events joined into the Python reader's terms (tests/vectors/reply_dialects.py's `read`). */
function summary(events) {
  const read = { text: '', reasoning: '', tool_calls: [], finish_reason: null, usage: null, error: null };
  const ends = events.filter((e) => e.type === 'finish' || e.type === 'error');
  assert.equal(ends.length, 1, 'one finish or one error');
  assert.equal(events.at(-1), ends[0], 'nothing after it');
  for (const event of events) {
    if (event.type === 'text') read.text += event.text;
    else if (event.type === 'reasoning') read.reasoning += event.text;
    else if (event.type === 'tool-call-start') {
      assert.equal(event.index, read.tool_calls.length, 'calls are counted from 0 in order');
      read.tool_calls.push({ id: event.id, name: event.name, arguments: '' });
    } else if (event.type === 'tool-call-delta') read.tool_calls[event.index].arguments += event.arguments;
    else if (event.type === 'finish') {
      read.finish_reason = event.reason;
      read.usage = event.usage === null ? null : [event.usage.inputTokens, event.usage.outputTokens];
    } else if (event.type === 'error') {
      assert.ok(event.error instanceof ReplyError);
      assert.equal(event.error.code, 'server');
      read.error = event.error.message;
    }
  }
  return read;
}

const plain = (list) => list.map((e) => (e.type === 'error' ? { type: 'error', code: e.error.code } : e));

/** The stream's SSE frames (each ends with a blank line). */
const framesOf = (stream) =>
  stream
    .split('\n\n')
    .slice(0, -1)
    .map((frame) => `${frame}\n\n`);

describe('the Responses and Messages readers, on the Python writers’ streams', () => {
  for (const { name, dialect, stream, read } of VECTORS.cases) {
    test(`${dialect}: ${name}: what the Python reader reads, for every cut of the bytes`, async () => {
      const bytes = encoder.encode(stream);
      const expected = readPieces(dialect, [bytes]);
      assert.deepEqual(summary(expected), read);
      // readReply over a fetch Response tells the dialect from the first event and reads the same.
      assert.deepEqual(await readResponse(responseOf([bytes])), expected);
      for (const [how, pieces] of cuttings(bytes, { randomRuns: 3 })) {
        assert.deepEqual(readPieces(dialect, pieces), expected, how);
        if (!how.startsWith('cut at'))
          assert.deepEqual(await readResponse(responseOf(pieces)), expected, how);
      }
    });
  }

  test('a stream cut before its end is a truncated error, never a quiet finish', () => {
    for (const { name, dialect, stream, read } of VECTORS.cases) {
      if (read.error !== null) continue;
      const frames = framesOf(stream);
      // The events that finish it: response.completed / response.incomplete; a Messages reply has finished
      // once its stop_reason came (message_delta), as a chat stream that lost its [DONE] has.
      const end = frames.findIndex((f) =>
        dialect === 'responses'
          ? /^event: response\.(completed|incomplete)\n/.test(f)
          : /^event: message_delta\n/.test(f),
      );
      assert.ok(end > 0, name);
      for (let kept = 0; kept < frames.length; kept++) {
        const out = readPieces(dialect, [frames.slice(0, kept).join('')]);
        const last = out.at(-1);
        if (kept <= end) {
          assert.deepEqual(
            plain([last]),
            [{ type: 'error', code: 'truncated' }],
            `${dialect} ${name}: ${kept} frames`,
          );
          assert.match(last.error.message, /ended before the reply was finished/);
        } else assert.equal(last.type, 'finish', `${dialect} ${name}: ${kept} frames`);
        // What came before the cut is given as it came: the text so far is the whole text's start.
        assert.ok(read.text.startsWith(summary([...out.slice(0, -1), finishOf()]).text));
      }
      // And half an event (the frame before the end, cut inside) is no event at all.
      const half = frames.slice(0, end).join('') + frames[end].slice(0, frames[end].length - 3);
      assert.equal(readPieces(dialect, [half]).at(-1).error.code, 'truncated');
    }
  });
});

const finishOf = () => ({ type: 'finish', reason: 'stop', usage: null });

/** An SSE stream of named events, each `[name, data]` (data an object, or raw text). */
const sse = (...events) =>
  events
    .map(
      ([name, data]) => `event: ${name}\ndata: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`,
    )
    .join('');

describe('ResponsesReader: ends, errors and what it skips', () => {
  const created = [
    'response.created',
    { type: 'response.created', response: { id: 'r', status: 'in_progress' } },
  ];
  const text = (delta) => [
    'response.output_text.delta',
    { type: 'response.output_text.delta', output_index: 0, delta },
  ];
  const end = (type, response) => [type, { type, response }];
  const read = (...events) => readPieces('responses', [sse(created, ...events)]);

  test('completed is stop, or tool_calls when the output holds a call; incomplete is length or its reason', () => {
    const usage = { input_tokens: 3, output_tokens: 2, total_tokens: 5 };
    assert.deepEqual(
      read(text('hi'), end('response.completed', { status: 'completed', output: [], usage })),
      [
        { type: 'text', text: 'hi' },
        { type: 'finish', reason: 'stop', usage: { inputTokens: 3, outputTokens: 2 } },
      ],
    );
    const called = { status: 'completed', output: [{ type: 'function_call', name: 'f', arguments: '{}' }] };
    assert.deepEqual(read(end('response.completed', called)).at(-1), {
      type: 'finish',
      reason: 'tool_calls',
      usage: null,
    });
    for (const [details, reason] of [
      [{ reason: 'max_output_tokens' }, 'length'],
      [null, 'length'],
      [{ reason: 'content_filter' }, 'content_filter'],
    ]) {
      const out = read(
        text('cut'),
        end('response.incomplete', { status: 'incomplete', incomplete_details: details }),
      );
      assert.deepEqual(out.at(-1), { type: 'finish', reason, usage: null });
    }
  });

  test('a call started by output_item.added, its arguments by output_index; the id is its call_id', () => {
    const item = { type: 'function_call', call_id: 'call_9', name: 'get', arguments: '' };
    const args = (delta) => [
      'response.function_call_arguments.delta',
      { type: 'response.function_call_arguments.delta', output_index: 1, delta },
    ];
    const out = read(
      [
        'response.output_item.added',
        { type: 'response.output_item.added', output_index: 0, item: { type: 'message' } },
      ],
      ['response.output_item.added', { type: 'response.output_item.added', output_index: 1, item }],
      args('{"a"'),
      args(': 1}'),
      end('response.completed', { output: [] }),
    );
    assert.deepEqual(out, [
      { type: 'tool-call-start', index: 0, id: 'call_9', name: 'get' },
      { type: 'tool-call-delta', index: 0, arguments: '{"a"' },
      { type: 'tool-call-delta', index: 0, arguments: ': 1}' },
      { type: 'finish', reason: 'tool_calls', usage: null },
    ]);
  });

  test('error and response.failed are the server’s errors; bad data is a protocol error; the rest is skipped', () => {
    const error = read(text('a'), [
      'error',
      { type: 'error', code: 'x', message: 'the engine broke', param: null },
    ]);
    assert.deepEqual(plain(error), [
      { type: 'text', text: 'a' },
      { type: 'error', code: 'server' },
    ]);
    assert.equal(error[1].error.message, 'the engine broke');
    const failed = read(
      end('response.failed', { status: 'failed', error: { code: 'server_error', message: 'gone' } }),
    );
    assert.equal(failed[0].error.code, 'server');
    assert.equal(failed[0].error.message, 'gone');
    for (const bad of [
      ['response.output_text.delta', '{not json'],
      ['response.output_text.delta', '[1]'],
      text(7),
      [
        'response.function_call_arguments.delta',
        { type: 'response.function_call_arguments.delta', output_index: 4, delta: 'x' },
      ],
      end('response.completed', { usage: { input_tokens: 1.5, output_tokens: 2 } }),
      end('response.completed', null),
    ]) {
      assert.deepEqual(
        plain(read(bad, text('never read'))),
        [{ type: 'error', code: 'protocol' }],
        JSON.stringify(bad),
      );
    }
    const skipped = read(
      ['response.in_progress', { type: 'response.in_progress' }],
      ['response.future.thing', { type: 'response.future.thing' }],
    );
    assert.deepEqual(plain(skipped), [{ type: 'error', code: 'truncated' }]);
    // A lone surrogate in the JSON comes out as U+FFFD, never as half a pair.
    assert.deepEqual(
      read(['response.output_text.delta', '{"type": "response.output_text.delta", "delta": "a\\ud800"}'])[0],
      { type: 'text', text: 'a\uFFFD' },
    );
  });
});

describe('MessagesReader: ends, errors and what it skips', () => {
  const start = [
    'message_start',
    { type: 'message_start', message: { id: 'm', usage: { input_tokens: 4, output_tokens: 1 } } },
  ];
  const block = (index, content_block) => [
    'content_block_start',
    { type: 'content_block_start', index, content_block },
  ];
  const delta = (index, d) => ['content_block_delta', { type: 'content_block_delta', index, delta: d }];
  const stopReason = (stop_reason, usage = { output_tokens: 9 }) => [
    'message_delta',
    { type: 'message_delta', delta: { stop_reason }, usage },
  ];
  const stop = ['message_stop', { type: 'message_stop' }];
  const read = (...events) => readPieces('messages', [sse(start, ...events)]);

  test('stop reasons in the chat API’s terms; the usage is message_start’s input and the last output', () => {
    for (const [reason, finish] of [
      ['end_turn', 'stop'],
      ['stop_sequence', 'stop'],
      ['max_tokens', 'length'],
      ['tool_use', 'tool_calls'],
      ['refusal', 'content_filter'],
      ['something_new', 'something_new'],
    ]) {
      const out = read(
        block(0, { type: 'text', text: '' }),
        delta(0, { type: 'text_delta', text: 'hi' }),
        stopReason(reason),
        stop,
      );
      assert.deepEqual(out, [
        { type: 'text', text: 'hi' },
        { type: 'finish', reason: finish, usage: { inputTokens: 4, outputTokens: 9 } },
      ]);
    }
    assert.deepEqual(read(stop), [
      { type: 'finish', reason: 'stop', usage: { inputTokens: 4, outputTokens: 1 } },
    ]);
  });

  test('thinking is reasoning, a tool_use block a call; pings, signatures and unknown events are skipped', () => {
    const out = read(
      ['ping', { type: 'ping' }],
      block(0, { type: 'thinking', thinking: '', signature: '' }),
      delta(0, { type: 'thinking_delta', thinking: 'hmm' }),
      delta(0, { type: 'signature_delta', signature: 'abc' }),
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      block(1, { type: 'tool_use', id: 'toolu_1', name: 'get', input: {} }),
      delta(1, { type: 'input_json_delta', partial_json: '' }),
      delta(1, { type: 'input_json_delta', partial_json: '{"a": 1}' }),
      ['a_future_event', { type: 'a_future_event' }],
      block(2, { type: 'tool_use', id: 'toolu_2', name: 'put', input: {} }),
      stopReason('tool_use'),
      stop,
      ['content_block_delta', 'after the stop: never read'],
    );
    assert.deepEqual(out, [
      { type: 'reasoning', text: 'hmm' },
      { type: 'tool-call-start', index: 0, id: 'toolu_1', name: 'get' },
      { type: 'tool-call-delta', index: 0, arguments: '{"a": 1}' },
      { type: 'tool-call-start', index: 1, id: 'toolu_2', name: 'put' },
      { type: 'finish', reason: 'tool_calls', usage: { inputTokens: 4, outputTokens: 9 } },
    ]);
  });

  test('an error event is the server’s error; bad data and out-of-order blocks are protocol errors', () => {
    const error = read(['error', { type: 'error', error: { type: 'overloaded_error', message: 'busy' } }]);
    assert.deepEqual(plain(error), [{ type: 'error', code: 'server' }]);
    assert.equal(error[0].error.message, 'busy');
    assert.equal(read(['error', 'not json'])[0].error.code, 'server');
    for (const bad of [
      ['content_block_start', '{not json'],
      ['message_delta', { type: 'message_stop' }],
      block(1, { type: 'text', text: '' }),
      delta(0, { type: 'text_delta', text: 'no block 0' }),
      [...block(0, { type: 'tool_use', id: 'x' })],
    ]) {
      assert.deepEqual(plain(read(bad, stop)), [{ type: 'error', code: 'protocol' }], JSON.stringify(bad));
    }
    const notACall = read(
      block(0, { type: 'text', text: '' }),
      delta(0, { type: 'input_json_delta', partial_json: '{}' }),
    );
    assert.deepEqual(plain(notACall), [{ type: 'error', code: 'protocol' }]);
    const badUsage = read(stopReason('end_turn', { output_tokens: 'many' }));
    assert.deepEqual(plain(badUsage), [{ type: 'error', code: 'protocol' }]);
  });
});

describe('the Responses and Messages readers: hostile streams', () => {
  test('frames dropped, repeated, swapped, bytes garbled: one finish or one error, never a throw', () => {
    const random = seeded(11);
    const pick = (n) => Math.floor(random() * n);
    let finished = 0;
    let errors = 0;
    for (const { dialect, stream } of VECTORS.cases) {
      const frames = framesOf(stream);
      for (let run = 0; run < 200; run++) {
        const mixed = [...frames];
        const edit = run % 4;
        const at = pick(mixed.length);
        if (edit === 0) mixed.splice(at, 1);
        else if (edit === 1) mixed.splice(at, 0, mixed[pick(mixed.length)]);
        else if (edit === 2) [mixed[at], mixed[0]] = [mixed[0], mixed[at]];
        const bytes = encoder.encode(mixed.join(''));
        if (edit === 3) for (let i = 0; i < 8; i++) bytes[pick(bytes.length)] = pick(256);
        const out = readPieces(dialect, [bytes]);
        const ends = out.filter((e) => e.type === 'finish' || e.type === 'error');
        assert.equal(ends.length, 1);
        assert.equal(out.at(-1), ends[0]);
        if (ends[0].type === 'finish') finished += 1;
        else errors += 1;
      }
    }
    assert.ok(finished > 0 && errors > 0, `${finished} finished, ${errors} errors`);
  });

  test('a 1 MB line is an error event through readReply, never a throw', async () => {
    for (const name of ['response.output_text.delta', 'content_block_delta']) {
      const big = `event: ${name}\ndata: "${'x'.repeat(1 << 20)}"\n\n`;
      const out = await readResponse(responseOf([encoder.encode(big)]));
      assert.deepEqual(plain(out), [{ type: 'error', code: 'protocol' }]);
    }
  });
});
