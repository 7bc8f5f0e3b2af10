#!/usr/bin/env node
// Streamed JSON in Node: the page's PartialJSON (src/tokenrelay/web/lib/partial_json.js) side by side with
// @streamparser/json (incremental) and the Vercel AI SDK's parsePartialJson (re-parse), printing ratios.
//
//   node benchmarks/partial_json.js [--sizes 38,380] [--repeat 5]      (npm run bench:json)
//
// The reply has the shape of benchmarks/partial_json.py's (a catalogue: nested objects, arrays, strings from
// the multilingual corpus with quotes, backslashes and newlines, numbers of every shape, booleans, nulls),
// dumped with indent 2, at ~38 KB and ~380 KB, fed in 4-character chunks. After every chunk each contestant
// produces what a UI would draw:
//   - tokenrelay: feed(chunk), then read .value (the live snapshot, strings growing in it);
//   - @streamparser/json: JSONParser.write(chunk) with its default options (keepStack: every completed
//     value is put into its parent); the snapshot is the outermost container of the last onValue, so it
//     holds completed values only. A second row adds emitPartialValues (strings and numbers emitted while
//     they grow, as a UI that shows text as it arrives needs);
//   - ai (the Vercel AI SDK) parsePartialJson(textSoFar) per chunk, awaited as streamObject does: a
//     re-parse of the whole text, O(n²) per reply; at 380 KB every 100th prefix is timed and scaled (the rows
//     say so);
//   - JSON.parse of the whole text once: the floor.
// Every contestant must end with JSON.parse's value (asserted). CPU time of this process
// (process.cpuUsage), best of --repeat, rounds interleaved. Target: tokenrelay at least as fast as
// @streamparser/json (both rows).

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { isDeepStrictEqual } from 'node:util';
import { JSONParser } from '@streamparser/json';
import { parsePartialJson } from 'ai';
import { PartialJSON } from '../src/tokenrelay/web/lib/partial_json.js';

const CORPUS = new URL('../tests/data/multilingual.txt', import.meta.url);
const CHUNK = 4;

/** mulberry32, as tests/web/helpers.js: the same document on every run. */
function seeded(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function reply(kilobytes) {
  const random = seeded(1);
  const pick = (list) => list[Math.floor(random() * list.length)];
  const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  const lines = readFileSync(CORPUS, 'utf8')
    .split('\n')
    .filter((line) => line.length > 20);
  const colours = ['red', 'green', 'blue', 'ночь', '緑', 'naranja'];
  const product = (k) => ({
    id: `sku-${String(k).padStart(5, '0')}`,
    name: `${pick(lines).slice(0, 24).trim()} "${colours[k % colours.length]}"`,
    price: Math.round(random() * 50000) / 100,
    discount: pick([null, 0.1, 0.25, -1.5e-3]),
    in_stock: random() < 0.7,
    stock: int(0, 10000),
    rating: { average: Math.round(random() * 40 + 10) / 10, count: int(0, 2000000) },
    tags: [pick(['new', 'sale', 'eco']), pick(['café', '日本製']), pick(['a\\b', 'tab\there'])],
    description: `${pick(lines)}\n${pick(lines)}`,
    offers: Array.from({ length: int(0, 3) }, (_, j) => ({
      seller: `shop ${j} — «${pick(colours)}»`,
      price: int(100, 99999) / 100,
    })),
    dimensions: { w: int(1, 300), h: int(1, 300), unit: 'cm', scale: 1e-2 },
  });
  const doc = { query: 'lamps and tea', total: 0, page: 1, items: [], next: null };
  while (JSON.stringify(doc, null, 2).length < kilobytes * 1000)
    for (let j = 0; j < 10; j++) doc.items.push(product(doc.items.length));
  while (JSON.stringify(doc, null, 2).length > kilobytes * 1000) doc.items.pop();
  doc.total = doc.items.length;
  return JSON.stringify(doc, null, 2);
}

const cpu = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000; // ms
};

