// The npm package `tokenrelay` (src/tokenrelay/web/lib/), imported by its name as an app does (the repo's
// package.json links it): the exports map, what each entry may import, readReply over fetch Responses,
// the stream forms of the SSE parser and the smoother, and MarkdownRenderer's set(). The packed tarball in
// a fresh app is tests/e2e/package.test.js.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import MarkdownIt from 'markdown-it';
import { ReplyError, detectDialect, readReply } from 'tokenrelay/reply';
import { SSEError, SSEParser, SSEParserStream } from 'tokenrelay/sse';
import { SmoothTextStream, smoothStream } from 'tokenrelay/smooth';
import { MarkdownRenderer } from 'tokenrelay/markdown';
import { PartialJSON } from 'tokenrelay/json';
import { RelayRecorder, drawLanes } from 'tokenrelay/lanes';
import { encoder, seeded } from './helpers.js';

const LIB = new URL('../../src/tokenrelay/web/lib/', import.meta.url);
const PACKAGE = JSON.parse(readFileSync(new URL('package.json', LIB), 'utf8'));

/** Every bare module name reachable from `file` through the package's relative imports. */
function bareImports(file, seen = new Set()) {
  if (seen.has(file)) return new Set();
  seen.add(file);
  const source = readFileSync(new URL(file, LIB), 'utf8');
  const names = new Set();
  for (const [, name] of source.matchAll(/^(?:import|export)\s[^;]*?from\s+'([^']+)'/gms)) {
    if (name.startsWith('./')) for (const inner of bareImports(name.slice(2), seen)) names.add(inner);
    else names.add(name);
  }
  return names;
}

describe('the package: exports, dependencies, side effects', () => {
  test('seven entries, each with its types; ESM, no side effects', () => {
    assert.equal(PACKAGE.name, 'tokenrelay');
    assert.equal(PACKAGE.type, 'module');
    assert.equal(PACKAGE.sideEffects, false);
    const entries = Object.keys(PACKAGE.exports).filter((key) => key !== './package.json');
    assert.deepEqual(entries, ['./sse', './reply', './json', './markdown', './smooth', './react', './lanes']);
    for (const entry of entries) {
      const { types, default: file } = PACKAGE.exports[entry];
      assert.ok(readFileSync(new URL(types, LIB), 'utf8').length > 0, types);
      assert.ok(readFileSync(new URL(file, LIB), 'utf8').length > 0, file);
    }
  });

  test('markdown-it is the one dependency, React an optional peer; each entry imports only what it must', () => {
    assert.deepEqual(PACKAGE.dependencies, { 'markdown-it': PACKAGE.dependencies['markdown-it'] });
    assert.deepEqual(Object.keys(PACKAGE.peerDependencies), ['react']);
    assert.equal(PACKAGE.peerDependenciesMeta.react.optional, true);
    const expected = {
      './sse': [],
      './reply': [],
      './json': [],
      './markdown': ['markdown-it'],
      './smooth': [],
      './react': ['markdown-it', 'react'],
      './lanes': [],
    };
    for (const [entry, names] of Object.entries(expected)) {
      const file = PACKAGE.exports[entry].default.slice(2);
      assert.deepEqual([...bareImports(file)].sort(), names, entry);
    }
  });
});

// A Chat Completions stream, as the server writes it.
const chunk = (delta, finish = null) =>
  `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\r\n\r\n`;
