// Render a long reply token by token, in Chromium, with the page's block renderer and with a naive renderer
// that parses and rebuilds the whole message for every token. Both use the same markdown-it setup, the same
// token renderer and the same DOM builder, so the difference is the block approach alone.
//
// One step = what one token costs: take the token, render, write the DOM, and force style and layout (by
// reading the container's height), timed with performance.now(). Every 20 steps the loop yields to the event
// loop, so the browser can collect garbage and draw between them as it would between frames. Paint is not
// included: it would only add to the naive renderer, which repaints the whole reply at every step.
//
// performance.now() is wall-clock time: a step also counts any time the main thread was runnable but not
// running (on a 2-core machine another thread, one of Chromium's own or another process, can hold its
// core for a whole 4 ms scheduler tick). run(..., {mark: true}) brackets each step with performance.mark()
// calls, outside the timed part, so that a Chromium trace of the run (run.js) gives each step's main-thread
// CPU time too.

import MarkdownIt from '/static/vendor/markdown-it.esm.min.mjs';
import { BlockRenderer } from '/static/blocks.js';
import { createMarkdown, renderTokens } from '/static/markdown.js';
import { buildNodes, MarkdownView } from '/static/view.js';
import { replyTokens } from './reply.js';

const md = createMarkdown(MarkdownIt);
const container = document.getElementById('reply');

/** The page's renderer: MarkdownView over a BlockRenderer, with one frame run right after each token. */
function blocksRenderer() {
  let frame = null;
  const view = new MarkdownView({
    container,
    renderer: new BlockRenderer(md),
    requestFrame: (cb) => (frame = cb),
  });
  const runFrame = () => {
    const cb = frame;
    frame = null;
    cb?.(performance.now());
  };
  return {
    step(token) {
      view.append(token);
      runFrame();
    },
    finish() {
      view.end();
      runFrame();
    },
  };
}

/** Re-parse and rebuild the whole message for every token. */
function naiveRenderer() {
  let text = '';
  const draw = () => container.replaceChildren(...buildNodes(document, renderTokens(md.parse(text, {}))));
  return {
    step(token) {
      text += token;
      draw();
    },
    finish: draw,
  };
}

const RENDERERS = { blocks: blocksRenderer, naive: naiveRenderer };
const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));
// The reply is made once per length: made again for every run, the generator's fresh closures were
// compiled again too (--trace-opt: marked for Maglev in every run), work for a V8 helper thread.
const replies = new Map();
const tokensOf = (count) => replies.get(count) ?? replies.set(count, replyTokens(count)).get(count);

/**
 * Run one renderer over `count` tokens; per-step times in ms and the final DOM's text and HTML size.
 * With `mark`, steps are bracketed by the user-timing marks 'step' and 'step-end' (run.js traces them).
 */
async function run(name, count, { mark = false } = {}) {
  container.replaceChildren();
  const tokens = tokensOf(count);
  const renderer = RENDERERS[name]();
  const steps = new Float64Array(tokens.length + 1);
  const layouts = new Float64Array(tokens.length + 1);
  let sink = 0;
  for (let i = 0; i <= tokens.length; i++) {
    if (i % 20 === 0) {
      if (mark) performance.clearMarks(); // the trace keeps them; the page need not
      await nextTask();
    }
    if (mark) performance.mark('step');
    const start = performance.now();
    if (i < tokens.length) renderer.step(tokens[i]);
    else renderer.finish();
    const rendered = performance.now();
    sink += container.offsetHeight; // style and layout happen here, inside the step
    steps[i] = performance.now() - start;
    layouts[i] = steps[i] - (rendered - start);
    if (mark) performance.mark('step-end');
  }
  if (mark) performance.clearMarks();
  return {
    name,
    tokens: tokens.length,
    steps: Array.from(steps),
    layouts: Array.from(layouts),
    textLength: container.textContent.length,
    // The blocks renderer keeps closed blocks in <div class="blocks"> groups; compare without them.
    html: Array.from(container.childNodes)
      .flatMap((node) => (node.classList?.contains('blocks') ? Array.from(node.childNodes) : [node]))
      .map((node) => node.outerHTML ?? node.textContent)
      .join(''),
    height: sink > 0 ? container.offsetHeight : 0,
  };
}

/** Run both renderers over a short reply once, so that neither is measured while the JIT warms up. */
async function warmUp() {
  for (const name of Object.keys(RENDERERS)) await run(name, 500);
  container.replaceChildren();
}

window.bench = { run, warmUp, ready: true };
