// How a reply ends, seen from both sides: Stop cancels the generation on the server (its metrics say so),
// a request the server refuses shows its error, and a stream cut by a dying server shows as truncated,
// never as a finished answer.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  CORPUS,
  changeSettings,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  send,
  sleep,
  startServer,
} from './harness.js';

const skip = missingPrerequisite() ?? false;

let slow; // 5 tokens/s: a reply that is still streaming when Stop is pressed
let doomed; // killed mid-stream by the truncation test
let browser;

before(async () => {
  if (skip) return;
  [slow, doomed, browser] = await Promise.all([
    startServer({ textFile: CORPUS, rate: 5 }),
    startServer({ textFile: CORPUS, rate: 20 }),
    launchBrowser(),
  ]);
});

after(async () => {
  await browser?.close();
  await Promise.all([slow?.stop(), doomed?.stop()]);
});

/** Wait until the reply shows some text. */
function firstText(reply) {
  return reply.locator('.body').evaluate(
    (body) =>
      new Promise((resolve) => {
        const check = () => (body.textContent !== '' ? resolve() : requestAnimationFrame(check));
        check();
      }),
  );
}

/** Poll `condition` every 50 ms for up to `ms`; returns the milliseconds it took, or null. */
async function within(ms, condition) {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (await condition()) return Date.now() - start;
    await sleep(50);
  }
  return null;
}

test(
  'Stop cancels the generation on the server and the reply shows as stopped',
  { skip, timeout: 60_000 },
  async () => {
    const { page, problems } = await openPage(browser.context, slow);
    const cancelledBefore = await slow.metric('tokenrelay_cancellations_total');
    const reply = await send(page, 'Start, then be stopped.');
    await firstText(reply);
    assert.equal((await slow.health()).active, 1, 'the generation is running');
    assert.equal(await page.isEnabled('#stop'), true);
    await page.click('#stop');

    const took = await within(2000, async () => {
      const [cancelled, health] = await Promise.all([
        slow.metric('tokenrelay_cancellations_total'),
        slow.health(),
      ]);
      return cancelled === cancelledBefore + 1 && health.active === 0;
    });
    assert.notEqual(took, null, 'within 2 s of Stop: one more cancellation counted and nothing active');

    const end = await outcome(reply);
    assert.equal(end.status, 'stopped', end.meta);
    assert.match(end.meta, /^Stopped · /);
    assert.equal(await page.isEnabled('#send'), true);
    assert.equal(await page.isDisabled('#stop'), true);
    // Nothing more arrives (at 5 tokens/s, 600 ms would bring three), and what came stays shown.
    const shown = await reply.locator('.body').textContent();
    await sleep(600);
    assert.equal(await reply.locator('.body').textContent(), shown);
    assert.ok(
      shown.length > 0 && shown.length < 200,
      `a part of the reply is shown: ${JSON.stringify(shown)}`,
    );
    assert.equal(await slow.metric('tokenrelay_cancellations_total'), cancelledBefore + 1);
    assert.deepEqual(problems.errors, []);
    await page.close();
  },
);

test('a request the server refuses shows its error', { skip, timeout: 60_000 }, async () => {
  const { page, problems } = await openPage(browser.context, slow);
  await changeSettings(page, () => page.fill('#max-tokens', '1000000'));
  const reply = await send(page, 'Hello?');
  const end = await outcome(reply);
  assert.equal(end.status, 'error', end.meta);
  assert.match(end.meta, /^Error: 400: max_tokens must be at most \d+/);
  assert.equal(await reply.locator('.meta').getAttribute('role'), 'alert');
  assert.equal(await reply.locator('.body').textContent(), '');
  // Chromium logs the failed request itself; nothing else may go wrong.
  assert.deepEqual(
    problems.errors.filter((e) => !e.includes('status of 400')),
    [],
  );
  await page.close();
});

test('a stream cut off by a dying server shows as truncated', { skip, timeout: 60_000 }, async () => {
  const { page, problems } = await openPage(browser.context, doomed);
  const reply = await send(page, 'Start, then lose the server.');
  await firstText(reply);
  await doomed.kill();
  const end = await outcome(reply);
  assert.equal(end.status, 'truncated', end.meta);
  assert.match(end.meta, /^Truncated: the stream ended before the reply was finished/);
  assert.equal(await reply.locator('.meta').getAttribute('role'), 'alert');
  assert.notEqual(await reply.locator('.body').textContent(), '', 'what came stays shown');
  // Only the broken connection itself may be logged.
  assert.deepEqual(
    problems.errors.filter((e) => !/ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_CONNECTION_RESET/.test(e)),
    [],
  );
  await page.close();
});
