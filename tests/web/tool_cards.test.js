// Tool-call cards (tool_cards.js, issue 21 §4): a call's arguments drawn as they stream, pretty-printed from
// PartialJSON's snapshot, one DOM write per frame; the result field; and what store.js sends back. A light DOM
// (linkedom) stands in for the page.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import { streamChat } from '../../src/tokenrelay/web/chat.js';
import { PartialJSON } from '../../src/tokenrelay/web/lib/partial_json.js';
import { requestBody, DEFAULT_SETTINGS, toolsOf } from '../../src/tokenrelay/web/store.js';
import { ToolCards, resultForm } from '../../src/tokenrelay/web/tool_cards.js';
import { encoder, seeded } from './helpers.js';

function page() {
  const { document } = parseHTML('<!doctype html><html><body><div id="calls"></div></body></html>');
  const frames = [];
  return {
    document,
    container: document.getElementById('calls'),
    requestFrame: (callback) => frames.push(callback),
    runFrames() {
      const due = frames.splice(0);
      for (const callback of due) callback(0);
      return due.length;
    },
  };
}

const ARGUMENTS = '{"city": "東京 🗼", "days": [1, 20, 300], "note": "a \\"quote\\"", "ok": true}';

/** What the card must show after `prefix` of the arguments: the snapshot of that prefix, indented. */
function expected(prefix) {
  const parser = new PartialJSON();
  parser.feed(prefix);
  return parser.hasValue ? JSON.stringify(parser.value, null, 2) : '';
}

function assertPrefix(shown, final) {
  if (typeof shown === 'string') return assert.ok(final.startsWith(shown), `${shown} grew into ${final}`);
  if (shown === null || typeof shown !== 'object') return assert.equal(shown, final);
  for (const [key, value] of Object.entries(shown)) assertPrefix(value, final[key]);
}

describe('ToolCards', () => {
  test('the arguments stream pretty-printed from the snapshot, one write per frame, never raw syntax', () => {
    const random = seeded(21);
    for (let run = 0; run < 20; run++) {
      const p = page();
      const cards = new ToolCards({ container: p.container, requestFrame: p.requestFrame });
      let sent = 0;
      while (sent < ARGUMENTS.length) {
        sent = Math.min(ARGUMENTS.length, sent + 1 + Math.floor(random() * 6));
        cards.update([{ index: 0, id: 'call_1', name: 'get_weather', arguments: ARGUMENTS.slice(0, sent) }]);
        cards.update([{ index: 0, id: 'call_1', name: 'get_weather', arguments: ARGUMENTS.slice(0, sent) }]);
        assert.equal(p.runFrames(), 1); // two updates, one frame
        const shown = p.container.querySelector('.tool-arguments').textContent;
        assert.equal(shown, expected(ARGUMENTS.slice(0, sent)));
        // Valid JSON at every frame, and every value shown a prefix of its final value (12 never becomes 123).
        if (shown !== '') assertPrefix(JSON.parse(shown), JSON.parse(ARGUMENTS));
      }
      const [card] = cards.end();
      assert.equal(card.querySelector('.tool-name').textContent, 'get_weather');
      assert.equal(
        card.querySelector('.tool-arguments').textContent,
        JSON.stringify(JSON.parse(ARGUMENTS), null, 2),
      );
    }
  });

  test('a card per call, in order; broken arguments are shown as they came, marked invalid', () => {
    const p = page();
    const cards = new ToolCards({ container: p.container, requestFrame: p.requestFrame });
    cards.update([
      { index: 0, id: 'a', name: 'f', arguments: '{"x": 1}' },
      { index: 1, id: 'b', name: 'g', arguments: '{"y": 12]' },
    ]);
    const [first, second] = cards.end();
    assert.equal(first.textContent, 'f' + JSON.stringify({ x: 1 }, null, 2));
    assert.ok(second.classList.contains('invalid'));
    assert.equal(second.querySelector('.tool-arguments').textContent, '{"y": 12]');
    assert.equal(cards.writes, 1);
  });

  test('the result field hands its text over once; the page runs nothing', () => {
    const p = page();
    const cards = new ToolCards({ container: p.container, requestFrame: p.requestFrame });
    cards.update([{ index: 0, id: 'a', name: 'get_weather', arguments: '{}' }]);
    const [card] = cards.end();
    const sent = [];
    const form = resultForm(card, 'get_weather', (text) => sent.push(text));
    form.querySelector('textarea').value = '22 °C';
    form.dispatchEvent(new p.document.defaultView.Event('submit', { cancelable: true }));
    assert.deepEqual(sent, ['22 °C']);
    assert.equal(form.querySelector('button').disabled, true);
    assert.match(form.querySelector('textarea').placeholder, /runs no tool/);
  });
});

describe('tools in the request', () => {
  const TOOLS = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];

  test('the tools setting is a JSON array of function tools, or an error the settings show', () => {
    assert.deepEqual(toolsOf({ ...DEFAULT_SETTINGS }), {});
    assert.deepEqual(toolsOf({ ...DEFAULT_SETTINGS, tools: JSON.stringify(TOOLS) }), { tools: TOOLS });
    assert.match(toolsOf({ ...DEFAULT_SETTINGS, tools: '[{' }).error, /not JSON/);
    assert.match(toolsOf({ ...DEFAULT_SETTINGS, tools: '[{"type": "function"}]' }).error, /array of/);
  });

  test('calls and results go back in OpenAI shapes', () => {
    const call = {
      id: 'call_1',
      type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
    };
    const body = requestBody({ ...DEFAULT_SETTINGS, tools: JSON.stringify(TOOLS) }, [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '22 °C' },
    ]);
    assert.deepEqual(body.tools, TOOLS);
    assert.deepEqual(body.messages.slice(1), [
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '22 °C' },
    ]);
    const json = requestBody({ ...DEFAULT_SETTINGS, tools: JSON.stringify(TOOLS), json: true }, []);
    assert.equal(json.tools, undefined); // the server takes response_format or tools, not both
  });

  test('streamChat hands each growth of the calls to onToolCall and keeps them in the outcome', async () => {
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const stream =
      chunk({ role: 'assistant', content: '' }) +
      chunk({
        tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }],
      }) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"a"' } }] }) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: ': 1}' } }] }) +
      chunk({}, 'tool_calls') +
      'data: [DONE]\n\n';
    const fetch = async () =>
      new Response(encoder.encode(stream), { headers: { 'Content-Type': 'text/event-stream' } });
    const seen = [];
    const outcome = await streamChat({
      model: 'm',
      messages: [],
      onDelta: () => {},
      onToolCall: (calls) => seen.push(calls.map((c) => c.arguments).join('|')),
      fetch,
    });
    assert.deepEqual(seen, ['', '{"a"', '{"a": 1}']);
    assert.equal(outcome.status, 'finished');
    assert.equal(outcome.finishReason, 'tool_calls');
    assert.deepEqual(outcome.toolCalls, [{ index: 0, id: 'call_1', name: 'f', arguments: '{"a": 1}' }]);
  });
});
