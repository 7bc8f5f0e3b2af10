#!/usr/bin/env node
// Streaming Markdown, side by side in one run (issue 32 §3): tokenrelay's MarkdownRenderer (the npm package),
// Streamdown (React, as an AI SDK app renders a message) and streaming-markdown, each fed the same reply a
// few tokens per animation frame in headless Chromium (Debian's, through playwright-core; frames unthrottled,
// so the run takes the renderers' time, not 60 Hz). Two numbers per renderer from a Chromium trace of the run:
//
//   scripting     time inside JavaScript on the page's main thread (function calls, timers, animation frame
//                 callbacks, microtasks, GC during them), less the style and layout they forced
//   main thread   every task the main thread ran: scripting + style + layout + paint + the frame's own work,
//                 what a user feels as jank
//
// and their ratios, the cost of the last tenth of the tokens against the first (flat per token is ≤ 2×).
// The `driver` row is the driver alone (the text goes nowhere): its frames, timers and marks are in every
// row, so each renderer's own work is its row less the driver's ("own" columns, and the ratios on them).
// Workloads: `reply`, a 10,000-token reply (prose, lists, tables, code blocks: benchmarks/render/reply.js),
// and `open-code`, a reply whose code block of 58,000 characters never closes (streamdown#574).
//
//   node benchmarks/render/peers.js [--workloads reply,open-code] [--renderers driver,tokenrelay,streamdown,streaming-markdown]
//                                   (also plain-lines: the browser's floor, see peers_page.js)
//                                   [--tokens 10000] [--code-chars 58000] [--per-frame 4] [--runs 1] [--follow]

import { build } from 'esbuild';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    workloads: { type: 'string', default: 'reply,open-code' },
    renderers: { type: 'string', default: 'driver,tokenrelay,streamdown,streaming-markdown' },
    tokens: { type: 'string', default: '10000' },
    'code-chars': { type: 'string', default: '58000' },
    'per-frame': { type: 'string', default: '4' },
    // The open code block: tokens per frame (a 58k block is ~19k tokens; Streamdown takes seconds a frame).
    'code-per-frame': { type: 'string', default: '40' },
    runs: { type: 'string', default: '1' },
    chromium: { type: 'string', default: process.env.TOKENRELAY_CHROMIUM ?? '/usr/bin/chromium' },
    // Instead of the trace: V8's sampling profile of each renderer's run, its top functions by self time.
    profile: { type: 'boolean', default: false },
    // Also print where each renderer's main thread went (the top-level events in its tasks, by name).
    breakdown: { type: 'boolean', default: false },
    // The view kept at the reply's end as it grows (a chat that follows the stream), instead of at its top.
    follow: { type: 'boolean', default: false },
  },
});

// Events that are JavaScript running (DevTools' "Scripting"), and those that are rendering work.
const SCRIPT = new Set([
  'FunctionCall',
  'EvaluateScript',
  'v8.evaluateModule',
  'TimerFire',
  'FireAnimationFrame',
  'RunMicrotasks',
  'v8.callFunction',
  'v8.run',
  'EventDispatch',
]);
const RENDERING = new Set([
  'UpdateLayoutTree',
  'Layout',
  'PrePaint',
  'Paint',
  'Layerize',
  'UpdateLayerTree',
  'Commit',
]);
const TASK = new Set(['ThreadControllerImpl::RunTask', 'RunTask']);

