// code.js: highlight.js's HTML read back into node descriptions, and nothing else accepted.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import hljs from '@highlightjs/cdn-assets/es/highlight.min.js';
import { createHighlighter, MAX_HIGHLIGHT, readHighlighted } from '../../src/tokenrelay/web/lib/code.js';
import { renderTokens } from '../../src/tokenrelay/web/lib/markdown_nodes.js';
import { makeMarkdown } from './helpers.js';

/** The text a node description shows. */
const textOf = (nodes) => nodes.map((n) => (typeof n === 'string' ? n : textOf(n.children))).join('');

describe('readHighlighted', () => {
  test('spans, text and the five escapes', () => {
    assert.deepEqual(readHighlighted('<span class="hljs-keyword">def</span> a &amp;&lt;&gt;&quot;&#x27;'), [
      { tag: 'span', attrs: { class: 'hljs-keyword' }, children: ['def'] },
      ' a &<>"\'',
    ]);
    assert.deepEqual(readHighlighted('<span class="hljs-title function_"><span class="x">f</span></span>'), [
      {
        tag: 'span',
        attrs: { class: 'hljs-title function_' },
        children: [{ tag: 'span', attrs: { class: 'x' }, children: ['f'] }],
      },
    ]);
    assert.deepEqual(readHighlighted(''), []);
  });

  test('anything else is refused', () => {
    for (const html of [
      '<img src=x onerror=alert(1)>',
      '<span class="a" onclick="x">t</span>',
      '<span class="a">t',
      't</span>',
      '&nbsp;',
      '&amp',
      '<span class="a&quot;">t</span>',
      '<SPAN class="a">t</SPAN>',
      '<script>alert(1)</script>',
    ]) {
      assert.equal(readHighlighted(html), null, html);
    }
  });
});

describe('createHighlighter over highlight.js', () => {
  const highlight = createHighlighter(hljs);

  test('keeps every character of the code, hostile ones included', () => {
    const code = 'def f(x):\n    return "<script>alert(1)</script>" & x  # \'quoted\' 👩‍💻\n';
    const nodes = highlight(code, 'python');
    assert.ok(nodes !== null);
    assert.equal(textOf(nodes), code);
    const spans = nodes.flatMap((run) => run.children ?? []);
    assert.ok(spans.some((n) => typeof n !== 'string' && n.attrs.class === 'hljs-keyword'));
  });

  test('a streaming block: complete lines highlighted once, the partial last line plain', () => {
    let calls = 0;
    const counting = createHighlighter({
      getLanguage: (name) => hljs.getLanguage(name),
      highlight: (code, options) => {
        calls += 1;
        return hljs.highlight(code, options);
      },
    });
    const whole = 'x = 1\nprint(x)\n';
    const before = counting('x = 1\npri', 'python');
    assert.equal(before.at(-1), 'pri', 'the partial line is plain text');
    assert.equal(textOf(before), 'x = 1\npri');
    const more = counting('x = 1\nprint(', 'python');
    assert.equal(calls, 1, 'a frame that only adds to the last line highlights nothing');
    assert.equal(more[0], before[0], 'and reuses the nodes it had');
    assert.equal(counting('x = ', 'python').length, 1, 'no complete line: all plain');
    const done = counting(whole, 'python');
    assert.equal(calls, 2, 'the line that completed is highlighted, and only it');
    assert.equal(textOf(done), whole);
    assert.equal(done[0], before[0], 'the first line keeps its nodes: never highlighted again');
    assert.deepEqual(done[1], highlight('print(x)\n', 'python')[0]);
    assert.equal(counting(whole, 'python').length, 2);
    assert.equal(calls, 2, 'asked again for the same lines: nothing highlighted');
  });

  test('finished lines are never highlighted again, however long the block grows', () => {
    const lines = [];
    const counting = createHighlighter({
      getLanguage: (name) => hljs.getLanguage(name),
      highlight: (code, options) => {
        lines.push(code);
        return hljs.highlight(code, options);
      },
    });
    let code = '';
    for (let i = 0; i < 300; i++) {
      code += `x${i} = ${i}\n`;
      counting(code + 'pri', 'python'); // with a partial line, as a frame sees it
    }
    assert.equal(lines.join(''), code, 'every line highlighted exactly once');
    assert.equal(textOf(counting(code, 'python')), code);
  });

  test('unknown languages, no language and huge blocks stay plain', () => {
    assert.equal(highlight('x', 'no-such-language'), null);
    assert.equal(highlight('x', ''), null);
    assert.equal(highlight('x = 1\n'.repeat(MAX_HIGHLIGHT), 'python'), null);
  });

  test('renderTokens highlights fenced code that names a language, only that', () => {
    const md = makeMarkdown();
    const text = '```js\nconst a = "<b>";\n```\n\n```\nplain <b>\n```\n';
    const [fenced, plain] = renderTokens(md.parse(text, {}), 0, undefined, highlight);
    const code = fenced.children[0];
    assert.equal(code.attrs.class, 'language-js');
    assert.ok(code.children.some((n) => typeof n !== 'string' && n.tag === 'span'));
    assert.equal(textOf(code.children), 'const a = "<b>";\n');
    assert.deepEqual(plain.children[0].children, ['plain <b>\n']);
  });
});
