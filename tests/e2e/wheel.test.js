// The built wheel serves a working page with no npm anywhere (issue 14): build the wheel (its build hook,
// hatch_build.py, copies the page's npm libraries into it), install it into a fresh venv, start that
// installation's server from a directory far from the checkout, and have Chromium get a rendered reply.
// The wheel and the sdist (built here too) carry the project's LICENSE (issue 25).
//
// The fresh venv gets the wheel with `pip install --no-deps --no-index`; its dependencies (FastAPI,
// uvicorn, the tokenizer) are the project venv's, reached through a .pth file placed after the venv's own
// site-packages, so the test needs no network and installs nothing twice. The project venv's editable
// install of tokenrelay is not on that path (its .pth is not read from there); the test checks that the
// tokenrelay that runs is the wheel's.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import {
  FIXTURES,
  PYTHON,
  ROOT,
  launchBrowser,
  missingPrerequisite,
  openPage,
  outcome,
  probe,
  send,
  startServer,
} from './harness.js';

const run = promisify(execFile);
const STEP_MS = 120_000; // no step may hang the suite

/** pip, quiet and offline: no look at PyPI for a newer pip (it can hang where the network is closed). */
function pip(python, args, env) {
  const argv = ['-m', 'pip', ...args, '-q', '--disable-pip-version-check', '--no-input'];
  return run(python, argv, { env, timeout: STEP_MS });
}
const skip = missingPrerequisite() ?? false;

let work;
let dist;
let server;
let browser;
let installed;

/** The environment for the installed server: no PYTHONPATH (it would put the checkout's src/ first). */
function cleanEnv() {
  const env = { ...process.env };
  delete env.PYTHONPATH;
  delete env.VIRTUAL_ENV;
  return env;
}

before(
  async () => {
    if (skip) return;
    work = mkdtempSync(join(tmpdir(), 'tokenrelay-wheel-'));
    dist = join(work, 'dist');
    const venv = join(work, 'venv');
    const python = join(venv, 'bin', 'python');
    const env = cleanEnv();
    // --no-build-isolation: hatchling from the project venv (the dev extra), no download of the backend.
    await Promise.all([
      pip(PYTHON, ['wheel', '--no-deps', '--no-build-isolation', '-w', dist, ROOT], env),
      run(PYTHON, ['-m', 'venv', venv], { env, timeout: STEP_MS }),
    ]);
    // The sdist, with the same backend (hatchling, from the dev extra).
    await run(PYTHON, ['-m', 'hatchling', 'build', '-t', 'sdist', '-d', dist], {
      cwd: ROOT,
      env,
      timeout: STEP_MS,
    });
    const wheel = readdirSync(dist).find((name) => name.endsWith('.whl'));
    await pip(python, ['install', '--no-deps', '--no-index', join(dist, wheel)], env);
    const paths = `import sysconfig; print(sysconfig.get_paths()['purelib'])`;
    const shared = (await run(PYTHON, ['-c', paths], { env })).stdout.trim();
    const own = (await run(python, ['-c', paths], { env })).stdout.trim();
    writeFileSync(join(own, 'zz-project-deps.pth'), `${shared}\n`);
    const where = (
      await run(python, ['-c', 'import tokenrelay; print(tokenrelay.__file__)'], { cwd: work, env })
    ).stdout.trim();
    installed = dirname(where);
    [server, browser] = await Promise.all([
      startServer({ textFile: join(FIXTURES, 'features.md'), rate: 1000, python, cwd: work, env }),
      launchBrowser(),
    ]);
  },
  { timeout: 240_000 },
);

after(async () => {
  await browser?.close();
  await server?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

test(
  'the wheel ships the page libraries with their licences, and no node_modules is in reach',
  { skip, timeout: 180_000 },
  () => {
    assert.ok(installed.startsWith(work), `tokenrelay runs from the fresh venv: ${installed}`);
    const vendor = join(installed, 'web', 'vendor');
    assert.deepEqual(readdirSync(vendor).sort(), [
      'highlight.min.mjs',
      'highlightjs-cdn-assets.LICENSE',
      'markdown-it.LICENSE',
      'markdown-it.esm.min.mjs',
    ]);
    for (let dir = installed; dir !== dirname(dir); dir = dirname(dir)) {
      assert.equal(existsSync(join(dir, 'node_modules')), false, `no node_modules in ${dir}`);
    }
  },
);

test('the wheel and the sdist carry the MIT LICENSE', { skip, timeout: 60_000 }, async () => {
  const licence = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
  assert.match(licence, /^MIT License\n\nCopyright \(c\) 2026 The tokenrelay authors\n/);
  const distInfo = readdirSync(dirname(installed)).find((name) => /^tokenrelay-.*\.dist-info$/.test(name));
  assert.ok(distInfo, 'the installed wheel has its .dist-info');
  const meta = join(dirname(installed), distInfo);
  assert.equal(readFileSync(join(meta, 'licenses', 'LICENSE'), 'utf8'), licence);
  const metadata = readFileSync(join(meta, 'METADATA'), 'utf8');
  assert.match(metadata, /^License-Expression: MIT$/m);
  assert.match(metadata, /^License-File: LICENSE$/m);
  const sdist = readdirSync(dist).find((name) => name.endsWith('.tar.gz'));
  assert.ok(sdist, `an sdist in ${readdirSync(dist)}`);
  const top = sdist.replace(/\.tar\.gz$/, '');
  const { stdout } = await run('tar', ['-xzOf', join(dist, sdist), `${top}/LICENSE`]);
  assert.equal(stdout, licence);
  const listing = (await run('tar', ['-tzf', join(dist, sdist)])).stdout.split('\n');
  for (const name of ['CHANGELOG.md', 'CONTRIBUTING.md', 'README.md']) {
    assert.ok(listing.includes(`${top}/${name}`), `${name} in the sdist`);
  }
});

test('the installed server serves a page that renders a reply', { skip, timeout: 180_000 }, async () => {
  for (const name of ['markdown-it.esm.min.mjs', 'highlight.min.mjs']) {
    const response = await fetch(`${server.url}/static/vendor/${name}`);
    assert.equal(response.status, 200, name);
    assert.match(response.headers.get('content-type'), /^text\/javascript/);
  }
  const { page, problems } = await openPage(browser.context, server);
  assert.equal(await page.isEnabled('#send'), true, 'Send is enabled: the Markdown library loaded');
  const reply = await send(page, 'Hello from the wheel');
  const end = await outcome(reply);
  assert.equal(end.status, 'finished', end.meta);
  assert.equal(await reply.locator('h1').textContent(), 'A reply with code and a wide table');
  assert.ok((await reply.locator('pre code span.hljs-keyword').count()) > 0, 'code highlighted');
  assert.equal(await reply.locator('table').count(), 1);
  assert.deepEqual((await probe(page, 0)).violations, []);
  assert.deepEqual(problems.errors, []);
  await page.close();
});
