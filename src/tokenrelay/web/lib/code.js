// Syntax highlighting for code blocks, without ever writing HTML (issue 14). highlight.js does the
// highlighting; its public API returns HTML, which the page may not parse (Trusted Types with no policy), so
// this module reads that HTML back into the renderer's node descriptions. highlight.js escapes every piece of
// the code it emits and adds only <span class="hljs-…">, so the reader accepts exactly that and nothing
// else: text, `&amp; &lt; &gt; &quot; &#x27;`, and <span class="…"> / </span> balanced. Anything else makes
// highlight() return null and the block stays plain text.

/** The longest code block that gets highlighted; beyond it, plain text (highlighting is per frame). */
export const MAX_HIGHLIGHT = 20_000;

const TOKEN = /<span class="([a-z0-9_ -]{1,80})">|<\/span>|([^<&]+)|&(amp|lt|gt|quot|#x27);/gy;
const ENTITIES = { amp: '&', lt: '<', gt: '>', quot: '"', '#x27': "'" };

/**
 * highlight.js's HTML for one block, as node descriptions; null when it holds anything else.
 * @param {string} html
 * @returns {import('./markdown_nodes.js').Node[] | null}
 */
export function readHighlighted(html) {
  const root = { tag: '', attrs: null, children: [] };
  const stack = [root];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < html.length) {
    const at = TOKEN.lastIndex;
    const match = TOKEN.exec(html);
    if (match === null || match.index !== at) return null;
    const top = stack[stack.length - 1];
    if (match[1] !== undefined) {
      const span = { tag: 'span', attrs: { class: match[1] }, children: [] };
      top.children.push(span);
      stack.push(span);
    } else if (match[0] === '</span>') {
      if (stack.length === 1) return null;
      stack.pop();
    } else {
      const text = match[2] ?? ENTITIES[match[3]];
      const last = top.children.length - 1;
      if (last >= 0 && typeof top.children[last] === 'string') top.children[last] += text;
      else top.children.push(text);
    }
  }
  return stack.length === 1 ? root.children : null;
}

/**
 * @typedef {{getLanguage: (name: string) => unknown, highlight: (code: string, options: object) => {value: string}}} HLJSApi
 * What the highlighter uses of highlight.js (its default export).
 */

/** How many blocks' highlighted lines are kept (a tail can hold a closed fence and an open one). */
const KEEP = 4;

/**
 * A highlighter for renderTokens: (code, language) → nodes, or null to leave the code as plain text.
 * Only a language highlight.js knows is highlighted (no guessing: auto-detection of a half-streamed block
 * would flicker between languages). highlight.js cannot resume where it stopped, so a construct that spans
 * lines (a block comment, a triple-quoted string) and is cut between two runs (see incrementalHighlighter)
 * is coloured as two pieces: the price of never redoing a finished line (Streamdown re-highlights the whole
 * block per change: its #574, #402). Shiki can resume: shiki.js.
 * @param {HLJSApi} hljs
 * @returns {import('./markdown_nodes.js').Highlighter}
 */
export function createHighlighter(hljs) {
  return incrementalHighlighter(
    (language) => Boolean(hljs.getLanguage(language)),
    (lines, language) => {
      const nodes = readHighlighted(hljs.highlight(lines, { language, ignoreIllegals: true }).value);
      return nodes === null ? null : { nodes, state: null };
    },
  );
}

/**
 * @typedef {(lines: string, language: string, state: unknown) =>
 *   {nodes: import('./markdown_nodes.js').Node[], state: unknown} | null} LineHighlighter
 * Nodes for complete lines (ending in a line end), going on from `state` (what the run before returned;
 * null at a block's start), and the state after them; null (or a throw) to leave them plain.
 */

/**
 * While a code block streams, it is asked for again at every frame. Only complete lines are highlighted,
 * and a line once highlighted never is again: the lines that completed since the block's last call are
 * highlighted on their own (by `highlightLines`, from the state the last run ended in) and their nodes
 * appended, in a <span> per run of lines (so the block's nodes grow by appending, and the view patches only
 * the end). A frame that adds to the last line highlights nothing; the partial last line is plain text until
 * its line end comes. A run longer than MAX_HIGHLIGHT stays plain text.
 * @param {(language: string) => boolean} knows whether a language can be highlighted
 * @param {LineHighlighter} highlightLines
 * @returns {import('./markdown_nodes.js').Highlighter}
 */
export function incrementalHighlighter(knows, highlightLines) {
  /** @type {{language: string, text: string, runs: import('./markdown_nodes.js').Node[], state: unknown}[]} */
  const kept = []; // the most recent blocks first: the complete lines highlighted, their runs, the state after
  const run = (lines, language, state) => {
    if (lines.length > MAX_HIGHLIGHT) return null;
    try {
      return highlightLines(lines, language, state);
    } catch {
      return null;
    }
  };
  return (code, language) => {
    if (!language || !knows(language)) return null;
    const end = code.lastIndexOf('\n') + 1;
    // The block this code continues: the kept one with the longest prefix of it.
    let block;
    for (const k of kept) {
      if (k.language !== language || end < k.text.length || (block && block.text.length >= k.text.length))
        continue;
      if (code.startsWith(k.text)) block = k;
    }
    if (block === undefined) {
      block = { language, text: '', runs: [], state: null };
      if (kept.unshift(block) > KEEP) kept.pop();
    }
    if (end > block.text.length) {
      const lines = code.slice(block.text.length, end);
      const result = run(lines, language, block.state);
      if (result === null && block.runs.length === 0) return null;
      block.runs.push(result === null ? lines : { tag: 'span', attrs: null, children: result.nodes });
      block.state = result?.state ?? null; // after plain lines, the next run starts afresh
      block.text = code.slice(0, end);
    }
    return end < code.length ? [...block.runs, code.slice(end)] : block.runs.slice();
  };
}
