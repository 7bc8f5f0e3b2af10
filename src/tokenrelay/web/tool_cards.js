// A reply's tool calls, drawn as cards (issue 21 §4): each call's function name, and its arguments as they
// stream, pretty-printed from PartialJSON's snapshot (partial_json.js): never a blob of raw syntax, never a
// value that later changes (a number shows once complete, a string grows in place). One DOM write per frame,
// as for text. Arguments that break as JSON are shown as the text that came, marked invalid.
//
// The page runs no tool: once the reply has ended, each card gets a field for the result the user gives
// (resultForm), which app.js sends back as a `tool` message.

import { JSONSyntaxError, PartialJSON } from './lib/partial_json.js';

/**
 * @typedef {{index: number, id: string | null, name: string, arguments: string}} ToolCall (chat.js's reading)
 */

export class ToolCards {
  /**
   * @param {{container: Element, requestFrame?: (callback: (now: number) => void) => unknown,
   *   onWrite?: () => void}} options
   */
  constructor({ container, requestFrame, onWrite = () => {} }) {
    this._container = container;
    this._requestFrame = requestFrame ?? ((cb) => globalThis.requestAnimationFrame(cb));
    this._onWrite = onWrite;
    /** @type {ToolCall[]} */
    this._calls = [];
    /** @type {Map<number, {card: HTMLElement, pre: HTMLElement, parser: PartialJSON, fed: number, broken: boolean}>} */
    this._cards = new Map();
    this._frameRequested = false;
    /** DOM writes so far (one per frame at most). */
    this.writes = 0;
  }

  /** The reply's calls so far (each with all its arguments so far): drawn at the next frame. */
  update(calls) {
    this._calls = calls;
    if (!this._frameRequested) {
      this._frameRequested = true;
      this._requestFrame(() => {
        this._frameRequested = false;
        this._draw();
      });
    }
  }

  /** The reply ended: draw what is left now. Returns the cards, in call order. */
  end() {
    this._draw();
    return [...this._cards.values()].map((c) => c.card);
  }

  _draw() {
    let wrote = false;
    for (const call of this._calls) {
      let entry = this._cards.get(call.index);
      if (entry === undefined) {
        entry = this._card(call);
        this._cards.set(call.index, entry);
        wrote = true;
      }
      if (call.arguments.length === entry.fed) continue;
      const more = call.arguments.slice(entry.fed);
      entry.fed = call.arguments.length;
      if (!entry.broken) {
        try {
          entry.parser.feed(more);
        } catch (error) {
          if (!(error instanceof JSONSyntaxError)) throw error;
          entry.broken = true;
          entry.card.classList.add('invalid');
        }
      }
      entry.pre.textContent = entry.broken ? call.arguments : pretty(entry.parser);
      wrote = true;
    }
    if (wrote) {
      this.writes += 1;
      this._onWrite();
    }
  }

  _card(call) {
    const doc = this._container.ownerDocument;
    const card = doc.createElement('section');
    card.className = 'tool-call';
    const name = doc.createElement('div');
    name.className = 'tool-name';
    name.textContent = call.name;
    const pre = doc.createElement('pre');
    pre.className = 'tool-arguments';
    card.append(name, pre);
    this._container.append(card);
    return { card, pre, parser: new PartialJSON(), fed: 0, broken: false };
  }
}

/** The snapshot, two-space indented ('' before a value started). */
function pretty(parser) {
  return parser.hasValue ? JSON.stringify(parser.value, null, 2) : '';
}

/**
 * A field under a card for the result of its call, and a Send button; `onSend(text)` gets what was typed,
 * once, and the form then shows it as sent.
 * @param {HTMLElement} card
 * @param {string} name the function's name (for the placeholder)
 * @param {(text: string) => void} onSend
 */
export function resultForm(card, name, onSend) {
  const doc = card.ownerDocument;
  const form = doc.createElement('form');
  form.className = 'tool-result';
  const field = doc.createElement('textarea');
  field.rows = 2;
  field.placeholder = `The result of ${name} (the page runs no tool: you give it)`;
  const button = doc.createElement('button');
  button.type = 'submit';
  button.textContent = 'Send result';
  form.append(field, button);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    field.readOnly = true;
    button.disabled = true;
    onSend(field.value);
  });
  card.append(form);
  return form;
}
