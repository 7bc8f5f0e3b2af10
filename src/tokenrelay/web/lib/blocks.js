// Streaming Markdown, a block at a time: closed blocks are rendered once and never touched again;
// only the open tail is parsed and rendered again as text arrives, so the work per update depends on the
// size of the last block, not on how long the reply already is.
//
// Which blocks are closed. The text since the last commit (the tail) is parsed with markdown-it and cut into
// its top-level blocks. A top-level block is closed once a later top-level block has begun on a complete
// line (one that has its line end) and the line after that one is complete too. In CommonMark a line's kind
// is settled by the line itself and the containers before it, except for the look-ahead constructs, which
// reach back one line: a setext underline makes the paragraph above it a heading, and a table delimiter row
// makes the line above it a table header, splitting it from a paragraph it belonged to. So a partial line
// can create or undo a block start on the line just above it, and nothing reaches further back (reference
// definitions would: they are off, see markdown_nodes.js). Hence the two complete lines:
//
//   "- a\n\n2"           the list is open: "2" may still become "2. b", the list's next item
//   "- a\n\n2\nx\n"      the list is closed: "2" starts a paragraph whatever follows
//   "p\nh | i\n-|-"      p is open: "-|-" makes "h | i" a table now, but "-|-x" would make it p's second line
//   "```\ncode"         open until the closing fence, whatever blank lines come inside
//
// An open fenced code block is the one block that can grow without bound while nothing closes (streamdown#574:
// a 58,000-character open fence), so it is not parsed again: while the tail is a fence opened at the left
// margin and not yet closed, update() scans only the lines that arrived for the closing fence and describes
// the block directly (codeBlock, as renderTokens would), with the highlighter asked for the new lines only.
// Work per update is then the new text's, not the block's.
//
// Most updates only add a few words to the last line of the open block, and parsing the block again cannot
// change anything but the last text node: _extend() says when that is certain and then extends the last
// update's description instead. When the words hold Markdown characters (an emphasis or code span closing)
// and the tail ends in a paragraph whose last line is growing, only that paragraph's inline content can
// change: _reinline() parses it alone. The rules for both are in open_line.js; anything they are not sure
// of is parsed.
//
// An open tail longer than MAX_OPEN_PARSE that neither path covers is drawn as plain text until it closes or
// the text ends (then it is parsed once): a frame never parses more than that.
//
// Contract (tested at every byte offset, one byte at a time, with random splits, and against markdown-it
// parsing the whole text at once): for any way of cutting the text into pushes, with update() after any of
// them, the closed nodes joined over update() and finish() equal renderTokens(md.parse(whole)). Closing a
// block one line late costs nothing but a re-render; closing it early would freeze a wrong one.

import { codeBlock, codeBoxes, codeNodes, inlineNodes, renderTokens } from './markdown_nodes.js';
import { EXTENDS, lastParagraph, settledLine, trimSpaces } from './open_line.js';

/**
 * @typedef {import('./markdown_nodes.js').Node} Node
 * @typedef {{closed: Node[], open: Node[] | null}} Update
 * `closed`: nodes of blocks closed by this update, to be appended once and kept; `open`: the nodes that
 * now stand for the open tail (they replace the previous ones), or null when the tail did not change.
 */

export class BlockRenderer {
  /**
   * @param {{parse: (src: string, env: object) => any[], parseInline: (src: string, env: object) => any[]}} md
   *   from createMarkdown()
   * @param {{highlight?: import('./markdown_nodes.js').Highlighter | null}} options code.js's createHighlighter()
   */
  constructor(md, { highlight = null } = {}) {
    this._md = md;
    this._highlight = highlight;
    this._tail = '';
    this._dirty = false;
    this._cr = false; // the last push ended in CR, already turned into LF: an LF opening the next is its pair
    this._finished = false;
    this._fence = undefined; // the open fence the tail starts with (see _openFence), null for none
    this._added = ''; // the text pushed since the last update
    this._lineStart = 0; // where the tail's last line starts
    this._lastOpen = null; // the last update's description of the whole tail, when _extend() may extend it
    this._paragraph = null; // the paragraph the tail ends in, when _reinline() may parse it alone
  }

  /** The text not yet in a closed block. */
  get tail() {
    return this._tail;
  }

