// Smoother: an even pace, a cap on added latency, whole graphemes only, nothing lost.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Smoother } from '../../src/tokenrelay/web/lib/smoother.js';
import { fixture, seeded } from './helpers.js';

const graphemes = (text) =>
  Array.from(new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(text), (s) => s.segment);

/** Grapheme boundaries of `text`, as UTF-16 offsets. */
function boundaries(text) {
  const offsets = new Set([0]);
  let at = 0;
  for (const g of graphemes(text)) offsets.add((at += g.length));
  return offsets;
}

/** Code points of `text` cut into random pieces of 1..6 (a grapheme can be cut anywhere between them). */
function randomPieces(text, random) {
  const points = Array.from(text);
  const pieces = [];
  for (let at = 0; at < points.length;) {
    const size = 1 + Math.floor(random() * 6);
    pieces.push(points.slice(at, at + size).join(''));
    at += size;
  }
  return pieces;
}

const MULTILINGUAL = fixture('reply.md')
  .split('\n')
  .filter((line) => /[^\x00-\x7f]/.test(line))
  .join('\n');

describe('Smoother', () => {
  test('releases exactly what was pushed, for any pushes and take() times', () => {
    const random = seeded(11);
    for (let run = 0; run < 200; run++) {
      const smoother = new Smoother({ maxDelayMs: 50 + random() * 300 });
      const pieces = randomPieces(MULTILINGUAL, random);
      let now = 0;
      let out = '';
      for (const piece of pieces) {
        now += random() * 120;
        smoother.push(piece, now);
        if (random() < 0.6) out += smoother.take(now + random() * 40);
      }
      out += smoother.finish();
      assert.equal(out, pieces.join(''));
      assert.equal(smoother.pending, 0);
    }
  });

  test('every release ends on a grapheme boundary of the whole text (no half emoji, no lone mark)', () => {
    const random = seeded(12);
    const whole = MULTILINGUAL;
    const allowed = boundaries(whole);
    for (let run = 0; run < 100; run++) {
      // Pushes 0-3 ms apart: the cap (10 s) never forces a grapheme out early.
      const smoother = new Smoother({ maxDelayMs: 10_000 });
      let now = 0;
      let released = 0;
      for (const piece of randomPieces(whole, random)) {
        now += random() * 3;
        smoother.push(piece, now);
        released += smoother.take(now + random() * 5000).length;
        assert.ok(allowed.has(released), `run ${run}: release ends inside a grapheme at ${released}`);
      }
      assert.equal(released + smoother.finish().length, whole.length);
    }
  });

  test('a combining mark arriving later joins its letter', () => {
    const smoother = new Smoother();
    smoother.push('cafe', 0);
    assert.equal(smoother.take(10), 'caf', 'the e may still take an accent');
    smoother.push('\u0301 ok', 20);
    assert.equal(smoother.take(100), 'e\u0301 o');
    assert.equal(smoother.finish(), 'k');
  });

  test('a ZWJ sequence and a flag come out whole', () => {
    const smoother = new Smoother();
    smoother.push('👩', 0);
    assert.equal(smoother.take(5), '');
    smoother.push('\u200d', 6);
    assert.equal(smoother.take(7), '');
    smoother.push('💻 🇮', 8);
    assert.equal(smoother.take(60), '👩\u200d💻 ');
    smoother.push('🇳!', 70);
    assert.equal(smoother.take(150), '🇮🇳');
    assert.equal(smoother.finish(), '!');
  });

  test('CJK and Thai move a grapheme at a time, not waiting for a space', () => {
    for (const text of ['你好世界今天的茶', 'สวัสดีครับภาษาไทย', 'こんにちは', 'नमस्ते क्षत्रिय']) {
      const smoother = new Smoother();
      smoother.push(text, 0);
      const all = graphemes(text);
      assert.equal(smoother.take(0), all.slice(0, -1).join(''), text);
      assert.equal(smoother.finish(), all.at(-1));
    }
  });

  test('the last grapheme waits no longer than the cap', () => {
    const smoother = new Smoother({ maxDelayMs: 100 });
    smoother.push('stalled', 0);
    assert.equal(smoother.take(99), 'stalle');
    assert.equal(smoother.take(100), 'd');
  });

  test('no grapheme is held longer than maxDelayMs, whatever the arrival pattern', () => {
    const random = seeded(13);
    const maxDelayMs = 150;
    const smoother = new Smoother({ maxDelayMs });
    const arrivals = []; // [time, cumulative length]
    let pushed = 0;
    let released = 0;
    let next = 0;
    for (let now = 0; now < 5000; now += 16) {
      while (next <= now) {
        const piece = 'x'.repeat(1 + Math.floor(random() * 20));
        smoother.push(piece, next);
        arrivals.push([next, (pushed += piece.length)]);
        next += random() < 0.2 ? 400 * random() : 30 * random(); // bursts and stalls
      }
      released += smoother.take(now).length;
      const owed = arrivals.filter(([t]) => t <= now - maxDelayMs).at(-1)?.[1] ?? 0;
      assert.ok(released >= owed, `at ${now} ms: released ${released}, owed ${owed}`);
    }
  });

  test('a steady stream of bursts comes out at an even pace', () => {
    const smoother = new Smoother({ maxDelayMs: 250 });
    const perFrame = [];
    let arrival = 0;
    for (let now = 0; now <= 3000; now += 16) {
      while (arrival <= now) {
        smoother.push('abcdefghij', arrival); // 10 graphemes every 100 ms
        arrival += 100;
      }
      perFrame.push(smoother.take(now).length);
    }
    // Shown as they come, the same arrivals would be 10 graphemes in one frame and then nothing for five.
    const steady = perFrame.slice(60); // after the first second
    assert.ok(Math.max(...steady) <= 3, `at most 3 graphemes a frame, got ${Math.max(...steady)}`);
    assert.ok(steady.filter((n) => n === 0).length <= steady.length / 10, 'hardly any empty frames');
  });

  test('maxDelayMs must be positive', () => {
    assert.throws(() => new Smoother({ maxDelayMs: 0 }), RangeError);
  });
});
