// PartialJSON (JS): the shared vectors, the snapshot rule on every prefix, split invariance, random cuts and
// fuzz, mirroring tests/test_partial_json.py over the same tests/vectors/partial_json.json.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readFileSync } from 'node:fs';
import {
  DEFAULT_MAX_DEPTH,
  JSONError,
  JSONSyntaxError,
  PartialJSON,
  TruncatedJSONError,
  UseAfterFinishError,
  joinEvents,
} from '../../src/tokenrelay/web/lib/partial_json.js';
import { seeded } from './helpers.js';

const VECTORS = JSON.parse(
  readFileSync(new URL('../vectors/partial_json.json', import.meta.url), 'utf8'),
).documents;
const MISSING = 'MISSING'; // "no value yet" in a list of snapshots (a vector's values are never this string)

/** A value as JSON says it: -0 is 0, a lone surrogate is its escape (what the Python side compares). */
const norm = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

/** Feed `pieces` then finish: the joined events, the snapshot after each piece by length, and the end. */
function run(pieces) {
  const parser = new PartialJSON();
  const events = [];
  const snapshots = new Map([[0, MISSING]]);
  let fed = 0;
  let end;
  try {
    for (const piece of pieces) {
      events.push(...parser.feed(piece));
      fed += piece.length;
      snapshots.set(fed, parser.hasValue ? structuredClone(parser.value) : MISSING);
    }
    end = { value: norm(parser.finish()) };
  } catch (error) {
    if (error instanceof JSONSyntaxError) {
      events.push(...error.events);
      end = { syntax: error.offset, message: error.message };
    } else if (error instanceof TruncatedJSONError) end = { truncated: norm(error.value) };
    else throw error;
  }
  return { events: norm(joinEvents(events)), snapshots, end };
}

function oneByOne(text) {
  return Array.from({ length: text.length }, (_, i) => text[i]); // code units: cuts inside pairs too
}

function randomCut(text, random, maxPiece = 9) {
  const pieces = [];
  for (let at = 0; at < text.length;) {
    const size = Math.floor(random() * (maxPiece + 1));
    pieces.push(text.slice(at, at + size));
    at += size;
  }
  return pieces;
}

function* cuttings(text, { randomRuns = 20, seed = 5 } = {}) {
  yield ['whole', [text]];
  for (let offset = 0; offset <= text.length; offset++)
    yield [`cut at ${offset}`, [text.slice(0, offset), text.slice(offset)]];
  const random = seeded(seed);
  for (let k = 0; k < randomRuns; k++) yield [`random ${k}`, randomCut(text, random)];
}

/** The outcome one code unit at a time; every other cutting must agree with it, snapshot for snapshot. */
function assertSplitInvariant(text, options) {
  const byUnit = run(oneByOne(text));
  for (const [name, pieces] of cuttings(text, options)) {
    const out = run(pieces);
    assert.deepStrictEqual(out.events, byUnit.events, name);
    assert.deepStrictEqual(out.end, byUnit.end, name);
    for (const [length, snapshot] of out.snapshots)
      assert.deepStrictEqual(norm(snapshot), norm(byUnit.snapshots.get(length)), `${name} @${length}`);
  }
  return byUnit;
}

/** Every value in `snapshot` is a prefix of its final value (all members but the last complete). */
function assertPrefixOf(snapshot, final) {
  if (typeof final === 'string') {
    assert.equal(typeof snapshot, 'string');
    assert.ok(final.startsWith(snapshot), `${JSON.stringify(snapshot)} / ${JSON.stringify(final)}`);
  } else if (Array.isArray(final)) {
    assert.ok(Array.isArray(snapshot) && snapshot.length <= final.length);
    snapshot.forEach((item, k) => {
      if (k < snapshot.length - 1) assert.deepStrictEqual(norm(item), norm(final[k]));
      else assertPrefixOf(item, final[k]);
    });
  } else if (final !== null && typeof final === 'object') {
    assert.ok(snapshot !== null && typeof snapshot === 'object' && !Array.isArray(snapshot));
    const keys = Object.keys(snapshot);
    assert.deepStrictEqual(keys, Object.keys(final).slice(0, keys.length));
    keys.forEach((key, k) => {
      if (k < keys.length - 1) assert.deepStrictEqual(norm(snapshot[key]), norm(final[key]));
      else assertPrefixOf(snapshot[key], final[key]);
    });
  } else assert.deepStrictEqual(norm(snapshot), norm(final));
}

/** JSON.parse's view: a lone surrogate escape stays lone there, and is U+FFFD in PartialJSON. */
function withoutSurrogates(value) {
  return JSON.parse(JSON.stringify(value).replace(/\\ud[89a-f][0-9a-f]{2}/g, '\\ufffd'));
}