  /** Add text; nothing is parsed until update(). */
  push(text) {
    if (this._finished) throw new Error('BlockRenderer.push() after finish()');
    if (text === '') return;
    // markdown-it reads CRLF and a lone CR as LF; doing it here, across pushes, keeps line numbers (the
    // token maps) and offsets in this text the same thing.
    if (this._cr && text.charCodeAt(0) === 10) text = text.slice(1);
    this._cr = text.charCodeAt(text.length - 1) === 13;
    const normal = text.replace(/\r\n?/g, '\n');
    this._tail += normal;
    this._added += normal;
    const end = normal.lastIndexOf('\n');
    if (end >= 0) this._lineStart = this._tail.length - normal.length + end + 1;
    this._dirty = true;
  }

  /** Parse the tail; close what can no longer change. @returns {Update} */
  update() {
    if (!this._dirty) return { closed: [], open: null };
    this._dirty = false;
    const added = this._added;
    this._added = '';
    const fence = this._openFence();
    if (fence !== null) {
      this._lastOpen = null;
      this._paragraph = null;
      return { closed: [], open: [this._openCode(fence)] };
    }
    const extended = this._extend(added);
    if (extended !== null) {
      this._lastOpen = extended;
      return { closed: [], open: extended };
    }
    const reinlined = this._reinline();
    if (reinlined !== null) {
      this._lastOpen = reinlined;
      return { closed: [], open: reinlined };
    }
    const tail = this._tail;
    this._paragraph = null;
    if (tail.length > MAX_OPEN_PARSE) {
      // A block this long that still does not close (a megabyte line of delimiters, a table of ten thousand
      // columns: markdown-it takes seconds over them) is shown as its text until the end, which parses it once.
      this._lastOpen = null;
      return { closed: [], open: [{ tag: 'p', attrs: null, children: [tail] }] };
    }
    const tokens = parse(this._md, tail);
    const starts = topLevelStarts(tokens);
    const lineStarts = lineOffsets(tail);
    // The last block whose start is settled: every block before it is closed.
    let cut = 0;
    for (let k = starts.length - 1; k > 0; k--) {
      if (settledStart(tail, lineStarts, tokens[starts[k]].map[0])) {
        cut = k;
        break;
      }
    }
    // Blocks that nothing after them can change close too, even with no block after them yet.
    while (cut < starts.length && isFinal(tail, lineStarts, tokens[starts[cut]])) cut++;
    const hl = this._highlight;
    if (cut === 0) {
      this._lastOpen = renderTokens(tokens, 0, tokens.length, hl);
      this._paragraph = lastParagraph(tokens, 0, tail, lineStarts.length, this._lineStart);
      return { closed: [], open: this._lastOpen };
    }
    const split = cut < starts.length ? starts[cut] : tokens.length;
    // The new tail starts at the next block, or past the blank lines after the last one.
    let line = cut < starts.length ? tokens[split].map[0] : tokens[starts[cut - 1]].map[1];
    if (cut === starts.length) while (line + 1 < lineStarts.length && isBlank(tail, lineStarts, line)) line++;
    const offset = lineStarts[line];
    this._tail = tail.slice(offset);
    this._lineStart -= offset;
    this._fence = undefined;
    this._lastOpen = renderTokens(tokens, split, tokens.length, hl);
    this._paragraph = lastParagraph(tokens, split, this._tail, lineStarts.length - line, this._lineStart);
    return { closed: renderTokens(tokens, 0, split, hl), open: this._lastOpen };
  }

  /** End of the text: the tail is rendered as closed too. @returns {Update} */
  finish() {
    if (this._finished) return { closed: [], open: null };
    this._finished = true;
    const tokens = this._tail === '' ? [] : parse(this._md, this._tail);
    const closed = renderTokens(tokens, 0, tokens.length, this._highlight);
    this._tail = '';
    this._lineStart = 0;
    this._dirty = false;
    this._lastOpen = null;
    this._paragraph = null;
    return { closed, open: [] };
  }

  /**
   * The last description with `added` joined to its last text, when parsing the tail again is certain to
   * give exactly that (EXTENDS); else null.
   */
  _extend(added) {
    const open = this._lastOpen;
    const tail = this._tail;
    const before = tail.length - added.length;
    if (open === null || added === '' || before <= 0) return null;
    // Spaces at the end are not shown (markdown-it trims a block's text): they wait in the tail and join
    // the description when a word follows them.
    const shown = trimSpaces(added);
    if (shown !== '' && !EXTENDS.text.test(shown)) return null;
    let end = before - 1; // the last character shown before `added`
    while (end >= this._lineStart && tail.charCodeAt(end) === 32) end--;
    if (end < this._lineStart || !EXTENDS.last.test(tail[end])) return null;
    if (!settledLine(tail.slice(this._lineStart, before))) return null;
    // The last block, down its last children, must end in text; a table is not extended (a row's cells past
    // the header's are dropped, so the end of the source need not be the last text shown).
    const path = [];
    let nodes = open;
    for (;;) {
      const last = nodes.length - 1;
      if (last < 0) return null;
      const node = nodes[last];
      if (typeof node === 'string') {
        if (node.length === 0 || node[node.length - 1] !== tail[end]) return null;
        break;
      }
      if (node.tag === 'table' || node.tag === 'pre' || node.tag === 'code' || node.tag === 'a') return null;
      path.push(node);
      nodes = node.children;
    }
    if (shown === '') return open;
    const more = tail.slice(end + 1, before) + shown;
    return changeLast(open, path.length, (text) => text + more);
  }

