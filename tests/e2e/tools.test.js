// Tool calls in the real page (issue 21 §4): with tools set, the replay engine streams a reply that calls one
// (the generic format's markup, through SmolLM2's tokenizer); Chromium draws the call as a card whose
// arguments grow, pretty-printed, never as raw syntax; the user gives the result (the page runs no tool), it
// goes back as a `tool` message with the call's id, and the conversation comes back whole after a reload.
// Under the page's strict CSP, with no violation.

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
  probe,
  screenshot,
  send,
  startServer,
} from './harness.js';

const skip = missingPrerequisite() ?? false;
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const ARGUMENTS = { city: '東京', unit: 'C', days: [1, 2, 3] };

let server;
let browser;

before(
  async () => {
    if (skip) return;
    [server, browser] = await Promise.all([
      startServer({ textFile: join(FIXTURES, 'tool_call.txt'), rate: 60, timeoutMs: 60_000 }),
      launchBrowser(),
    ]);
  },
  { timeout: 90_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
});

describe('a tool call as a card', { skip }, () => {
  test('its arguments stream pretty-printed; the result the user gives goes back as a tool message', async () => {
    const { page, problems } = await openPage(browser.context, server);
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    const bodies = [];
    page.on('request', (request) => {
      if (request.url().endsWith('/v1/chat/completions')) bodies.push(request.postDataJSON());
    });
    await changeSettings(page, async () => {
      await page.fill('#tools', '[{');
      assert.match(await page.locator('#tools-note').textContent(), /not JSON/);
      await page.fill('#tools', JSON.stringify(TOOLS));
      assert.equal(await page.locator('#tools-note').textContent(), '');
    });
    // Record what the card shows at every frame while the reply streams.
    await page.evaluate(() => {
      window.__cards = [];
      const record = () => {
        const pre = document.querySelector('#conversation .tool-arguments');
        if (pre !== null && window.__cards.at(-1) !== pre.textContent) window.__cards.push(pre.textContent);
        requestAnimationFrame(record);
      };
      requestAnimationFrame(record);
    });
    const reply = await send(page, 'Weather in Tokyo?');
    const end = await outcome(reply);
    assert.equal(end.status, 'finished', end.meta);
    assert.deepEqual(bodies.at(-1).tools, TOOLS);
    assert.equal((await reply.locator('.body').textContent()).trim(), 'Let me look that up.');
    const card = reply.locator('.tool-call');
    assert.equal(await card.locator('.tool-name').textContent(), 'get_weather');
    assert.equal(await card.locator('.tool-arguments').textContent(), JSON.stringify(ARGUMENTS, null, 2));

    const shown = await page.evaluate(() => window.__cards);
    assert.ok(shown.length >= 4, `the arguments grew over several frames (${shown.length})`);
    for (const text of shown) {
      if (text === '') continue;
      const value = JSON.parse(text); // every frame pretty JSON, no raw syntax
      for (const [key, part] of Object.entries(value)) {
        if (typeof part === 'string') assert.ok(ARGUMENTS[key].startsWith(part), `${key}: ${part}`);
        else if (Array.isArray(part)) assert.deepEqual(part, ARGUMENTS[key].slice(0, part.length));
        else assert.deepEqual(part, ARGUMENTS[key]);
      }
    }
    await screenshot(page, 'tool-call.png');

    await card.locator('.tool-result textarea').fill('21 °C, clear');
    await card.locator('.tool-result button').click();
    const tool = page.locator('#conversation .turn.tool');
    await tool.waitFor();
    assert.equal(await tool.locator('.body').textContent(), '21 °C, clear');
    const second = page.locator('#conversation .turn.assistant').nth(1);
    await second.waitFor();
    await outcome(second);
    const [, assistant, result] = bodies.at(-1).messages;
    assert.equal(assistant.role, 'assistant');
    const [call] = assistant.tool_calls;
    assert.match(call.id, /^call_/);
    assert.deepEqual(JSON.parse(call.function.arguments), ARGUMENTS);
    assert.deepEqual(result, { role: 'tool', tool_call_id: call.id, content: '21 °C, clear' });

    // The kept conversation: the card, the result, the next reply.
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    await page.locator('#conversations button.open').first().click();
    await page.locator('#conversation .turn.tool').waitFor();
    assert.equal(await page.locator('#conversation .tool-call').count(), 2);
    assert.equal(
      await page.locator('#conversation .tool-arguments').first().textContent(),
      JSON.stringify(ARGUMENTS, null, 2),
    );
    const { violations } = await probe(page, 0);
    assert.deepEqual(violations, []);
    assert.deepEqual(problems.errors, []);
    await page.close();
  });
});
