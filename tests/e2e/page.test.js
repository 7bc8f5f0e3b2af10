// The chat page's features (issue 14), each in the real page in Chromium against the real server:
// conversations kept in the browser, settings sent with the request, the API key prompt, copy buttons,
// highlighted code, regenerate and edit-and-resend, live numbers while streaming, HEAD / and the favicon,
// the keyboard, and the layout at 1280 and 390 px in light and dark (screenshots in test-artifacts/).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  CORPUS,
  FIXTURES,
  changeSettings,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  probe,
  screenshot,
  send,
  sleep,
  startServer,
} from './harness.js';

const skip = missingPrerequisite() ?? false;
const FEATURES = join(FIXTURES, 'features.md');
const FEATURES_TEXT = readFileSync(FEATURES, 'utf8');
const CODE = /```python\n([\s\S]*?)```/.exec(FEATURES_TEXT)[1];
const KEY = 'sk-page-test';

let fast; // the features reply at 1000 tokens/s
let slow; // 10 tokens/s: still streaming while the test looks
let locked; // requires an API key
let browser;

before(
  async () => {
    if (skip) return;
    // Three servers at once on a loaded 2-core machine: give each longer than the usual 30 s to come up.
    const timeoutMs = 90_000;
    [fast, slow, locked, browser] = await Promise.all([
      startServer({ textFile: FEATURES, rate: 1000, timeoutMs }),
      startServer({ textFile: CORPUS, rate: 10, timeoutMs }),
      startServer({ textFile: FEATURES, rate: 1000, args: ['--api-key', KEY], timeoutMs }),
      launchBrowser(),
    ]);
  },
  { timeout: 120_000 },
);

after(async () => {
  await browser?.close();
  await Promise.all([fast?.stop(), slow?.stop(), locked?.stop()]);
});

/** openPage with nothing kept from an earlier test (the browser profile is shared by the whole file). */
async function freshPage(server = fast) {
  const { page, problems } = await openPage(browser.context, server);
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await page.waitForFunction(() => document.getElementById('model').value !== '', null, { timeout: 10_000 });
  return { page, problems };
}

/** The chat request bodies the page sends, as they go. */
function recordRequests(page) {
  const bodies = [];
  page.on('request', (request) => {
    if (request.url().endsWith('/v1/chat/completions')) bodies.push(request.postDataJSON());
  });
  return bodies;
}

/** No page errors, no console errors, no dialogs, no CSP violations. */
async function assertClean(page, problems) {
  assert.deepEqual(problems.errors, [], 'no page or console errors');
  assert.deepEqual(problems.dialogs, [], 'no dialogs');
  assert.deepEqual((await probe(page, 0)).violations, [], 'no CSP violations');
}