// The vectors give prefixes as text, so each side measures them in its own unit (code points in Python,
// UTF-16 code units here).
describe('PartialJSON: the shared vectors (tests/vectors/partial_json.json)', () => {
  test('there are vectors of every kind', () => {
    assert.ok(VECTORS.length >= 70);
    assert.ok(VECTORS.filter((v) => 'error_after' in v).length >= 30);
    assert.ok(VECTORS.filter((v) => v.truncated).length >= 10);
  });

  for (const vector of VECTORS) {
    test(vector.name, () => {
      const text = vector.text;
      const out = assertSplitInvariant(text);
      if ('error_after' in vector) {
        assert.ok(text.startsWith(vector.error_after));
        assert.equal(out.end.syntax, vector.error_after.length, JSON.stringify(out.end));
      } else if (vector.truncated) {
        assert.deepStrictEqual(out.end, { truncated: norm(vector.value) });
        assert.equal(out.snapshots.get(text.length) !== MISSING, vector.has_value ?? true);
      } else {
        assert.deepStrictEqual(out.end, { value: norm(vector.value) });
        assert.deepStrictEqual(norm(vector.value), withoutSurrogates(JSON.parse(text)));
        if (!vector.duplicate_keys)
          for (const snapshot of out.snapshots.values())
            if (snapshot !== MISSING) assertPrefixOf(snapshot, vector.value);
      }
      if (vector.events !== undefined)
        assert.deepStrictEqual(
          out.events.map((e) => [e.type, e.path, e.kind ?? e.text ?? e.value]),
          norm(vector.events),
        );
      for (const expected of vector.snapshots ?? []) {
        assert.ok(text.startsWith(expected.prefix));
        const snapshot = out.snapshots.get(expected.prefix.length);
        if (expected.has_value === false) assert.equal(snapshot, MISSING, expected.prefix);
        else assert.deepStrictEqual(norm(snapshot), norm(expected.value), expected.prefix);
      }
    });
  }
});

// -- random values, random cuts, fuzz --------------------------------------------------------------------

const ALPHABET = ['a', 'é', '😀', '"', '\\', '\n', '\t', '/', ' ', '\u2028', '中', 'z', '\u0001', '\ud83d'];

function randomValue(random, depth = 0) {
  const pick = Math.floor(random() * (depth > 3 ? 5 : 7));
  if (pick === 0) return null;
  if (pick === 1) return random() < 0.5;
  if (pick === 2) return Math.floor((random() - 0.5) * 10 ** Math.floor(random() * 12));
  if (pick === 3) return (random() - 0.5) * 10 ** Math.floor(random() * 40 - 20);
  if (pick === 4) {
    let text = '';
    for (let k = Math.floor(random() * 8); k > 0; k--)
      text += ALPHABET[Math.floor(random() * ALPHABET.length)];
    return text;
  }
  if (pick === 5)
    return Array.from({ length: Math.floor(random() * 4) }, () => randomValue(random, depth + 1));
  const object = {};
  for (let k = Math.floor(random() * 4); k > 0; k--)
    object[randomValue(random, 9)] = randomValue(random, depth + 1);
  return object;
}

describe('PartialJSON: properties', () => {
  test('any stringified value parses to JSON.parse under any cut, and every snapshot is a prefix', () => {
    const random = seeded(11);
    for (let k = 0; k < 300; k++) {
      const value = randomValue(random);
      const text = JSON.stringify(value, null, [undefined, 2, '\t'][k % 3]);
      const expected = withoutSurrogates(JSON.parse(text));
      const byUnit = run(oneByOne(text));
      assert.deepStrictEqual(byUnit.end, { value: expected }, text);
      const final = new PartialJSON();
      final.feed(text);
      const live = final.finish();
      for (const snapshot of byUnit.snapshots.values())
        if (snapshot !== MISSING) assertPrefixOf(snapshot, live);
      for (let r = 0; r < 3; r++) {
        const out = run(randomCut(text, random));
        assert.deepStrictEqual(out.events, byUnit.events, text);
        assert.deepStrictEqual(out.end, byUnit.end, text);
      }
    }
  });

  // prettier-ignore
  const PIECES = ['{"a":', '"', '\\', '\\u', 'd83d', '\\ude00', '\\ud83d', '[', ']', '{', '}', ',', ':', ' ', '\n',
    '0', '1', '-', '.', 'e', 'E', '+', '12', 'true', 'fals', 'null', 'n', 'x', 'é', '😀', '\u0000', '\ufeff',
    'NaN', '\ud83d', '\ude00'];

  test('fuzz: any text gives snapshots then a value or a JSON error, and agrees with JSON.parse', () => {
    const random = seeded(3);
    for (let k = 0; k < 3000; k++) {
      let text = '';
      for (let p = Math.floor(random() * 20); p > 0; p--)
        text += PIECES[Math.floor(random() * PIECES.length)];
      const whole = run([text]); // run() rethrows anything but a JSON error: the test fails on it
      for (let r = 0; r < 2; r++) {
        const out = run(randomCut(text, random));
        assert.deepStrictEqual([out.events, out.end], [whole.events, whole.end], JSON.stringify(text));
      }
      let parsed;
      try {
        parsed = { value: withoutSurrogates(JSON.parse(text)) };
      } catch {
        parsed = null;
      }
      if (parsed === null) assert.ok(!('value' in whole.end), `${JSON.stringify(text)} was accepted`);
      else assert.deepStrictEqual(withoutSurrogates(whole.end.value), parsed.value, JSON.stringify(text));
    }
  });
});

