// A rendered reply as plain data, to compare what was streamed with markdown-it's one-shot render of the
// whole text: the page's tests (render.test.js) and the npm package's (package.test.js).

import { parseHTML } from 'linkedom';
import MarkdownIt from 'markdown-it';
import { createMarkdown } from '../../src/tokenrelay/web/lib/markdown_nodes.js';

/**
 * A reply's blocks as plain data: [tag, {attrs}, ...children] for an element, a string for a run of text.
 * Blocks inside the view's <div class="blocks"> groups are taken out of them. Self-contained: it runs in
 * Chromium (locator.evaluate) and under node on a linkedom document alike.
 */
export function blockTree(root) {
  function walk(node) {
    const out = [node.nodeName.toLowerCase(), {}];
    for (const attr of Array.from(node.attributes)) out[1][attr.name] = attr.value;
    for (const child of flat(node)) {
      if (child.nodeType === 3) {
        if (typeof out[out.length - 1] === 'string') out[out.length - 1] += child.data;
        else out.push(child.data);
      } else if (child.nodeType === 1) {
        out.push(walk(child));
      }
    }
    return out;
  }
  // A code block's highlighting spans count as their text, and its Copy button as nothing: markdown-it's
  // stock renderer has neither (the highlighting itself is checked on its own below).
  function flat(node) {
    return Array.from(node.childNodes).flatMap((child) => {
      if (child.nodeName === 'BUTTON') return [];
      if (child.nodeName === 'SPAN') return flat(child);
      return [child];
    });
  }
  const blocks = [];
  for (const child of Array.from(root.childNodes)) {
    const group =
      child.nodeType === 1 && child.nodeName === 'DIV' && child.getAttribute('class') === 'blocks';
    blocks.push(...(group ? Array.from(child.childNodes) : [child]));
  }
  const tree = walk({ nodeName: '', attributes: [], childNodes: blocks });
  return tree.slice(2);
}

/**
 * markdown-it's own HTML renderer (not the page's) over the whole text, as a blockTree. Three documented
 * differences are mapped: the page writes table alignment as a class (the CSP forbids style attributes),
 * markdown-it puts a newline between block tags, which the page's DOM does not have, and the page's links
 * open in a new tab without an opener or a referrer (lib/markdown_nodes.js).
 */
export function markdownItTree(text) {
  const html = createMarkdown(MarkdownIt).render(text);
  const { document } = parseHTML(`<!doctype html><html><body>${html}</body></html>`);
  const containers = new Set(['BODY', 'BLOCKQUOTE', 'OL', 'UL', 'LI', 'TABLE', 'THEAD', 'TBODY', 'TR']);
  const tidy = (node) => {
    for (const child of Array.from(node.childNodes)) {
      if (child.nodeType === 3 && containers.has(node.nodeName) && /^\n+$/.test(child.data)) child.remove();
      else if (child.nodeType === 1) tidy(child);
    }
    const align = /^text-align:(left|center|right)$/.exec(node.getAttribute?.('style') ?? '');
    if (align) {
      node.removeAttribute('style');
      node.setAttribute('class', `align-${align[1]}`);
    }
    if (node.nodeName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('rel', 'noopener noreferrer nofollow');
      node.setAttribute('target', '_blank');
    }
  };
  tidy(document.body);
  return blockTree(document.body);
}
