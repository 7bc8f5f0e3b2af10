// MarkdownRenderer: bytes -> TextDecoder -> frames -> DOM, with a light DOM (linkedom) standing in for a page.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import MarkdownIt from 'markdown-it/browser';
import { renderTokens } from '../../src/tokenrelay/web/lib/markdown_nodes.js';
import { Smoother } from '../../src/tokenrelay/web/lib/smoother.js';
import { CODE_BOX } from '../../src/tokenrelay/web/lib/blocks.js';
import { buildNodes, MarkdownRenderer } from '../../src/tokenrelay/web/lib/view.js';
import { cuttings, encoder, fixture, makeMarkdown, markdownish, seeded, TRICKY } from './helpers.js';

const md = makeMarkdown();

/** A document, a container in it, and a frame queue the test runs by hand. */
function page() {
  const { document } = parseHTML('<!doctype html><html><body><div id="reply"></div></body></html>');
  const frames = [];
  const clock = { now: 0 };
  return {
    document,
    container: document.getElementById('reply'),
    frames,
    clock,
    requestFrame: (callback) => frames.push(callback),
    /** Run the frames requested so far (not those they request), at `clock.now`. */
    runFrames() {
      const due = frames.splice(0);
      for (const callback of due) callback(clock.now);
      return due.length;
    },
  };
}

function view(p, options = {}) {
  return new MarkdownRenderer(p.container, {
    markdownIt: MarkdownIt,
    requestFrame: p.requestFrame,
    now: () => p.clock.now,
    ...options,
  });
}

/** The reply's top-level block nodes, in order: the closed ones from their groups, then the open ones. */
function blocks(container) {
  return Array.from(container.childNodes).flatMap((node) =>
    node.nodeName === 'DIV' && node.getAttribute('class') === 'blocks' ? Array.from(node.childNodes) : [node],
  );
}

/** The reply as HTML without the group wrappers. */
function html(container) {
  return blocks(container)
    .map((node) => node.outerHTML ?? node.textContent)
    .join('');
}

/** The reply's HTML with an open code block's boxes taken out (their content left in their place). */
function unboxed(container) {
  const copy = container.cloneNode(true);
  for (const span of copy.querySelectorAll('pre code > span')) {
    if (span.style.display === 'block') span.replaceWith(...span.childNodes);
  }
  return html(copy);
}

/** The container's HTML once markdown-it's one-shot render of `text` is built into it. */
function oneShotHTML(text) {
  const p = page();
  for (const node of buildNodes(p.document, renderTokens(md.parse(text, {})))) p.container.appendChild(node);
  return p.container.innerHTML;
}

/** Stream `text`'s bytes through a view, one frame per piece, for every cutting: always the one-shot DOM. */
function assertSameDOM(text, cutOptions) {
  const expected = oneShotHTML(text);
  for (const [name, pieces] of cuttings(encoder.encode(text), cutOptions)) {
    const p = page();
    const v = view(p);
    const decoder = new TextDecoder();
    for (const piece of pieces) {
      v.append(decoder.decode(piece, { stream: true }));
      p.runFrames();
    }
    v.append(decoder.decode());
    v.finish();
    p.runFrames();
    assert.equal(html(p.container), expected, `${JSON.stringify(text.slice(0, 40))}: ${name}`);
  }
}

describe('MarkdownRenderer: the same DOM for every cut of the bytes', () => {
  test('reply fixture: every byte offset, byte by byte and random cuts, a frame after each piece', () => {
    assertSameDOM(fixture('reply.md'));
  });

  test('tricky block boundaries, where the open block changes kind as it grows', () => {
    for (const text of TRICKY) assertSameDOM(text);
  });

  test('random Markdown-ish text (fuzz with a fixed seed)', () => {
    const random = seeded(4048);
    for (let run = 0; run < 150; run++) {
      assertSameDOM(markdownish(random), { seed: run, randomRuns: 2, everyOffset: run % 10 === 0 });
    }
  });
});

