// Shiki as the Markdown renderer's highlighter (`tokenrelay/markdown`'s createShikiHighlighter). Shiki is
// never bundled: the app creates its highlighter (themes and languages loaded, any engine) and passes it in.
//
// Streaming as with highlight.js (code.js's incrementalHighlighter): complete lines only, each highlighted
// once. Shiki, unlike highlight.js, can go on from where it stopped: each run of lines starts from the
// grammar state the run before ended in, so a comment or string that spans a run's edge is coloured as the
// whole block would colour it (Streamdown instead highlights the whole block again per change).
//
// Shiki colours tokens with inline styles; the renderer writes none (a strict CSP refuses style attributes),
// so a token's colour and font style travel as the node's `style` and the view sets them through CSSOM, each
// value checked against ALLOWED_STYLES first. Text in the block's default colour stays plain text.

import { incrementalHighlighter } from './code.js';

// Shiki's (TextMate's) FontStyle bits.
const ITALIC = 1;
const BOLD = 2;
const UNDERLINE = 4;
const STRIKETHROUGH = 8;

/**
 * @typedef {{
 *   codeToTokens: (code: string, options: {lang: string, theme: string, grammarState?: unknown}) => {
 *     tokens: {content: string, color?: string, fontStyle?: number}[][],
 *     fg?: string,
 *     grammarState?: unknown,
 *   },
 *   getLanguage: (name: string) => unknown,
 *   getLoadedThemes: () => string[],
 * }} ShikiApi
 * What the adapter uses of a Shiki highlighter (createHighlighter's or createHighlighterCore's result).
 */

/**
 * A highlighter function for MarkdownRenderer's `highlighter` option, from a Shiki highlighter.
 * @param {ShikiApi} shiki
 * @param {{theme?: string}} [options] a theme loaded in `shiki` (default: the first loaded)
 * @returns {import('./markdown_nodes.js').Highlighter}
 */
export function createShikiHighlighter(shiki, { theme } = {}) {
  if (typeof shiki?.codeToTokens !== 'function')
    throw new TypeError('createShikiHighlighter needs a Shiki highlighter');
  const name = theme ?? shiki.getLoadedThemes()[0];
  if (typeof name !== 'string')
    throw new TypeError('createShikiHighlighter needs a theme loaded in the highlighter');
  const known = new Map();
  const knows = (language) => {
    let yes = known.get(language);
    if (yes === undefined) {
      try {
        shiki.getLanguage(language);
        yes = true;
      } catch {
        yes = false;
      }
      known.set(language, yes);
    }
    return yes;
  };
  return incrementalHighlighter(knows, (lines, language, state) => {
    const result = shiki.codeToTokens(lines.slice(0, -1), {
      lang: language,
      theme: name,
      ...(state === null ? {} : { grammarState: state }),
    });
    return { nodes: tokenNodes(result.tokens, result.fg), state: result.grammarState ?? null };
  });
}

/** Shiki's lines of tokens as nodes: a <span> with a style per styled token, each line followed by its end. */
function tokenNodes(lines, fg) {
  /** @type {import('./markdown_nodes.js').Node[]} */
  const nodes = [];
  const text = (value) => {
    const last = nodes.length - 1;
    if (last >= 0 && typeof nodes[last] === 'string') nodes[last] += value;
    else nodes.push(value);
  };
  const plain = fg?.toLowerCase();
  for (const line of lines) {
    for (const { content, color, fontStyle = 0 } of line) {
      if (content === '') continue;
      /** @type {Record<string, string>} */
      const style = {};
      if (color && color.toLowerCase() !== plain) style.color = color;
      if (fontStyle > 0) {
        if (fontStyle & ITALIC) style.fontStyle = 'italic';
        if (fontStyle & BOLD) style.fontWeight = 'bold';
        const decorations = [
          fontStyle & UNDERLINE ? 'underline' : '',
          fontStyle & STRIKETHROUGH ? 'line-through' : '',
        ];
        const decoration = decorations.filter(Boolean).join(' ');
        if (decoration) style.textDecoration = decoration;
      }
      if (Object.keys(style).length === 0) text(content);
      else nodes.push({ tag: 'span', attrs: null, children: [content], style });
    }
    text('\n');
  }
  return nodes;
}