const USAGE = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 3 } })}\n\n`;
const WHOLE =
  chunk({ role: 'assistant', content: '' }) +
  chunk({ reasoning_content: 'think ' }) +
  chunk({ content: 'Hé 👩‍💻 ' }) +
  chunk({ content: '你好' }) +
  chunk({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'f', arguments: '{"a"' } }] }) +
  chunk({ tool_calls: [{ index: 0, function: { arguments: ': 1}' } }] }) +
  chunk({}, 'stop') +
  USAGE +
  'data: [DONE]\n\n';

/** A fetch Response whose body is `pieces` (strings or bytes), then the end (or hangs, or breaks). */
function responseOf(pieces, { status = 200, type = 'text/event-stream', end = 'close', onCancel } = {}) {
  let next = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (next < pieces.length) {
        const piece = pieces[next++];
        controller.enqueue(typeof piece === 'string' ? encoder.encode(piece) : piece);
      } else if (end === 'close') controller.close();
      else if (end === 'break') controller.error(new TypeError('network error'));
      else return new Promise(() => {});
    },
    cancel: onCancel,
  });
  return new Response(body, { status, headers: { 'Content-Type': type } });
}

async function events(response, options) {
  const out = [];
  for await (const event of readReply(response, options)) out.push(event);
  return out;
}

const plain = (list) => list.map((e) => (e.type === 'error' ? { type: 'error', code: e.error.code } : e));

describe('readReply: Chat Completions as reply events', () => {
  test('a whole reply: reasoning, text, a tool call, finish with usage; the same for every cut', async () => {
    const expected = [
      { type: 'reasoning', text: 'think ' },
      { type: 'text', text: 'Hé 👩‍💻 ' },
      { type: 'text', text: '你好' },
      { type: 'tool-call-start', index: 0, id: 'call_1', name: 'f' },
      { type: 'tool-call-delta', index: 0, arguments: '{"a"' },
      { type: 'tool-call-delta', index: 0, arguments: ': 1}' },
      { type: 'finish', reason: 'stop', usage: { inputTokens: 5, outputTokens: 3 } },
    ];
    const bytes = encoder.encode(WHOLE);
    assert.deepEqual(await events(responseOf([bytes])), expected);
    for (let at = 0; at <= bytes.length; at += 7) {
      const cut = [bytes.subarray(0, at), bytes.subarray(at)];
      assert.deepEqual(await events(responseOf(cut)), expected, `cut at ${at}`);
    }
    const random = seeded(3);
    const pieces = [];
    for (let at = 0; at < bytes.length;) {
      const size = 1 + Math.floor(random() * 9);
      pieces.push(bytes.subarray(at, at + size));
      at += size;
    }
    assert.deepEqual(await events(responseOf(pieces)), expected, 'random small pieces');
  });

  test('a stream cut before its finish_reason ends with a truncated error, never quietly', async () => {
    const cut = chunk({ content: 'All done, this looks complete.' });
    for (const end of ['close', 'break']) {
      const out = await events(responseOf([cut], { end }));
      assert.deepEqual(plain(out), [
        { type: 'text', text: 'All done, this looks complete.' },
        { type: 'error', code: 'truncated' },
      ]);
    }
    assert.deepEqual(plain(await events(responseOf([]))), [{ type: 'error', code: 'truncated' }]);
  });

  test('a finish_reason with the usage and [DONE] lost is still a finish (usage null)', async () => {
    const out = await events(responseOf([chunk({ content: 'x' }), chunk({}, 'length')]));
    assert.deepEqual(out.at(-1), { type: 'finish', reason: 'length', usage: null });
  });

  test('refused, not an event stream, an in-stream error, a chunk that is not JSON', async () => {
    const refused = await events(
      new Response(JSON.stringify({ error: { message: 'bad key' } }), { status: 401 }),
    );
    assert.equal(refused.length, 1);
    assert.ok(refused[0].error instanceof ReplyError);
    assert.equal(refused[0].error.code, 'http');
    assert.equal(refused[0].error.status, 401);
    assert.match(refused[0].error.message, /bad key/);
    const html = await events(responseOf(['<html>'], { type: 'text/html' }));
    assert.deepEqual(plain(html), [{ type: 'error', code: 'not-sse' }]);
    const server = await events(
      responseOf([chunk({ content: 'a' }), 'data: {"error": {"message": "boom"}}\n\n']),
    );
    assert.deepEqual(plain(server), [
      { type: 'text', text: 'a' },
      { type: 'error', code: 'server' },
    ]);
    assert.match(server[1].error.message, /boom/);
    const bad = await events(responseOf(['data: {not json\n\n', chunk({ content: 'never read' })]));
    assert.deepEqual(plain(bad), [{ type: 'error', code: 'protocol' }]);
  });

  test('the dialect is told by the first event; one with no reader is an error, not a guess', async () => {
    assert.equal(detectDialect({ type: 'message', data: '{}', id: '', retry: null }), 'chat-completions');
    assert.equal(detectDialect({ type: 'response.created', data: '{}', id: '', retry: null }), 'responses');
    assert.equal(detectDialect({ type: 'message_start', data: '{}', id: '', retry: null }), 'messages');
    const responses = 'event: response.created\ndata: {"type": "response.created"}\n\n';
    // Told, and read (tests/web/reply_dialects.test.js reads whole ones): cut after its first event, truncated.
    assert.deepEqual(plain(await events(responseOf([responses]))), [{ type: 'error', code: 'truncated' }]);
    const unknown = await events(responseOf([responses]), { dialect: 'gemini' });
    assert.deepEqual(plain(unknown), [{ type: 'error', code: 'dialect' }]);
    // A dialect added by the caller: a reader is all it takes.
    const echo = () => {
      let ended = false;
      return {
        get done() {
          return ended;
        },
        feed: (event) => [{ type: 'text', text: event.type }],
        finish: () => ((ended = true), [{ type: 'finish', reason: 'stop', usage: null }]),
      };
    };
    const out = await events(responseOf([responses]), { readers: { responses: echo } });
    assert.deepEqual(out, [
      { type: 'text', text: 'response.created' },
      { type: 'finish', reason: 'stop', usage: null },
    ]);
  });

  test('breaking out early, [DONE] and an abort let the connection go', async () => {
    let cancelled = 0;
    const onCancel = () => void (cancelled += 1);
    for await (const event of readReply(responseOf([chunk({ content: 'a' })], { end: 'hang', onCancel }))) {
      assert.equal(event.type, 'text');
      break;
    }
    assert.equal(cancelled, 1);
    const done = await events(responseOf([WHOLE], { end: 'hang', onCancel }));
    assert.equal(done.at(-1).type, 'finish');
    assert.equal(cancelled, 2);
    const controller = new AbortController();
    const body = new ReadableStream({
      start(c) {
        c.enqueue(encoder.encode(chunk({ content: 'a' })));
        controller.signal.addEventListener('abort', () =>
          c.error(new DOMException('The operation was aborted.', 'AbortError')),
        );
      },
    });
    const reading = events(new Response(body, { headers: { 'Content-Type': 'text/event-stream' } }));
    setTimeout(() => controller.abort(), 10);
    assert.deepEqual(plain(await reading), [
      { type: 'text', text: 'a' },
      { type: 'error', code: 'aborted' },
    ]);
  });
});

describe('SSEParser over strings, and SSEParserStream', () => {
  test('strings and bytes are the same stream, mixed too', () => {
    const parser = new SSEParser();
    const out = [...parser.feed('data: é'), ...parser.feed(encoder.encode('😀\r')), ...parser.feed('\n\r\n')];
    assert.deepEqual(out, [{ type: 'message', data: 'é😀', id: '', retry: null }]);
    assert.throws(() => parser.feed(42), TypeError);
  });

  test('response.body.pipeThrough(new SSEParserStream()), and an over-long line errors the stream', async () => {
    const stream = responseOf([WHOLE.slice(0, 50), WHOLE.slice(50)]).body.pipeThrough(new SSEParserStream());
    const data = [];
    for await (const event of stream) data.push(event.data);
    assert.equal(data.at(-1), '[DONE]');
    assert.equal(data.length, 9);
    const long = responseOf(['data: ' + 'x'.repeat(200)]).body.pipeThrough(
      new SSEParserStream({ maxEventBytes: 100 }),
    );
    await assert.rejects(async () => {
      for await (const event of long) assert.fail(event.data);
    }, SSEError);
  });
});

const graphemes = (text) =>
  Array.from(new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(text), (s) => s.segment);
const TEXT = 'Thai สวัสดีครับ, Devanagari नमस्ते, CJK 你好世界, a family 👨‍👩‍👧‍👦 and a flag 🇫🇷.';

/** `text` cut into pieces of 1-3 code units: graphemes and surrogate pairs cut anywhere. */
function codeUnitPieces(text) {
  const random = seeded(11);
  const pieces = [];
  for (let at = 0; at < text.length;) {
    const size = 1 + Math.floor(random() * 3);
    pieces.push(text.slice(at, at + size));
    at += size;
  }
  return pieces;
}

describe('smoothStream and SmoothTextStream', () => {
  test('the AI SDK transform: deltas paced in whole graphemes, other parts in order, nothing lost', async () => {
    const parts = [{ type: 'text-start', id: 't' }];
    // Text pieces that cut through graphemes (never through a surrogate pair: the SDK's deltas are strings).
    for (const piece of TEXT.match(/[\s\S]{1,3}(?<![\uD800-\uDBFF])/gu))
      parts.push({ type: 'text-delta', id: 't', text: piece });
    parts.push({ type: 'text-end', id: 't' }, { type: 'finish', finishReason: 'stop' });
    const source = new ReadableStream({
      start(controller) {
        for (const part of parts) controller.enqueue(part);
        controller.close();
      },
    });
    const out = [];
    for await (const part of source.pipeThrough(smoothStream({ maxDelayMs: 30 })())) out.push(part);
    const deltas = out.filter((p) => p.type === 'text-delta');
    assert.equal(deltas.map((p) => p.text).join(''), TEXT);
    const whole = new Set(graphemes(TEXT));
    for (const delta of deltas)
      for (const g of graphemes(delta.text)) assert.ok(whole.has(g), JSON.stringify(g));
    assert.deepEqual(
      out.filter((p) => p.type !== 'text-delta').map((p) => p.type),
      ['text-start', 'text-end', 'finish'],
    );
    assert.ok(out.indexOf(deltas.at(-1)) < out.findIndex((p) => p.type === 'text-end'));
  });

  test('a TransformStream of strings: all the text, never half a grapheme or half a pair', async () => {
    const source = new ReadableStream({
      start(controller) {
        for (const piece of codeUnitPieces(TEXT)) controller.enqueue(piece);
        controller.close();
      },
    });
    const out = [];
    for await (const text of source.pipeThrough(new SmoothTextStream({ maxDelayMs: 30 }))) out.push(text);
    assert.equal(out.join(''), TEXT);
    let shown = '';
    const boundaries = new Set([0]);
    let at = 0;
    for (const g of graphemes(TEXT)) boundaries.add((at += g.length));
    for (const text of out)
      assert.ok(boundaries.has((shown += text).length), `cut inside a grapheme: ${shown}`);
  });
});

/** A document, a container, and frames the test runs by hand. */
function page() {
  const { document } = parseHTML('<!doctype html><html><body><div id="r"></div></body></html>');
  const frames = [];
  return {
    container: document.getElementById('r'),
    requestFrame: (callback) => frames.push(callback),
    run() {
      let n = 0;
      while (frames.length > 0 && n++ < 10_000) frames.shift()(0);
    },
  };
}

const html = (container) =>
  Array.from(container.childNodes)
    .flatMap((n) => (n.getAttribute?.('class') === 'blocks' ? Array.from(n.childNodes) : [n]))
    .map((n) => n.outerHTML ?? n.textContent)
    .join('');

function oneShot(text) {
  const p = page();
  const renderer = new MarkdownRenderer(p.container, { requestFrame: p.requestFrame, now: () => 0 });
  renderer.append(text);
  renderer.finish();
  p.run();
  return html(p.container);
}

describe('MarkdownRenderer (tokenrelay/markdown)', () => {
  test('set(): an extension is appended; other text is drawn anew; the DOM is the one-shot DOM', () => {
    const p = page();
    const renderer = new MarkdownRenderer(p.container, { requestFrame: p.requestFrame, now: () => 0 });
    const text =
      '# Title\n\nA **bold** claim, `code` and [a link](https://example.com).\n\n| a | b |\n|---|---|\n| 1 | 2 |\n';
    for (let end = 1; end <= text.length; end += 3) {
      renderer.set(text.slice(0, end));
      p.run();
    }
    renderer.set(text);
    p.run();
    const writes = renderer.writes;
    renderer.set(text); // the same text: nothing to do
    p.run();
    assert.equal(renderer.writes, writes);
    assert.equal(html(p.container), oneShot(text));
    renderer.set('Something else entirely');
    p.run();
    assert.equal(html(p.container), '<p>Something else entirely</p>');
    renderer.set('');
    p.run();
    assert.equal(p.container.childNodes.length, 0);
  });

  test('the markdown-it it is given: another build of the library works the same', () => {
    const p = page();
    const renderer = new MarkdownRenderer(p.container, {
      markdownIt: MarkdownIt,
      requestFrame: p.requestFrame,
    });
    renderer.append('*x*');
    renderer.finish();
    p.run();
    assert.equal(html(p.container), '<p><em>x</em></p>');
    assert.throws(() => new MarkdownRenderer(null), TypeError);
    assert.throws(() => renderer.append(3), TypeError);
  });
});

describe('the other entries by name', () => {
  test('tokenrelay/json and tokenrelay/lanes', () => {
    const parser = new PartialJSON();
    parser.feed('{"a": "b');
    assert.deepEqual(parser.value, { a: 'b' });
    const { document } = parseHTML('<!doctype html><html><body></body></html>');
    let clock = 0;
    const recorder = new RelayRecorder(() => clock);
    recorder.handed({ arrive: 1, parse: 2, timing: null });
    clock = 5;
    recorder.painted();
    const svg = drawLanes(recorder.result(), document);
    assert.equal(svg.nodeName.toLowerCase(), 'svg');
  });
});
