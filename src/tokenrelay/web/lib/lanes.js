// The relay as lanes, one per hop, shared by the doctor page (doctor.js) and the chat page's "relay" toggle
// (app.js). An event is one streamed chunk with the time it reached each row: the model step that made its
// first token (`step`, and `stepStart` when that step began), the server's send, the network arrival (the
// fetch reader's chunk), the parse, the hand-off to the renderer, and the frame that painted it. A lane is
// the gap between two rows: how long the event was held in that hop.
//
// Clocks: the server's times (its send, the model's steps) are on its clock; the page's on
// performance.now(). As the CLI does, alignSends shifts the server's times by the smallest transit of any
// event, so the fastest event crosses the network lane in zero time and every other event's network lane is
// how much longer it was held on the way; the steps move with the send of their chunk, so the server lane
// (model step end -> server send: detokenizer, stop strings, event loop) is the server's own measurement.
//
// Pure functions over plain objects, and drawLanes builds SVG with the document it is given: the node tests
// run all of it without a browser.

import { percentile } from './stats.js';

/** The rows, in the order an event passes them. */
export const ROWS = ['step', 'send', 'arrive', 'parse', 'render', 'paint'];
export const ROW_NAMES = {
  step: 'model step',
  send: 'server send',
  arrive: 'network arrival',
  parse: 'parsed',
  render: 'to the renderer',
  paint: 'painted',
};
/** The hops: [lane, from row, to row]. `server` is engine -> socket; `network` includes every proxy. */
export const LANES = [
  ['server', 'step', 'send'],
  ['network', 'send', 'arrive'],
  ['parse', 'arrive', 'parse'],
  ['render', 'parse', 'render'],
  ['paint', 'render', 'paint'],
];
const SVG = 'http://www.w3.org/2000/svg';

/**
 * Put the server's times of `events` (send, step, stepStart: server ms) on the page's clock, in place: the
 * fastest event's transit becomes zero. Returns the shift added (null when no event has a send time).
 */
export function alignSends(events) {
  const sent = events.filter((e) => e.send !== null && e.send !== undefined && e.arrive !== null);
  if (sent.length === 0) return null;
  const shift = Math.min(...sent.map((e) => e.arrive - e.send));
  for (const e of events) {
    for (const row of ['send', 'step', 'stepStart'])
      if (e[row] !== null && e[row] !== undefined) e[row] += shift;
  }
  return shift;
}

/**
 * Events from a chat stream's records: each {arrive, parse, render, paint, timing} where timing is the
 * chunk's `tokenrelay` field (stream_options.include_step_times) or null. The chunk's step is the step of its
 * first token: the token it held longest. Times are aligned (alignSends).
 */
export function chatEvents(records) {
  const events = records.map((r, id) => {
    const steps = r.timing?.steps_ms ?? [];
    return {
      id,
      step: steps.length > 0 ? steps[0][1] : null,
      stepStart: steps.length > 0 ? steps[0][0] : null,
      source: r.timing?.source ?? null,
      tokens: steps.length,
      send: typeof r.timing?.sent_ms === 'number' ? r.timing.sent_ms : null,
      arrive: r.arrive,
      parse: r.parse,
      render: r.render ?? null,
      paint: r.paint ?? null,
    };
  });
  alignSends(events);
  return events;
}

/** Per lane with any data: the most, the 90th percentile and the sum of what it held (ms). */
export function laneStats(events) {
  const lanes = {};
  for (const [lane, from, to] of LANES) {
    const holds = events
      .filter((e) => typeof e[from] === 'number' && typeof e[to] === 'number')
      .map((e) => Math.max(0, e[to] - e[from]));
    if (holds.length === 0) continue;
    lanes[lane] = {
      max_ms: Math.max(...holds),
      p90_ms: percentile(holds, 90),
      total_ms: holds.reduce((a, b) => a + b, 0),
    };
  }
  return lanes;
}

/** How long the model's steps took (stepStart -> step), or null when no event has one. */
export function stepStats(events) {
  const spans = events.filter((e) => typeof e.stepStart === 'number').map((e) => e.step - e.stepStart);
  return spans.length === 0 ? null : { max_ms: Math.max(...spans), p90_ms: percentile(spans, 90) };
}

/** One line of text: held per hop (max), for a caption or a log. */
export function heldText(lanes) {
  return LANES.filter(([lane]) => lanes[lane])
    .map(([lane]) => `${lane} ${lanes[lane].max_ms.toFixed(0)} ms`)
    .join(' · ');
}

