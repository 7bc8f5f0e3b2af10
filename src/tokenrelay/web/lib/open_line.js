// What text added to the open tail can change, for BlockRenderer's two ways around parsing the tail again
// (blocks.js): _extend, when the text can only lengthen the last text node, and _reinline, when it can only
// change the inline content of the paragraph the tail ends in. Both need the line the text goes on to keep
// its kind whatever comes after on that line (settledLine); the rules are here, the renderer applies them.
// Both are checked against markdown-it's parse of the text so far after every update (tests/web/blocks.test.js).

import { makesElement } from './markdown_nodes.js';

// When text added to the tail only extends the last text of the last update's description (_extend):
//   text  the added text has no character that means anything in Markdown inside a line (emphasis, code,
//         escapes, links and images, HTML, entities, tables, strikethrough) nor a line end, and it ends in a
//         character that is not white space (a paragraph's trailing spaces are not shown);
//   last  the tail ended, before it, in such a character too (so no delimiter run, entity or escape is left
//         open at the seam, and no trailing space was dropped);
//   line  the line it goes on already has its kind (settledLine).
// Links are not extended: the text of [a](b) is shown, but [a] alone is not a link.
export const EXTENDS = {
  text: /^[^\n*_`\\[\]()<>&!;|~#=+\-]*[^\s*_`\\[\]()<>&!;|~#=+\-]$/u,
  last: /^[^\s*_`\\[\]()<>&!;|~#=+\-]$/u,
};

const LIST_MARKER = /^(?:[-+*]|[0-9]{1,9}[.)])$/;

/**
 * Whether the kind of a line (so far) is settled whatever text without a line end follows: it starts with
 * a letter, which no block syntax does, or with a complete first word that is no container marker; after a
 * list marker or a quote's ">", the rest of the line is a line of its own inside the container and must be
 * settled too ("1. 2" may become "1. 2." and a list inside the item, "abc\n1. " a list once text follows).
 * @param {string} line
 */
export function settledLine(line) {
  for (;;) {
    line = line.replace(/^[ \t]+/, '');
    if (line === '') return false;
    if (/^\p{L}/u.test(line)) return true;
    if (line[0] === '>') {
      line = line.slice(1);
      continue;
    }
    const word = /^\S+(?=\s)/.exec(line);
    if (word === null) return false;
    if (!LIST_MARKER.test(word[0])) return true;
    line = line.slice(word[0].length);
  }
}

// A line that holds a character none of these is made of can never become a rule, a setext underline or a
// table's delimiter row, however it goes on: the constructs that a line's end can still make of it.
const NOT_A_RULE = /[^-*_=|:\s]/;

/**
 * The paragraph that the tokens of `text` (from `from`, the open tail's) end in, when _reinline may parse
 * its inline content alone while its last line grows: it is the last block, nothing but closings after it,
 * its last line is the text's last (partial) line, and that line is settled and can become no rule,
 * underline or delimiter row. Its content, where the text it came from ends (trailing spaces left out, as
 * markdown-it trims them), and its depth in the description: the elements down to the one holding its
 * inline nodes (its <p>, or the <li> of a tight list whose item it alone fills). Else null.
 * @returns {{content: string, end: number, depth: number, lineStart: number} | null}
 */
export function lastParagraph(tokens, from, text, lines, lineStart) {
  let close = tokens.length - 1;
  while (close >= from && tokens[close].nesting === -1 && tokens[close].type !== 'paragraph_close') close--;
  const open = tokens[close - 2];
  const inline = tokens[close - 1];
  if (close - 2 < from || tokens[close].type !== 'paragraph_close' || open.type !== 'paragraph_open')
    return null;
  if (typeof inline.content !== 'string' || open.map?.[1] !== lines) return null;
  if (open.hidden && tokens[close - 3]?.type !== 'list_item_open') return null;
  const line = text.slice(lineStart);
  if (!settledLine(line) || !NOT_A_RULE.test(line)) return null;
  const end = text.trimEnd().length;
  if (inline.content === '' || inline.content.at(-1) !== text[end - 1]) return null;
  let depth = open.hidden ? 0 : 1;
  const enclosing = [];
  for (let i = from; i < close - 2; i++) {
    if (tokens[i].nesting === 1) enclosing.push(tokens[i]);
    else if (tokens[i].nesting === -1) enclosing.pop();
  }
  for (const token of enclosing) if (makesElement(token)) depth++;
  return { content: inline.content, end, depth, lineStart };
}

/** `text` without the spaces it ends with. */
export function trimSpaces(text) {
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === 32) end--;
  return end === text.length ? text : text.slice(0, end);
}
