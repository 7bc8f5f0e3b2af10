// A JSON reply in the real page (issue 20 §4): the JSON setting sends response_format, the replay engine
// streams a JSON text through SmolLM2's tokenizer, and Chromium draws it as a tree that only grows (no
// frame ever changes or removes what an earlier frame showed), ends equal to JSON.parse of the text, copies
// as the JSON text, comes back as a tree from the kept conversation, and a reply cut by max_tokens is shown
// as cut, never as complete. Under the page's strict CSP, with no violation.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
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
const REPLY = join(FIXTURES, 'reply.json');
const REPLY_TEXT = readFileSync(REPLY, 'utf8');
const SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

let server;
let browser;

before(
  async () => {
    if (skip) return;
    [server, browser] = await Promise.all([
      startServer({ textFile: REPLY, rate: 300, timeoutMs: 60_000 }),
      launchBrowser(),
    ]);
  },
  { timeout: 90_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The value a JSON tree shows, read back from its DOM (runs in the page). */
function treeValue(root) {
  function read(el) {
    const kind = el.className.split(' ')[0];
    if (kind === 'json-object')
      return Object.fromEntries(
        Array.from(el.children, (li) => [li.children[0].textContent, read(li.children[1])]),
      );
    if (kind === 'json-array') return Array.from(el.children, (li) => read(li.children[0]));
    if (kind === 'json-string') return el.textContent;
    if (kind === 'json-number') return Number(el.textContent);
    if (kind === 'json-boolean') return el.textContent === 'true';
    return null;
  }
  const top = root.querySelector('.json-tree > *');
  return top === null ? undefined : read(top);
}

async function freshPage() {
  const { page, problems } = await openPage(browser.context, server);
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await page.waitForFunction(() => document.getElementById('model').value !== '', null, { timeout: 10_000 });
  const bodies = [];
  page.on('request', (request) => {
    if (request.url().endsWith('/v1/chat/completions')) bodies.push(request.postDataJSON());
  });
  return { page, problems, bodies };
}

describe('a JSON reply as a tree', { skip }, () => {
  test('the setting sends response_format; the tree only grows and ends as JSON.parse of the text', async () => {
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    const { page, problems, bodies } = await freshPage();
    await changeSettings(page, async () => {
      assert.equal(await page.isChecked('#json'), false, 'JSON is off by default');
      assert.equal(await page.locator('#json-schema-row').isHidden(), true);
      await page.check('#json');
      await page.locator('#json-schema-row').waitFor();
    });
    const reply = await send(page, 'Describe Zürich as JSON.');
    const end = await outcome(reply);
    assert.equal(end.status, 'finished', end.meta);
    assert.deepEqual(bodies.at(-1).response_format, { type: 'json_object' });
    assert.deepEqual(await reply.evaluate(treeValue), JSON.parse(REPLY_TEXT));
    assert.equal(await reply.locator('.json-tree.complete').count(), 1);
    assert.equal(await reply.locator('.json-tree .open').count(), 0);
    assert.equal(await reply.locator('.json-raw, .json-note').count(), 0, 'no raw syntax, no note');

    // Every frame's text is a prefix of the next: nothing shown ever changed, moved or went away.
    const { texts, violations } = await probe(page, 0);
    assert.ok(texts.length >= 10, `the tree grew over many frames (${texts.length})`);
    for (let k = 1; k < texts.length; k++)
      assert.ok(texts[k].startsWith(texts[k - 1]), `frame ${k} kept what frame ${k - 1} showed`);
    assert.deepEqual(violations, []);

    await reply.locator('.actions .copy').click();
    assert.equal(
      await page.evaluate(() => navigator.clipboard.readText()),
      REPLY_TEXT,
      'Copy gives the JSON',
    );
    await screenshot(page, 'json-tree.png');

    // The kept conversation draws the same tree again.
    await page.reload();
    await page.waitForFunction(() => document.getElementById('model').value !== '');
    await page.locator('#conversations button.open').first().click();
    const kept = page.locator('#conversation .turn.assistant').first();
    await kept.locator('.json-tree.complete').waitFor();
    assert.deepEqual(await kept.evaluate(treeValue), JSON.parse(REPLY_TEXT));
    assert.deepEqual(problems.errors, []);
    await page.close();
  });

  test('a schema is sent as json_schema, and a schema that is not JSON is refused before sending', async () => {
    const { page, problems, bodies } = await freshPage();
    await changeSettings(page, async () => {
      await page.check('#json');
      await page.fill('#json-schema', '{"type": ');
      assert.match(await page.locator('#json-schema-note').textContent(), /not JSON/);
      await page.fill('#json-schema', JSON.stringify(SCHEMA));
      assert.equal(await page.locator('#json-schema-note').textContent(), '');
    });
    await outcome(await send(page, 'As JSON, please.'));
    assert.deepEqual(bodies.at(-1).response_format, {
      type: 'json_schema',
      json_schema: { name: 'reply', schema: SCHEMA, strict: true },
    });
    assert.deepEqual(problems.errors, []);
    await page.close();
  });

  test('a reply cut by max_tokens is shown as cut, not as complete', async () => {
    const { page, problems } = await freshPage();
    await changeSettings(page, async () => {
      await page.check('#json');
      await page.fill('#max-tokens', '30');
    });
    const reply = await send(page, 'Describe Zürich as JSON.');
    const end = await outcome(reply);
    assert.match(end.meta, /^finish_reason: length/);
    assert.equal(await reply.locator('.json-tree.truncated').count(), 1);
    assert.equal(await reply.locator('.json-tree.complete').count(), 0);
    assert.ok((await reply.locator('.json-tree .open').count()) >= 1, 'what never closed is marked open');
    assert.match(await reply.locator('.json-note').textContent(), /^Cut: /);
    const shown = await reply.evaluate(treeValue);
    assert.equal(shown.city, 'Zürich', 'what arrived is shown');
    const keys = Object.keys(shown);
    assert.deepEqual(
      keys,
      Object.keys(JSON.parse(REPLY_TEXT)).slice(0, keys.length),
      'a prefix of the reply',
    );
    assert.ok(keys.length < Object.keys(JSON.parse(REPLY_TEXT)).length, 'and not all of it');
    await screenshot(page, 'json-tree-cut.png');
    assert.deepEqual((await probe(page, 0)).violations, []);
    assert.deepEqual(problems.errors, []);
    await page.close();
  });
});
