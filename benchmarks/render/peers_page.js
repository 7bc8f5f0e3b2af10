// The page side of benchmarks/render/peers.js (bundled by it with esbuild): the same reply appended token by
// token to tokenrelay's MarkdownRenderer (the npm package), Streamdown (React) and streaming-markdown, a few
// tokens per animation frame, with user-timing marks that the driver's Chromium trace cuts into tenths.

import { createElement } from 'react';
import { createRoot } from 'react-dom/client';
import { Streamdown } from 'streamdown';
import * as smd from 'streaming-markdown';
import { MarkdownRenderer } from 'tokenrelay/markdown';
import { openCodeTokens, replyTokens } from './reply.js';

// view.js's GROUP_SIZE, for the plain-lines row.
const VIEW_GROUP_SIZE = 16;

const RENDERERS = {
  // The driver alone: the text goes nowhere. Its time (frames, timers, marks) is in every other row too, and
  // taken from them gives each renderer's own work.
  driver() {
    return { append() {}, finish() {} };
  },
  // About the least a renderer that writes every frame can cost: each line of the text as it comes (not
  // Markdown) in a <div> of its own, growing by appendData, the divs grouped as tokenrelay's blocks are. Not in
  // the default rows: run it with --renderers to see how much of a row is the browser's own work for text
  // that grows every frame.
  'plain-lines'(container) {
    let group = null;
    let node = null;
    let pending = '';
    let asked = false;
    const write = () => {
      asked = false;
      const lines = pending.split('\n');
      pending = '';
      lines.forEach((line, i) => {
        if (node === null || i > 0) {
          // Groups skipped off screen: what tokenrelay's view does with blocks (view.js, _appendBlock).
          if (group === null || group.childNodes.length >= VIEW_GROUP_SIZE) {
            group = container.appendChild(document.createElement('div'));
            group.style.contentVisibility = 'auto';
            group.style.containIntrinsicSize = 'auto 800px';
          }
          node = group.appendChild(document.createElement('div')).appendChild(document.createTextNode(''));
        }
        if (line !== '') node.appendData(line);
      });
    };
    return {
      append(token) {
        pending += token;
        if (asked) return;
        asked = true;
        requestAnimationFrame(write);
      },
      finish() {},
    };
  },
  tokenrelay(container) {
    const renderer = new MarkdownRenderer(container);
    return { append: (token) => renderer.append(token), finish: () => renderer.finish() };
  },
  streamdown(container) {
    // As an AI SDK app does: the message's text so far, rendered again at each update.
    const root = createRoot(container);
    let text = '';
    return {
      append(token) {
        text += token;
        root.render(createElement(Streamdown, null, text));
      },
      finish() {
        root.render(createElement(Streamdown, { isAnimating: false }, text));
      },
    };
  },
  'streaming-markdown'(container) {
    const parser = smd.parser(smd.default_renderer(container));
    return { append: (token) => smd.parser_write(parser, token), finish: () => smd.parser_end(parser) };
  },
};

const WORKLOADS = { reply: (n) => replyTokens(n), 'open-code': (n) => openCodeTokens(n) };
const frame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

/**
 * Append the workload's tokens, `perFrame` per animation frame; marks `tenth-0` … `tenth-10` at the
 * boundaries of each tenth of the tokens, and `done` once the end is drawn. Resolves with the sizes.
 */
async function run(name, workload, size, perFrame, follow = false) {
  const container = document.getElementById('reply');
  container.replaceChildren();
  if (follow) {
    // A chat view that follows the reply: a scroller as tall as the window, taken to its end after each frame
    // as chat apps do (app.js too), so the block being written is on screen.
    document.body.style.margin = '0';
    Object.assign(container.style, { height: '100vh', overflowY: 'auto' });
  }
  const holder = document.createElement('div');
  container.append(holder);
  const tokens = WORKLOADS[workload](size);
  const renderer = RENDERERS[name](holder);
  await frame();
  // The end of tenth k is token min(n, k * ceil(n / 10)): marked once it has been drawn.
  const tenth = Math.ceil(tokens.length / 10);
  let next = 1;
  performance.mark('tenth-0');
  for (let i = 0; i < tokens.length; i += perFrame) {
    const end = Math.min(i + perFrame, tokens.length);
    for (let k = i; k < end; k++) renderer.append(tokens[k]);
    await frame();
    if (follow) container.scrollTop = container.scrollHeight;
    for (; next <= 10 && end >= Math.min(tokens.length, next * tenth); next++)
      performance.mark(`tenth-${next}`);
  }
  await renderer.finish();
  await frame();
  await frame();
  performance.mark('done');
  return { tokens: tokens.length, characters: tokens.join('').length, shown: holder.textContent.length };
}

window.bench = { run, ready: true };
