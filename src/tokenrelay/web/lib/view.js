// The last hop: rendered blocks -> DOM, at most one write per animation frame (MarkdownRenderer, the
// `tokenrelay/markdown` entry's class; the page draws its replies with it too). Text from the network is only
// buffered when it arrives; one frame callback moves what is due into the BlockRenderer and brings the open
// tail's nodes up to date, in one go, changing only what differs. Once a block is closed its nodes are never
// touched again. The container holds the blocks in groups: <div class="blocks">block…</div>
//
// Bounded work per frame: a frame whose update took longer than FRAME_BUDGET_MS (a huge open block: a
// megabyte line, a table of ten thousand columns) makes the next updates wait that many budgets, the text
// gathering meanwhile, so the tab keeps answering however hostile the text; the end always draws it all.

import { BlockRenderer } from './blocks.js';
import { createHighlighter } from './code.js';
import { ALLOWED_ATTRS, ALLOWED_STYLES, ALLOWED_TAGS, createMarkdown } from './markdown_nodes.js';

// Blocks go into <div class="blocks"> groups of this many. Layout visits every child of a box, even clean
// ones, so a reply of a thousand blocks side by side makes each frame's layout a thousand steps long; in
// groups it stays a few dozen (measured in Chromium: 0.9 ms vs 0.17 ms a frame at 1000 blocks). The group
// being written is painted again whole at each frame it is on screen, so it is kept small, but every group
// is a paint layer to commit: on the 10k-token reply, followed at its end, groups of 16 took 0.92x the main
// thread of groups of 32 (Paint 618 -> 411 ms), 8 and 4 more than 16 (Commit grew), three rounds each.
const GROUP_SIZE = 16;
// A frame's share of the renderer's work; an update over it makes the next ones wait (see above).
const FRAME_BUDGET_MS = 8;

/**
 * DOM nodes for a node description: createElement, setAttribute and createTextNode only, so description
 * text can never become markup. A tag or attribute outside the renderer's lists is refused outright.
 * @param {Document} doc
 * @param {import('./markdown_nodes.js').Node[]} nodes
 * @returns {Node[]}
 */
export function buildNodes(doc, nodes) {
  return nodes.map((node) => draw(doc, node).node);
}

/** The element for a description, without its children (draw adds them). */
function element(doc, node) {
  if (!ALLOWED_TAGS.has(node.tag)) throw new Error(`refusing to build <${node.tag}>`);
  const el = doc.createElement(node.tag);
  // Set through CSSOM, which a strict style-src allows (a style attribute it would refuse).
  if (node.box === true) el.style.display = 'block';
  if (node.style) {
    for (const [name, value] of Object.entries(node.style)) {
      if (!Object.hasOwn(ALLOWED_STYLES, name) || !ALLOWED_STYLES[name].test(value))
        throw new Error(`refusing to set style ${name}: ${value}`);
      el.style[name] = value;
    }
  }
  if (node.attrs) {
    for (const [name, value] of Object.entries(node.attrs)) {
      if (!ALLOWED_ATTRS.has(name)) throw new Error(`refusing to set ${name}=`);
      el.setAttribute(name, value);
    }
  }
  return el;
}

/**
 * What every streamed view shares: append(text) only buffers (through a Smoother when given) and asks for
 * a frame; the frame hands what is due to the subclass's _draw(text, ended), which does all DOM work. With a
 * Smoother, frames keep coming while it holds any. finish() flushes everything into a last frame; the returned
 * promise resolves after that frame has drawn, with the subclass's _outcome().
 */
export class FrameView {
  /**
   * @param {{
   *   requestFrame?: (callback: (now: number) => void) => unknown,
   *   now?: () => number,
   *   smoother?: import('./smoother.js').Smoother | null,
   *   onWrite?: () => void,
   * }} options onWrite runs right after each DOM write, in the same frame (e.g. to keep the view scrolled)
   */
  constructor({ requestFrame, now, smoother = null, onWrite = () => {} }) {
    this._requestFrame = requestFrame ?? ((cb) => globalThis.requestAnimationFrame(cb));
    this._now = now ?? (() => globalThis.performance.now());
    this._smoother = smoother;
    this._onWrite = onWrite;
    this._buffer = '';
    this._frameRequested = false;
    this._ended = false;
    this._done = null;
    this._resolveDone = null;
    /** DOM writes so far (one per frame at most). */
    this.writes = 0;
  }

  /** Text from the stream; drawn at the next frame (or later, with smoothing). */
  append(text) {
    if (this._ended) throw new Error(`${this.constructor.name}.append() after finish()`);
    if (text === '') return;
    if (this._smoother) this._smoother.push(text, this._now());
    else this._buffer += text;
    this._schedule();
  }

