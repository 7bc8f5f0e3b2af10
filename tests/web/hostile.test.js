// Bad input for every reader and renderer of the npm package (issue 32 §4): lone surrogates, megabyte
// lines, a `data:` line that is not JSON, script and javascript: links, a table of 10,000 columns and
// 10,000 nested list levels. Each gives a clear error or safe output; nothing escapes append(); no frame's
// work grows without bound.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import { PartialJSON, JSONSyntaxError } from 'tokenrelay/json';
import MarkdownIt from 'markdown-it';
import { MarkdownRenderer } from 'tokenrelay/markdown';
import { MAX_OPEN_PARSE } from '../../src/tokenrelay/web/lib/blocks.js';
import { readReply } from 'tokenrelay/reply';
import { SSEError, SSEParser } from 'tokenrelay/sse';
import { Smoother } from 'tokenrelay/smooth';
import { encoder, seeded } from './helpers.js';

const MB = 1 << 20;
const LONE = 'a\uD800b\uDC00c\uD83D';
const HOSTILE = {
  'lone surrogates': `${LONE} and **${LONE}**`,
  'a 1 MB line': 'word '.repeat(MB / 5),
  'a 160 KB line of delimiters': '*_`['.repeat(40_000),
  'script and javascript: links':
    '<script>alert(1)</script> [x](javascript:alert(1)) [y](JaVaScRiPt:alert(2)) <javascript:alert(3)> ![i](javascript:alert(4)) <img src=x onerror=alert(5)>',
  'a table of 10,000 columns': `${'| a '.repeat(10_000)}|\n${'|---'.repeat(10_000)}|\n${'| 1 '.repeat(10_000)}|\n`,
  '10,000 nested list levels': `${'- '.repeat(10_000)}deep\n`,
  '10,000 nested quotes': `${'>'.repeat(10_000)} deep\n`,
};

/** A light DOM page whose frames run at once, timed with a real clock. */
function page() {
  const { document } = parseHTML('<!doctype html><html><body><div id="r"></div></body></html>');
  const frames = [];
  return {
    container: document.getElementById('r'),
    requestFrame: (callback) => frames.push(callback),
    frames,
  };
}

const chunks = (text, size) => {
  const out = [];
  for (let at = 0; at < text.length; at += size) out.push(text.slice(at, at + size));
  return out;
};

describe('MarkdownRenderer: hostile text', () => {
  for (const [name, text] of Object.entries(HOSTILE)) {
    test(`${name}: appended in pieces, drawn safely, nothing thrown, frames bounded`, () => {
      // The text in 32 pieces, each drawn in the frames it asks for, run in turn. While it streams no update
      // parses more than MAX_OPEN_PARSE characters (markdown-it takes seconds over some of these texts
      // whole); the end parses the text once.
      let largest = 0;
      let streaming = true;
      class Counting extends MarkdownIt {
        parse(src, env) {
          if (streaming) largest = Math.max(largest, src.length);
          return super.parse(src, env);
        }
      }
      const p = page();
      const renderer = new MarkdownRenderer(p.container, {
        markdownIt: Counting,
        requestFrame: p.requestFrame,
      });
      for (const piece of chunks(text, Math.ceil(text.length / 32))) {
        renderer.append(piece);
        while (p.frames.length > 0) p.frames.shift()(performance.now());
      }
      streaming = false;
      renderer.finish();
      while (p.frames.length > 0) p.frames.shift()(performance.now());
      assert.ok(largest <= MAX_OPEN_PARSE, `${name}: a parse of ${largest} characters while streaming`);
      const root = p.container;
      assert.equal(root.querySelectorAll('script, img, iframe').length, 0);
      for (const a of root.querySelectorAll('a')) assert.match(a.getAttribute('href'), /^https?:|^mailto:/);
      // Nothing lost at the end: the last word of the text is on screen (markdown-it drops what lies past its
      // nesting limit; the renderer then shows the text as text).
      const last = text.match(/[\p{L}\p{N}]+(?=[^\p{L}\p{N}]*$)/u)?.[0];
      if (last) assert.ok(root.textContent.includes(last), `${name}: "${last}" is shown`);
    });
  }

  test('append() takes strings only, and nothing after finish()', () => {
    const p = page();
    const renderer = new MarkdownRenderer(p.container, { requestFrame: p.requestFrame });
    assert.throws(() => renderer.append(null), TypeError);
    renderer.finish();
    assert.throws(() => renderer.append('x'), /after finish/);
  });
});

describe('the readers: hostile streams', () => {
  test('SSEParser: random bytes give events or an SSEError, nothing else; lone surrogates become U+FFFD', () => {
    const random = seeded(32);
    for (let run = 0; run < 300; run++) {
      const bytes = new Uint8Array(Array.from({ length: 200 }, () => Math.floor(random() * 256)));
      const parser = new SSEParser({ maxEventBytes: 64 });
      try {
        for (let at = 0; at < bytes.length; at += 7) parser.feed(bytes.subarray(at, at + 7));
        parser.close();
      } catch (error) {
        assert.ok(error instanceof SSEError, String(error));
      }
    }
    const [event] = new SSEParser().feed(`data: ${LONE}\n\n`);
    assert.equal(event.data, 'a\uFFFDb\uFFFDc\uFFFD');
  });

  test('SSEParser: a line over the limit is a clear SSEError, one under it an event', () => {
    const parser = new SSEParser();
    assert.throws(() => parser.feed(`data: ${'x'.repeat(MB)}\n\n`), SSEError);
    const roomy = new SSEParser({ maxEventBytes: 2 * MB });
    assert.equal(roomy.feed(`data: ${'x'.repeat(MB)}\n\n`)[0].data.length, MB);
  });

  const response = (text) =>
    new Response(encoder.encode(text), { headers: { 'Content-Type': 'text/event-stream' } });
  const read = async (text) => {
    const out = [];
    for await (const event of readReply(response(text))) out.push(event);
    return out;
  };

  test('readReply: a data: line that is not JSON, a 1 MB line: an error event, never a throw', async () => {
    const bad = await read('data: {"choices": [\n\n');
    assert.equal(bad.at(-1).type, 'error');
    assert.equal(bad.at(-1).error.code, 'protocol');
    assert.match(bad.at(-1).error.message, /bad chunk/);
    const huge = await read(`data: ${'x'.repeat(MB + 10)}\n\n`);
    assert.deepEqual(
      huge.map((e) => e.error?.code),
      ['protocol'],
    );
  });

  test('readReply: lone surrogates sent as JSON escapes reach the app as U+FFFD', async () => {
    const chunk = `data: {"choices": [{"index": 0, "delta": {"content": "a\\ud800b"}, "finish_reason": "stop"}]}\n\n`;
    const events = await read(chunk);
    assert.deepEqual(events[0], { type: 'text', text: 'a\uFFFDb' });
    assert.equal(events.at(-1).type, 'finish');
  });

  test('PartialJSON: lone surrogate escapes become U+FFFD; 10,000 nested arrays are refused at the limit', () => {
    const parser = new PartialJSON();
    parser.feed('"a\\ud800b"');
    assert.equal(parser.finish(), 'a\uFFFDb');
    assert.throws(() => new PartialJSON().feed('['.repeat(10_000)), JSONSyntaxError);
  });

  test('Smoother: lone surrogates and megabyte pushes pass through whole', () => {
    const smoother = new Smoother();
    smoother.push(LONE, 0);
    smoother.push('x'.repeat(MB), 1);
    assert.equal(smoother.take(1000) + smoother.finish(), LONE + 'x'.repeat(MB));
  });
});