// -- errors, the end, the live snapshot -------------------------------------------------------------------

describe('PartialJSON: errors and the end', () => {
  test('a syntax error carries its offset and the events before it, and comes again', () => {
    const parser = new PartialJSON();
    let error;
    try {
      parser.feed('{"a": 12]');
    } catch (caught) {
      error = caught;
    }
    assert.ok(error instanceof JSONSyntaxError && error instanceof JSONError && error instanceof SyntaxError);
    assert.equal(error.offset, 8);
    assert.equal(error.message, "expected ',' or '}' at offset 8");
    assert.deepStrictEqual(error.events.at(-1), { type: 'completed', path: ['a'], value: 12 });
    assert.deepStrictEqual(parser.value, { a: 12 });
    assert.throws(
      () => parser.feed('}'),
      (again) => again instanceof JSONSyntaxError && again.offset === 8 && again.events.length === 0,
    );
    assert.throws(() => parser.finish(), JSONSyntaxError);
  });

  test('finish: the value again, or the truncation again; feed after it throws', () => {
    const parser = new PartialJSON();
    assert.deepStrictEqual(parser.feed('12'), []);
    assert.equal(parser.hasValue, false);
    assert.equal(parser.finish(), 12);
    assert.equal(parser.finish(), 12);
    assert.throws(() => parser.feed(' '), UseAfterFinishError);
    const cut = new PartialJSON();
    cut.feed('{"tags": ["a", "b');
    for (let k = 0; k < 2; k++)
      assert.throws(
        () => cut.finish(),
        (e) => e instanceof TruncatedJSONError && e instanceof SyntaxError && e.value.tags[1] === 'b',
      );
  });

  test('the snapshot is live: the same objects, updated in place', () => {
    const parser = new PartialJSON();
    parser.feed('{"items": [{"name": "a');
    const root = parser.value;
    const first = root.items[0];
    parser.feed('bc"}, {"name": "x');
    assert.equal(parser.value, root);
    assert.equal(root.items[0], first);
    assert.deepStrictEqual(root, { items: [{ name: 'abc' }, { name: 'x' }] });
  });

  test('a raw surrogate pair cut between its halves is never shown half', () => {
    const text = '["😀", {"k": "a😀"}]';
    for (let at = 0; at <= text.length; at++) {
      const parser = new PartialJSON();
      parser.feed(text.slice(0, at));
      assert.ok(!/[\ud800-\udbff](?![\udc00-\udfff])/.test(JSON.stringify(parser.value) ?? ''), `cut ${at}`);
      parser.feed(text.slice(at));
      assert.deepStrictEqual(parser.finish(), ['😀', { k: 'a😀' }]);
    }
  });

  test('"__proto__" is an own key, as JSON.parse makes it', () => {
    const parser = new PartialJSON();
    parser.feed('{"__proto__": {"x": 1}, "b": "');
    assert.equal(Object.getPrototypeOf(parser.value), Object.prototype);
    assert.deepStrictEqual(Object.keys(parser.value), ['__proto__', 'b']);
    parser.feed('y"}');
    assert.deepStrictEqual(parser.finish(), JSON.parse('{"__proto__": {"x": 1}, "b": "y"}'));
  });

  test('nesting is limited', () => {
    const parser = new PartialJSON();
    parser.feed('['.repeat(DEFAULT_MAX_DEPTH) + ']'.repeat(DEFAULT_MAX_DEPTH));
    assert.equal(JSON.stringify(parser.finish()).length, 2 * DEFAULT_MAX_DEPTH);
    assert.throws(
      () => new PartialJSON().feed('['.repeat(100000)),
      (e) => e instanceof JSONSyntaxError && e.offset === DEFAULT_MAX_DEPTH,
    );
  });
});