function svgNode(doc, name, attributes, text) {
  const node = doc.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * One lane per hop: each event a line through the rows it reached; at left, each row's name and the most
 * the hop into it held an event. `result` is {events, lanes, stepNote?}: with no step times the model row
 * says why (stepNote), an engine that does not time its steps is marked as timed by arrival.
 */
export function drawLanes(result, doc = globalThis.document) {
  const width = 1000;
  const left = 290;
  const rowHeight = 40;
  const height = rowHeight * ROWS.length + 30;
  const { events, lanes } = result;
  const times = events.flatMap((e) => ROWS.map((row) => e[row]).concat(e.stepStart ?? null));
  const known = times.filter((t) => typeof t === 'number');
  const start = Math.min(0, ...known);
  const end = Math.max(start + 1, ...known);
  const x = (t) => left + ((width - left - 10) * (t - start)) / (end - start);
  const y = (row) => 20 + row * rowHeight;
  const svg = svgNode(doc, 'svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'lanes' });
  svg.append(svgNode(doc, 'title', {}, 'where each event was held, hop by hop'));
  const steps = stepStats(events);
  const arrival = events.some((e) => e.source === 'arrival');
  ROWS.forEach((row, i) => {
    const lane = LANES.find(([, , to]) => to === row);
    let label = ROW_NAMES[row];
    if (lane && lanes[lane[0]]) label += ` · held max ${lanes[lane[0]].max_ms.toFixed(0)} ms`;
    if (row === 'step' && steps !== null) {
      label += arrival ? ' (arrival at the server)' : ` · step max ${steps.max_ms.toFixed(0)} ms`;
    } else if (row === 'step') {
      label += ` · ${result.stepNote ?? 'not recorded'}`;
    }
    const text = svgNode(doc, 'text', { x: 5, y: y(i) + 4, 'font-size': 13, 'data-row': row }, label);
    svg.append(text);
    svg.append(svgNode(doc, 'line', { x1: left, x2: width - 10, y1: y(i), y2: y(i), stroke: '#ddd' }));
  });
  for (const e of events) {
    if (typeof e.stepStart === 'number' && typeof e.step === 'number') {
      // The model's step itself: a bar on the model row from its start to its end.
      const bar = { x1: x(e.stepStart), x2: x(e.step), y1: y(0), y2: y(0), stroke: '#d98b00' };
      svg.append(svgNode(doc, 'line', { ...bar, 'stroke-width': 5, class: 'step' }));
    }
    const points = ROWS.map((row, i) =>
      typeof e[row] === 'number' ? `${x(e[row]).toFixed(1)},${y(i)}` : null,
    ).filter((p) => p !== null);
    svg.append(
      svgNode(doc, 'polyline', {
        points: points.join(' '),
        fill: 'none',
        stroke: '#4a7bd0',
        'stroke-width': 1,
      }),
    );
  }
  const scale = `${(end - start).toFixed(0)} ms`;
  svg.append(
    svgNode(doc, 'text', { x: width - 10, y: height - 5, 'font-size': 12, 'text-anchor': 'end' }, scale),
  );
  return svg;
}

/**
 * Records a chat reply's hops as the page handles it: handed(hop) when a delta's text goes to the renderer
 * (hop is streamChat's {arrive, parse, timing}), painted() in the frame that drew what was handed so far.
 * Times come from `now`, the clock the hop times are on.
 */
export class RelayRecorder {
  constructor(now) {
    this._now = now;
    this._unpainted = [];
    /** One record per delta: {arrive, parse, timing, render, paint}. */
    this.records = [];
  }

  handed(hop) {
    const record = { ...hop, render: this._now(), paint: null };
    this.records.push(record);
    this._unpainted.push(record);
  }

  /** Whether some handed text waits for its frame. */
  get waiting() {
    return this._unpainted.length > 0;
  }

  painted() {
    const at = this._now();
    for (const record of this._unpainted) record.paint = at;
    this._unpainted = [];
  }

  /** {events, lanes, stepNote?} for drawLanes. */
  result() {
    const events = chatEvents(this.records);
    const result = { events, lanes: laneStats(events) };
    if (!events.some((e) => e.step !== null)) result.stepNote = 'none: the server sent no step times';
    return result;
  }
}
