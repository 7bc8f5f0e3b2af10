// The page shows a reasoning model's thinking apart from its answer (issue 31), in Debian's Chromium against
// `tokenrelay serve --engine replay --reasoning-parser qwen3` replaying a <think> reply: a "Thinking" section
// above the answer, open while the model thinks, folded once the answer starts, with its duration and token
// count; the answer holds no reasoning and no tag; a reply cut while thinking is marked cut.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  FIXTURES,
  changeSettings,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  send,
  startServer,
} from './harness.js';

const skip = missingPrerequisite() ?? false;
let server;
let browser;

before(
  async () => {
    if (skip) return;
    [server, browser] = await Promise.all([
      startServer({
        textFile: join(FIXTURES, 'reasoning.md'),
        rate: 40,
        args: ['--reasoning-parser', 'qwen3'],
        timeoutMs: 90_000,
      }),
      launchBrowser(),
    ]);
  },
  { timeout: 120_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
});

describe('reasoning on the page', { skip }, () => {
  test('thinking streams above the answer, folds when the answer starts, and is never in it', async () => {
    const { page, problems } = await openPage(browser.context, server);
    const reply = await send(page, 'Capital of France?');
    const thinking = reply.locator('details.thinking');
    await thinking.waitFor({ timeout: 10_000 });
    assert.equal(await thinking.evaluate((el) => el.open), true); // open while it thinks
    const { status } = await outcome(reply);
    assert.equal(status, 'finished');
    assert.equal(await thinking.evaluate((el) => el.open), false); // folded once the answer started
    const thought = await reply.locator('.thinking-text').textContent();
    assert.match(thought, /Hmm, the user asks about \*\*Paris\*\*\. 🤔 विचार करें/); // plain text, not Markdown
    assert.match(await thinking.locator('summary').textContent(), /^Thought for \d+\.\d s · \d+ tokens$/);
    const answer = await reply.locator('.body').textContent();
    assert.equal(answer.trim(), 'The capital of France is Paris 🇫🇷.');
    assert.doesNotMatch(answer, /think|Hmm/);
    assert.deepEqual(problems.errors, []);
    await page.close();
  });

  test('a reply cut while thinking is marked cut, with no answer made up', async () => {
    const { page, problems } = await openPage(browser.context, server);
    await changeSettings(page, async () => {
      await page.fill('#max-tokens', '6');
    });
    const reply = await send(page, 'Capital of France?');
    await outcome(reply);
    const thinking = reply.locator('details.thinking');
    assert.equal(await thinking.evaluate((el) => el.classList.contains('cut')), true);
    assert.match(await thinking.locator('summary').textContent(), /^Thinking cut \(length\)/);
    assert.equal((await reply.locator('.body').textContent()).trim(), '');
    assert.deepEqual(problems.errors, []);
    await page.close();
  });
});
