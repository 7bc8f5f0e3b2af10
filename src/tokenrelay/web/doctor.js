// The doctor in the browser: runs tokenrelay's diagnostic stream here, through whatever proxies and CDN are
// really in front of this page, and records per event when it was sent (the server's schedule), when its
// bytes arrived (the fetch reader's chunk), when it was parsed, when its text was handed to the DOM and the
// animation frame in which it was painted. The recording goes to POST /v1/diagnostics/report, which judges
// it with the CLI's own code, so the verdicts, hops and fixes are the CLI's; the lanes are drawn here.
//
// Times are performance.now() milliseconds since the request. The server's send times are on its own clock:
// like the CLI, each send is shifted by the smallest transit of any event, so the fastest event crosses the
// network lane in zero time and every other event's network lane is how much longer it was held on the way.
//
// ?run=1&events=N&cadence_ms=C&seed=S runs at once and leaves the result in window.tokenrelayDoctor (a
// promise); `tokenrelay doctor URL --browser` calls window.tokenrelayDoctorRun(options) instead.

import { SSEParser } from './sse.js';
import { percentile } from './stats.js';

/** The hops after the server's write, each the gap between two of an event's timestamps. */
export const LANES = [
  ['network', 'send', 'arrive'],
  ['parse', 'arrive', 'parse'],
  ['render', 'parse', 'render'],
  ['paint', 'render', 'paint'],
];
const ROWS = ['send', 'arrive', 'parse', 'render', 'paint'];
const ROW_NAMES = {
  send: 'server send',
  arrive: 'network arrival',
  parse: 'parsed',
  render: 'to the DOM',
  paint: 'painted',
};
const SVG = 'http://www.w3.org/2000/svg';
const EOLS = { crlf: '\r\n', lf: '\n', cr: '\r' };

const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));

function streamId() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function base64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000)
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

/** Where each event's bytes end in the body: after its blank line (the opening comment is not an event). */
function eventEnds(body, eol) {
  const mark = new TextEncoder().encode(EOLS[eol].repeat(2));
  const ends = [];
  outer: for (let i = 0; i + mark.length <= body.length; i++) {
    for (let j = 0; j < mark.length; j++) if (body[i + j] !== mark[j]) continue outer;
    ends.push(i + mark.length);
    i += mark.length - 1;
  }
  return ends.slice(1); // the first blank line closes the opening comment
}

/** Per event: the server's send time of the write holding its last byte (server clock). */
function sendTimes(body, plan, schedule) {
  const ends = eventEnds(body, plan.eol);
  return ends.slice(0, plan.events).map((end) => {
    const write = schedule.writes.find(([, offset, size]) => offset <= end - 1 && end - 1 < offset + size);
    return write ? write[0] : null;
  });
}

/**
 * Run the probe and return {plan, events, lanes, report}.
 * @param {{events?: number, cadenceMs?: number, seed?: number|null, apiKey?: string, textTarget?: Element|null,
 *          onProgress?: (n: number) => void}} options
 */
export async function runDoctor({
  events = 60,
  cadenceMs = 50,
  seed = null,
  apiKey = '',
  textTarget = null,
  onProgress = () => {},
} = {}) {
  const plan = {
    stream: streamId(),
    seed: seed ?? Math.floor(Math.random() * 2 ** 31),
    events,
    cadence_ms: cadenceMs,
    eol: 'crlf',
  };
  const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
  const streamUrl = new URL('/v1/diagnostics/stream', location.href).href;
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const response = await fetch(streamUrl, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...auth },
    body: JSON.stringify(plan),
    cache: 'no-store',
  });
  const headersMs = now();
  if (!response.ok) throw new Error(`diagnostic stream: HTTP ${response.status}`);
  const chunks = [];
  const timed = new Map(); // event id -> {arrive, parse, render, paint}
  let schedule = null;
  let unpainted = [];
  let painting = null;
  const paintLoop = async () => {
    // The text handed to the DOM before this callback is painted in this frame.
    while (unpainted.length) {
      await frame();
      const at = now();
      for (const record of unpainted) record.paint = at;
      unpainted = [];
    }
    painting = null;
  };
  const parser = new SSEParser();
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const arrive = now();
    chunks.push([arrive, value]);
    const parsed = parser.feed(value);
    const parseAt = now();
    for (const event of parsed) {
      if (event.event === 'schedule') schedule = JSON.parse(event.data);
      if (event.event !== 'message' || event.data === '[DONE]') continue;
      const text = JSON.parse(event.data).choices[0].delta.content;
      const record = { arrive, parse: parseAt, render: null, paint: null };
      timed.set(Number(event.id), record);
      if (textTarget) textTarget.append(text);
      record.render = now();
      unpainted.push(record);
      painting ??= paintLoop();
    }
    onProgress(timed.size);
  }
  parser.close();
  await (painting ?? Promise.resolve());
  const body = new Uint8Array(chunks.reduce((n, [, c]) => n + c.length, 0));
  let offset = 0;
  for (const [, c] of chunks) body.set(c, (offset += c.length) - c.length);
  const sends = schedule ? sendTimes(body, plan, schedule) : [];
  const list = Array.from(timed, ([id, r]) => ({ id, send: sends[id] ?? null, ...r })).sort(
    (a, b) => a.id - b.id,
  );
  const shift = Math.min(...list.filter((e) => e.send !== null).map((e) => e.arrive - e.send));
  for (const e of list) if (e.send !== null) e.send += shift;
  const lanes = {};
  for (const [lane, from, to] of LANES) {
    const holds = list.filter((e) => e[from] !== null && e[to] !== null).map((e) => e[to] - e[from]);
    lanes[lane] = {
      max_ms: Math.max(0, ...holds),
      p90_ms: percentile(holds, 90) ?? 0,
      total_ms: holds.reduce((a, b) => a + b, 0),
    };
  }
  const headers = Object.fromEntries(response.headers.entries());
  const reportResponse = await fetch(new URL('/v1/diagnostics/report', location.href), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...auth },
    body: JSON.stringify({
      plan,
      url: location.origin,
      request: streamUrl,
      status: response.status,
      headers,
      headers_ms: headersMs,
      chunks: chunks.map(([at, c]) => [at, base64(c)]),
      lanes,
    }),
  });
  const report = await reportResponse.json();
  const result = { plan, headers_ms: headersMs, events: list, lanes, report };
  result.svg = new XMLSerializer().serializeToString(drawLanes(result));
  return result;
}

