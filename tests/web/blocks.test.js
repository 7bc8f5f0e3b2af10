// BlockRenderer: closed blocks once, the open tail again; split-invariant; work bounded by the last block.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BlockRenderer } from '../../src/tokenrelay/web/lib/blocks.js';
import { renderTokens } from '../../src/tokenrelay/web/lib/markdown_nodes.js';
import { cuttings, encoder, fixture, makeMarkdown, markdownish, seeded, TRICKY } from './helpers.js';

const md = makeMarkdown();

/** What markdown-it makes of the whole text at once: the oracle. */
function oneShot(text) {
  return renderTokens(md.parse(text, {}));
}

/** Stream byte pieces through one TextDecoder into a BlockRenderer, updating after each piece. */
function streamed(pieces, renderer = new BlockRenderer(md)) {
  const decoder = new TextDecoder();
  const closed = [];
  for (const piece of pieces) {
    renderer.push(decoder.decode(piece, { stream: true }));
    closed.push(...renderer.update().closed);
  }
  renderer.push(decoder.decode());
  closed.push(...renderer.finish().closed);
  return closed;
}

/**
 * Stream byte pieces as streamed() does, checking after every update that what is shown (the closed blocks
 * so far, then the open ones) is what markdown-it makes of the text so far.
 */
function assertShownAsOneShot(text, options) {
  for (const [name, pieces] of cuttings(encoder.encode(text), options)) {
    const renderer = new BlockRenderer(md);
    const decoder = new TextDecoder();
    const closed = [];
    let open = [];
    let sofar = '';
    for (const piece of pieces) {
      const added = decoder.decode(piece, { stream: true });
      sofar += added;
      renderer.push(added);
      const update = renderer.update();
      closed.push(...update.closed);
      if (update.open !== null) open = update.open;
      const where = `${JSON.stringify(sofar.slice(-60))} (${name})`;
      const shown = [...closed, ...open];
      const expected = oneShot(sofar);
      // An open fence is described directly, not parsed (its boxes, its partial last line): only its kind
      // is compared here; the split invariant checks it once it closes.
      if (shown.at(-1)?.tag === 'pre' && expected.at(-1)?.tag === 'pre') {
        shown.pop();
        expected.pop();
      }
      assert.deepEqual(shown, expected, where);
    }
  }
}

function assertSplitInvariant(text, options) {
  const expected = oneShot(text);
  for (const [name, pieces] of cuttings(encoder.encode(text), options)) {
    assert.deepEqual(streamed(pieces), expected, `${JSON.stringify(text.slice(0, 40))}: ${name}`);
  }
}

describe("BlockRenderer: every cut gives markdown-it's one-shot result", () => {
  test('the reply fixture (every byte offset, byte by byte, random cuts)', () => {
    assertSplitInvariant(fixture('reply.md'));
  });

  test('tricky block boundaries', () => {
    for (const text of TRICKY) assertSplitInvariant(text);
  });

  test('random Markdown-ish text (fuzz with a fixed seed)', () => {
    const random = seeded(2024);
    for (let run = 0; run < 300; run++) {
      assertSplitInvariant(markdownish(random), { seed: run, randomRuns: 3, everyOffset: run % 10 === 0 });
    }
  });
});

