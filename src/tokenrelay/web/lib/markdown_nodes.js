// Markdown -> a safe description of DOM nodes (inside `tokenrelay/markdown`, and the page's). markdown-it
// parses; this module decides what may reach the page. Model output is untrusted text, and the page's rule is that it can never inject markup or script, so:
//
//   - markdown-it runs with html: false, so raw HTML in the reply stays text (and any html token a future
//     option or plugin let through is still written as text below);
//   - links and autolinks pass validateLink = isSafeHref, the browser's own URL parser allowing http:,
//     https:, mailto: and relative links; the renderer checks every href again before it writes one;
//   - images become links to their source rather than <img>: a reply must not make the browser fetch a URL
//     on its own (an image URL is the classic way to leak a conversation), and the CSP's img-src would
//     block most of them anyway;
//   - the output is a plain tree, {tag, attrs, children} with strings for text, and only the tags and
//     attributes listed below ever appear in it; view.js turns it into nodes with createElement,
//     setAttribute and createTextNode, never innerHTML.
//
// Reference-style link definitions ("[id]: /url") are switched off: a definition can come after the text
// that uses it, which would change a block that streaming has already closed. They show as written.

/** Every element the renderer can produce. */
// prettier-ignore
export const ALLOWED_TAGS = new Set([
  'a', 'blockquote', 'br', 'code', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr', 'li', 'ol', 'p', 'pre', 's',
  'span', 'strong', 'table', 'tbody', 'td', 'th', 'thead', 'tr', 'ul',
]);

/** Every attribute the renderer can produce (values: see renderTokens). */
export const ALLOWED_ATTRS = new Set(['class', 'href', 'rel', 'start', 'target', 'title']);

/**
 * Every style the renderer can set (through CSSOM, never a style attribute), with the values it accepts:
 * a highlighter's token colours and font styles (shiki.js).
 * @type {Readonly<Record<string, RegExp>>}
 */
