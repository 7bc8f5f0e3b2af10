// The npm package's README runs: every `js` and `jsx` block, as written, in Node. A block is a module of its
// own (its imports resolve to the package, markdown-it, highlight.js, the AI SDK), with the names it leaves
// to the reader (the request, the page's elements, `response`) given as globals: a chat stream recorded in
// tokenrelay's shape, a linkedom document, a mock AI SDK model. A few harness lines after a block read what
// it made; each test then checks the block did what the README says it does.

import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { after, describe, test } from 'node:test';
import { transformSync } from 'esbuild';
import { parseHTML } from 'linkedom';
import { simulateReadableStream } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { readReply } from 'tokenrelay/reply';

const README = readFileSync(new URL('../../src/tokenrelay/web/lib/README.md', import.meta.url), 'utf8');
const BLOCKS = [...README.matchAll(/```(jsx?)\n([\s\S]*?)```/g)].map(([, lang, code]) => ({ lang, code }));
const written = [];

after(() => {
  for (const file of written) rmSync(file, { force: true });
});

/** The README block that imports `entry` (and holds `also`; without it, the one that does not use Shiki). */
function block(entry, also = '') {
  const found = BLOCKS.filter(
    (b) =>
      b.code.includes(`from '${entry}'`) &&
      (also === '' ? !b.code.includes("from 'shiki'") : b.code.includes(also)),
  );
  assert.equal(found.length, 1, `one README block imports ${entry}`);
  return found[0];
}

/** Run a block as a module (next to this file, so its imports resolve), `harness` appended. */
async function run({ lang, code }, harness = '') {
  let source = `${code}\n${harness}\n`;
  if (lang === 'jsx') source = transformSync(source, { loader: 'jsx', jsx: 'automatic', format: 'esm' }).code;
  const url = new URL(`./.readme-block-${written.length}.mjs`, import.meta.url);
  written.push(url);
  writeFileSync(url, source);
  await import(url.href);
}

/** A document with a #reply element, as the page's globals (document, window, requestAnimationFrame). */
function replyPage() {
  const { document, window } = parseHTML('<html><body><div id="reply"></div></body></html>');
  globalThis.document = document;
  globalThis.requestAnimationFrame ??= (callback) => setTimeout(() => callback(performance.now()), 0);
  globalThis.window ??= window;
  return document;
}

/** A Chat Completions stream as tokenrelay writes it, `pieces` as the content deltas. */
function chatStream(pieces) {
  const chunk = (delta, finish = null) =>
    `data: ${JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    })}\n\n`;
  const usage = `data: ${JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [],
    usage: { prompt_tokens: 5, completion_tokens: pieces.length, total_tokens: 5 + pieces.length },
  })}\n\n`;
  const text = [
    chunk({ role: 'assistant', content: '' }),
    ...pieces.map((p) => chunk({ content: p })),
    chunk({}, 'stop'),
    usage,
    'data: [DONE]\n\n',
  ].join('');
  // Cut into 7-byte reads, so characters and lines arrive split as the network splits them.
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream({
    start(controller) {
      for (let at = 0; at < bytes.length; at += 7) controller.enqueue(bytes.slice(at, at + 7));
      controller.close();
    },
  });
  return new Response(body, { headers: { 'Content-Type': 'text/event-stream' } });
}

function sink() {
  return {
    text: '',
    append(t) {
      this.text += t;
    },
  };
}

const REPLY = ['Hello ', '**wor', 'ld** 🌍', ' नमस्ते'];
Object.assign(globalThis, {
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ model: 'm', messages: [], stream: true }),
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  prompt: 'hi',
  readReply,
});