function svgNode(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** One lane per hop: each event a mark where it was in that hop, joined across hops; held times at left. */
export function drawLanes(result) {
  const width = 1000;
  const left = 250;
  const rowHeight = 40;
  const height = rowHeight * ROWS.length + 30;
  const end = Math.max(1, ...result.events.map((e) => e.paint ?? e.render ?? e.arrive));
  const x = (t) => left + ((width - left - 10) * t) / end;
  const y = (row) => 20 + row * rowHeight;
  const svg = svgNode('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img' });
  svg.append(svgNode('title', {}, 'where each event was held, hop by hop'));
  ROWS.forEach((row, i) => {
    const lane = LANES.find(([, , to]) => to === row);
    const held = lane ? ` · held max ${result.lanes[lane[0]].max_ms.toFixed(0)} ms` : '';
    svg.append(svgNode('text', { x: 5, y: y(i) + 4, 'font-size': 13 }, `${ROW_NAMES[row]}${held}`));
    svg.append(svgNode('line', { x1: left, x2: width - 10, y1: y(i), y2: y(i), stroke: '#ddd' }));
  });
  for (const e of result.events) {
    const points = ROWS.map((row, i) => (e[row] === null ? null : `${x(e[row]).toFixed(1)},${y(i)}`));
    const drawn = points.filter((p) => p !== null);
    svg.append(
      svgNode('polyline', { points: drawn.join(' '), fill: 'none', stroke: '#4a7bd0', 'stroke-width': 1 }),
    );
  }
  svg.append(
    svgNode(
      'text',
      { x: width - 10, y: height - 5, 'font-size': 12, 'text-anchor': 'end' },
      `${end.toFixed(0)} ms`,
    ),
  );
  return svg;
}

function drawChecks(table, report) {
  table.replaceChildren();
  for (const check of report.checks ?? []) {
    const row = document.createElement('tr');
    row.className = check.status.toLowerCase();
    const status = document.createElement('td');
    status.className = 'status';
    status.textContent = check.status;
    const name = document.createElement('td');
    name.textContent = check.check;
    const detail = document.createElement('td');
    detail.append(check.message);
    for (const [label, value] of [
      ['hop', check.hop],
      ['fix', check.fix],
    ]) {
      if (!value) continue;
      detail.append(document.createElement('br'), `${label}: ${value}`);
    }
    row.append(status, name, detail);
    table.append(row);
  }
}

function exportTrace(result) {
  const blob = new Blob([JSON.stringify(result, null, 2)], { type: 'application/json' });
  const link = document.createElement('a');
  link.href = URL.createObjectURL(blob);
  link.download = `tokenrelay-doctor-${result.plan.seed}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function show(result) {
  document.getElementById('lanes').replaceChildren(drawLanes(result));
  drawChecks(document.getElementById('checks'), result.report);
  const failed = !result.report.ok;
  document.getElementById('state').textContent =
    `${failed ? 'FAILED' : 'OK'} · seed ${result.plan.seed} · ${result.events.length} events`;
  const button = document.getElementById('export');
  button.disabled = false;
  button.onclick = () => exportTrace(result);
}

async function run(options) {
  const state = document.getElementById('state');
  document.getElementById('text').replaceChildren();
  state.textContent = 'running…';
  try {
    const result = await runDoctor({
      ...options,
      textTarget: document.getElementById('text'),
      onProgress: (n) => (state.textContent = `running… ${n} events`),
    });
    show(result);
    return result;
  } catch (error) {
    state.textContent = `error: ${error.message}`;
    throw error;
  }
}

window.tokenrelayDoctorRun = run; // for `tokenrelay doctor URL --browser` (DevTools Runtime.evaluate)
const query = new URLSearchParams(location.search);
document.getElementById('options').addEventListener('submit', (event) => {
  event.preventDefault();
  const seed = document.getElementById('seed').value;
  run({
    events: Number(document.getElementById('events').value),
    cadenceMs: Number(document.getElementById('cadence').value),
    seed: seed === '' ? null : Number(seed),
    apiKey: document.getElementById('key').value,
  });
});
if (query.get('run') === '1') {
  window.tokenrelayDoctor = run({
    events: Number(query.get('events') ?? 60),
    cadenceMs: Number(query.get('cadence_ms') ?? 50),
    seed: query.has('seed') ? Number(query.get('seed')) : null,
  });
}
