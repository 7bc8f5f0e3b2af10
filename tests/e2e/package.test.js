// The npm package `tokenrelay` where users put it (issue 32 §2): `npm pack` of src/tokenrelay/web/lib, the
// tarball installed into a fresh app outside the repository (with React, the AI SDK and its own markdown-it,
// all from the npm registry or its cache), bundled with esbuild and with Vite, and driven in Debian's
// Chromium against `tokenrelay serve` (the replay engine): a plain page (esbuild's and Vite's builds), and a
// React app using the AI SDK's useChat with <Markdown>. The same entries under Node, and `tsc --noEmit` on a
// consumer of every export. One app, one server and one browser for the file.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { FIXTURES, ROOT, launchBrowser, missingPrerequisite, startServer } from './harness.js';
import { blockTree, markdownItTree } from './trees.js';

const run = promisify(execFile);
const STEP_MS = 180_000;
const REPLY = join(FIXTURES, 'package_reply.md');
const APP_SOURCES = join(FIXTURES, 'app');
const BIN = join(ROOT, 'node_modules', '.bin');
// The page's policy (server/page.py): the package must work under it, no inline code, Trusted Types on.
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'; " +
  "require-trusted-types-for 'script'; trusted-types 'none'";
// What the fresh app depends on besides the tarball, at the versions the project's lockfile installed (so
// npm finds them in its cache from `npm ci`).
const APP_DEPENDENCIES = [
  'react',
  'react-dom',
  '@types/react',
  'ai',
  '@ai-sdk/react',
  '@ai-sdk/openai-compatible',
  'zod',
];

const skip = missingPrerequisite() ?? false;
let work;
let app;
let tarball;
let server;
let browser;
let model;

const version = (name) =>
  JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')).version;

before(
  async () => {
    if (skip) return;
    work = mkdtempSync(join(tmpdir(), 'tokenrelay-npm-'));
    app = join(work, 'app');
    const serving = startServer({ textFile: REPLY, rate: 400, args: ['--default-max-tokens', '4096'] });
    const launching = launchBrowser();
    const packed = JSON.parse(
      (
        await run(
          'npm',
          ['pack', join(ROOT, 'src', 'tokenrelay', 'web', 'lib'), '--json', '--pack-destination', work],
          {
            timeout: STEP_MS,
          },
        )
      ).stdout,
    );
    tarball = { name: packed[0].filename, files: packed[0].files.map((f) => f.path).sort() };
    mkdirSync(app);
    const dependencies = { tokenrelay: `file:../${tarball.name}` };
    for (const name of APP_DEPENDENCIES) dependencies[name] = version(name);
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({ name: 'fresh-app', private: true, type: 'module', dependencies }, null, 2),
    );
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
      cwd: app,
      timeout: STEP_MS,
    });
    cpSync(APP_SOURCES, app, { recursive: true });
    const esbuild = (entry, ...flags) =>
      run(
        join(BIN, 'esbuild'),
        [entry, '--bundle', '--format=esm', '--platform=browser', `--outdir=dist`, ...flags],
        {
          cwd: app,
          timeout: STEP_MS,
        },
      );
    await Promise.all([
      run(join(BIN, 'vite'), ['build'], { cwd: app, timeout: STEP_MS }),
      esbuild('plain.js'),
      esbuild('react.jsx', '--jsx=automatic', '--define:process.env.NODE_ENV="production"'),
    ]);
    [server, browser] = await Promise.all([serving, launching]);
    model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0].id;
  },
  { timeout: 400_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

/**
 * A tab on the server's origin whose /app/ is the bundled app (esbuild's, with `html` as every page), or
 * /app/vite/ Vite's build (`html` null), under the page's CSP; frames recorded.
 */
async function openApp(html) {
  const page = await browser.context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
  page.on('console', (message) => message.type() === 'error' && problems.push(`console: ${message.text()}`));
  await page.route(`${server.url}/app/**`, (route) => {
    const name = new URL(route.request().url()).pathname.slice('/app/'.length);
    const file = name.startsWith('vite/') ? join(app, 'dist-vite', name.slice(5)) : join(app, 'dist', name);
    const body = name.endsWith('.html') && html !== null ? html : readFileSync(file);
    const type = name.endsWith('.html') ? 'text/html; charset=utf-8' : 'text/javascript; charset=utf-8';
    return route.fulfill({
      status: 200,
      body,
      headers: { 'Content-Type': type, 'Content-Security-Policy': CSP },
    });
  });
  await page.addInitScript(() => {
    window.__frames = [];
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__violations.push(`${e.effectiveDirective} ${e.sample} ${e.sourceFile}:${e.lineNumber}`),
    );
    new MutationObserver(() => {
      const text = document.querySelector('#reply, .message.assistant .markdown, .direct')?.textContent;
      if (text !== undefined && text !== window.__frames.at(-1)) window.__frames.push(text);
    }).observe(document, { subtree: true, childList: true, characterData: true });
  });
  return { page, problems };
}

