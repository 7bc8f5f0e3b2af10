// End-to-end harness: the real tokenrelay server (replay engine) as a child process on a free loopback
// port, and Debian's Chromium driven by playwright-core. Nothing here downloads a browser: playwright-core
// has no browser of its own and is only ever pointed at /usr/bin/chromium.
//
// Missing prerequisites: under CI (the CI variable set) a missing Chromium, venv or node package fails the
// suite with a message that says what to install; on a developer machine without them the tests skip and
// say why (the Makefile's `system` step installs Chromium only as root).

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CHROMIUM = process.env.TOKENRELAY_CHROMIUM ?? '/usr/bin/chromium';
export const PYTHON = join(ROOT, '.venv', 'bin', 'python');
export const ARTIFACTS = join(ROOT, 'test-artifacts');
export const CORPUS = join(ROOT, 'tests', 'data', 'multilingual.txt');
export const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

// The flags the machine notes prescribe: without the background-networking ones Chromium keeps trying to
// reach Google's hosts, which this closed network refuses.
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Why the suite cannot run here, or null. Under CI this throws instead: CI installs all of it.
 * @returns {string | null}
 */
export function missingPrerequisite() {
  let reason = null;
  if (!existsSync(CHROMIUM)) {
    reason = `${CHROMIUM} not found (apt-get install -y chromium fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji)`;
  } else if (!existsSync(PYTHON)) {
    reason = `${PYTHON} not found (run \`make install\`)`;
  } else if (!existsSync(join(ROOT, 'node_modules', 'playwright-core'))) {
    reason = 'node_modules/playwright-core not found (run `npm ci`)';
  } else if (!existsSync(join(ROOT, 'node_modules', 'markdown-it', 'dist', 'browser'))) {
    reason = 'node_modules/markdown-it not found (run `npm ci`)';
  } else if (!existsSync(join(ROOT, 'node_modules', '@highlightjs', 'cdn-assets', 'es'))) {
    reason = 'node_modules/@highlightjs/cdn-assets not found (run `npm ci`)';
  }
  if (reason !== null && (process.env.CI ?? 'false') !== 'false')
    throw new Error(`end-to-end tests cannot run: ${reason}`);
  return reason;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const live = new Set();
// A crashed test run must not leave servers behind.
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

// uvicorn's line once its socket is bound; with --port 0 it names the port the system chose.
const LISTENING = /Uvicorn running on http:\/\/127\.0\.0\.1:(\d+)/;

/**
 * Start `tokenrelay serve --engine replay` on a port the system picks, and wait until it answers /health.
 *
 * --port 0 and reading the port from the server's own log, rather than probing for a free port first:
 * between a probe and the bind another process (another test run on this machine) can take the port, and
 * then /health would be answered by that process's server. `python`, `cwd` and `env` run another
 * installation (the wheel test's fresh venv) instead of the project's.
 * @param {{
 *   textFile: string, rate: number, args?: string[], timeoutMs?: number,
 *   python?: string, cwd?: string, env?: NodeJS.ProcessEnv,
 * }} options
 * @returns {Promise<Server>}
 */
export async function startServer({
  textFile,
  rate,
  args = [],
  timeoutMs = 30_000,
  python = PYTHON,
  cwd = ROOT,
  env = process.env,
}) {
  const argv = ['--engine', 'replay', '--text-file', textFile, '--rate', String(rate), ...args];
  return spawnServer(argv, { timeoutMs, python, cwd, env });
}

/**
 * Start `tokenrelay serve` over the embedded SmolLM2 model (llama.cpp), as startServer does the replay engine.
 * Loading the model and its start-up check take a few seconds, more on a busy machine.
 * @param {{ args?: string[], timeoutMs?: number }} options
 * @returns {Promise<Server>}
 */
export async function startModelServer({ args = [], timeoutMs = 120_000 } = {}) {
  return spawnServer(args, { timeoutMs, python: PYTHON, cwd: ROOT, env: process.env });
}

async function spawnServer(serveArgs, { timeoutMs, python, cwd, env }) {
  const argv = ['-m', 'tokenrelay', 'serve', ...serveArgs, '--port', '0', '--log-level', 'info'];
  const child = spawn(python, argv, { cwd, env, stdio: ['ignore', 'ignore', 'pipe'] });
  live.add(child);
  const server = new Server(child);
  const deadline = Date.now() + timeoutMs;
  while (server.port === null && server.running && Date.now() < deadline) await sleep(50);
  if (server.port !== null) {
    while (server.running && Date.now() < deadline) {
      try {
        if ((await fetch(`${server.url}/health`)).ok) return server;
      } catch {
        // Bound, but not serving yet.
      }
      await sleep(50);
    }
  }
  const why = server.running ? `did not answer within ${timeoutMs} ms` : 'exited before answering';
  await server.stop();
  throw new Error(`tokenrelay serve ${why}; stderr:\n${server.stderr}`);
}

export class Server {
  constructor(child) {
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', resolve));
    /** The port, once the server's log has named it; null before. */
    this.port = null;
    /** The last few kilobytes the server wrote to stderr, for failure messages. */
    this.stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-4000);
      this.port ??= Number(LISTENING.exec(this.stderr)?.[1] ?? '') || null;
    });
  }

  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  get running() {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Throws, with the server's stderr, if its process has ended. */
  assertRunning() {
    if (!this.running) {
      const status = this.child.exitCode ?? this.child.signalCode;
      throw new Error(`tokenrelay serve on ${this.url} exited (${status}); stderr:\n${this.stderr}`);
    }
  }

  /** /health as JSON. */
  async health() {
    return (await fetch(`${this.url}/health`)).json();
  }

  /** One sample of /metrics by name (no labels), or null when absent. */
  async metric(name) {
    const text = await (await fetch(`${this.url}/metrics`)).text();
    // A series with labels (every one has model="...") or without: the value is after the last space.
    const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
    return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
  }

  /** Kill at once, as a crash would: open connections are cut by the kernel, with no end of stream. */
  async kill() {
    this.child.kill('SIGKILL');
    await this.exited;
    live.delete(this.child);
  }

  /** SIGTERM (uvicorn shuts down gracefully), SIGKILL if that takes over 3 s. */
  async stop() {
    if (this.running) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
      await this.exited;
      clearTimeout(timer);
    }
    live.delete(this.child);
  }
}