describe('the chat page', { skip, timeout: 120_000 }, () => {
  test('HEAD / is answered, and the favicon is served and linked', async () => {
    const head = await fetch(`${fast.url}/`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.match(head.headers.get('content-type'), /^text\/html/);
    assert.match(head.headers.get('content-security-policy'), /require-trusted-types-for 'script'/);
    assert.equal((await head.text()).length, 0, 'no body for HEAD');
    for (const path of ['/favicon.ico', '/static/favicon.svg']) {
      const icon = await fetch(`${fast.url}${path}`);
      assert.equal(icon.status, 200, path);
      assert.equal(icon.headers.get('content-type'), 'image/svg+xml', path);
      assert.match(await icon.text(), /^<svg /, path);
    }
    const { page, problems } = await freshPage();
    const linked = await page.evaluate(async () => {
      const link = document.querySelector('link[rel="icon"]');
      return (await fetch(link.href)).status;
    });
    assert.equal(linked, 200);
    await assertClean(page, problems);
    await page.close();
  });

  test('code is highlighted; messages and code blocks have working Copy buttons', async () => {
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: fast.url });
    const { page, problems } = await freshPage();
    const reply = await send(page, 'Show me code.');
    const end = await outcome(reply);
    assert.equal(end.status, 'finished', end.meta);
    const code = reply.locator('pre code.language-python');
    assert.equal(await code.textContent(), CODE, 'highlighting keeps every character');
    const classes = await code.evaluate((el) => Array.from(el.querySelectorAll('span'), (s) => s.className));
    for (const name of ['hljs-keyword', 'hljs-string', 'hljs-comment', 'hljs-title function_']) {
      assert.ok(classes.includes(name), `a ${name} span among ${classes.join(', ')}`);
    }
    // Highlighted tokens are coloured by the style sheet (keyword and plain text differ).
    const colours = await code.evaluate((el) => [
      getComputedStyle(el.querySelector('.hljs-keyword')).color,
      getComputedStyle(el).color,
    ]);
    assert.notEqual(colours[0], colours[1]);

    const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
    await reply.locator('button.copy-code').click();
    assert.equal(await clipboard(), CODE, 'the code block, exactly');
    await page.waitForFunction(() => document.querySelector('button.copy-code.copied') !== null);
    await reply.locator('.actions .copy').click();
    assert.equal(await clipboard(), FEATURES_TEXT, 'the whole reply, as the Markdown it came as');
    const question = page.locator('.turn.user').first();
    await question.locator('.actions .copy').click();
    assert.equal(await clipboard(), 'Show me code.');
    await assertClean(page, problems);
    await page.close();
  });

  test('TTFT and tokens/s show while the reply streams, not only at the end', async () => {
    const { page, problems } = await freshPage(slow);
    const reply = await send(page, 'Stream slowly.');
    const meta = reply.locator('.meta');
    await page.waitForFunction(
      (el) => /tokens\/s/.test(el.querySelector('.meta').textContent),
      await reply.elementHandle(),
      { timeout: 10_000 },
    );
    const first = await meta.textContent();
    assert.match(first, /^TTFT \d+ ms · [\d.]+ tokens\/s · \d+ tokens$/);
    assert.ok(await reply.evaluate((el) => el.classList.contains('streaming')), 'still streaming');
    await sleep(800);
    const later = await meta.textContent();
    const count = (text) => Number(/(\d+) tokens$/.exec(text)[1]);
    assert.ok(count(later) > count(first), `the count moves: ${first} → ${later}`);
    // Esc stops the reply, as Stop does.
    await page.keyboard.press('Escape');
    const end = await outcome(reply);
    assert.equal(end.status, 'stopped', end.meta);
    assert.match(end.meta, /^Stopped · TTFT \d+ ms · [\d.]+ tokens\/s · \d+ tokens · [\d.]+ s total$/);
    await assertClean(page, problems);
    await page.close();
  });

  test('conversations are kept in the browser: list, open again, new chat, delete', async () => {
    const { page, problems } = await freshPage();
    const titles = () => page.locator('#conversations .open').allTextContents();
    assert.deepEqual(await titles(), []);
    const first = await outcome(await send(page, 'First conversation'));
    assert.equal(first.status, 'finished', first.meta);
    assert.deepEqual(await titles(), ['First conversation']);
    await page.click('#new-chat');
    assert.equal(await page.locator('#conversation .turn').count(), 0, 'a new chat starts empty');
    const second = await outcome(await send(page, 'Second conversation'));
    assert.equal(
      second.status,
      'finished',
      `${second.meta} ${await page.locator('#conversation').innerHTML()}`,
    );
    assert.deepEqual(await titles(), ['Second conversation', 'First conversation']);

    // A new tab (or a reload) lists both; opening one draws it again, Markdown, highlighting and all.
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    assert.deepEqual(await titles(), ['Second conversation', 'First conversation']);
    await page.locator('#conversations .open', { hasText: 'First conversation' }).click();
    assert.deepEqual(await page.locator('.turn.user .body').allTextContents(), ['First conversation']);
    const restored = page.locator('.turn.assistant').first();
    assert.equal(await restored.locator('h1').textContent(), 'A reply with code and a wide table');
    assert.ok((await restored.locator('pre code span.hljs-keyword').count()) > 0);
    assert.match(await restored.locator('.meta').textContent(), /tokens · [\d.]+ s total$/);
    assert.ok(await restored.evaluate((el) => el.classList.contains('finished')));
    assert.equal(
      await page.locator('#conversations .open[aria-current="true"]').textContent(),
      'First conversation',
    );

    // Delete the open one: it leaves the list and the page starts a new chat; the deletion is kept.
    await page.click('#conversations li:has-text("First conversation") .delete');
    assert.deepEqual(await titles(), ['Second conversation']);
    assert.equal(await page.locator('#conversation .turn').count(), 0);
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    assert.deepEqual(await titles(), ['Second conversation']);
    await assertClean(page, problems);
    await page.close();
  });

  test('leaving a chat while it streams stops the reply and keeps it in its own chat', async () => {
    const { page, problems } = await freshPage(slow);
    const reply = await send(page, 'Left mid-stream');
    await page.waitForFunction(
      (el) => el.querySelector('.body').textContent.length > 0,
      await reply.elementHandle(),
    );
    await page.click('#new-chat');
    assert.equal(await page.locator('#conversation .turn').count(), 0);
    await page.waitForFunction(() => document.getElementById('send').disabled === false);
    await page.locator('#conversations .open', { hasText: 'Left mid-stream' }).click();
    const kept = page.locator('.turn.assistant').first();
    assert.ok(
      await kept.evaluate((el) => el.classList.contains('stopped')),
      await kept.getAttribute('class'),
    );
    assert.ok((await kept.locator('.body').textContent()).length > 0, 'the text shown so far is kept');
    assert.equal(await page.locator('.turn').count(), 2, 'and nothing leaked into the new chat');
    await page.click('#new-chat');
    assert.equal(await page.locator('.turn').count(), 0);
    await assertClean(page, problems);
    await page.close();
  });

  test('settings: model from /v1/models, system prompt, temperature and max tokens are sent and kept', async () => {
    const { page, problems } = await freshPage();
    const bodies = recordRequests(page);
    const served = (await (await fetch(`${fast.url}/v1/models`)).json()).data.map((m) => m.id);
    await changeSettings(page, async () => {
      const options = await page.locator('#model option').allTextContents();
      assert.deepEqual(options, served);
      await page.fill('#system-prompt', 'You are terse.');
      await page.fill('#temperature', '0.3');
      await page.fill('#max-tokens', '5');
    });
    const reply = await send(page, 'Hello');
    const end = await outcome(reply);
    // The server honoured max_tokens: the reply stopped at 5 tokens, and says why.
    assert.equal(end.status, 'finished');
    assert.match(end.meta, /^finish_reason: length · .*5 tokens/);
    assert.deepEqual(bodies.at(-1).messages, [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hello' },
    ]);
    assert.equal(bodies.at(-1).temperature, 0.3);
    assert.equal(bodies.at(-1).max_tokens, 5);
    assert.equal(bodies.at(-1).model, served[0]);
    assert.equal(await page.locator('#model-name').textContent(), served[0], 'the header names the model');

    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    await changeSettings(page, async () => {
      assert.equal(await page.inputValue('#system-prompt'), 'You are terse.');
      assert.equal(await page.inputValue('#temperature'), '0.3');
      assert.equal(await page.inputValue('#max-tokens'), '5');
      // Cleared fields mean "the server's default": they leave the request.
      await page.fill('#system-prompt', '');
      await page.fill('#temperature', '');
      await page.fill('#max-tokens', '');
    });
    await outcome(await send(page, 'Again'));
    assert.deepEqual(bodies.at(-1).messages, [{ role: 'user', content: 'Again' }]);
    assert.equal('temperature' in bodies.at(-1), false);
    assert.equal('max_tokens' in bodies.at(-1), false);
    await assertClean(page, problems);
    await page.close();
  });

  test('a server that requires an API key asks for it, and the page works once it is given', async () => {
    const page = await browser.context.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`${locked.url}/`);
    // /v1/models answered 401: the settings open on the key field, saying why.
    const dialog = page.locator('#settings');
    await dialog.waitFor();
    assert.equal(await page.locator('#api-key').isVisible(), true);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'api-key');
    assert.match(await page.locator('#settings-note').textContent(), /requires an API key/);

    // Closed without a key, a send gets the 401 on its turn and the key field again.
    await page.click('#close-settings');
    const refused = await send(page, 'Hi');
    const end = await outcome(refused);
    assert.equal(end.status, 'error');
    assert.match(end.meta, /^Error: 401/);
    await dialog.waitFor();
    assert.match(await page.locator('#settings-note').textContent(), /requires an API key/);

    await page.fill('#api-key', 'wrong');
    await page.waitForFunction(() => /refused/.test(document.getElementById('settings-note').textContent));
    await page.fill('#api-key', KEY);
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    await page.click('#close-settings');
    await page.click('.turn.assistant .actions .regenerate');
    const answer = page.locator('.turn.assistant').first();
    assert.equal((await outcome(answer)).status, 'finished');
    assert.equal(await answer.locator('h1').count(), 1);
    // The key is kept in this browser: a new tab needs no prompt.
    const again = await browser.context.newPage();
    await again.goto(`${locked.url}/`);
    await again.waitForFunction(() => document.getElementById('model').value !== '');
    assert.equal(await again.locator('#settings').isVisible(), false);
    assert.deepEqual(errors, []);
    await again.evaluate(() => localStorage.clear());
    await Promise.all([page.close(), again.close()]);
  });

  test('regenerate the last answer, and edit and resend the last question', async () => {
    const { page, problems } = await freshPage();
    const bodies = recordRequests(page);
    await outcome(await send(page, 'One'));
    await outcome(await send(page, 'Two'));
    // Only the last answer can be regenerated, only the last question edited.
    assert.deepEqual(await page.locator('.actions .regenerate:visible').count(), 1);
    assert.deepEqual(await page.locator('.actions .edit:visible').count(), 1);

    await page.locator('.turn.assistant').last().locator('.regenerate').click();
    await outcome(page.locator('.turn.assistant').nth(1));
    assert.equal(await page.locator('.turn.assistant').count(), 2, 'replaced, not added');
    const roles = (body) => body.messages.map((m) => `${m.role}:${m.content.slice(0, 3)}`);
    assert.deepEqual(roles(bodies.at(-1)), ['user:One', 'assistant:# A', 'user:Two']);

    await page.locator('.turn.user').last().locator('.edit').click();
    const box = page.locator('.turn.user .edit-box');
    assert.equal(await box.inputValue(), 'Two');
    await box.fill('Two, edited');
    await box.press('Enter');
    await outcome(page.locator('.turn.assistant').nth(1));
    assert.deepEqual(await page.locator('.turn.user .body').allTextContents(), ['One', 'Two, edited']);
    assert.equal(await page.locator('.turn.assistant').count(), 2);
    assert.deepEqual(roles(bodies.at(-1)), ['user:One', 'assistant:# A', 'user:Two']);
    assert.equal(bodies.at(-1).messages.at(-1).content, 'Two, edited');
    // What is kept is what is shown.
    const kept = await page.evaluate(() => {
      const [{ id }] = JSON.parse(localStorage.getItem('tokenrelay.index'));
      return JSON.parse(localStorage.getItem(`tokenrelay.chat.${id}`)).map((m) => m.role + ':' + m.content);
    });
    assert.equal(kept.length, 4);
    assert.equal(kept[2], 'user:Two, edited');

    // Escape cancels an edit and leaves the question as it was.
    await page.locator('.turn.user').last().locator('.edit').click();
    await page.locator('.turn.user .edit-box').press('Escape');
    assert.equal(await page.locator('.turn.user .body').last().textContent(), 'Two, edited');
    await assertClean(page, problems);
    await page.close();
  });

  test('keyboard: Enter sends, the settings open and close from the keyboard, focus is visible', async () => {
    const { page, problems } = await freshPage();
    await page.focus('#prompt');
    await page.keyboard.type('Typed');
    await page.keyboard.press('Enter');
    const reply = page.locator('.turn.assistant').first();
    assert.equal((await outcome(reply)).status, 'finished');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'prompt', 'focus back in the box');

    await page.focus('#open-settings');
    await page.keyboard.press('Enter');
    await page.locator('#settings').waitFor();
    assert.equal(await page.evaluate(() => document.activeElement.id), 'model');
    await page.keyboard.press('Escape');
    await page.locator('#settings').waitFor({ state: 'hidden' });
    assert.equal(await page.evaluate(() => document.activeElement.id), 'open-settings', 'focus returns');
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert.notEqual(outline, 'none', 'the focused button shows it');
    await assertClean(page, problems);
    await page.close();
  });

  test('layout at 1280 and 390 px, light and dark: one-row header, wide tables scroll in their block', async () => {
    const { page, problems } = await freshPage();
    await outcome(await send(page, 'Show me a table.'));
    const shots = [];
    for (const scheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const width of [1280, 390]) {
        await page.setViewportSize({ width, height: width === 390 ? 844 : 800 });
        const layout = await page.evaluate(() => {
          const header = document.querySelector('header');
          const boxes = Array.from(header.children)
            .filter((el) => !el.hidden)
            .map((el) => el.getBoundingClientRect());
          const table = document.querySelector('.turn.assistant table');
          const box = table.getBoundingClientRect();
          return {
            headerHeight: header.getBoundingClientRect().height,
            // One row: some horizontal line crosses every item of the header.
            rows: Math.max(...boxes.map((b) => b.top)) < Math.min(...boxes.map((b) => b.bottom)) ? 1 : 2,
            pageScrolls: document.documentElement.scrollWidth > window.innerWidth,
            tableRight: box.right,
            tableScrolls: table.scrollWidth > table.clientWidth,
            background: getComputedStyle(document.body).backgroundColor,
          };
        });
        assert.ok(layout.headerHeight < 60, `${width}px: header ${layout.headerHeight}px high`);
        assert.equal(layout.rows, 1, `${width}px: the header is one row`);
        assert.equal(layout.pageScrolls, false, `${width}px: the page itself never scrolls sideways`);
        assert.ok(layout.tableRight <= width, `${width}px: the table ends inside the window`);
        if (width === 390) assert.ok(layout.tableScrolls, '390px: the wide table scrolls inside its block');
        const dark = layout.background === 'rgb(15, 17, 21)';
        assert.equal(dark, scheme === 'dark', `${scheme}: background ${layout.background}`);
        shots.push(await screenshot(page, `page-${width}-${scheme}.png`));
      }
    }
    // At 390 px the conversation list is a drawer, closed until the menu button opens it.
    assert.equal(await page.locator('#history').isVisible(), false);
    await page.click('#toggle-history');
    assert.equal(await page.locator('#history').isVisible(), true);
    shots.push(await screenshot(page, 'page-390-dark-conversations.png'));
    await page.click('#toggle-history');
    await page.click('#open-settings');
    const fields = await page.evaluate(() =>
      Array.from(document.querySelectorAll('#settings, #settings :is(input, select, textarea)'), (el) => {
        const box = el.getBoundingClientRect();
        return { id: el.id, left: box.left, right: box.right };
      }),
    );
    const [dialog, ...inside] = fields;
    assert.ok(dialog.left >= 0 && dialog.right <= 390, 'the settings fit the window');
    for (const { id, left, right } of inside.filter((field) => field.right > 0)) {
      assert.ok(left >= dialog.left && right <= dialog.right, `#${id} inside the dialog (${left}..${right})`);
    }
    shots.push(await screenshot(page, 'page-390-dark-settings.png'));
    await page.keyboard.press('Escape');
    console.log(`screenshots: ${shots.join(' ')}`);
    await assertClean(page, problems);
    await page.close();
  });
});
