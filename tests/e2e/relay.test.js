// The relay lanes in the real page, in Chromium, against the real server (replay engine, whose steps are
// timed like a model's): the chat page's "relay" toggle asks for step times and draws, under the reply just
// received, the lanes from the model's step to the painted frame; off, it asks for nothing and draws
// nothing. The doctor page's chat mode traces a real reply with its model lane; its probe says it has none.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  CORPUS,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  screenshot,
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
      startServer({ textFile: CORPUS, rate: 100, args: ['--default-max-tokens', '40'], timeoutMs: 90_000 }),
      launchBrowser(),
    ]);
  },
  { timeout: 120_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The chat request bodies the page sends. */
function recordRequests(page) {
  const bodies = [];
  page.on('request', (request) => {
    if (request.url().endsWith('/v1/chat/completions')) bodies.push(request.postDataJSON());
  });
  return bodies;
}

describe('the chat page relay toggle', { skip }, () => {
  test('on: step times are asked for and the reply shows every lane, the model first', async () => {
    const { page, problems } = await openPage(browser.context, server);
    const bodies = recordRequests(page);
    await page.click('#relay');
    assert.equal(await page.getAttribute('#relay', 'aria-pressed'), 'true');
    const reply = await send(page, 'Tell me about tea');
    assert.equal((await outcome(reply)).status, 'finished');
    await reply.locator('figure.relay svg').waitFor({ timeout: 10_000 });
    assert.equal(bodies.at(-1).stream_options.include_step_times, true);
    const rows = await reply.locator('figure.relay svg text[data-row]').allTextContents();
    assert.deepEqual(
      rows.map((row) => row.split(' · ')[0]),
      ['model step', 'server send', 'network arrival', 'parsed', 'to the renderer', 'painted'],
    );
    assert.match(rows[0], /^model step · step max \d+ ms$/); // the engine's own step times
    for (const row of rows.slice(1)) assert.match(row, / · held max \d+ ms$/);
    const lines = await reply.locator('figure.relay svg polyline').count();
    const bars = await reply.locator('figure.relay svg line.step').count();
    assert.ok(lines > 5 && bars === lines, `${lines} events, ${bars} model steps`);
    // The x positions of one event's line go forward from the model's step to the painted frame.
    const points = await reply.locator('figure.relay svg polyline').first().getAttribute('points');
    const xs = points.split(' ').map((p) => Number(p.split(',')[0]));
    assert.equal(xs.length, 6);
    for (let i = 1; i < xs.length; i++) assert.ok(xs[i] >= xs[i - 1] - 0.5, points);
    const caption = await reply.locator('figure.relay figcaption').textContent();
    assert.match(
      caption,
      /^relay · held max: server \d+ ms · network \d+ ms · parse \d+ ms · render \d+ ms · paint \d+ ms$/,
    );
    await screenshot(page, 'relay-lanes.png');
    assert.deepEqual(problems.errors, []);
    await page.close();
  });

  test('off: nothing is asked for and nothing is drawn; the choice is kept', async () => {
    const { page, problems } = await openPage(browser.context, server);
    const bodies = recordRequests(page);
    // The profile kept the toggle on from the previous test.
    assert.equal(await page.getAttribute('#relay', 'aria-pressed'), 'true');
    await page.click('#relay');
    const reply = await send(page, 'Tell me about tea');
    assert.equal((await outcome(reply)).status, 'finished');
    assert.equal(bodies.at(-1).stream_options.include_step_times, undefined);
    assert.equal(await reply.locator('figure.relay').count(), 0);
    assert.deepEqual(problems.errors, []);
    await page.close();
  });
});

describe('the doctor page', { skip }, () => {
  test('chat mode traces a real reply from the model step; the probe says it has no model', async () => {
    const page = await browser.context.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`${server.url}/doctor?run=1&mode=chat&max_tokens=24`);
    const chat = await page.evaluate(() => window.tokenrelayDoctor);
    assert.equal(chat.mode, 'chat');
    assert.ok(chat.events.length > 5);
    for (const e of chat.events) {
      assert.equal(e.source, 'engine');
      assert.ok(e.stepStart < e.step && e.step <= e.send + 0.01, JSON.stringify(e));
      assert.ok(e.send <= e.arrive + 0.01 && e.arrive <= e.parse && e.render <= e.paint, JSON.stringify(e));
    }
    assert.ok(chat.lanes.server.max_ms >= 0 && chat.lanes.network.max_ms >= 0);
    assert.match(chat.svg, /model step · step max \d+ ms/);
    assert.match(await page.textContent('#state'), /^OK · chat reply · \d+ events$/);

    await page.goto(`${server.url}/doctor?run=1&events=10&cadence_ms=20&seed=1`);
    const probeRun = await page.evaluate(() => window.tokenrelayDoctor);
    assert.equal(probeRun.mode, 'probe');
    assert.equal(probeRun.lanes.server, undefined);
    assert.ok(probeRun.lanes.network !== undefined);
    assert.match(probeRun.svg, /model step · none: the probe has no model/);
    assert.deepEqual(errors, []);
    await page.close();
  });
});
