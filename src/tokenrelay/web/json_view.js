// A JSON reply drawn as a tree while it streams (issue 20 §4): PartialJSON (partial_json.js) reads the text,
// and its events build the tree in place, at most one DOM write per animation frame, as MarkdownRenderer does
// for prose. The snapshot rule makes the tree stable: a key appears with its value, a string grows in its
// own text node, a number appears once complete, and no node ever changes type, moves or disappears (a
// repeated key replaces its value in the row it already has, as JSON.parse keeps the first position).
// Elements are created one by one and text is set as text: nothing from the model is parsed as HTML.
//
//   object  <ul class="json-object"> of <li class="json-member"><span class="json-key">k</span> value</li>
//   array   <ol class="json-array">  of <li class="json-item">value</li>
//   string  <span class="json-string">text</span>   number, boolean, null: <span class="json-number">…
// A value still streaming has the class `open`; when the reply ends, finish() says how: `complete` (finish()
// gave the value), `truncated` (the text ended inside the value: the tree is marked cut, never completed)
// or `invalid` (the text is not JSON: the tree so far stays, with the reason and the text as it came).

import { JSONSyntaxError, PartialJSON, TruncatedJSONError } from './lib/partial_json.js';
import { FrameView } from './lib/view.js';

const KIND_CLASS = {
  object: 'json-object',
  array: 'json-array',
  string: 'json-string',
  number: 'json-number',
  boolean: 'json-boolean',
  null: 'json-null',
};

/**
 * Builds the tree from PartialJSON's events (no frames, no parser: the unit the tests drive directly).
 * Events arrive in document order, so a started value's parent is the innermost open container.
 */
export class JSONTree {
  /** @param {Element} root the element the tree goes into */
  constructor(root) {
    this.root = root;
    this._doc = root.ownerDocument;
    this._open = []; // open containers: {element, list, rows: Map<key, row> | null}
    this._string = null; // the open string's text node
    this._scalar = null; // the element of the string, number, boolean or null started last
    this._top = null; // the top-level value's element
  }

  /** Apply events from PartialJSON.feed (or a JSONSyntaxError's `events`). */
  apply(events) {
    for (const event of events) {
      if (event.type === 'grew') this._string.appendData(event.text);
      else if (event.type === 'started') this._start(event);
      else this._complete(event);
    }
  }

  /** The top-level value when it appeared only at the end (a top-level number: finish() reports no events). */
  showFinal(value) {
    if (this._top !== null) return;
    const kind = typeof value === 'number' ? 'number' : typeof value === 'boolean' ? 'boolean' : 'null';
    this._start({ path: [], kind });
    this._complete({ path: [], value });
  }

  _start({ path, kind }) {
    const doc = this._doc;
    const element = doc.createElement(kind === 'object' ? 'ul' : kind === 'array' ? 'ol' : 'span');
    element.className = `${KIND_CLASS[kind]} open`;
    if (kind === 'array') element.setAttribute('start', '0');
    if (kind === 'string') {
      this._string = doc.createTextNode('');
      element.append(this._string);
    }
    if (path.length === 0) {
      this._top = element;
      this.root.append(element);
    } else {
      const parent = this._open[path.length - 1];
      const key = path[path.length - 1];
      const row = parent.rows?.get(key);
      if (row !== undefined) {
        row.value.replaceWith(element); // a repeated key: the row stays where it is
        row.value = element;
      } else {
        const li = doc.createElement('li');
        li.className = parent.rows === null ? 'json-item' : 'json-member';
        if (parent.rows !== null) {
          const label = doc.createElement('span');
          label.className = 'json-key';
          label.textContent = key;
          li.append(label);
          parent.rows.set(key, { value: element });
        }
        li.append(element);
        parent.element.append(li);
      }
    }
    if (kind === 'object' || kind === 'array')
      this._open[path.length] = { element, rows: kind === 'object' ? new Map() : null };
    else this._scalar = element;
  }

  _complete({ path, value }) {
    let element;
    if (value !== null && typeof value === 'object') {
      element = this._open[path.length].element;
      this._open.length = path.length;
    } else {
      element = this._scalar;
      if (this._string === null) element.textContent = value === null ? 'null' : String(value);
      this._string = null; // a string's text is already in its node, grown piece by piece
    }
    element.classList.remove('open');
  }
}

/**
 * One JSON reply, drawn into `container` as it streams. A FrameView (lib/view.js), as MarkdownRenderer is: each frame
 * feeds the parser and applies its events, one DOM write; finish() draws the rest, finishes the parser and
 * resolves with how the value ended (`result`).
 */
export class JSONView extends FrameView {
  /**
   * @param {{
   *   container: Element,
   *   requestFrame?: (callback: (now: number) => void) => unknown,
   *   now?: () => number,
   *   smoother?: import('./lib/smoother.js').Smoother | null,
   *   onWrite?: () => void,
   * }} options
   */
  constructor({ container, ...frames }) {
    super(frames);
    this._container = container;
    this._parser = new PartialJSON();
    const doc = container.ownerDocument;
    this._treeEl = doc.createElement('div');
    this._treeEl.className = 'json-tree';
    container.append(this._treeEl);
    this._tree = new JSONTree(this._treeEl);
    this._text = ''; // all text received, for the fallback of a text that is not JSON
    this._error = null; // the JSONSyntaxError, once the text broke
    /** @type {{status: 'complete' | 'truncated' | 'invalid', value?: unknown, error?: string} | null} */
    this.result = null;
  }

  /** The parser's live snapshot (what the tree shows). */
  get value() {
    return this._parser.value;
  }

  append(text) {
    super.append(text);
    this._text += text;
  }

  _draw(text, ended) {
    let wrote = false;
    if (text !== '' && this._error === null) {
      let events;
      try {
        events = this._parser.feed(text);
      } catch (error) {
        if (!(error instanceof JSONSyntaxError)) throw error;
        this._error = error;
        events = error.events;
      }
      this._tree.apply(events);
      wrote = events.length > 0;
    }
    if (ended) {
      this._finish();
      wrote = true;
    }
    return wrote;
  }

  _outcome() {
    return this.result;
  }

  _finish() {
    const doc = this._container.ownerDocument;
    if (this._error === null) {
      try {
        const value = this._parser.finish();
        this._tree.showFinal(value);
        this.result = { status: 'complete', value };
      } catch (error) {
        if (error instanceof TruncatedJSONError) {
          this.result = { status: 'truncated', error: error.message };
          const note = doc.createElement('p');
          note.className = 'json-note';
          note.textContent = 'Cut: the reply ended before its JSON value was complete.';
          this._container.append(note);
        } else if (error instanceof JSONSyntaxError) this._error = error;
        else throw error;
      }
    }
    if (this._error !== null) {
      this.result = { status: 'invalid', error: this._error.message };
      const note = doc.createElement('p');
      note.className = 'json-note';
      note.textContent = `Not JSON: ${this._error.message}. The reply as it came:`;
      const raw = doc.createElement('pre');
      raw.className = 'json-raw';
      raw.textContent = this._text;
      this._container.append(note, raw);
    }
    this._treeEl.classList.add(this.result.status);
  }
}