/** Debian's Chromium with a fresh profile; close() also removes the profile. */
export async function launchBrowser() {
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'tokenrelay-e2e-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1000, height: 800 },
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// Runs in the page before its own scripts (page.addInitScript): records every CSP violation, and the text
// of every assistant reply after each DOM change. MutationObserver callbacks run at the microtask
// checkpoint right after the view's frame callback, so each record is what one frame left on screen.
function pageProbe() {
  window.__probe = { violations: [], replies: [] };
  document.addEventListener('securitypolicyviolation', (event) => {
    window.__probe.violations.push(`${event.effectiveDirective} blocked ${event.blockedURI} ${event.sample}`);
  });
  new MutationObserver(() => {
    const bodies = document.querySelectorAll('#conversation .turn.assistant .body');
    bodies.forEach((body, index) => {
      const records = (window.__probe.replies[index] ??= []);
      const text = body.textContent;
      if (records.length === 0 || records[records.length - 1] !== text) records.push(text);
    });
  }).observe(document, { subtree: true, childList: true, characterData: true });
}

/**
 * A new tab on the server's page, ready to send (the Markdown library and the model list have loaded).
 * `problems` collects page errors, console errors and dialogs; each test says which it expects.
 */
export async function openPage(context, server) {
  const page = await context.newPage();
  const problems = { errors: [], dialogs: [] };
  page.on('pageerror', (error) => problems.errors.push(`pageerror: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    problems.errors.push(`console: ${message.text()} (${message.location().url})`);
  });
  page.on('dialog', (dialog) => {
    problems.dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
  await page.addInitScript(pageProbe);
  server.assertRunning();
  await page.goto(`${server.url}/`);
  await page.waitForFunction(() => document.getElementById('model').value !== '', null, { timeout: 10_000 });
  return { page, problems };
}

/** Open the settings dialog, run `change` (it gets the page), and close it with Done. */
export async function changeSettings(page, change) {
  await page.click('#open-settings');
  await page.locator('#settings').waitFor();
  await change(page);
  await page.click('#close-settings');
}

/** Type a message and press Send; returns the new reply's locator. */
export async function send(page, text) {
  const before = await page.locator('#conversation .turn.assistant').count();
  await page.fill('#prompt', text);
  await page.click('#send');
  const reply = page.locator('#conversation .turn.assistant').nth(before);
  await reply.waitFor();
  return reply;
}

/** Wait for a reply to end (it loses the class `streaming`); returns its status class and its meta line. */
export async function outcome(reply, timeout = 20_000) {
  const handle = await reply.elementHandle();
  await reply.page().waitForFunction((el) => !el.classList.contains('streaming'), handle, { timeout });
  const classes = (await reply.getAttribute('class')).split(/\s+/);
  const status = ['finished', 'stopped', 'error', 'truncated'].find((name) => classes.includes(name));
  return { status, meta: await reply.locator('.meta').textContent() };
}

/** The probe's records for reply `index`, and the CSP violations so far. */
export async function probe(page, index) {
  return page.evaluate(
    (i) => ({ texts: window.__probe.replies[i] ?? [], violations: window.__probe.violations }),
    index,
  );
}

/** A screenshot under test-artifacts/ (gitignored); returns its path. */
export async function screenshot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, name);
  await page.screenshot({ path });
  return path;
}

export { sleep };