  /**
   * The last description with its last paragraph's inline content parsed again alone, when the text added
   * since the parse that found it (_paragraph) only lengthened the paragraph's last line and that line's kind
   * cannot change (see lastParagraph): the blocks stay as they were, only the paragraph's emphasis, code
   * spans and links can differ. markdown-it gives a paragraph's inline content the same parse alone
   * (parseInline) as within the whole text. Else null.
   */
  _reinline() {
    const paragraph = this._paragraph;
    const open = this._lastOpen;
    const tail = this._tail;
    if (paragraph === null || open === null || this._lineStart !== paragraph.lineStart) return null;
    if (tail.length > MAX_OPEN_PARSE) return null;
    const content = (paragraph.content + tail.slice(paragraph.end)).trimEnd();
    const [inline] = this._md.parseInline(content, {});
    const children = inlineNodes(inline?.children ?? []);
    return changeLast(open, paragraph.depth - 1, (node) => ({ ...node, children }));
  }

  /**
   * The open fence's block. Its complete lines go into boxes of CODE_BOX characters or so, each described
   * once and laid out by the browser as a block of its own, so that a frame lays out and paints the last
   * box, not the whole block (a <pre> is one run of text to the browser: streamed into as one, the layout of
   * a 58,000-character block grew 9x from its first tenth to its last). The closing fence (or the end)
   * makes it one block again, as markdown-it renders it.
   */
  _openCode(fence) {
    const tail = this._tail;
    const hl = this._highlight;
    let end;
    while ((end = tail.indexOf('\n', fence.boxed + CODE_BOX - 1)) >= 0) {
      fence.boxes.push(box(codeNodes(fence.info, tail.slice(fence.boxed, end + 1), hl)));
      fence.boxed = end + 1;
    }
    if (fence.boxes.length === 0) return codeBlock(fence.info, tail.slice(fence.start), hl);
    const rest = box(codeNodes(fence.info, tail.slice(fence.boxed), hl));
    return codeBoxes(fence.info, [...fence.boxes, rest]);
  }

  /**
   * The fence the tail opens, when it is still open: {info, start (where its content starts), scanned
   * (where the lines not yet checked for a closing fence start)}; null when the tail is anything else, or
   * when a line (the partial last one included) closes it: then markdown-it parses the tail as usual.
   * Only a fence at the left margin whose info string markdown-it would keep as it is (no escapes or
   * entities) takes this path; any other is parsed.
   */
  _openFence() {
    const tail = this._tail;
    if (this._fence === undefined) {
      const end = tail.indexOf('\n');
      const opener = end < 0 ? null : FENCE_OPEN.exec(tail.slice(0, end));
      if (opener === null) {
        // Not a fence, or its first line is not complete yet (the info string may grow).
        if (end >= 0) this._fence = null;
        return null;
      }
      const [, marker, info] = opener;
      if ((marker[0] === '`' && info.includes('`')) || /[\\&]/.test(info)) {
        this._fence = null;
        return null;
      }
      const start = end + 1;
      this._fence = {
        marker,
        info: info.trim(),
        start,
        scanned: start,
        closed: false,
        boxes: [],
        boxed: start,
      };
    }
    const fence = this._fence;
    if (fence === null || fence.closed) return null;
    // Complete lines since the last look, then the partial last line: none may be a closing fence.
    let at = fence.scanned;
    for (let end = tail.indexOf('\n', at); end >= 0; end = tail.indexOf('\n', at)) {
      if (closesFence(tail, at, end, fence.marker)) {
        fence.closed = true;
        return null;
      }
      at = end + 1;
    }
    fence.scanned = at;
    if (closesFence(tail, at, tail.length, fence.marker)) return null;
    return fence;
  }
}

/** Characters of complete lines in each box of an open code block (see _openCode). */
export const CODE_BOX = 2048;