export const ALLOWED_STYLES = Object.freeze({
  color: /^(?:#[0-9a-fA-F]{3,8}|var\(--[A-Za-z0-9_-]{1,64}\))$/,
  fontStyle: /^italic$/,
  fontWeight: /^bold$/,
  textDecoration: /^(?:underline|line-through|underline line-through)$/,
});

const SAFE_PROTOCOLS = new Set(['http:', 'https:', 'mailto:']);
// Relative links resolve against a base of a safe scheme; only an absolute URL can name another scheme.
const RELATIVE_BASE = 'https://relative.invalid/';
const BLOCK_TAGS = new Set('blockquote h1 h2 h3 h4 h5 h6 li ol p table tbody td th thead tr ul'.split(' '));
const INLINE_TAGS = new Set(['em', 'strong', 's']);
const ALIGN = /^text-align:(left|center|right)$/;
const LANGUAGE = /^[A-Za-z0-9_+#.-]{1,40}$/;

/**
 * Whether `href` may be written as a link: what the browser's URL parser makes of it (the same parser that
 * will follow the link, so tabs, newlines, case and leading spaces cannot hide a scheme) must be http:,
 * https: or mailto:.
 * @param {string} href
 */
export function isSafeHref(href) {
  if (typeof href !== 'string' || href === '') return false;
  try {
    return SAFE_PROTOCOLS.has(new URL(href, RELATIVE_BASE).protocol);
  } catch {
    return false;
  }
}

/**
 * A configured markdown-it instance. The library comes in as an argument so the same code runs in the
 * browser (the page imports /static/vendor/markdown-it.esm.min.mjs) and under node (`markdown-it/browser`,
 * the very same file).
 * @param {new (options: object) => any} MarkdownIt the library's default export
 */
export function createMarkdown(MarkdownIt) {
  const md = new MarkdownIt({ html: false, linkify: false, typographer: false });
  md.disable('reference');
  md.validateLink = isSafeHref;
  return md;
}

/**
 * @typedef {string | {
 *   tag: string, attrs: Record<string, string> | null, children: Node[], box?: boolean,
 *   style?: Record<string, string>,
 * }} Node
 * A text node is a string; an element lists its tag, attributes and children. `box`: a <span> the view lays
 * out as a block of its own (display: block), for the lines of an open code block (blocks.js); `style`:
 * properties of ALLOWED_STYLES, set through CSSOM (a highlighter's colours).
 */

/**
 * @typedef {(code: string, language: string) => Node[] | null} Highlighter
 * Nodes for a code block's content (spans with classes and text: code.js), or null to keep it plain text.
 */

/**
 * Describe block tokens `tokens[from..to)` (from md.parse) as nodes. Built from the token stream, not from
 * markdown-it's HTML, so text can only ever be text. Concatenating the results for consecutive slices cut at
 * top-level block starts gives the result for the whole range; blocks.js relies on that.
 * @param {any[]} tokens
 * @param {Highlighter | null} highlight for the content of fenced code blocks that name a language
 * @returns {Node[]}
 */
export function renderTokens(tokens, from = 0, to = tokens.length, highlight = null) {
  const root = element('', null);
  const stack = [root];
  for (let i = from; i < to; i++) {
    const token = tokens[i];
    const top = stack[stack.length - 1];
    if (token.nesting === -1) {
      stack.pop();
    } else if (token.nesting === 1) {
      // Hidden paragraphs (tight lists) and unknown containers add no element: their content goes to the
      // parent, and the parent is pushed again so that the closing token pops it.
      if (!makesElement(token)) {
        stack.push(top);
      } else {
        stack.push(append(top, element(token.tag, blockAttrs(token))));
      }
    } else if (token.type === 'inline') {
      renderInline(token.children ?? [], top);
    } else if (token.type === 'fence' || token.type === 'code_block') {
      top.children.push(codeBlock(token.info, token.content, highlight));
    } else if (token.type === 'hr') {
      append(top, element('hr', null));
    } else if (token.content) {
      // html_block (never produced with html: false) or a token type we do not know: its text, as text.
      text(append(top, element('p', null)), token.content);
    }
  }
  return root.children;
}

/**
 * A fenced or indented code block: <pre><code class="language-…">, its content highlighted when a language
 * is named and a highlighter given, else plain text. blocks.js builds an open fence with it too.
 * @param {string} info the fence's info string (markdown-it's token.info)
 * @param {string} content
 * @param {Highlighter | null} highlight
 * @returns {Node}
 */
export function codeBlock(info, content, highlight) {
  return codeBoxes(info, codeNodes(info, content, highlight));
}

/**
 * The <pre><code> of a code block around `children`: its content (codeNodes), or the boxes of an open
 * fence's lines (blocks.js).
 * @param {string} info
 * @param {Node[]} children
 * @returns {Node}
 */
export function codeBoxes(info, children) {
  const language = codeLanguage(info);
  const code = { tag: 'code', attrs: language === '' ? null : { class: `language-${language}` }, children };
  return { tag: 'pre', attrs: null, children: [code] };
}

/**
 * A code block's content as nodes: highlighted when the info string names a language and a highlighter is
 * given (and it does not decline), else the text.
 * @param {string} info
 * @param {string} content
 * @param {Highlighter | null} highlight
 * @returns {Node[]}
 */
export function codeNodes(info, content, highlight) {
  const language = codeLanguage(info);
  const nodes = language !== '' && highlight !== null ? highlight(content, language) : null;
  return nodes ?? (content === '' ? [] : [content]);
}

/** The language a fence's info string names, or '' (none, or not a plain name). */
function codeLanguage(info) {
  const language = info ? info.trim().split(/\s+/)[0] : '';
  return LANGUAGE.test(language) ? language : '';
}

/** Whether renderTokens draws an element for an opening block token (hidden paragraphs and unknown ones add none). */
export function makesElement(token) {
  return !token.hidden && BLOCK_TAGS.has(token.tag);
}

/**
 * An inline token's children (from md.parseInline, or md.parse's inline tokens) as nodes: what renderTokens
 * puts in the element that holds them.
 * @param {any[]} children
 * @returns {Node[]}
 */
export function inlineNodes(children) {
  const holder = element('', null);
  renderInline(children, holder);
  return holder.children;
}

function renderInline(tokens, parent) {
  const stack = [parent];
  for (const token of tokens) {
    const top = stack[stack.length - 1];
    if (token.nesting === -1) {
      stack.pop();
    } else if (token.nesting === 1) {
      let child = null;
      if (token.type === 'link_open') {
        const href = token.attrGet('href');
        // A link whose target is not safe keeps its text and loses the link.
        if (isSafeHref(href)) child = element('a', linkAttrs(href, token.attrGet('title')));
      } else if (INLINE_TAGS.has(token.tag)) {
        child = element(token.tag, null);
      }
      stack.push(child ? append(top, child) : top);
    } else if (token.type === 'text' || token.type === 'text_special' || token.type === 'html_inline') {
      text(top, token.content);
    } else if (token.type === 'softbreak') {
      text(top, '\n');
    } else if (token.type === 'hardbreak') {
      append(top, element('br', null));
    } else if (token.type === 'code_inline') {
      append(top, element('code', null)).children.push(token.content);
    } else if (token.type === 'image') {
      const alt = plainText(token.children ?? []) || token.attrGet('src') || '';
      const src = token.attrGet('src');
      if (isSafeHref(src)) {
        const attrs = linkAttrs(src, token.attrGet('title'));
        attrs.class = 'image-link';
        text(append(top, element('a', attrs)), alt);
      } else {
        text(top, alt);
      }
    } else if (token.content) {
      text(top, token.content);
    }
  }
}

function blockAttrs(token) {
  if (token.tag === 'ol') {
    const start = token.attrGet('start');
    return start !== null && /^[0-9]{1,9}$/.test(start) ? { start } : null;
  }
  if (token.tag === 'th' || token.tag === 'td') {
    // markdown-it writes alignment as an inline style, which the page's CSP forbids; a class does the same.
    const align = ALIGN.exec(token.attrGet('style') ?? '');
    return align ? { class: `align-${align[1]}` } : null;
  }
  return null;
}

function linkAttrs(href, title) {
  // A link opens in a new tab: following it in this one would throw the conversation away.
  const attrs = { href, rel: 'noopener noreferrer nofollow', target: '_blank' };
  if (title) attrs.title = title;
  return attrs;
}

function plainText(tokens) {
  let out = '';
  for (const token of tokens) {
    if (token.type === 'image') out += plainText(token.children ?? []);
    else if (token.type === 'softbreak' || token.type === 'hardbreak') out += '\n';
    else out += token.content;
  }
  return out;
}

function element(tag, attrs) {
  return { tag, attrs, children: [] };
}

function append(parent, child) {
  parent.children.push(child);
  return child;
}

/** Append text, joining it to a text node just before it: one DOM text node per run of text. */
function text(parent, value) {
  if (value === '') return;
  const children = parent.children;
  const last = children.length - 1;
  if (last >= 0 && typeof children[last] === 'string') children[last] += value;
  else children.push(value);
}
