// turns.js: the meta line's text while streaming and at the end, and the code blocks' Copy buttons.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import { addCodeCopyButtons, addTurn, liveText, outcomeText } from '../../src/tokenrelay/web/turns.js';

const base = { ttftMs: 123.4, tokensPerSecond: 41.26, tokens: 20, totalMs: 1500, error: null };

describe('meta line', () => {
  test('live: only the numbers known so far', () => {
    assert.equal(liveText({ ttftMs: null, tokensPerSecond: null, tokens: 0 }), '');
    assert.equal(liveText({ ttftMs: 80, tokensPerSecond: null, tokens: 1 }), 'TTFT 80 ms · 1 tokens');
    assert.equal(liveText(base), 'TTFT 123 ms · 41.3 tokens/s · 20 tokens');
  });

  test('at the end: an unfinished reply says so first', () => {
    const cases = [
      [
        { status: 'finished', finishReason: 'stop' },
        'TTFT 123 ms · 41.3 tokens/s · 20 tokens · 1.50 s total',
      ],
      [{ status: 'finished', finishReason: 'length' }, /^finish_reason: length · TTFT/],
      [{ status: 'stopped' }, /^Stopped · TTFT/],
      [{ status: 'truncated', error: 'TypeError: network' }, /^Truncated: .* \(TypeError: network\) · /],
      [
        { status: 'error', error: '401: missing key', tokens: 0, ttftMs: null, tokensPerSecond: null },
        /^Error: 401: missing key · 1.50 s total$/,
      ],
    ];
    for (const [fields, expected] of cases) {
      const text = outcomeText({ ...base, ...fields });
      if (typeof expected === 'string') assert.equal(text, expected);
      else assert.match(text, expected);
    }
  });
});

describe('code blocks', () => {
  test('one Copy button per block, adding no text to the reply', () => {
    const { document } = parseHTML('<!doctype html><html><body></body></html>');
    const turn = addTurn(document.body, 'assistant');
    turn.body.append(document.createElement('pre'), document.createElement('pre'));
    for (const pre of turn.body.querySelectorAll('pre')) {
      pre.append(document.createElement('code'));
      pre.firstChild.textContent = 'x = 1';
    }
    const before = turn.body.textContent;
    addCodeCopyButtons(turn.body);
    addCodeCopyButtons(turn.body); // a second pass adds none
    assert.equal(turn.body.querySelectorAll('button.copy-code').length, 2);
    assert.equal(turn.body.textContent, before);
    assert.equal(turn.body.querySelector('button').getAttribute('aria-label'), 'Copy code');
  });
});