describe('the npm package README', () => {
  test('tokenrelay/sse: the events of a stream, logged', async () => {
    globalThis.fetch = async () => chatStream(REPLY);
    const logged = [];
    const log = console.log;
    console.log = (...args) => logged.push(args);
    try {
      await run(block('tokenrelay/sse'));
    } finally {
      console.log = log;
    }
    assert.equal(logged.length, REPLY.length + 4); // role, pieces, finish, usage, [DONE]
    assert.deepEqual(logged.at(-1), ['message', '[DONE]', '', null]);
  });

  test('tokenrelay/reply: text, then one finish with its reason and usage', async () => {
    globalThis.fetch = async () => chatStream(REPLY);
    const seen = { output: sink(), thoughts: sink(), finish: [], failed: [] };
    Object.assign(globalThis, {
      output: seen.output,
      thoughts: seen.thoughts,
      startCard: () => assert.fail('no call in this reply'),
      growCard: () => assert.fail('no call in this reply'),
      done: (reason, usage) => seen.finish.push([reason, usage.outputTokens]),
      failed: (error) => seen.failed.push(error),
    });
    await run(block('tokenrelay/reply'));
    assert.equal(seen.output.text, REPLY.join(''));
    assert.deepEqual(seen.finish, [['stop', REPLY.length]]);
    assert.deepEqual(seen.failed, []);
  });

  test('tokenrelay/json: the value grows, then finish() gives the whole of it', async () => {
    const json = ['{"colours": ["re', 'd", "gr', 'een"], "n": 2', '}'];
    globalThis.response = chatStream(json);
    const shown = [];
    globalThis.show = (value) => shown.push(JSON.stringify(value));
    globalThis.result = undefined;
    await run(block('tokenrelay/json'));
    assert.deepEqual(globalThis.result, { colours: ['red', 'green'], n: 2 });
    assert.equal(shown.length, json.length);
    assert.deepEqual(JSON.parse(shown[0]), { colours: ['re'] }); // a string shows as it grows
  });

  test('tokenrelay/markdown: the reply drawn, its code highlighted by highlight.js', async () => {
    const document = replyPage();
    const text = '# Title\n\nSome **bold** text.\n\n```js\nconst a = 1;\n```\n';
    globalThis.response = chatStream([...text].map((c) => c));
    await run(block('tokenrelay/markdown'));
    const reply = document.querySelector('#reply');
    assert.equal(reply.querySelector('h1').textContent, 'Title');
    assert.equal(reply.querySelector('strong').textContent, 'bold');
    assert.equal(reply.querySelector('pre > code.language-js').textContent, 'const a = 1;\n');
    assert.ok(reply.querySelector('span.hljs-keyword'), 'highlight.js marked the keyword');
  });

  test('tokenrelay/markdown with Shiki: the code coloured through CSSOM', async () => {
    const document = replyPage();
    const code = 'def f(x):\n    """Twice\n    x."""\n    return 2 * x\n';
    const text = `Code:\n\n\`\`\`python\n${code}\`\`\`\n`;
    globalThis.response = chatStream(text.match(/[\s\S]{1,3}/g));
    await run(block('tokenrelay/markdown', "from 'shiki'"));
    const shown = document.querySelector('#reply pre > code.language-python');
    assert.equal(shown.textContent, code);
    const coloured = [...shown.querySelectorAll('span[style]')];
    assert.ok(
      coloured.some((span) => span.textContent === 'def'),
      'the keyword coloured',
    );
    const docstring = coloured.filter((span) => /Twice|x\."""/.test(span.textContent));
    assert.ok(docstring.length >= 1);
    assert.equal(
      new Set(docstring.map((span) => span.getAttribute('style'))).size,
      1,
      'one colour across lines',
    );
  });

  test('tokenrelay/smooth: streamText with smoothStream() gives the model text, whole', async () => {
    const deltas = ['สวัสดี', 'ครับ 👋🏽', ' 你好'];
    globalThis.model = new MockLanguageModelV3({
      doStream: async () => ({
        stream: simulateReadableStream({
          chunks: [
            { type: 'stream-start', warnings: [] },
            { type: 'text-start', id: 't' },
            ...deltas.map((delta) => ({ type: 'text-delta', id: 't', delta })),
            { type: 'text-end', id: 't' },
            {
              type: 'finish',
              finishReason: { unified: 'stop', raw: 'stop' },
              usage: {
                inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 3, text: 3, reasoning: 0 },
              },
            },
          ],
        }),
      }),
    });
    try {
      await run(block('tokenrelay/smooth'), 'globalThis.smoothed = result;');
      const parts = [];
      for await (const part of globalThis.smoothed.textStream) parts.push(part);
      assert.equal(parts.join(''), deltas.join(''));
      // whole graphemes only: no part ends inside a cluster (the waving hand keeps its skin tone)
      assert.ok(!parts.some((p) => p.endsWith('👋')), parts.join('|'));
    } finally {
      globalThis.model = 'm';
    }
  });

  test('tokenrelay/react: the component module renders', async () => {
    const { renderToString } = await import('react-dom/server');
    const { createElement } = await import('react');
    await run(block('tokenrelay/react'), 'globalThis.Messages = Messages;');
    assert.equal(typeof globalThis.Messages, 'function');
    assert.equal(renderToString(createElement(globalThis.Messages)), ''); // no messages yet: nothing drawn
  });

  test('tokenrelay/lanes: the recorder and the lanes drawn into the document', async () => {
    const { document } = parseHTML('<html><body></body></html>');
    globalThis.document = document;
    await run(block('tokenrelay/lanes'));
    const svg = document.body.querySelector('svg.lanes');
    assert.ok(svg, 'drawLanes appended its SVG');
    assert.equal(svg.querySelector('title').textContent, 'where each event was held, hop by hop');
  });

  test('every block of the README is one of the above', () => {
    const entries = ['sse', 'reply', 'json', 'markdown', 'smooth', 'react', 'lanes'];
    const covered = BLOCKS.filter((b) => entries.some((e) => b.code.includes(`from 'tokenrelay/${e}'`)));
    assert.equal(covered.length, BLOCKS.length);
  });
});
