// The lanes' maths: the server's times put on the page's clock, each hop's hold, and the drawing, shared by
// the doctor page and the chat page's relay toggle.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import {
  LANES,
  RelayRecorder,
  alignSends,
  chatEvents,
  drawLanes,
  heldText,
  laneStats,
  stepStats,
} from '../../src/tokenrelay/web/lib/lanes.js';
import { streamChat } from '../../src/tokenrelay/web/chat.js';
import { encoder } from './helpers.js';

/** A chat record as streamChat + the page hand it over: page times, and the chunk's server timing. */
const record = (arrive, sent, steps, source = 'engine') => ({
  arrive,
  parse: arrive + 0.5,
  render: arrive + 1,
  paint: arrive + 10,
  timing: { sent_ms: sent, steps_ms: steps, source },
});

describe('alignSends', () => {
  test('the fastest transit becomes zero and every server time moves with it', () => {
    const events = [
      { arrive: 105, send: 5, step: 4, stepStart: 1 },
      { arrive: 130, send: 10, step: 9, stepStart: 6 }, // held 20 ms longer on the way
      { arrive: 140, send: null, step: null },
    ];
    assert.equal(alignSends(events), 100);
    assert.deepEqual(
      events.map((e) => [e.send, e.step]),
      [
        [105, 104],
        [110, 109],
        [null, null],
      ],
    );
    assert.equal(events[0].stepStart, 101);
    assert.equal(alignSends([{ arrive: 3, send: null }]), null);
  });
});

describe('chatEvents and laneStats', () => {
  test('each hop holds what its two rows say; the server lane is step end to send', () => {
    const events = chatEvents([
      record(50, 10, [[2, 8]]), // 2 ms in the server, 0 on the network (fastest)
      record(80, 20, [
        [12, 14],
        [14, 18],
      ]), // first token held 6 ms in the server, the chunk 20 ms on the network
    ]);
    assert.deepEqual(
      events.map((e) => [e.step, e.stepStart, e.send, e.tokens, e.source]),
      [
        [48, 42, 50, 1, 'engine'],
        [54, 52, 60, 2, 'engine'],
      ],
    );
    const lanes = laneStats(events);
    assert.deepEqual(Object.keys(lanes), ['server', 'network', 'parse', 'render', 'paint']);
    assert.equal(lanes.server.max_ms, 6);
    assert.equal(lanes.server.total_ms, 8);
    assert.equal(lanes.network.max_ms, 20);
    assert.equal(lanes.paint.max_ms, 9);
    assert.deepEqual(stepStats(events), { max_ms: 6, p90_ms: 5.6 }); // p90 interpolated (stats.js)
    assert.match(heldText(lanes), /^server 6 ms · network 20 ms · parse 1 ms · render 1 ms · paint 9 ms$/);
  });

  test('without step times there is no server lane and no step', () => {
    const events = chatEvents([{ arrive: 5, parse: 6, render: 7, paint: 9, timing: null }]);
    assert.equal(events[0].step, null);
    assert.equal(events[0].send, null);
    assert.deepEqual(Object.keys(laneStats(events)), ['parse', 'render', 'paint']);
    assert.equal(stepStats(events), null);
  });

  test("a hold is never negative (clock noise), and p90 is the project's one percentile", () => {
    const lanes = laneStats([{ arrive: 10, parse: 9.5 }]);
    assert.equal(lanes.parse.max_ms, 0);
    const held = laneStats([1, 5, 3].map((h) => ({ arrive: 0, parse: h })));
    assert.ok(Math.abs(held.parse.p90_ms - 4.6) < 1e-9); // interpolated between 3 and 5, as stats.js has it
    assert.deepEqual(
      LANES.map(([lane]) => lane),
      ['server', 'network', 'parse', 'render', 'paint'],
    );
  });
});

