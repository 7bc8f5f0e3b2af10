// `tokenrelay/markdown`: MarkdownRenderer with markdown-it already given. The one module of the package that
// imports markdown-it by name; the page, which cannot resolve a bare name (no import map under its CSP),
// uses view.js's MarkdownRenderer and passes the library it loaded from /static/vendor/.

import MarkdownIt from 'markdown-it';
import { MarkdownRenderer as Renderer } from './view.js';

export { ALLOWED_ATTRS, ALLOWED_STYLES, ALLOWED_TAGS, isSafeHref } from './markdown_nodes.js';
export { createShikiHighlighter } from './shiki.js';
export { MAX_HIGHLIGHT } from './code.js';

/**
 * Streamed Markdown into `container`: append(text) / finish(), or set(text); one DOM write per animation
 * frame, only the open block drawn again, no raw HTML, only http(s) and mailto links.
 */
export class MarkdownRenderer extends Renderer {
  /**
   * @param {Element} container
   * @param {Omit<ConstructorParameters<typeof Renderer>[1], 'markdownIt'> & {markdownIt?: any}} [options]
   */
  constructor(container, options = {}) {
    super(container, { markdownIt: MarkdownIt, ...options });
  }
}