describe('MarkdownRenderer: at most one DOM write per animation frame', () => {
  test('deltas arriving between frames are batched into one write', () => {
    const p = page();
    const v = view(p);
    for (const word of 'many deltas arrive before the browser draws'.split(' ')) v.append(`${word} `);
    assert.equal(p.frames.length, 1, 'one frame requested for all of them');
    assert.equal(p.container.textContent, '', 'nothing written before the frame');
    p.runFrames();
    assert.equal(v.writes, 1);
    assert.equal(p.container.textContent, 'many deltas arrive before the browser draws');
  });

  test('a frame with nothing new writes nothing and asks for no other frame', () => {
    const p = page();
    const v = view(p);
    v.append('text');
    p.runFrames();
    assert.equal(p.runFrames(), 0);
    assert.equal(v.writes, 1);
  });

  test('closed blocks stay the same nodes, untouched, while the reply grows', () => {
    const p = page();
    const v = view(p);
    // "Second" starts on a complete line, so the two blocks before it are closed.
    v.append('# Title\n\nFirst paragraph.\n\nSecond\n');
    p.runFrames();
    const [title, first] = blocks(p.container);
    assert.equal(title.outerHTML, '<h1>Title</h1>');
    assert.equal(first.outerHTML, '<p>First paragraph.</p>');
    for (const more of ['grows.', '\n\n- a', '\n- b\n\nend']) {
      v.append(more);
      p.runFrames();
      assert.equal(blocks(p.container)[0], title);
      assert.equal(blocks(p.container)[1], first);
      assert.equal(title.outerHTML, '<h1>Title</h1>');
      assert.equal(first.outerHTML, '<p>First paragraph.</p>');
    }
    v.finish();
    p.runFrames();
    assert.equal(
      html(p.container),
      '<h1>Title</h1><p>First paragraph.</p><p>Second\ngrows.</p><ul><li>a</li><li>b</li></ul><p>end</p>',
    );
  });

  test('blocks fill groups of 16; a full group of closed blocks is never touched again', () => {
    const p = page();
    const v = view(p);
    v.append(Array.from({ length: 24 }, (_, i) => `paragraph ${i}\n\n`).join(''));
    p.runFrames();
    const [full, second] = p.container.childNodes;
    assert.equal(p.container.childNodes.length, 2);
    assert.equal(full.childNodes.length, 16);
    assert.equal(second.childNodes.length, 8, 'paragraphs 16..22 closed and 23, still open');
    const before = full.outerHTML;
    v.append('more');
    v.finish();
    p.runFrames();
    assert.equal(p.container.childNodes[0], full);
    assert.equal(full.outerHTML, before);
    assert.equal(second.childNodes.length, 9);
    assert.equal(second.lastChild.outerHTML, '<p>more</p>');
  });

  test('every group may be skipped off screen, the one still filling too; skipOffscreen: false leaves them be', () => {
    const text = Array.from({ length: 24 }, (_, i) => `paragraph ${i}\n\n`).join('');
    const skipped = (container) =>
      Array.from(container.childNodes, (group) => [
        group.style.contentVisibility,
        group.style.containIntrinsicSize,
      ]);
    const p = page();
    const v = view(p);
    v.append('first');
    p.runFrames();
    assert.deepEqual(skipped(p.container), [['auto', 'auto 800px']], 'from its first block on');
    v.append(text);
    p.runFrames();
    assert.deepEqual(skipped(p.container), [
      ['auto', 'auto 800px'],
      ['auto', 'auto 800px'],
    ]);
    const q = page();
    const w = view(q, { skipOffscreen: false });
    w.append(text);
    q.runFrames();
    assert.equal(q.container.childNodes.length, 2);
    assert.deepEqual(skipped(q.container), [
      ['', ''],
      ['', ''],
    ]);
  });

  test('the open block is patched in place: a growing paragraph keeps its element and text node', () => {
    const p = page();
    const v = view(p);
    v.append('Hello');
    p.runFrames();
    const [paragraph] = blocks(p.container);
    const textNode = paragraph.firstChild;
    v.append(', world');
    p.runFrames();
    assert.equal(blocks(p.container)[0], paragraph);
    assert.equal(paragraph.firstChild, textNode);
    assert.equal(textNode.data, 'Hello, world');
    v.append('\n===');
    p.runFrames();
    assert.equal(html(p.container), '<h1>Hello, world</h1>', 'a change of kind replaces the element');
  });

  test('finish() resolves after the last frame has drawn everything', async () => {
    const p = page();
    const v = view(p);
    v.append('**Menu');
    p.runFrames();
    assert.equal(html(p.container), '<p>**Menu</p>');
    v.append('**');
    const done = v.finish();
    p.runFrames();
    await done;
    assert.equal(html(p.container), '<p><strong>Menu</strong></p>');
    assert.throws(() => v.append('more'));
  });
});

describe('MarkdownRenderer with smoothing', () => {
  test('text comes out over several frames, one write each, and finish() flushes the rest', async () => {
    const p = page();
    const v = view(p, { smoother: new Smoother({ maxDelayMs: 200 }) });
    v.append('warm-up ');
    p.clock.now = 100;
    v.append('then a burst of text to spread out');
    const seen = [];
    for (let frame = 0; frame < 4; frame++) {
      p.clock.now += 16;
      p.runFrames();
      seen.push(p.container.textContent);
    }
    assert.equal(v.writes, seen.filter((t, i) => t !== (seen[i - 1] ?? '')).length);
    assert.ok(seen[0].length < seen[3].length, `text should grow frame by frame: ${JSON.stringify(seen)}`);
    assert.ok(!seen[3].endsWith('out'), 'still holding some text');
    const done = v.finish();
    p.runFrames();
    await done;
    assert.equal(p.container.textContent, 'warm-up then a burst of text to spread out');
  });

  test('switching smoothing off releases what it held at the next frame', () => {
    const p = page();
    const v = view(p, { smoother: new Smoother({ maxDelayMs: 1000 }) });
    v.append('held back');
    p.runFrames();
    assert.notEqual(p.container.textContent, 'held back');
    v.setSmoother(null);
    p.runFrames();
    assert.equal(p.container.textContent, 'held back');
  });
});