/**
 * A new description: `list` with the node `depth` levels down its last children changed, copied along that
 * path only (the rest is shared with the old one, which patch() then skips as unchanged).
 * @param {Node[]} list
 * @param {number} depth
 * @param {(node: any) => Node} change
 * @returns {Node[]}
 */
function changeLast(list, depth, change) {
  const copy = list.slice();
  const last = copy.length - 1;
  copy[last] =
    depth === 0
      ? change(copy[last])
      : { ...copy[last], children: changeLast(copy[last].children, depth - 1, change) };
  return copy;
}

function box(children) {
  return { tag: 'span', attrs: null, children, box: true };
}

/** The longest open tail parsed again while it streams (characters); longer, it is drawn as text. */
export const MAX_OPEN_PARSE = 100_000;

// A fence opener at the left margin: three or more backticks or tildes, then the info string.
const FENCE_OPEN = /^(`{3,}|~{3,})(.*)$/;

/** Whether tail[from, to) is a closing fence for `marker` (CommonMark: up to three spaces, at least as many
 * of the same character, then only spaces or tabs). */
function closesFence(tail, from, to, marker) {
  let i = from;
  while (i < to && i - from < 4 && tail.charCodeAt(i) === 32) i++;
  if (i - from > 3) return false;
  const char = marker.charCodeAt(0);
  let run = 0;
  while (i < to && tail.charCodeAt(i) === char) {
    i++;
    run++;
  }
  if (run < marker.length) return false;
  for (; i < to; i++) {
    const c = tail.charCodeAt(i);
    if (c !== 32 && c !== 9) return false;
  }
  return true;
}

/**
 * markdown-it's tokens for `text`; when its nesting limit (maxNesting) was reached, where it stops and drops
 * the rest of the text, the text as one paragraph of plain text instead: nothing is lost.
 */
function parse(md, text) {
  const tokens = md.parse(text, {});
  const limit = (md.options?.maxNesting ?? 100) - 1;
  if (!tokens.some((token) => token.level >= limit)) return tokens;
  const open = { type: 'paragraph_open', tag: 'p', nesting: 1, level: 0, map: [0, 1], hidden: false };
  const inline = {
    type: 'inline',
    tag: '',
    nesting: 0,
    level: 1,
    children: [{ type: 'text', content: text, nesting: 0 }],
  };
  return [open, inline, { type: 'paragraph_close', tag: 'p', nesting: -1, level: 0, hidden: false }];
}

/** Indexes of the tokens that begin a top-level block (an opening or a self-contained token at level 0). */
function topLevelStarts(tokens) {
  const starts = [];
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i].level === 0 && tokens[i].nesting !== -1) starts.push(i);
  }
  return starts;
}

/** Whether line `line` of `text` is complete and holds only spaces or tabs. */
function isBlank(text, lineStarts, line) {
  if (line < 0 || line + 1 >= lineStarts.length) return false;
  for (let i = lineStarts[line], end = lineStarts[line + 1] - 1; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c !== 32 && c !== 9) return false;
  }
  return true;
}

/**
 * Whether a top-level block starting on `line` starts there for good, closing every block before it: its
 * first line is complete, and either the line after it is complete too (a partial line can only reach back
 * one line: a setext underline, a table's delimiter row) or a blank line comes before it (nothing reaches
 * back over a blank line but a list or an indented code block, and a new top-level block after the blank
 * line has already ended those).
 */
function settledStart(text, lineStarts, line) {
  if (line + 1 >= lineStarts.length) return false;
  return line + 2 < lineStarts.length || isBlank(text, lineStarts, line - 1);
}

/**
 * Whether the top-level block that `token` opens is final with nothing after it yet: a paragraph, heading,
 * block quote, table or rule followed by a complete blank line (which ends each of them; a list or an
 * indented code block can go on after one), or a fenced code block whose closing line is complete.
 */
function isFinal(text, lineStarts, token) {
  const [first, end] = token.map;
  if (FINAL_BEFORE_BLANK.has(token.type)) return isBlank(text, lineStarts, end);
  if (token.type !== 'fence' || end - 1 <= first || end >= lineStarts.length) return false;
  return closesFence(text, lineStarts[end - 1], lineStarts[end] - 1, token.markup);
}

const FINAL_BEFORE_BLANK = new Set(['paragraph_open', 'heading_open', 'blockquote_open', 'table_open', 'hr']);

/** Offsets where each line of `text` starts; a line is complete when the next one has an entry. */
function lineOffsets(text) {
  const starts = [0];
  for (let at = text.indexOf('\n'); at >= 0; at = text.indexOf('\n', at + 1)) starts.push(at + 1);
  return starts;
}
