// The corpus, streamed by the real server through SmolLM2's tokenizer, rendered by the real page in
// Chromium: what is on screen at the end is exactly what rendering the whole text at once gives, and no
// frame on the way ever showed a broken character.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import {
  CORPUS,
  changeSettings,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  probe,
  screenshot,
  send,
  startServer,
} from './harness.js';
import { blockTree, markdownItTree } from './trees.js';

const skip = missingPrerequisite() ?? false;
// Read as bytes, decoded as they are: CRLF line ends and all.
const CORPUS_TEXT = readFileSync(CORPUS, 'utf8');
const REPLACEMENT = '\uFFFD';
// The corpus holds one literal U+FFFD, right after these words.
const LITERAL_FFFD = `must survive unchanged: ${REPLACEMENT}`;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

let server;
let browser;

before(async () => {
  if (skip) return;
  // About 1250 tokens at 500 tokens/s: about 2.5 s of real streaming, some hundred frames. The page sends no
  // max_tokens, so the server's default (512) would cut the corpus short.
  [server, browser] = await Promise.all([
    startServer({ textFile: CORPUS, rate: 500, args: ['--default-max-tokens', '4096'] }),
    launchBrowser(),
  ]);
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/**
 * The page's own renderer over the whole text at once, in the same page: the blocks' HTML. A streamed code
 * block's highlighting comes in a <span> (no attributes) per run of lines highlighted together (lib/code.js),
 * one run when the text comes whole: both sides are compared without those spans (unwrapRuns).
 */
function oneShotHTML(page, text) {
  return page.evaluate(async (whole) => {
    const { default: MarkdownItInPage } = await import('/static/vendor/markdown-it.esm.min.mjs');
    const { default: hljs } = await import('/static/vendor/highlight.min.mjs');
    const { createMarkdown: create, renderTokens } = await import('/static/lib/markdown_nodes.js');
    const { createHighlighter } = await import('/static/lib/code.js');
    const { buildNodes } = await import('/static/lib/view.js');
    const holder = document.createElement('div');
    const tokens = create(MarkdownItInPage).parse(whole, {});
    const nodes = renderTokens(tokens, 0, tokens.length, createHighlighter(hljs));
    holder.append(...buildNodes(document, nodes));
    holder.querySelectorAll('span:not([class])').forEach((span) => span.replaceWith(...span.childNodes));
    return holder.innerHTML;
  }, text);
}

/** The text of a chat completion event stream: every choices[0].delta.content, joined. */
function streamedContent(body) {
  let content = '';
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    content += JSON.parse(line.slice(6)).choices?.[0]?.delta?.content ?? '';
  }
  return content;
}

/** Send, let the reply finish, and return what a test needs to judge it. */
async function streamCorpus(page) {
  const reply = await send(page, 'Show me the streaming test corpus, please.');
  const end = await outcome(reply);
  const body = reply.locator('.body');
  const groups = await body.evaluate((el) =>
    Array.from(el.children, (child) => `${child.tagName}.${child.className}:${child.childNodes.length}`),
  );
  const index = (await page.locator('#conversation .turn.assistant').count()) - 1;
  return {
    end,
    groups,
    // Without the code blocks' Copy buttons, which the page adds once the reply has ended.
    html: await body.evaluate((el) => {
      const copy = el.cloneNode(true);
      copy.querySelectorAll('button.copy-code').forEach((button) => button.remove());
      copy.querySelectorAll('span:not([class])').forEach((span) => span.replaceWith(...span.childNodes));
      return Array.from(copy.children, (group) => group.innerHTML).join('');
    }),
    highlighted: await body
      .locator('pre code.language-python span[class]')
      .evaluateAll((spans) => spans.map((span) => span.className)),
    tree: await body.evaluate(blockTree),
    text: await body.textContent(),
    ...(await probe(page, index)),
  };
}

/** Every check on one streamed corpus reply. */
async function checkCorpusReply(page, problems, run) {
  assert.equal(run.end.status, 'finished', `the reply ended as ${run.end.status}: ${run.end.meta}`);
  assert.doesNotMatch(run.end.meta, /finish_reason/, 'finish_reason stop is not shown');
  assert.match(run.end.meta, /\d+ tokens · [\d.]+ s total$/);

  // The view keeps closed blocks in <div class="blocks"> groups of at most 16, and nothing else.
  assert.ok(run.groups.length > 0);
  for (const group of run.groups) assert.match(group, /^DIV\.blocks:([1-9]|1[0-6])$/);

  // Exact: the streamed DOM serialises to the same HTML as the page's renderer over the whole text at once,
  // and has the same tree as markdown-it's stock HTML renderer gives for the whole text.
  assert.equal(run.html, await oneShotHTML(page, CORPUS_TEXT));
  assert.deepEqual(run.tree, markdownItTree(CORPUS_TEXT));
  // print("नमस्ते 👩‍💻"): highlight.js marks the built-in and the string.
  assert.deepEqual(run.highlighted, ['hljs-built_in', 'hljs-string'], 'the Python block is highlighted');
  for (const sample of ['👩‍💻', '🏳️‍🌈', '你好，世界。', 'नमस्ते', 'café', '₹20']) {
    assert.ok(run.text.includes(sample), `the reply shows ${sample}`);
  }

  // Every frame: at most the one literal U+FFFD, and only once it has arrived; no half of a surrogate pair.
  assert.ok(run.texts.length >= 30, `only ${run.texts.length} distinct frames recorded: not a stream`);
  assert.equal(run.texts.at(-1), run.text);
  let sawLiteral = false;
  for (const [i, text] of run.texts.entries()) {
    const count = text.split(REPLACEMENT).length - 1;
    assert.ok(count <= 1, `frame ${i} shows ${count} U+FFFD: ...${text.slice(-80)}`);
    if (count === 1) {
      assert.ok(text.includes(LITERAL_FFFD), `frame ${i} shows a U+FFFD that is not the literal`);
      sawLiteral = true;
    }
    assert.doesNotMatch(text, LONE_SURROGATE, `frame ${i} shows half a surrogate pair`);
  }
  assert.ok(sawLiteral && !run.texts[0].includes(REPLACEMENT), 'the literal U+FFFD arrived mid-stream');

  assert.deepEqual(run.violations, [], 'no CSP violations');
  assert.deepEqual(problems.errors, [], 'no page or console errors');
  assert.deepEqual(problems.dialogs, []);
}

describe('the corpus streamed through the page', { skip, timeout: 90_000 }, () => {
  test('renders exactly, never shows a broken character (smoothing on)', async () => {
    const { page, problems } = await openPage(browser.context, server);
    await changeSettings(page, async () => {
      assert.equal(await page.isChecked('#smoothing'), true, 'smoothing is on by default');
    });
    const run = await streamCorpus(page);
    // Taken before the checks, so a failure leaves a picture too. A tall window, so that one picture holds
    // the whole reply: CJK, Devanagari, Thai, Myanmar, emoji, the table and the code.
    await page.setViewportSize({ width: 1000, height: 1400 });
    console.log(`screenshot: ${await screenshot(page, 'e2e-corpus.png')}`);
    await checkCorpusReply(page, problems, run);
    await page.close();
  });

  test('renders exactly, never shows a broken character (smoothing off)', async () => {
    const { page, problems } = await openPage(browser.context, server);
    await changeSettings(page, () => page.uncheck('#smoothing'));
    const run = await streamCorpus(page);
    await checkCorpusReply(page, problems, run);
    await page.close();
  });

  test('a reply in several block groups keeps its margins, trimmed only at its two ends', async () => {
    // style.css trims the first block's top margin and the last block's bottom margin with rules that name
    // the top-level block tags (so that a new group does not restyle the whole previous one); whatever
    // block ends the reply must be among them, and the last block of a full group must keep its margin.
    const endings = ['# h1', '## h2', '### h3', '#### h4', '##### h5', '###### h6', '- a\n- b', '1. a\n2. b'];
    endings.push('> quote', '```\ncode\n```', '| a | b |\n|---|---|\n| 1 | 2 |', '***', 'A paragraph.');
    const { page, problems } = await openPage(browser.context, server);
    const replies = await page.evaluate(async (lastBlocks) => {
      const { default: MarkdownItInPage } = await import('/static/vendor/markdown-it.esm.min.mjs');
      const { MarkdownRenderer } = await import('/static/lib/view.js');
      const margins = (el) => [getComputedStyle(el).marginTop, getComputedStyle(el).marginBottom];
      const out = [];
      for (const last of lastBlocks) {
        const body = document.createElement('div');
        body.className = 'body markdown';
        document.getElementById('conversation').append(body);
        let frame = null;
        const draw = () => {
          const callback = frame;
          frame = null;
          callback?.(performance.now());
        };
        const view = new MarkdownRenderer(body, {
          markdownIt: MarkdownItInPage,
          requestFrame: (cb) => (frame = cb),
        });
        const text = `${Array.from({ length: 40 }, (_, i) => `Paragraph ${i}.`).join('\n\n')}\n\n${last}`;
        for (const piece of text.match(/[\s\S]{1,5}/g)) {
          view.append(piece);
          draw();
        }
        view.finish();
        draw();
        const groups = Array.from(body.children);
        const blocks = groups.flatMap((group) => Array.from(group.children));
        out.push({
          last,
          groups: groups.length,
          first: margins(blocks[0])[0],
          lastTag: blocks.at(-1).tagName,
          lastBottom: margins(blocks.at(-1))[1],
          groupEnds: groups.slice(0, -1).map((group) => margins(group.lastElementChild)[1]),
        });
        body.remove();
      }
      return out;
    }, endings);
    for (const reply of replies) {
      assert.ok(reply.groups >= 2, `${reply.last}: ${reply.groups} group(s)`);
      assert.equal(reply.first, '0px', `${reply.last}: the first block's top margin`);
      assert.equal(
        reply.lastBottom,
        '0px',
        `${reply.last}: the last block's (${reply.lastTag}) bottom margin`,
      );
      for (const bottom of reply.groupEnds)
        assert.notEqual(bottom, '0px', `${reply.last}: a full group's last block`);
    }
    assert.deepEqual(problems.errors, []);
    await page.close();
  });

  test("the server replays the file's CRLF line ends", async () => {
    // Asked directly: Chromium keeps no copy of a streamed fetch body for the test to read. (The page's
    // handling of CR and CRLF, split anywhere, is covered by the node tests in tests/web/.)
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model: 'replay',
        messages: [{ role: 'user', content: 'corpus' }],
        stream: true,
      }),
    });
    const content = streamedContent(await response.text());
    const lf = (text) => text.replace(/\r\n/g, '\n');
    assert.ok(lf(content) === lf(CORPUS_TEXT), 'the text itself is the corpus');
    const crlf = (text) => text.split('\r\n').length - 1;
    assert.equal(crlf(content), crlf(CORPUS_TEXT), 'CRLF line ends replayed');
  });
});
