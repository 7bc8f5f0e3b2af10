// The JSON tree (json_view.js): PartialJSON's events -> a stable DOM tree, one write per frame, with a light
// DOM (linkedom) standing in for the page.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHTML } from 'linkedom';
import { readFileSync } from 'node:fs';
import { JSONTree, JSONView } from '../../src/tokenrelay/web/json_view.js';
import { PartialJSON } from '../../src/tokenrelay/web/lib/partial_json.js';
import { Smoother } from '../../src/tokenrelay/web/lib/smoother.js';
import { seeded } from './helpers.js';

const VECTORS = JSON.parse(
  readFileSync(new URL('../vectors/partial_json.json', import.meta.url), 'utf8'),
).documents;

function page() {
  const { document } = parseHTML('<!doctype html><html><body><div id="reply"></div></body></html>');
  const frames = [];
  return {
    document,
    container: document.getElementById('reply'),
    requestFrame: (callback) => frames.push(callback),
    runFrames() {
      const due = frames.splice(0);
      for (const callback of due) callback(0);
      return due.length;
    },
    frames,
  };
}

/** The value the tree shows, read back from the DOM alone (keys, items, texts and classes). */
function treeValue(element) {
  if (element === null || element === undefined) return undefined;
  const kind = element.className.split(' ')[0];
  if (kind === 'json-object') {
    const object = {};
    for (const li of element.children) {
      const key = li.children[0].textContent;
      Object.defineProperty(object, key, {
        value: treeValue(li.children[1]),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return object;
  }
  if (kind === 'json-array') return Array.from(element.children, (li) => treeValue(li.children[0]));
  if (kind === 'json-string') return element.textContent;
  if (kind === 'json-number') return Number(element.textContent);
  if (kind === 'json-boolean') return element.textContent === 'true';
  if (kind === 'json-null') return null;
  throw new Error(`not a tree node: ${element.className}`);
}

/** Every element in `root`, with the kind it had (to check that none changes type or goes away). */
function census(root) {
  return new Map(Array.from(root.querySelectorAll('*'), (el) => [el, el.className.split(' ')[0]]));
}

const norm = (value) => JSON.parse(JSON.stringify(value));

/** Feed `pieces` into a parser and a tree side by side; check the tree against the snapshot each time. */
function drive(text, pieces) {
  const { document, container } = page();
  const tree = new JSONTree(container);
  const parser = new PartialJSON();
  const seen = [];
  const grown = new Map(); // each string element -> its text at the last check (it may only grow)
  for (const piece of pieces) {
    tree.apply(parser.feed(piece));
    const shown = treeValue(container.firstElementChild);
    const expected = parser.hasValue ? norm(parser.value) : undefined; // -0 is drawn as 0, as JSON writes it
    assert.deepStrictEqual(shown, expected, `after ${JSON.stringify(piece)}`);
    seen.push(census(container));
    for (const el of container.querySelectorAll('.json-string')) {
      const before = grown.get(el) ?? '';
      assert.ok(el.textContent.startsWith(before), 'a string only grows');
      grown.set(el, el.textContent);
    }
  }
  const final = parser.finish();
  tree.showFinal(final);
  const end = census(container);
  for (const elements of seen)
    for (const [el, kind] of elements) assert.equal(end.get(el), kind, 'a node stayed, with its type');
  assert.equal(container.querySelectorAll('.open').length, 0, 'nothing is open once the value is complete');
  return { document, container, final };
}

const cutEvery = (text) => Array.from({ length: text.length }, (_, i) => text[i]);

describe('JSONTree: the snapshot, drawn as a stable tree', () => {
  const documents = VECTORS.filter((v) => !('error_after' in v) && !v.truncated && !v.duplicate_keys);
  for (const vector of documents) {
    test(vector.name, () => {
      const random = seeded(vector.text.length);
      const whole = drive(vector.text, [vector.text]).container.innerHTML;
      assert.equal(drive(vector.text, cutEvery(vector.text)).container.innerHTML, whole);
      for (let r = 0; r < 3; r++) {
        const pieces = [];
        for (let at = 0; at < vector.text.length;) {
          const size = 1 + Math.floor(random() * 7);
          pieces.push(vector.text.slice(at, at + size));
          at += size;
        }
        assert.equal(drive(vector.text, pieces).container.innerHTML, whole);
      }
    });
  }

  test('a key appears with its value, a string grows in one text node', () => {
    const { container } = page();
    const tree = new JSONTree(container);
    const parser = new PartialJSON();
    tree.apply(parser.feed('{"city": "Par'));
    const string = container.querySelector('.json-string');
    assert.equal(string.childNodes.length, 1);
    const node = string.firstChild;
    tree.apply(parser.feed('is", "population": 21'));
    assert.equal(string.firstChild, node);
    assert.equal(node.data, 'Paris');
    assert.deepStrictEqual(
      Array.from(container.querySelectorAll('.json-key'), (k) => k.textContent),
      ['city'],
      'the number key waits for its number',
    );
    tree.apply(parser.feed('00}'));
    assert.deepStrictEqual(treeValue(container.firstElementChild), { city: 'Paris', population: 2100 });
  });

  test('a repeated key replaces its value in the same row', () => {
    const { container } = page();
    const tree = new JSONTree(container);
    const parser = new PartialJSON();
    tree.apply(parser.feed('{"a": 1, "b": 2, "a": "x"}'));
    assert.deepStrictEqual(treeValue(container.firstElementChild), JSON.parse('{"a": 1, "b": 2, "a": "x"}'));
    assert.equal(container.querySelectorAll('.json-member').length, 2);
  });

  test('model text is text: markup in keys and strings builds no element', () => {
    const { container } = page();
    const tree = new JSONTree(container);
    const parser = new PartialJSON();
    tree.apply(parser.feed('{"<img src=x onerror=alert(1)>": "<script>alert(2)</script>"}'));
    assert.equal(container.querySelectorAll('img, script').length, 0);
    assert.equal(container.querySelector('.json-key').textContent, '<img src=x onerror=alert(1)>');
    assert.equal(container.querySelector('.json-string').textContent, '<script>alert(2)</script>');
  });

  test('a top-level number appears at the end', () => {
    const { container } = drive('-12.5e1', cutEvery('-12.5e1'));
    assert.equal(container.querySelector('.json-number').textContent, '-125');
  });
});

describe('JSONView: frames and endings', () => {
  test('one DOM write per frame, however many pieces arrived', async () => {
    const p = page();
    const view = new JSONView({ container: p.container, requestFrame: p.requestFrame });
    for (const piece of cutEvery('{"a": [1, 2, 3], "b": "hello"}')) view.append(piece);
    assert.equal(p.frames.length, 1);
    assert.equal(p.container.querySelectorAll('.json-tree *').length, 0, 'nothing drawn before the frame');
    p.runFrames();
    assert.equal(view.writes, 1);
    const done = view.finish();
    p.runFrames();
    assert.deepStrictEqual(await done, { status: 'complete', value: { a: [1, 2, 3], b: 'hello' } });
    assert.equal(view.writes, 2);
    assert.ok(p.container.querySelector('.json-tree').classList.contains('complete'));
  });

  test('with a Smoother the text is drawn over several frames, and all of it by the end', async () => {
    const p = page();
    let clock = 0;
    const view = new JSONView({
      container: p.container,
      requestFrame: p.requestFrame,
      now: () => clock,
      smoother: new Smoother(),
    });
    view.append('{"text": "' + 'word '.repeat(40) + '"}');
    let frames = 0;
    for (; frames < 5 && p.frames.length > 0; frames++) {
      clock += 16;
      p.runFrames();
    }
    const done = view.finish();
    p.runFrames();
    assert.equal((await done).status, 'complete');
    assert.equal(p.container.querySelector('.json-string').textContent, 'word '.repeat(40));
  });

  test('a reply cut short is shown as cut: open nodes stay open, a note says so', async () => {
    const p = page();
    const view = new JSONView({ container: p.container, requestFrame: p.requestFrame });
    view.append('{"items": [{"name": "lam');
    const done = view.finish();
    p.runFrames();
    const result = await done;
    assert.equal(result.status, 'truncated');
    const tree = p.container.querySelector('.json-tree');
    assert.ok(tree.classList.contains('truncated') && !tree.classList.contains('complete'));
    assert.equal(tree.querySelectorAll('.open').length, 4, 'object, array, object and string are all open');
    assert.match(p.container.querySelector('.json-note').textContent, /^Cut: /);
  });

  test('text that is not JSON keeps the tree so far and shows the text as it came', async () => {
    const p = page();
    const view = new JSONView({ container: p.container, requestFrame: p.requestFrame });
    view.append('{"a": 1, ');
    p.runFrames();
    view.append('oops} and more');
    p.runFrames();
    const done = view.finish();
    p.runFrames();
    const result = await done;
    assert.equal(result.status, 'invalid');
    assert.match(result.error, /at offset 9$/);
    assert.deepStrictEqual(treeValue(p.container.querySelector('.json-tree').firstElementChild), { a: 1 });
    assert.equal(p.container.querySelector('.json-raw').textContent, '{"a": 1, oops} and more');
  });
});