/** The checks every rendering of the reply must pass. */
async function checkRendering(page, selector, text, problems) {
  const expected = readFileSync(REPLY, 'utf8').replace(/\n$/, '');
  assert.equal(text.replace(/\n$/, ''), expected, 'the reply text arrived whole');
  assert.deepEqual(await page.locator(selector).evaluate(blockTree), markdownItTree(text));
  const frames = await page.evaluate(() => window.__frames);
  assert.ok(frames.length >= 10, `${frames.length} frames: the reply was drawn as it streamed`);
  for (const [i, frame] of frames.entries()) assert.ok(!frame.includes('\uFFFD'), `frame ${i} shows U+FFFD`);
  const final = await page.locator(selector).textContent();
  assert.ok(!final.includes('**'), 'no raw ** once the pairs closed');
  for (const sample of ['你好，世界。', '👩‍💻', '🏳️‍🌈', 'สวัสดีครับ', 'नमस्ते', '🦀'])
    assert.ok(final.includes(sample), sample);
  const links = await page
    .locator(`${selector} a`)
    .evaluateAll((as) => as.map((a) => a.getAttribute('href')));
  assert.deepEqual(links, ['https://example.com/docs'], 'the javascript: link lost its target');
  assert.equal(await page.locator(`${selector} script`).count(), 0);
  assert.ok((await page.locator(`${selector} table td`).count()) === 6, 'the table');
  assert.equal(await page.locator(`${selector} pre code.language-python`).count(), 1, 'the code block');
  // zod (the AI SDK's) probes whether `new Function("")` is allowed, and falls back when it is not: that one
  // report is the probe's, caught by zod; nothing else may be refused.
  const all = await page.evaluate(() => window.__violations);
  const violations = all.filter((v) => !v.startsWith('require-trusted-types-for Function|(\n) {\n\n})'));
  assert.deepEqual(violations, [], 'no CSP violations');
  const probe = "console: This document requires 'TrustedScript' assignment. The action has been blocked.";
  let probes = all.length - violations.length; // each also logs one console error
  assert.deepEqual(
    problems.filter((p) => !(p === probe && probes-- > 0)),
    [],
  );
}

test('npm pack: the package files and nothing else', { skip }, () => {
  assert.match(tarball.name, /^tokenrelay-\d+\.\d+\.\d+\.tgz$/);
  const names = tarball.files;
  for (const name of [
    'package.json',
    'README.md',
    'LICENSE',
    'sse.js',
    'sse.d.ts',
    'reply.js',
    'react.js',
    'markdown.js',
  ])
    assert.ok(names.includes(name), name);
  assert.ok(
    names.every((name) => /^[a-z_]+(\.d\.ts|\.js)$|^(package\.json|README\.md|LICENSE)$/.test(name)),
    String(names),
  );
  assert.ok(!names.includes('app.js') && !names.some((name) => name.includes('test')));
});

test(
  'a plain page: readReply and MarkdownRenderer over CRLF-cut SSE render what markdown-it renders',
  { skip, timeout: 120_000 },
  async () => {
    const { page, problems } = await openApp(
      '<!doctype html><meta charset="utf-8"><div id="reply"></div><script type="module" src="/app/plain.js"></script>',
    );
    await page.goto(`${server.url}/app/index.html`);
    await page.waitForFunction(() => window.ready === true);
    const result = await page.evaluate((m) => window.runPlain({ model: m }), model);
    assert.equal(result.end.type, 'finish', JSON.stringify(result.end));
    assert.equal(result.end.reason, 'stop');
    assert.ok(result.end.usage.outputTokens > 50);
    await checkRendering(page, '#reply', result.text, problems);
    await page.close();
  },
);

