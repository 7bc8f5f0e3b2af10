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
// The probe has no model, so its lanes start at the server's send and the model row says so. The chat mode
// traces a real reply instead: a chat request with stream_options.include_step_times, whose chunks say when
// the model step of each token ran and when the chunk was sent, so the lanes start at the model's step (the
// lane maths and drawing are lanes.js, shared with the chat page's "relay" toggle).
//
// ?run=1&events=N&cadence_ms=C&seed=S (or ?run=1&mode=chat&prompt=P&max_tokens=N) runs at once and leaves
// the result in window.tokenrelayDoctor (a promise); `tokenrelay doctor URL --browser` calls
// window.tokenrelayDoctorRun(options) instead.

import { streamChat } from './chat.js';
import { LANES, RelayRecorder, alignSends, drawLanes, heldText, laneStats } from './lib/lanes.js';
import { SSEParser } from './lib/sse.js';

export { LANES, drawLanes };

const PROBE_NOTE = 'none: the probe has no model (chat mode traces a real reply)';
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
      if (event.type === 'schedule') schedule = JSON.parse(event.data);
      if (event.type !== 'message' || event.data === '[DONE]') continue;
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
  const list = Array.from(timed, ([id, r]) => ({ id, step: null, send: sends[id] ?? null, ...r })).sort(
    (a, b) => a.id - b.id,
  );
  alignSends(list);
  const lanes = laneStats(list);
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
  const result = { mode: 'probe', plan, headers_ms: headersMs, events: list, lanes, report };
  result.stepNote = PROBE_NOTE;
  result.svg = new XMLSerializer().serializeToString(drawLanes(result));
  return result;
}

/**
 * Trace one real chat reply (the engine's step times included) and return {mode, events, lanes, outcome}.
 * @param {{prompt?: string, maxTokens?: number, apiKey?: string, textTarget?: Element|null,
 *          onProgress?: (n: number) => void}} options
 */
export async function runChatTrace({
  prompt = 'Write a short poem about tea.',
  maxTokens = 64,
  apiKey = '',
  textTarget = null,
  onProgress = () => {},
} = {}) {
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const recorder = new RelayRecorder(now);
  let painting = null;
  const paintLoop = async () => {
    // The text handed to the DOM before this callback is painted in this frame.
    while (recorder.waiting) {
      await frame();
      recorder.painted();
    }
    painting = null;
  };
  const outcome = await streamChat({
    model: '',
    messages: [{ role: 'user', content: prompt }],
    params: { max_tokens: maxTokens, temperature: 0 },
    apiKey,
    stepTimes: true,
    now,
    onDelta: (text, _stats, hop) => {
      if (textTarget) textTarget.append(text);
      recorder.handed(hop);
      painting ??= paintLoop();
      onProgress(recorder.records.length);
    },
  });
  await (painting ?? Promise.resolve());
  if (outcome.status !== 'finished') throw new Error(`chat: ${outcome.status}: ${outcome.error ?? ''}`);
  const result = { mode: 'chat', ...recorder.result() };
  const { content: _content, ...summary } = outcome;
  result.outcome = summary;
  result.report = {
    ok: true,
    checks: [{ status: 'INFO', check: 'relay', message: `held per hop (max): ${heldText(result.lanes)}` }],
  };
  result.svg = new XMLSerializer().serializeToString(drawLanes(result));
  return result;
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
  const what = result.mode === 'chat' ? 'chat reply' : `seed ${result.plan.seed}`;
  document.getElementById('state').textContent =
    `${failed ? 'FAILED' : 'OK'} · ${what} · ${result.events.length} events`;
  const button = document.getElementById('export');
  button.disabled = false;
  button.onclick = () => exportTrace(result);
}

async function run(options) {
  const state = document.getElementById('state');
  document.getElementById('text').replaceChildren();
  state.textContent = 'running…';
  try {
    const result = await (options.mode === 'chat' ? runChatTrace : runDoctor)({
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
    mode: document.getElementById('mode').value,
    prompt: document.getElementById('prompt').value || undefined,
    events: Number(document.getElementById('events').value),
    cadenceMs: Number(document.getElementById('cadence').value),
    seed: seed === '' ? null : Number(seed),
    apiKey: document.getElementById('key').value,
  });
});
if (query.get('run') === '1') {
  window.tokenrelayDoctor = run({
    mode: query.get('mode') ?? 'probe',
    prompt: query.get('prompt') ?? undefined,
    maxTokens: Number(query.get('max_tokens') ?? 64),
    events: Number(query.get('events') ?? 60),
    cadenceMs: Number(query.get('cadence_ms') ?? 50),
    seed: query.has('seed') ? Number(query.get('seed')) : null,
  });
}
