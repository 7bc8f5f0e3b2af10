// Shared test helpers: ways to cut an input, a seeded random source, and the Markdown stack under test.

import MarkdownIt from 'markdown-it/browser';
import { readFileSync } from 'node:fs';
import { createMarkdown } from '../../src/tokenrelay/web/lib/markdown_nodes.js';

/** The page's markdown-it setup over the same browser build the page loads. */
export function makeMarkdown() {
  return createMarkdown(MarkdownIt);
}

export const encoder = new TextEncoder();

/** A small seeded generator (mulberry32): the same cuts on every run. */
export function seeded(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `bytes` cut once at `offset`. */
export function cutAt(bytes, offset) {
  return [bytes.subarray(0, offset), bytes.subarray(offset)];
}

/** `bytes` one byte at a time. */
export function oneByOne(bytes) {
  return Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
}

/** `bytes` cut into pieces of 0..maxPiece bytes (empty pieces included: a read may return nothing). */
export function randomCuts(bytes, random, maxPiece = 12) {
  const pieces = [];
  for (let at = 0; at < bytes.length;) {
    const size = Math.floor(random() * (maxPiece + 1));
    pieces.push(bytes.subarray(at, at + size));
    at += size;
  }
  return pieces;
}

/** Every way of cutting the input used by the split-invariance tests, each with a name for failures. */
export function* cuttings(bytes, { seed = 7, randomRuns = 5, everyOffset = true } = {}) {
  yield ['whole', [bytes]];
  yield ['one byte at a time', oneByOne(bytes)];
  if (everyOffset) {
    for (let offset = 0; offset <= bytes.length; offset++) yield [`cut at ${offset}`, cutAt(bytes, offset)];
  }
  const random = seeded(seed);
  for (let run = 0; run < randomRuns; run++) yield [`random run ${run}`, randomCuts(bytes, random)];
}

/** A fixture file under tests/web/fixtures/, as text. */
export function fixture(name) {
  return readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
}

// Inputs where a block looks closed before it is (or the reverse), one construct each.
export const TRICKY = [
  '- a\n\n2. b\n\n- c\n\n2\n\nx',
  '1. a\n\n2. b\n\n3\n\n4. d',
  'para\n===\n\npara\n---\n\npara\n--\n',
  'a | b\n--|--\n1 | 2\nlazy row\n\nafter',
  'text\na | b\n-|-\n\nx',
  '```\ncode\n\n\nmore\n```\nafter\n\n~~~md\n```\n~~~',
  '```\nnever closed\n\npara',
  '> quote\nlazy\n\n> second\n\nplain',
  '    code\n\n    more code\n\n  not code\n',
  '**Menu** and *em* and `code` and **unclosed\n\nnext',
  '# h1\n## h2\ntext right after\n# h3',
  '- a\n  - b\n\n    c\n\n  d\n\ne',
  '<div>\n*raw*\n</div>\n\n<script>alert(1)</script>',
  '[a]: /u\n\n[a]\n\n[b]\n\n[b]: /v',
  'line\r\nline\r\rpara\rnext\r\n\r\n- x\r- y',
  '* * *\n- - -\n_ _ _\n\n* a\n* b\n+ c',
  // Blocks that close at a blank line, and those that go on past one.
  'para\n\n    code\n\n  - x\n\n\n   # h\n\n> q\n\n> r\n\na | b\n-|-\n1 | 2\n\n***\n\n',
  '- a\n\n  b\n\n- c\n\n  ```\n  x\n\n  ```\nd\n\n    e\n\n    f\n\ng',
  '```\nx\n```\n```\ny\n```   \n~~~\n```\n~~~~~\nz\n \t\n\tcode\n\n',
  '',
  '\n\n\n',
  'x',
];

// prettier-ignore
const FRAGMENTS = [
  '- ', '* ', '1. ', '2. ', '3) ', '> ', '# ', '## ', '```', '~~~', '    ', '  ', '|', ' | ', '---', '===', '-|-',
  '**', '*', '_', '`', '[x](http://a.b/c)', '[y]', '[y]: /z', '<b>', 'word', 'two words', 'é', '\u0301', '👩‍💻',
  '中文', '\n', '\n', '\n', '\n\n', '\r\n', '\r', '\t', '\\', 'a | b', '|-|-|', ':-:|', '| 1 | 2 |',
];

/** A random string of Markdown syntax and text: 1 to 40 fragments. */
export function markdownish(random) {
  let text = '';
  for (let i = 1 + Math.floor(random() * 40); i > 0; i--)
    text += FRAGMENTS[Math.floor(random() * FRAGMENTS.length)];
  return text;
}