  /** Turn smoothing on (a Smoother) or off (null), keeping the text it held. */
  setSmoother(smoother) {
    if (this._smoother) this._buffer += this._smoother.finish();
    this._smoother = this._ended ? null : smoother;
    if (this._buffer !== '') this._schedule();
  }

  /** The stream is over: draw everything left. Resolves once the last frame has drawn. */
  finish() {
    if (!this._done) {
      this._ended = true;
      this._done = new Promise((resolve) => {
        this._resolveDone = resolve;
      });
      this._schedule();
    }
    return this._done;
  }

  _schedule() {
    if (this._frameRequested) return;
    this._frameRequested = true;
    this._requestFrame((now) => this._frame(now));
  }

  _frame(now) {
    this._frameRequested = false;
    let text = this._buffer;
    this._buffer = '';
    if (this._smoother) text += this._ended ? this._smoother.finish() : this._smoother.take(now);
    if (this._draw(text, this._ended)) {
      this.writes += 1;
      this._onWrite();
    }
    if (this._ended) {
      this._resolveDone(this._outcome());
    } else if (this._smoother && this._smoother.pending > 0) {
      this._schedule();
    }
  }

  /**
   * Draw `text` (possibly empty), and everything left when `ended`. Returns whether the DOM was written.
   * @param {string} text
   * @param {boolean} ended
   * @returns {boolean}
   */
  _draw(text, ended) {
    throw new Error(`${this.constructor.name} does not draw (${text.length}, ${ended})`);
  }

  /** What finish()'s promise resolves with. */
  _outcome() {
    return undefined;
  }
}

/** The markdown-it set up by createMarkdown, once per library. */
const configured = new WeakMap();

/**
 * Streamed Markdown drawn into `container`: `append(text)` as it arrives, `finish()` at the end, or
 * `set(text)` with the whole text so far (for frameworks that hold the text). Safe by default: no raw HTML,
 * only http(s) and mailto links, images as links (markdown_nodes.js). Frames are FrameView's.
 */
export class MarkdownRenderer extends FrameView {
  /**
   * @param {Element} container
   * @param {{
   *   markdownIt: new (options: object) => any,
   *   highlighter?: import('./code.js').HLJSApi | import('./markdown_nodes.js').Highlighter | null,
   *   requestFrame?: (callback: (now: number) => void) => unknown,
   *   now?: () => number,
   *   smoother?: import('./smoother.js').Smoother | null,
   *   onWrite?: () => void,
   *   skipOffscreen?: boolean,
   * }} options markdownIt: markdown-it's default export (the entry passes it); highlighter: highlight.js
   *   (its default export) or a function (code, language) → nodes; skipOffscreen: groups of blocks get
   *   `content-visibility: auto` (the default; false leaves their style alone)
   */
  constructor(container, { markdownIt, highlighter = null, skipOffscreen = true, ...frames }) {
    super(frames);
    this._skipOffscreen = skipOffscreen;
    if (!container || typeof container.appendChild !== 'function')
      throw new TypeError('MarkdownRenderer needs a container element');
    if (typeof markdownIt !== 'function') throw new TypeError('MarkdownRenderer needs markdown-it');
    let md = configured.get(markdownIt);
    if (md === undefined) configured.set(markdownIt, (md = createMarkdown(markdownIt)));
    this._md = md;
    this._highlight =
      typeof highlighter?.highlight === 'function' ? createHighlighter(highlighter) : highlighter;
    this._container = container;
    this._text = ''; // every text appended, for set()
    this._reset();
  }

  /** The text given so far (appended, or the last set()). */
  get text() {
    return this._text;
  }

  append(text) {
    if (typeof text !== 'string') throw new TypeError('MarkdownRenderer.append() takes a string');
    super.append(text);
    this._text += text;
  }

  /**
   * The whole text so far: what extends the last text is appended; any other text is drawn anew (at the
   * next frame, as always). An empty text clears the container.
   * @param {string} text
   */
  set(text) {
    if (typeof text !== 'string') throw new TypeError('MarkdownRenderer.set() takes a string');
    if (text.length >= this._text.length && text.startsWith(this._text)) {
      if (text.length > this._text.length) this.append(text.slice(this._text.length));
      return;
    }
    if (this._ended) throw new Error('MarkdownRenderer.set() after finish()');
    if (this._smoother) this._smoother.finish(); // what it held belongs to the old text
    this._buffer = '';
    this._text = '';
    this._reset();
    this._container.replaceChildren();
    if (text !== '') this.append(text);
  }

  _reset() {
    this._renderer = new BlockRenderer(this._md, { highlight: this._highlight });
    this._open = []; // the open tail's description as drawn
    this._drawn = []; // and what was drawn for it, the last nodes in the container
    this._group = null; // the <div class="blocks"> new blocks go into
    this._wait = 0; // frames to let pass before the next update (the budget, above)
  }

