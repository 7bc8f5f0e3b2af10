// SSEParser (JS): the WHATWG event-stream interpretation, split-invariant, mirroring src/tokenrelay/wire/_sse.py.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readFileSync } from 'node:fs';
import { SSEError, SSEParser } from '../../src/tokenrelay/web/lib/sse.js';
import { cuttings, encoder, seeded } from './helpers.js';

// Shared with the Python parser's tests (tests/test_sse.py): the same vectors must pass on both sides.
// The vectors name an event's type `event` (the Python SSEEvent's field); the JS events call it `type`, as a
// DOM MessageEvent does.
const VECTORS = JSON.parse(readFileSync(new URL('../vectors/sse.json', import.meta.url), 'utf8')).vectors.map(
  (vector) => ({
    ...vector,
    events: vector.events?.map(({ event, ...rest }) => ({ type: event, ...rest })),
  }),
);

/** Parse byte pieces; the events, the parser's final state, or the error it ended with. */
function parse(pieces, options) {
  const parser = new SSEParser(options);
  const events = [];
  try {
    for (const piece of pieces) events.push(...parser.feed(piece));
    events.push(...parser.close());
  } catch (error) {
    if (!(error instanceof SSEError)) throw error;
    return { events, error: error.code };
  }
  return { events, lastEventId: parser.lastEventId, retry: parser.retry, truncated: parser.truncated };
}

/** The result for `bytes` must not depend on how they are cut. */
function assertSplitInvariant(bytes, options, cutOptions) {
  const expected = parse([bytes], options);
  for (const [name, pieces] of cuttings(bytes, cutOptions))
    assert.deepEqual(parse(pieces, options), expected, name);
  return expected;
}

const ev = (data, { event = 'message', id = '', retry = null } = {}) => ({ type: event, data, id, retry });
const bytesOf = (text) => encoder.encode(text);

describe('SSEParser: the shared vectors (tests/vectors/sse.json)', () => {
  test("there are vectors, the spec's examples among them", () => {
    assert.ok(VECTORS.length >= 40);
    assert.ok(VECTORS.filter((v) => v.source === 'whatwg').length >= 6);
  });

  for (const vector of VECTORS) {
    test(vector.name, () => {
      const bytes =
        vector.input_base64 !== undefined
          ? Uint8Array.from(Buffer.from(vector.input_base64, 'base64'))
          : encoder.encode(vector.input.join(''));
      const options =
        vector.max_event_bytes === undefined ? undefined : { maxEventBytes: vector.max_event_bytes };
      const result = assertSplitInvariant(bytes, options);
      assert.deepEqual(result.events, vector.events);
      assert.equal(result.error !== undefined, vector.error ?? false);
      if (result.error === undefined) {
        assert.equal(result.lastEventId, vector.last_event_id);
        assert.equal(result.retry, vector.retry);
        assert.equal(result.truncated, vector.truncated);
      }
      if (vector.input !== undefined) {
        // The split the vector suggests, too.
        assert.deepEqual(
          parse(
            vector.input.map((piece) => encoder.encode(piece)),
            options,
          ),
          result,
        );
      }
    });
  }
});

// More cases written from the WHATWG spec's text (some overlap the vectors, on purpose: they run here with
// this file's own cuttings).
const SPEC_CASES = [
  ['three data lines join with LF', 'data: YHOO\ndata: +2\ndata: 10\n\n', [ev('YHOO\n+2\n10')], {}],
  [
    'comment, ids that stick, an id-less event',
    ': test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n',
    [ev('first event', { id: '1' }), ev('second event'), ev(' third event')],
    {},
  ],
  [
    'empty data dispatches, a last field without blank line does not',
    'data\n\ndata\ndata\n\ndata:',
    [ev(''), ev('\n')],
    { truncated: true },
  ],
  ['one leading space is dropped', 'data:test\n\ndata: test\n\n', [ev('test'), ev('test')], {}],
  [
    'event type, reset after each event',
    'event: add\ndata: 1\n\ndata: 2\n\n',
    [ev('1', { event: 'add' }), ev('2')],
    {},
  ],
  ['CRLF, CR and LF line ends mix', 'data: a\r\n\r\ndata: b\r\rdata: c\n\n', [ev('a'), ev('b'), ev('c')], {}],
  ['a lone CR ends a line', 'data: a\rdata: b\r\r', [ev('a\nb')], {}],
  [
    'retry: digits only; it rides on its event',
    'retry: 1500\ndata: x\n\nretry: 1.5\ndata: y\n\n',
    [ev('x', { retry: 1500 }), ev('y')],
    { retry: 1500 },
  ],
  ['id with NUL is ignored', 'id: 7\n\nid: a\0b\ndata: x\n\n', [ev('x', { id: '7' })], { lastEventId: '7' }],
  [
    'id alone updates the last event id at the blank line',
    'data: x\n\nid: 9\n\n',
    [ev('x')],
    { lastEventId: '9' },
  ],
  ['unknown fields and a colon-less field name are ignored', 'foo: bar\nbaz\ndata: x\n\n', [ev('x')], {}],
  ['one leading BOM is dropped, a second is kept', '\ufeff\ufeffdata: x\n\ndata: y\n\n', [ev('y')], {}],
  ['a BOM-less stream is unchanged', 'data: \ufeffx\n\n', [ev('\ufeffx')], {}],
  ['multi-byte text', 'data: 世界 👩‍💻 café\n\n', [ev('世界 👩‍💻 café')], {}],
  ['a partial comment at the end is not a truncated event', 'data: x\n\n: keep', [ev('x')], {}],
  ['a partial field at the end is', 'data: x\n\ndat', [ev('x')], { truncated: true }],
  ['nothing at all', '', [], {}],
];