test('the same plain page bundled by Vite', { skip, timeout: 120_000 }, async () => {
  const { page, problems } = await openApp(null);
  await page.goto(`${server.url}/app/vite/vite.html`);
  await page.waitForFunction(() => window.ready === true);
  const result = await page.evaluate((m) => window.runPlain({ model: m }), model);
  assert.equal(result.end.type, 'finish', JSON.stringify(result.end));
  await checkRendering(page, '#reply', result.text, problems);
  await page.close();
});

test(
  'a React app: the AI SDK useChat with <Markdown> and smoothStream',
  { skip, timeout: 120_000 },
  async () => {
    const { page, problems } = await openApp(
      '<!doctype html><meta charset="utf-8"><div id="root"></div><script type="module" src="/app/react.js"></script>',
    );
    await page.goto(`${server.url}/app/index.html?model=${encodeURIComponent(model)}`);
    await page.click('#send');
    await page.waitForFunction(() => window.chat?.status === 'streaming', null, { timeout: 20_000 });
    await page.waitForFunction(() => window.chat?.status === 'ready' || window.chat?.error, null, {
      timeout: 60_000,
    });
    const chat = await page.evaluate(() => ({
      error: window.chat.error,
      text: window.chat.messages
        .at(-1)
        .parts.filter((p) => p.type === 'text')
        .map((p) => p.text)
        .join(''),
    }));
    assert.equal(chat.error, null);
    // <Markdown> draws at the next animation frame after React's last render.
    await page.evaluate(
      () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))),
    );
    await checkRendering(page, '.message.assistant .markdown', chat.text, problems);
    await page.close();
  },
);

test('a React app: useReply over fetch with <Markdown>', { skip, timeout: 120_000 }, async () => {
  const { page, problems } = await openApp(
    '<!doctype html><meta charset="utf-8"><div id="root"></div><script type="module" src="/app/react.js"></script>',
  );
  await page.goto(`${server.url}/app/index.html?model=${encodeURIComponent(model)}`);
  await page.click('#direct');
  await page.waitForFunction(() => window.direct?.status === 'streaming', null, { timeout: 20_000 });
  await page.waitForFunction(() => ['finished', 'error'].includes(window.direct?.status), null, {
    timeout: 60_000,
  });
  const direct = await page.evaluate(() => window.direct);
  assert.equal(direct.error, null);
  assert.equal(direct.status, 'finished');
  assert.equal(direct.finish.reason, 'stop');
  assert.ok(direct.finish.usage.outputTokens > 50);
  await page.evaluate(
    () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))),
  );
  await checkRendering(page, '.direct', direct.text, problems);
  await page.close();
});

test(
  'the same entries under Node, reading the stream from the server',
  { skip, timeout: 60_000 },
  async () => {
    const { stdout } = await run(process.execPath, ['node_check.mjs', server.url, model], {
      cwd: app,
      timeout: 60_000,
    });
    const out = JSON.parse(stdout);
    assert.equal(out.text.replace(/\n$/, ''), readFileSync(REPLY, 'utf8').replace(/\n$/, ''));
    assert.equal(out.end.type, 'finish');
    assert.equal(out.sseLast, '[DONE]');
    assert.ok(out.sseEvents > 50);
    assert.deepEqual(out.snapshots, [
      '{"city":"Par"}',
      '{"city":"Paris","n":[1]}',
      '{"city":"Paris","n":[1,2]}',
    ]);
    assert.deepEqual(out.final, { city: 'Paris', n: [1, 2] });
    assert.equal(out.smoothed.join(''), '👩‍💻 สวัสดี');
    assert.ok(
      out.smoothed.every((piece) => !/^\u200d/.test(piece)),
      'no grapheme cut',
    );
    assert.ok(out.lanes.length > 0);
    assert.equal(out.noContainer, 'TypeError');
    assert.deepEqual(out.safe, [true, false]);
  },
);

test(
  'tsc --noEmit: a consumer of every export type-checks against the installed package',
  { skip, timeout: 60_000 },
  async () => {
    for (const name of ['consumer.tsx', 'tsconfig.json'])
      cpSync(join(ROOT, 'tests', 'web', 'consumer', name), join(app, name));
    const { stdout } = await run(join(BIN, 'tsc'), ['-p', 'tsconfig.json'], {
      cwd: app,
      timeout: 60_000,
    }).catch((error) => {
      assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`);
    });
    assert.equal(stdout, '');
  },
);
