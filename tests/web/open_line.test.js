// open_line.js: when a growing line keeps its kind. BlockRenderer's use of it is checked against
// markdown-it after every update in blocks.test.js; here, the rule itself, line by line.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { settledLine } from '../../src/tokenrelay/web/lib/open_line.js';

describe('settledLine', () => {
  test('a letter first, or a complete first word that is no container marker, settles a line', () => {
    for (const line of [
      'word',
      '  word',
      'é',
      '中文 x',
      '**bold** and',
      '`code` x',
      '2024 was',
      '#tag x',
      '(a) b',
    ])
      assert.equal(settledLine(line), true, JSON.stringify(line));
  });

  test('a partial first word or a bare marker does not', () => {
    // "2" may become "2." (a list), "-" a list or a rule, "1. " a list once text follows, "" anything.
    for (const line of ['', '   ', '2', '-', '**', '1.', '1. ', '- ', '>', '> ', '- - ', '* * '])
      assert.equal(settledLine(line), false, JSON.stringify(line));
  });

  test('past a list marker or a quote, the rest of the line must be settled too', () => {
    for (const [line, settled] of [
      ['1. 2', false], // "1. 2." is a list inside the item
      ['1. 2 x', true],
      ['- a', true],
      ['> 1. x', true],
      ['> 1.', false],
      ['>quote', true],
      ['- > - ', false],
      ['3) b', true],
    ])
      assert.equal(settledLine(line), settled, JSON.stringify(line));
  });
});
