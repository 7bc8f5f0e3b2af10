// createShikiHighlighter: Shiki (a real highlighter, its JavaScript regex engine) as the renderer's
// highlighter, streamed: complete lines once each, going on from the grammar state, colours through CSSOM.

import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import MarkdownIt from 'markdown-it/browser';
import { createHighlighter } from 'shiki';
import { createJavaScriptRegexEngine } from 'shiki/engine/javascript';
import { createShikiHighlighter } from '../../src/tokenrelay/web/lib/shiki.js';
import { buildNodes, MarkdownRenderer } from '../../src/tokenrelay/web/lib/view.js';

const THEME = 'github-light';
let shiki;

before(async () => {
  shiki = await createHighlighter({
    themes: [THEME],
    langs: ['python', 'javascript'],
    engine: createJavaScriptRegexEngine(),
  });
});

/** Each styled span's text and colour, in order: what a reader sees of the highlighting. */
function colours(nodes, out = []) {
  for (const node of nodes) {
    if (typeof node === 'string') continue;
    if (node.style) out.push([node.children.join(''), node.style.color ?? '']);
    colours(node.children, out);
  }
  return out;
}

const text = (nodes) => nodes.map((node) => (typeof node === 'string' ? node : text(node.children))).join('');

const PYTHON = [
  'def area(r):\n',
  '    """The area\n',
  '    of a circle."""\n',
  '    return 3.14 * r * r  # square\n',
  'print(area(2), "done")\n',
];

describe('createShikiHighlighter', () => {
  test('streamed line by line: the same text and colours as the block highlighted at once', () => {
    const whole = createShikiHighlighter(shiki, { theme: THEME })(PYTHON.join(''), 'python');
    assert.ok(whole !== null);
    const streamed = createShikiHighlighter(shiki, { theme: THEME });
    let nodes = null;
    let code = '';
    // Cut inside lines too: a partial last line is plain text until its end comes.
    for (const piece of PYTHON.join('').match(/[\s\S]{1,7}/g)) {
      code += piece;
      nodes = streamed(code, 'python');
      assert.equal(text(nodes), code);
    }
    assert.deepEqual(colours(nodes), colours(whole));
    // The docstring spans two runs (cut between its lines) and is one colour all through, as at once.
    const docstring = colours(nodes).filter(([t]) => t.includes('area') || t.includes('circle'));
    assert.ok(docstring.length >= 2);
    assert.equal(
      new Set(docstring.filter(([t]) => /of a circle|The area/.test(t)).map(([, c]) => c)).size,
      1,
    );
  });

  test('each complete line is highlighted once', () => {
    const calls = [];
    const counting = {
      ...shiki,
      codeToTokens: (code, options) => (calls.push(code), shiki.codeToTokens(code, options)),
    };
    counting.getLanguage = shiki.getLanguage;
    counting.getLoadedThemes = shiki.getLoadedThemes;
    const highlight = createShikiHighlighter(counting);
    let code = '';
    for (const ch of PYTHON.join('')) {
      code += ch;
      highlight(code, 'python');
    }
    assert.equal(calls.join('\n') + '\n', PYTHON.join(''), 'every line once, in order');
  });

  test('an unknown language is plain text; hostile code stays text', () => {
    const highlight = createShikiHighlighter(shiki);
    assert.equal(highlight('x = 1\n', 'no-such-language'), null);
    const nodes = highlight('let s = "<script>alert(1)</script>";\n', 'javascript');
    const { document } = parseHTML('<!doctype html><div id="x"></div>');
    const div = document.getElementById('x');
    for (const node of buildNodes(document, nodes)) div.appendChild(node);
    assert.equal(div.querySelector('script'), null);
    assert.match(div.innerHTML, /&lt;script&gt;/);
    assert.match(div.innerHTML, /style="color:/, 'colours set (through CSSOM)');
  });

  test('a style outside ALLOWED_STYLES, or a value it does not accept, is refused', () => {
    const { document } = parseHTML('<!doctype html><div></div>');
    const span = (style) => [{ tag: 'span', attrs: null, children: ['x'], style }];
    assert.throws(() => buildNodes(document, span({ background: 'url(https://evil.example/)' })), /style/);
    assert.throws(() => buildNodes(document, span({ color: 'red; background: url(x)' })), /style/);
    assert.equal(buildNodes(document, span({ color: '#D73A49', fontStyle: 'italic' })).length, 1);
  });

  test('in a MarkdownRenderer: a streamed fence, coloured, the same text as markdown-it', () => {
    const { document } = parseHTML('<!doctype html><div id="reply"></div>');
    const frames = [];
    const container = document.getElementById('reply');
    const view = new MarkdownRenderer(container, {
      markdownIt: MarkdownIt,
      highlighter: createShikiHighlighter(shiki, { theme: THEME }),
      requestFrame: (callback) => frames.push(callback),
      now: () => 0,
    });
    const reply = `Some code:\n\n\`\`\`python\n${PYTHON.join('')}\`\`\`\n\nAfter.`;
    for (const piece of reply.match(/[\s\S]{1,5}/g)) {
      view.append(piece);
      for (const frame of frames.splice(0)) frame(0);
    }
    view.finish();
    for (const frame of frames.splice(0)) frame(0);
    const code = container.querySelector('pre code.language-python');
    assert.equal(code.textContent, PYTHON.join(''));
    assert.ok(code.querySelectorAll('span[style]').length > 5);
    assert.equal(container.querySelectorAll('p').length, 2);
  });
});