/** Sorted, merged [from, to) intervals. */
function union(intervals) {
  const sorted = intervals.filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0]);
  const out = [];
  for (const [a, b] of sorted) {
    const last = out.at(-1);
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/** Total length of merged intervals `u` inside [from, to). */
function within(u, from, to) {
  let sum = 0;
  for (const [a, b] of u) sum += Math.max(0, Math.min(b, to) - Math.max(a, from));
  return sum;
}

/** The intersection of two merged interval lists. */
function intersect(u, v) {
  const out = [];
  for (let i = 0, j = 0; i < u.length && j < v.length;) {
    const a = Math.max(u[i][0], v[j][0]);
    const b = Math.min(u[i][1], v[j][1]);
    if (b > a) out.push([a, b]);
    if (u[i][1] < v[j][1]) i++;
    else j++;
  }
  return out;
}

async function readTrace(cdp, handle) {
  const chunks = [];
  for (;;) {
    const { data, eof, base64Encoded } = await cdp.send('IO.read', { handle, size: 1 << 22 });
    chunks.push(Buffer.from(data, base64Encoded ? 'base64' : 'utf8'));
    if (eof) break;
  }
  await cdp.send('IO.close', { handle });
  const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  return Array.isArray(parsed) ? parsed : parsed.traceEvents;
}

/** Scripting and main-thread ms per tenth of the run, from the trace. */
function analyse(events) {
  const marks = new Map();
  for (const e of events)
    if (e.cat?.includes('blink.user_timing') && /^tenth-|^done$/.test(e.name)) marks.set(e.name, e);
  const first = marks.get('tenth-0');
  if (!first) throw new Error('no marks in the trace');
  const { pid, tid } = first;
  const mine = events.filter(
    (e) => e.pid === pid && e.tid === tid && e.ph === 'X' && typeof e.dur === 'number',
  );
  const span = (e) => [e.ts, e.ts + e.dur];
  const tasks = union(mine.filter((e) => TASK.has(e.name)).map(span));
  const scripts = union(mine.filter((e) => SCRIPT.has(e.name)).map(span));
  const forced = intersect(scripts, union(mine.filter((e) => RENDERING.has(e.name)).map(span)));
  const at = (name) => marks.get(name)?.ts;
  const bounds = Array.from({ length: 11 }, (_, k) => at(`tenth-${k}`));
  bounds[10] = at('done') ?? bounds[10];
  const tenths = [];
  for (let k = 0; k < 10; k++) {
    const [from, to] = [bounds[k], bounds[k + 1]];
    tenths.push({
      main: within(tasks, from, to) / 1000,
      scripting: (within(scripts, from, to) - within(forced, from, to)) / 1000,
    });
  }
  const total = (key) => tenths.reduce((sum, t) => sum + t[key], 0);
  // Where the main thread's time went: the events directly inside its tasks, by name.
  const where = (from, to) => {
    const inside = new Map();
    const tops = mine
      .filter((e) => !TASK.has(e.name) && e.ts >= from && e.ts < to)
      .sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    let end = -1;
    for (const e of tops) {
      if (e.ts < end) continue; // nested in the previous top-level event
      end = e.ts + e.dur;
      inside.set(e.name, (inside.get(e.name) ?? 0) + e.dur / 1000);
    }
    return [...inside].sort((a, b) => b[1] - a[1]).slice(0, 8);
  };
  return {
    breakdown: where(bounds[0], bounds[10]),
    firstTenth: where(bounds[0], bounds[1]),
    lastTenth: where(bounds[9], bounds[10]),
    main: total('main'),
    scripting: total('scripting'),
    wall: (bounds[10] - bounds[0]) / 1000,
    flatMain: tenths[9].main / tenths[0].main,
    flatScripting: tenths[9].scripting / tenths[0].scripting,
    tenths,
  };
}

async function main() {
  const out = mkdtempSync(join(tmpdir(), 'tokenrelay-peers-'));
  await build({
    entryPoints: [join(HERE, 'peers_page.js')],
    bundle: true,
    minify: !args.profile,
    format: 'esm',
    outfile: join(out, 'page.js'),
    define: { 'process.env.NODE_ENV': '"production"' },
    loader: { '.css': 'empty' },
    logLevel: 'error',
  });
  const files = {
    '/': [
      'text/html',
      '<!doctype html><meta charset="utf-8"><div id="reply"></div><script type="module" src="/page.js"></script>',
    ],
    '/page.js': ['text/javascript', readFileSync(join(out, 'page.js'))],
  };
  const server = createServer((request, response) => {
    const file = files[new URL(request.url, 'http://x').pathname];
    if (!file) return response.writeHead(404).end();
    response.writeHead(200, { 'Content-Type': `${file[0]}; charset=utf-8` }).end(file[1]);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const browser = await chromium.launch({
    executablePath: args.chromium,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-frame-rate-limit',
      '--disable-gpu-vsync',
    ],
  });
  const version = browser.version();
  const renderers = args.renderers.split(',');
  const perFrame = Number(args['per-frame']);
  const sizes = { reply: Number(args.tokens), 'open-code': Number(args['code-chars']) };
  const results = {};
  try {
    for (const workload of args.workloads.split(',')) {
      results[workload] = {};
      // Rounds of one run per renderer, so that a change in the machine's load falls on every renderer alike.
      const runsOf = Object.fromEntries(renderers.map((name) => [name, []]));
      for (let r = 0; r < Number(args.runs); r++) {
        for (const name of renderers) {
          const runs = runsOf[name];
          const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
          await page.goto(`http://127.0.0.1:${server.address().port}/`);
          await page.waitForFunction(() => window.bench?.ready);
          // A short run first, so that no renderer is measured while the JIT warms up.
          const frames = workload === 'open-code' ? Number(args['code-per-frame']) : perFrame;
          await page.evaluate(
            ([n, w, f, k]) => window.bench.run(n, w, 300, f, k),
            [name, workload, frames, args.follow],
          );
          const cdp = await page.context().newCDPSession(page);
          if (args.profile) {
            await profile(cdp, page, [name, workload, sizes[workload], frames, args.follow]);
            await page.close();
            continue;
          }
          const done = new Promise((resolve) => cdp.once('Tracing.tracingComplete', resolve));
          await cdp.send('Tracing.start', {
            transferMode: 'ReturnAsStream',
            traceConfig: {
              recordMode: 'recordContinuously',
              includedCategories: [
                'devtools.timeline',
                'disabled-by-default-devtools.timeline',
                'toplevel',
                'blink.user_timing',
                'v8.execute',
              ],
            },
          });
          const sizesShown = await page.evaluate(
            ([n, w, s, f, k]) => window.bench.run(n, w, s, f, k),
            [name, workload, sizes[workload], frames, args.follow],
          );
          await cdp.send('Tracing.end');
          const events = await readTrace(cdp, (await done).stream);
          runs.push({ ...analyse(events), ...sizesShown, perFrame: frames });
          await page.close();
        }
      }
      // The run with the least main-thread time: the one least disturbed by the rest of the machine.
      for (const [name, runs] of Object.entries(runsOf))
        if (runs.length > 0) results[workload][name] = runs.sort((a, b) => a.main - b.main)[0];
      report({ [workload]: results[workload] });
    }
  } finally {
    await browser.close();
    server.close();
    rmSync(out, { recursive: true, force: true });
  }
  console.log(`(Chromium ${version})`);
}

/** A sampling profile of one run: the functions with the most self time. */
async function profile(cdp, page, runArgs) {
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  await page.evaluate(([n, w, s, f, k]) => window.bench.run(n, w, s, f, k), runArgs);
  const { profile: data } = await cdp.send('Profiler.stop');
  const self = new Map();
  const byId = new Map(data.nodes.map((node) => [node.id, node]));
  const dt = new Map();
  data.samples.forEach((id, i) => dt.set(id, (dt.get(id) ?? 0) + (data.timeDeltas[i] ?? 0)));
  for (const [id, us] of dt) {
    const { functionName, lineNumber } = byId.get(id).callFrame;
    const key = `${functionName || '(anonymous)'}:${lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + us);
  }
  // Inclusive time: each sample counted once for every function on its stack.
  const parent = new Map();
  for (const node of data.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const inclusive = new Map();
  for (const [id, us] of dt) {
    const seen = new Set();
    for (let at = id; at !== undefined; at = parent.get(at)) {
      const { functionName, lineNumber } = byId.get(at).callFrame;
      seen.add(`${functionName || '(anonymous)'}:${lineNumber + 1}`);
    }
    for (const key of seen) inclusive.set(key, (inclusive.get(key) ?? 0) + us);
  }
  if (process.env.INCLUSIVE) {
    console.log(`\ninclusive time of ${runArgs[0]}:`);
    for (const [key, us] of [...inclusive]
      .sort((a, b) => b[1] - a[1])
      .slice(0, Number(process.env.INCLUSIVE)))
      console.log(`  ${(us / 1000).toFixed(1).padStart(8)}  ${key}`);
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(`\nprofile of ${runArgs[0]} on ${runArgs[1]} (self time, ms of ${(total / 1000).toFixed(0)}):`);
  for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 30)))
    console.log(`  ${(us / 1000).toFixed(1).padStart(8)}  ${key}`);
}

function report(results) {
  if (args.profile) return;
  for (const [workload, rows] of Object.entries(results)) {
    const any = Object.values(rows)[0];
    const driver = rows.driver ?? null;
    const own = (r, key) => (driver === null ? null : r[key] - driver[key]);
    const ms = (value) => (value === null ? '-' : value.toFixed(0));
    console.log(
      `\n${workload}: ${any.tokens} tokens, ${any.characters} characters, ${any.perFrame} tokens per frame (ms, from a trace)`,
    );
    console.log(
      `${''.padEnd(20)}${'scripting'.padStart(11)}${'main thread'.padStart(13)}${'own script'.padStart(12)}` +
        `${'own main'.padStart(10)}${'wall'.padStart(9)}${'last/first tenth (script, main)'.padStart(34)}`,
    );
    for (const [name, r] of Object.entries(rows)) {
      const mine = name !== 'driver';
      console.log(
        `${name.padEnd(20)}${r.scripting.toFixed(0).padStart(11)}${r.main.toFixed(0).padStart(13)}` +
          `${(mine ? ms(own(r, 'scripting')) : '').padStart(12)}${(mine ? ms(own(r, 'main')) : '').padStart(10)}` +
          `${r.wall.toFixed(0).padStart(9)}${`${r.flatScripting.toFixed(2)}x, ${r.flatMain.toFixed(2)}x`.padStart(34)}`,
      );
      if (args.breakdown)
        for (const key of ['breakdown', 'firstTenth', 'lastTenth'])
          console.log(`    ${key}: ${r[key].map(([event, t]) => `${event} ${t.toFixed(0)}`).join(', ')}`);
    }
    const us = rows.tokenrelay;
    if (!us) continue;
    for (const [name, r] of Object.entries(rows)) {
      if (name === 'tokenrelay' || name === 'driver') continue;
      // Own work at or below zero is within the driver's spread from run to run: no ratio to give.
      const ratio = (key, of) =>
        of(r, key) > 0 && of(us, key) > 0
          ? (of(r, key) / of(us, key)).toFixed(2)
          : 'n/a (within the driver spread) ';
      const whole = (row, key) => row[key];
      let line = `tokenrelay vs ${name}: whole rows ${ratio('scripting', whole)}x less scripting, ${ratio('main', whole)}x less main thread`;
      if (driver !== null)
        line += `; own work ${ratio('scripting', own)}x less scripting, ${ratio('main', own)}x less main thread`;
      console.log(`${line} (above 1: tokenrelay does less)`);
    }
  }
}

await main();
