// A hostile reply (fixtures/hostile.md: raw HTML, script tags, javascript:, data: and vbscript: links in
// several spellings, a tracking image) streamed by the real server into the real page: nothing executes,
// nothing but the page's own element and attribute lists reaches the DOM, and the CSP never has to step in.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ALLOWED_ATTRS, ALLOWED_TAGS } from '../../src/tokenrelay/web/lib/markdown_nodes.js';
import {
  FIXTURES,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  probe,
  send,
  sleep,
  startServer,
} from './harness.js';

const skip = missingPrerequisite() ?? false;

let server;
let browser;

before(async () => {
  if (skip) return;
  [server, browser] = await Promise.all([
    startServer({ textFile: join(FIXTURES, 'hostile.md'), rate: 1000 }),
    launchBrowser(),
  ]);
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('the page is served under the strict CSP', { skip, timeout: 60_000 }, async () => {
  const response = await fetch(`${server.url}/`);
  const csp = response.headers.get('content-security-policy') ?? '';
  for (const directive of ["script-src 'self'", "object-src 'none'", "require-trusted-types-for 'script'"]) {
    assert.ok(csp.includes(directive), `CSP has ${directive}: ${csp}`);
  }
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
});

test('a hostile reply executes nothing and injects no markup', { skip, timeout: 60_000 }, async () => {
  const { page, problems } = await openPage(browser.context, server);
  const tabs = browser.context.pages().length;
  const reply = await send(page, 'Say something dangerous.');
  const end = await outcome(reply);
  assert.equal(end.status, 'finished', end.meta);
  const body = reply.locator('.body');

  // Raw HTML is shown as the text it is.
  const text = await body.textContent();
  for (const raw of [
    '<img src=x onerror=alert(1)>',
    '<script>alert(2)</script>',
    '<script>alert(4)</script>',
  ]) {
    assert.ok(text.includes(raw), `the reply shows ${raw} as text`);
  }

  // Only the renderer's elements and attributes, and no event handler anywhere in the reply.
  const elements = await body.evaluate((el) =>
    Array.from(el.querySelectorAll('*'), (node) => ({
      tag: node.localName,
      className: node.className,
      attrs: Array.from(node.attributes, (attr) => attr.name),
    })),
  );
  for (const { tag, className, attrs } of elements) {
    if (tag === 'div') continue; // the view's own block groups
    if (tag === 'button' && className === 'copy-code') continue; // the page's own Copy button on code
    assert.ok(ALLOWED_TAGS.has(tag), `<${tag}> in the reply`);
    for (const name of attrs) assert.ok(ALLOWED_ATTRS.has(name), `${name}= on <${tag}> in the reply`);
  }
  assert.equal(await body.locator('img, script, iframe, object, embed, [onerror], [onmouseover]').count(), 0);

  // Exactly the fixture's safe targets became links (the image as a link to it, not an <img>); every
  // javascript:, data: and vbscript: target, however spelled, left only its text.
  const links = await body.evaluate((el) =>
    Array.from(el.querySelectorAll('a'), (a) => [a.textContent, a.protocol, a.getAttribute('href')]),
  );
  assert.deepEqual(links, [
    ['pixel', 'https:', 'https://example.invalid/track.png'],
    ['https link', 'https:', 'https://example.com/?q=1'],
    ['mail link', 'mailto:', 'mailto:someone@example.com'],
  ]);
  for (const name of ['javascript: link', 'mixed-case one', 'data: link', 'vbscript: link', 'raw anchor']) {
    assert.ok(text.includes(name), `"${name}" is still shown`);
  }

  // Poke at it as a person would: click what was a javascript: link, hover what was an onmouseover.
  await body.getByText('javascript: link').click();
  await body.getByText('bold?').hover();
  await sleep(300); // an <img onerror> would fire once its request failed
  const { violations } = await probe(page, 0);
  assert.deepEqual(problems.dialogs, [], 'no dialog opened');
  assert.deepEqual(violations, [], 'the CSP had nothing to block');
  assert.deepEqual(problems.errors, []);
  assert.equal(page.url(), `${server.url}/`, 'no navigation');
  assert.equal(browser.context.pages().length, tabs, 'no new tab');

  // The control: the same injection done by hand is caught, so the empty lists above mean something.
  const thrown = await page.evaluate(() => {
    const img = document.createElement('img');
    try {
      img.setAttribute('onerror', 'alert("control")');
    } catch (error) {
      return error.name;
    }
    img.src = 'x';
    document.body.append(img);
    return null;
  });
  await page.waitForFunction(() => window.__probe.violations.length > 0, null, { timeout: 5000 });
  assert.equal(thrown, 'TypeError', 'Trusted Types refuse a handler set from a string');
  assert.deepEqual(problems.dialogs, []);
  await page.close();
});