describe('BlockRenderer: what the open block shows', () => {
  test('after every update, what is shown is what markdown-it makes of the text so far', () => {
    for (const text of TRICKY) assertShownAsOneShot(text, { randomRuns: 2 });
    assertShownAsOneShot(fixture('reply.md'), { randomRuns: 2, everyOffset: false });
    const random = seeded(2026);
    for (let run = 0; run < 300; run++)
      assertShownAsOneShot(markdownish(random), { seed: run, randomRuns: 2, everyOffset: run % 10 === 0 });
    // A first word that is complete but alone does not settle a line: "1." starts a list once text follows
    // (an empty item cannot interrupt a paragraph, a non-empty one can).
    assertShownAsOneShot('abc\n1. x y', {});
  });

  test('**Menu** is literal asterisks only until its closing pair arrives', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('Today: **Menu');
    assert.deepEqual(renderer.update().open, [{ tag: 'p', attrs: null, children: ['Today: **Menu'] }]);
    renderer.push('**');
    assert.deepEqual(renderer.update().open, [
      { tag: 'p', attrs: null, children: ['Today: ', { tag: 'strong', attrs: null, children: ['Menu'] }] },
    ]);
  });

  test('a block closes when the next block has two complete lines, not before', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('# h\nafter\n');
    assert.deepEqual(renderer.update().closed, [], 'the line after "after" may be "===" or a table row');
    renderer.push('more\n');
    const { closed, open } = renderer.update();
    assert.deepEqual(closed, [{ tag: 'h1', attrs: null, children: ['h'] }]);
    assert.deepEqual(open, [{ tag: 'p', attrs: null, children: ['after\nmore'] }]);
    assert.equal(renderer.tail, 'after\nmore\n');
  });

  test('after a blank line, a complete first line is enough', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('1. a\n\n2');
    assert.deepEqual(renderer.update().closed, [], '"2" may become "2. b", the next item');
    renderer.push('. b\n\nafter');
    assert.deepEqual(renderer.update().closed, [], 'a partial line may still be "   c", the item going on');
    renderer.push('\n');
    const { closed, open } = renderer.update();
    assert.equal(closed.length, 1);
    assert.equal(closed[0].tag, 'ol');
    assert.equal(closed[0].children.length, 2);
    assert.deepEqual(open, [{ tag: 'p', attrs: null, children: ['after'] }]);
    assert.equal(renderer.tail, 'after\n');
  });

  test('a paragraph, heading, quote, table or rule closes at the blank line after it', () => {
    for (const [text, tag] of [
      ['para\nline two', 'p'],
      ['# heading', 'h1'],
      ['> quote\nlazy', 'blockquote'],
      ['a | b\n-|-\n1 | 2', 'table'],
      ['***', 'hr'],
    ]) {
      const renderer = new BlockRenderer(md);
      renderer.push(`${text}\n `);
      assert.deepEqual(renderer.update().closed, [], `${tag}: the blank line is not complete`);
      renderer.push('\n\n ');
      const { closed, open } = renderer.update();
      assert.deepEqual(closed, oneShot(text), tag);
      assert.deepEqual(open, []);
      assert.equal(renderer.tail, ' ', 'the tail starts past the blank lines');
    }
  });

  test('a list or an indented code block can go on after a blank line: it stays open', () => {
    for (const text of ['- a\n\n', '1. a\n\n', '    code\n\n']) {
      const renderer = new BlockRenderer(md);
      renderer.push(text);
      assert.deepEqual(renderer.update().closed, [], JSON.stringify(text));
    }
  });

  test('a fenced code block closes once its closing line is complete', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('```js\nx\n```');
    assert.deepEqual(renderer.update().closed, [], '"```x" would not close it');
    renderer.push('\n');
    const { closed, open } = renderer.update();
    assert.deepEqual(closed, oneShot('```js\nx\n```\n'));
    assert.deepEqual(open, []);
    assert.equal(renderer.tail, '');
  });

  test('a partial delimiter row can split a line off the paragraph above: nothing closes on it', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('para\nh | i\n-|-');
    const { closed, open } = renderer.update();
    assert.deepEqual(closed, []);
    assert.deepEqual(
      open.map((node) => node.tag),
      ['p', 'table'],
      'a table for now',
    );
    renderer.push('x');
    assert.deepEqual(
      renderer.update().open.map((node) => node.tag),
      ['p'],
      'and now one paragraph again',
    );
  });

  test('an unchanged tail is not rendered again', () => {
    const renderer = new BlockRenderer(md);
    renderer.push('hello');
    assert.notEqual(renderer.update().open, null);
    assert.deepEqual(renderer.update(), { closed: [], open: null });
  });

  test('push after finish is refused', () => {
    const renderer = new BlockRenderer(md);
    renderer.finish();
    assert.throws(() => renderer.push('x'));
  });
});

describe('BlockRenderer: work per update does not grow with the reply', () => {
  /** Largest text markdown-it was asked to parse while streaming `text` token-sized pieces at a time. */
  function largestParse(text) {
    let largest = 0;
    const counting = {
      parse: (src, env) => ((largest = Math.max(largest, src.length)), md.parse(src, env)),
      parseInline: (src, env) => ((largest = Math.max(largest, src.length)), md.parseInline(src, env)),
    };
    const renderer = new BlockRenderer(counting);
    for (let at = 0; at < text.length; at += 4) {
      renderer.push(text.slice(at, at + 4));
      renderer.update();
    }
    return largest;
  }

  test('a 20x longer reply parses no more text per update', () => {
    const section = fixture('reply.md');
    const short = largestParse(section.repeat(2));
    const long = largestParse(section.repeat(40));
    assert.equal(long, short);
    // Bounded by the largest block (the table, the fence) plus what arrived since the last update.
    assert.ok(short < 400, `largest parse ${short} chars`);
  });
});