  _draw(text, ended) {
    if (text !== '') this._renderer.push(text);
    if (!ended && this._wait > 0) {
      this._wait -= 1;
      this._schedule(); // the text waits in the BlockRenderer; a later frame draws it
      return false;
    }
    const start = this._now();
    let update;
    try {
      update = ended ? this._renderer.finish() : this._renderer.update();
    } catch (error) {
      // markdown-it failed on this text (none known): the text is shown as text rather than lost.
      update = { closed: [], open: [this._renderer.tail] };
      reportError(error);
    }
    const { closed, open } = update;
    if (closed.length === 0 && open === null) return false;
    const doc = this._container.ownerDocument;
    // The blocks that closed were the first of the open tail, drawn already: patching them into their
    // final form leaves them where they are, usually unchanged. After that nothing touches them again.
    const next = closed.length > 0 ? closed.concat(open ?? []) : (open ?? []);
    const drawn = patchChildren(doc, (node) => this._appendBlock(node), this._open, this._drawn, next);
    this._open = open ?? [];
    this._drawn = drawn.slice(closed.length);
    this._wait = Math.min(60, Math.floor((this._now() - start) / FRAME_BUDGET_MS));
    return true;
  }

  _appendBlock(node) {
    if (this._group === null || this._group.childNodes.length >= GROUP_SIZE) {
      this._group = this._container.appendChild(this._container.ownerDocument.createElement('div'));
      this._group.className = 'blocks';
      // The browser may skip a group's style, layout and paint while it is off screen (content-visibility),
      // keeping its last size. Without it every frame repaints and commits the whole reply's display list
      // (traced: Paint, PrePaint and Commit grew with the reply, 4x from the first tenth of 10k tokens to the
      // last). The group still filling gets it too: a reader scrolled back up does not pay a frame's layout
      // and paint for the tail growing below them (traced on 10k tokens, view at the top: a third less main
      // thread; followed at the end, where it is drawn every frame, no dearer). Set through CSSOM, which a
      // strict style-src allows.
      if (this._skipOffscreen) {
        this._group.style.contentVisibility = 'auto';
        this._group.style.containIntrinsicSize = 'auto 800px';
      }
    }
    return this._group.appendChild(node);
  }
}

function reportError(error) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(error);
}

/**
 * What was drawn for one description node, so that the next frame's patch never has to read the DOM back:
 * an element and what was drawn for its children, or a text node.
 * @typedef {{node: Node, kids: Drawn[] | null}} Drawn
 */

/** Draw a description node, keeping what was drawn for patch. @returns {Drawn} */
function draw(doc, desc) {
  if (typeof desc === 'string') return { node: doc.createTextNode(desc), kids: null };
  const el = element(doc, desc);
  const kids = desc.children.map((child) => draw(doc, child));
  for (const kid of kids) el.appendChild(kid.node);
  return { node: el, kids };
}

/**
 * Make `drawn` (drawn from the descriptions `old`) into what draws `next`, changing only what differs: the
 * open block usually differs from the last frame's by a few characters at the end of one text, and
 * re-creating it whole would make the browser shape and lay out all of it again. New nodes go to `append`.
 * The DOM ends up as buildNodes(next) would make it (the view tests check it at every byte cut).
 * @returns {Drawn[]}
 */
function patchChildren(doc, append, old, drawn, next) {
  const out = [];
  for (let i = 0; i < next.length; i++) {
    if (i < old.length) out.push(patch(doc, old[i], drawn[i], next[i]));
    else {
      const kid = draw(doc, next[i]);
      append(kid.node);
      out.push(kid);
    }
  }
  for (let i = next.length; i < old.length; i++) drawn[i].node.remove();
  return out;
}

function patch(doc, old, drawn, next) {
  if (old === next) return drawn;
  if (typeof next === 'string' && typeof old === 'string') {
    // appendData, not a node per frame nor setting the whole text: in Chromium it makes the new text's
    // layout an update of the old (measured side by side, 3 rounds: main thread 1,762 ms of own work on a
    // 10k-token reply, against 2,068 setting the whole text and 2,473 with a text node per frame).
    if (next.startsWith(old)) drawn.node.appendData(next.slice(old.length));
    else drawn.node.data = next;
    return drawn;
  }
  if (
    typeof next !== 'string' &&
    typeof old !== 'string' &&
    old.tag === next.tag &&
    old.box === next.box &&
    sameAttrs(old.attrs, next.attrs) &&
    sameAttrs(old.style ?? null, next.style ?? null)
  ) {
    const el = drawn.node;
    drawn.kids = patchChildren(
      doc,
      (child) => el.appendChild(child),
      old.children,
      drawn.kids,
      next.children,
    );
    return drawn;
  }
  const replacement = draw(doc, next);
  drawn.node.replaceWith(replacement.node);
  return replacement;
}

function sameAttrs(a, b) {
  if (a === b) return true;
  if (a === null || b === null) return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key]);
}