describe('SSEParser: WHATWG event stream interpretation', () => {
  for (const [name, input, events, state] of SPEC_CASES) {
    test(name, () => {
      const result = assertSplitInvariant(bytesOf(input));
      assert.deepEqual(result.events, events);
      assert.equal(result.truncated, state.truncated ?? false);
      assert.equal(result.lastEventId, state.lastEventId ?? result.events.at(-1)?.id ?? '');
      assert.equal(result.retry, state.retry ?? null);
    });
  }

  test('a BOM split over chunks is still dropped', () => {
    const bytes = new Uint8Array([0xef, 0xbb, 0xbf, ...bytesOf('data: x\n\n')]);
    assert.deepEqual(assertSplitInvariant(bytes).events, [ev('x')]);
  });

  test('invalid UTF-8 becomes U+FFFD, and a cut-off character at the end makes the stream truncated', () => {
    const bytes = new Uint8Array([
      ...bytesOf('data: a'),
      0xff,
      0xe2,
      0x82,
      ...bytesOf('\n\ndata: '),
      0xe2,
      0x82,
    ]);
    const result = assertSplitInvariant(bytes);
    assert.deepEqual(result.events, [ev('a\ufffd\ufffd')]);
    assert.equal(result.truncated, true);
  });

  test('a CR ending one chunk and an LF starting the next are one line end', () => {
    const parser = new SSEParser();
    assert.deepEqual(parser.feed(bytesOf('data: a\r')), []);
    assert.deepEqual(parser.feed(bytesOf('\n')), []);
    assert.deepEqual(parser.feed(bytesOf('\r')), [ev('a')]);
    assert.deepEqual(parser.feed(bytesOf('\ndata: b\n\n')), [ev('b')]);
  });

  test('feed after close is refused', () => {
    const parser = new SSEParser();
    parser.close();
    assert.throws(() => parser.feed(bytesOf('data: x\n\n')), /after close/);
  });
});

describe('SSEParser: size limit', () => {
  test('events before an oversized line come out; the error follows, for every cut', () => {
    const input = bytesOf('data: ok\n\ndata: this line is far too long\n\ndata: never\n\n');
    const result = assertSplitInvariant(input, { maxEventBytes: 16 });
    assert.deepEqual(result, { events: [ev('ok')], error: 'sse_event_too_large' });
  });

  test("the limit counts UTF-8 bytes, and an event's lines together", () => {
    assert.deepEqual(parse([bytesOf('data: ééé\n\n')], { maxEventBytes: 12 }).events, [ev('ééé')]);
    assert.equal(parse([bytesOf('data: éééé\n\n')], { maxEventBytes: 12 }).error, 'sse_event_too_large');
    assert.equal(
      parse([bytesOf('data: 12\ndata: 34\n\n')], { maxEventBytes: 12 }).error,
      'sse_event_too_large',
    );
    assert.equal(
      parse([bytesOf(': a long comment, never stored\ndata: x\n\n')], { maxEventBytes: 12 }).error,
      'sse_event_too_large',
    );
  });

  test('the limit counts bytes received, not the U+FFFD they decode to', () => {
    const invalid = new Uint8Array([...bytesOf('data: '), 0xff, 0xfe, ...bytesOf('\n\n')]); // a line of 8 bytes
    assert.deepEqual(parse([invalid], { maxEventBytes: 8 }).events, [ev('\ufffd\ufffd')]);
    assert.equal(parse([invalid], { maxEventBytes: 7 }).error, 'sse_event_too_large');
  });

  test('a line that never ends is refused before the end of the stream', () => {
    const parser = new SSEParser({ maxEventBytes: 1024 });
    assert.throws(() => {
      for (let i = 0; i < 100; i++) parser.feed(bytesOf('data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'));
    }, SSEError);
  });
});

describe('SSEParser: fuzz', () => {
  test('any bytes give events or SSEError, never another exception, and do not depend on the cutting', () => {
    const random = seeded(99);
    const alphabet = [...'data:event:id:retry: \n\r\n\r:x0123456789']
      .map((c) => c.charCodeAt(0))
      .concat([0, 0xef, 0xbb, 0xbf, 0xe2, 0x82, 0xac, 0xff]);
    for (let run = 0; run < 300; run++) {
      const bytes = Uint8Array.from(
        { length: Math.floor(random() * 80) },
        () => alphabet[Math.floor(random() * alphabet.length)],
      );
      assertSplitInvariant(
        bytes,
        { maxEventBytes: 1 + Math.floor(random() * 60) },
        { seed: run, randomRuns: 2, everyOffset: run % 5 === 0 },
      );
    }
  });
});