describe('buildNodes', () => {
  test("refuses tags and attributes outside the renderer's lists", () => {
    const { document } = parseHTML('<html><body></body></html>');
    assert.throws(() => buildNodes(document, [{ tag: 'script', attrs: null, children: [] }]), /script/);
    assert.throws(
      () => buildNodes(document, [{ tag: 'a', attrs: { onclick: 'x' }, children: [] }]),
      /onclick/,
    );
  });

  test('text stays text', () => {
    const { document } = parseHTML('<html><body><div></div></body></html>');
    const div = document.querySelector('div');
    for (const node of buildNodes(document, ['<img src=x onerror=alert(1)>'])) div.appendChild(node);
    assert.equal(div.children.length, 0);
    assert.equal(div.innerHTML, '&lt;img src=x onerror=alert(1)&gt;');
  });
});

describe('MarkdownRenderer: words added to the last line are not parsed again', () => {
  // Text as a model writes it, cut as a tokenizer would: most pieces are " word", and most frames only
  // extend the last line's text (blocks.js's _extend), the rest are parsed.
  // prettier-ignore
  const PIECES = [
    ' the', ' model', ' 中文', ' naïve', ' 👩‍💻', ' x1', ' 1', '.', ',', ':', '?', "'s", ' "q"', ' a/b', ' 42%',
    '\n', '\n\n', '\n- ', '\n1. ', '\n# ', '\n> ', '\n    ', ' **', '**', ' *', '_', ' `', '`', ' [', '](https://a.b)',
    ' <', '>', ' &amp', ';', ' |', ' ~~', ' \\', '!', ' -', '-', '=', '#', '  ', ' \n', '1', ')', '\n| a | b |\n|--|--|\n| c',
  ];
  const tokenize = (text) => text.match(/ ?[A-Za-z]{1,6}|[0-9]{1,3}|\n|[ \t]+|[^A-Za-z0-9\s]/gu) ?? [];

  test('the same DOM as the one-shot render, for random text in token-sized pieces', () => {
    const random = seeded(2032);
    let parses = 0;
    let updates = 0;
    class Counting extends MarkdownIt {
      parse(src, env) {
        parses += 1;
        return super.parse(src, env);
      }
    }
    for (let run = 0; run < 300; run++) {
      let text = '';
      for (let n = 5 + Math.floor(random() * 60); n > 0; n--) {
        const r = random();
        text += r < 0.7 ? PIECES[Math.floor(random() * 15)] : PIECES[Math.floor(random() * PIECES.length)];
      }
      const p = page();
      const v = new MarkdownRenderer(p.container, {
        markdownIt: Counting,
        requestFrame: p.requestFrame,
        now: () => 0,
      });
      for (const token of tokenize(text)) {
        v.append(token);
        updates += p.runFrames();
      }
      v.finish();
      p.runFrames();
      assert.equal(html(p.container), oneShotHTML(text), JSON.stringify(text));
    }
    assert.ok(parses < updates * 0.8, `${parses} parses for ${updates} updates: the words were extended`);
  });
});

describe('MarkdownRenderer: a long open code block', () => {
  test('drawn as the one-shot render draws it at every point, without parsing it again', () => {
    let parses = 0;
    class Counting extends MarkdownIt {
      parse(src, env) {
        parses += 1;
        return super.parse(src, env);
      }
    }
    const lines = Array.from({ length: 600 }, (_, i) => `line_${i} = value(${i})  # 中文 👩‍💻\n`).join('');
    const text = `Intro.\n\n\`\`\`python\n${lines}`;
    const p = page();
    const v = new MarkdownRenderer(p.container, {
      markdownIt: Counting,
      requestFrame: p.requestFrame,
      now: () => 0,
    });
    let checked = 0;
    let boxes = [];
    for (let at = 0; at < text.length; at += 37) {
      v.append(text.slice(at, at + 37));
      p.runFrames();
      if (at % (37 * 100) === 0) {
        boxes = Array.from(p.container.querySelectorAll('pre code > span')).filter(
          (span) => span.style.display === 'block',
        );
        // Its complete lines in boxes laid out as blocks (a box's lines and nothing else); without the
        // boxes, the one-shot render's HTML.
        for (const b of boxes.slice(0, -1)) {
          assert.ok(b.textContent.length >= CODE_BOX && b.textContent.endsWith('\n'));
          assert.ok(b.textContent.length < CODE_BOX + 60, 'a box ends at the first line end past its size');
        }
        assert.equal(unboxed(p.container), oneShotHTML(text.slice(0, at + 37)));
        checked += 1;
      }
    }
    const shown = p.container.querySelectorAll('pre code > span');
    assert.equal(shown.length, Math.floor(lines.length / CODE_BOX) + 1, 'the boxes, then the last lines');
    assert.ok(boxes.length > 1);
    assert.ok(parses < 20, `${parses} parses for ${Math.ceil(text.length / 37)} updates`);
    v.append('```\nafter\n');
    v.finish();
    p.runFrames();
    assert.equal(html(p.container), oneShotHTML(`${text}\`\`\`\nafter\n`));
    assert.ok(checked > 5);
  });
});