function tokenrelay(chunks) {
  const parser = new PartialJSON();
  let drawn = null;
  for (const chunk of chunks) {
    parser.feed(chunk);
    drawn = parser.value;
  }
  return parser.finish() ?? drawn;
}

function streamparser(chunks, options = {}) {
  const parser = new JSONParser(options);
  let root;
  parser.onValue = ({ value, stack, partial }) => {
    if (stack.length > 0) root = stack[0].value ?? root;
    else if (!partial) root = value;
  };
  let drawn;
  for (const chunk of chunks) {
    parser.write(chunk);
    drawn = root; // what a UI would draw now
  }
  if (!parser.isEnded) parser.end(); // it ends by itself after the top-level value
  return root ?? drawn;
}

async function vercel(chunks, stride) {
  let text = '';
  let drawn;
  for (let k = 0; k < chunks.length; k++) {
    text += chunks[k];
    if (stride === 1 || k % stride === stride >> 1) drawn = (await parsePartialJson(text)).value;
  }
  return stride === 1 ? drawn : (await parsePartialJson(text)).value;
}

async function bench(kilobytes, repeat) {
  const text = reply(kilobytes);
  const chunks = [];
  for (let i = 0; i < text.length; i += CHUNK) chunks.push(text.slice(i, i + CHUNK));
  const expected = JSON.parse(text);
  console.log(
    `\n== ${Math.round(text.length / 1000)} KB reply, ${chunks.length} chunks of ${CHUNK} characters ==`,
  );
  const stride = chunks.length > 20000 ? 100 : 1;
  const rows = [
    ['tokenrelay PartialJSON + .value', () => tokenrelay(chunks), 1, ''],
    ['@streamparser/json', () => streamparser(chunks), 1, '(completed values only)'],
    ['@streamparser/json emitPartialValues', () => streamparser(chunks, { emitPartialValues: true }), 1, ''],
    [
      'ai parsePartialJson re-parse',
      () => vercel(chunks, stride),
      stride,
      stride > 1 ? `(sampled 1 in ${stride})` : '',
    ],
    ['JSON.parse of the whole, once', () => JSON.parse(text), 1, '(no streaming)'],
  ];
  const times = rows.map(() => Infinity);
  for (let round = 0; round < repeat; round++) {
    for (const [k, [name, run, scale]] of rows.entries()) {
      if (scale > 1 && round >= 2) continue; // a sampled re-parse takes ~10 s a round: two are enough
      const start = cpu();
      const result = await run();
      times[k] = Math.min(times[k], (cpu() - start) * scale); // a sampled re-parse, scaled to every chunk
      if (round === 0 && !isDeepStrictEqual(result, expected))
        throw new Error(`${name} did not end with JSON.parse's value`);
    }
  }
  const ours = times[0];
  console.log(
    `  ${''.padEnd(38)} ${'total'.padStart(12)} ${'per chunk'.padStart(11)} ${'time / ours'.padStart(12)}`,
  );
  rows.forEach(([name, , , note], k) => {
    const perChunk = ((times[k] / chunks.length) * 1000).toFixed(2);
    const ratio = (times[k] / ours).toPrecision(3);
    console.log(
      `  ${name.padEnd(38)} ${times[k].toFixed(1).padStart(9)} ms ${perChunk.padStart(8)} µs ${ratio.padStart(11)}x ${note}`,
    );
  });
  const slowest = Math.min(times[1], times[2]);
  console.log(
    `  target: at least as fast as @streamparser/json (${(times[1] / ours).toFixed(2)}x, ` +
      `${(times[2] / ours).toFixed(2)}x with partial values): ${ours <= slowest ? 'met' : 'NOT met'}`,
  );
}

const { values } = parseArgs({
  options: { sizes: { type: 'string', default: '38,380' }, repeat: { type: 'string', default: '5' } },
});
for (const size of values.sizes.split(',')) await bench(Number(size), Number(values.repeat));
