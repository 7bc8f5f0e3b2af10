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
 * @returns {import('./markdown.js').Node[] | null}
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
 * A highlighter for renderTokens: (code, language) → nodes, or null to leave the code as plain text.
 * Only a language highlight.js knows is highlighted (no guessing: auto-detection of a half-streamed block
 * would flicker between languages).
 *
 * While a code block streams, renderTokens asks for it again at every frame. Only its complete lines are
 * highlighted, and the last result is kept: a frame that adds to the last line costs no highlighting at
 * all, and the line is coloured once its line end arrives. A closed block's content ends with its line end,
 * so it is highlighted whole; the result for a text never depends on how it was streamed.
 * @param {{getLanguage: (name: string) => unknown, highlight: (code: string, options: object) => {value: string}}} hljs
 */
export function createHighlighter(hljs) {
  const kept = new Map(); // `${language}\n${lines}` → nodes, the few most recent
  const highlightLines = (lines, language) => {
    const key = `${language}\n${lines}`;
    let nodes = kept.get(key);
    if (nodes === undefined) {
      try {
        nodes = readHighlighted(hljs.highlight(lines, { language, ignoreIllegals: true }).value);
      } catch {
        nodes = null;
      }
      kept.set(key, nodes);
      if (kept.size > 8) kept.delete(kept.keys().next().value);
    }
    return nodes;
  };
  return (code, language) => {
    if (!language || code.length > MAX_HIGHLIGHT || !hljs.getLanguage(language)) return null;
    const end = code.lastIndexOf('\n') + 1;
    const nodes = end > 0 ? highlightLines(code.slice(0, end), language) : [];
    if (nodes === null) return null;
    return end < code.length ? [...nodes, code.slice(end)] : nodes;
  };
}