describe('RelayRecorder', () => {
  test('handed text is painted by the next frame, and the result starts at the model', () => {
    let clock = 0;
    const recorder = new RelayRecorder(() => clock);
    clock = 12;
    recorder.handed({ arrive: 10, parse: 11, timing: { sent_ms: 5, steps_ms: [[1, 3]], source: 'engine' } });
    clock = 13;
    recorder.handed({ arrive: 10, parse: 11, timing: { sent_ms: 6, steps_ms: [[3, 4]], source: 'engine' } });
    assert.equal(recorder.waiting, true);
    clock = 20;
    recorder.painted();
    assert.equal(recorder.waiting, false);
    assert.deepEqual(
      recorder.records.map((r) => [r.render, r.paint]),
      [
        [12, 20],
        [13, 20],
      ],
    );
    const { events, lanes, stepNote } = recorder.result();
    assert.equal(stepNote, undefined);
    assert.equal(events[0].step, 7); // aligned: the second chunk (sent 6, arrived 10) was the fastest
    assert.equal(lanes.server.max_ms, 2);
    assert.equal(new RelayRecorder(() => 0).result().stepNote, 'none: the server sent no step times');
  });
});

describe('drawLanes', () => {
  const { document } = parseHTML('<!doctype html><html><body></body></html>');

  test('one row per hop with its hold, a line per event, the model step as a bar', () => {
    const events = chatEvents([record(50, 10, [[2, 8]]), record(80, 20, [[12, 14]])]);
    const svg = drawLanes({ events, lanes: laneStats(events) }, document);
    const labels = Array.from(svg.querySelectorAll('text[data-row]'), (t) => t.textContent);
    assert.deepEqual(
      labels.map((l) => l.split(' · ')[0]),
      ['model step', 'server send', 'network arrival', 'parsed', 'to the renderer', 'painted'],
    );
    assert.match(labels[0], /step max 6 ms/);
    assert.match(labels[1], /held max 6 ms/); // the server lane ends at the send row
    assert.match(labels[2], /held max 20 ms/);
    assert.equal(svg.querySelectorAll('polyline').length, 2);
    assert.equal(svg.querySelectorAll('line.step').length, 2);
  });

  test('the probe, which has no model, says so on the model row', () => {
    const events = [{ id: 0, step: null, send: 1, arrive: 2, parse: 3, render: 4, paint: 5 }];
    const svg = drawLanes({ events, lanes: laneStats(events), stepNote: 'none: no model' }, document);
    assert.equal(svg.querySelector('text[data-row="step"]').textContent, 'model step · none: no model');
    assert.equal(svg.querySelectorAll('line.step').length, 0);
  });

  test('steps timed by their arrival at the server are marked as such', () => {
    const events = chatEvents([record(50, 10, [[9, 9]], 'arrival')]);
    const svg = drawLanes({ events, lanes: laneStats(events) }, document);
    assert.match(svg.querySelector('text[data-row="step"]').textContent, /arrival at the server/);
  });
});

describe('streamChat with stepTimes', () => {
  const timed = (content, timing) =>
    `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content }, finish_reason: null }], tokenrelay: timing })}\n\n`;

  async function run(stepTimes) {
    const sent = [];
    const body = timed('Hi', { sent_ms: 3, steps_ms: [[1, 2]], source: 'engine' }) + 'data: [DONE]\n\n';
    const fetch = async (url, init) => {
      sent.push(JSON.parse(init.body));
      return new Response(encoder.encode(body), { headers: { 'Content-Type': 'text/event-stream' } });
    };
    const hops = [];
    let clock = 0;
    const outcome = await streamChat({
      model: 'm',
      messages: [],
      stepTimes,
      fetch,
      now: () => (clock += 1),
      onDelta: (text, stats, hop) => hops.push(hop),
    });
    return { sent: sent[0], hops, outcome };
  }

  test('asks for step times only when told, and hands each delta its hop times', async () => {
    const on = await run(true);
    assert.deepEqual(on.sent.stream_options, { include_usage: true, include_step_times: true });
    assert.equal(on.outcome.status, 'finished');
    assert.equal(on.hops.length, 1);
    const [hop] = on.hops;
    assert.ok(hop.arrive < hop.parse);
    assert.deepEqual(hop.timing, { sent_ms: 3, steps_ms: [[1, 2]], source: 'engine' });
    const off = await run(false);
    assert.deepEqual(off.sent.stream_options, { include_usage: true });
  });
});
