// The page: a conversation, a message box, Send and Stop, a smoothing switch, and per-reply stats.
// Everything that can be tested without a browser lives in the modules imported here; this file only wires
// them to the document. The conversation is kept in memory while the page is open.
//
// markdown-it's browser ES module is served by the tokenrelay server from the installed npm package
// (node_modules/markdown-it/dist/browser/markdown-it.esm.min.mjs). It is imported by path, not through an
// import map, so the page needs no inline script and runs under a CSP without 'unsafe-inline' or hashes.
// It is imported dynamically so that a missing package says so on the page instead of leaving it dead.

import { BlockRenderer } from './blocks.js';
import { streamChat } from './chat.js';
import { createMarkdown } from './markdown.js';
import { Smoother } from './smoother.js';
import { MarkdownView } from './view.js';

const MARKDOWN_IT = '/static/vendor/markdown-it.esm.min.mjs';
const byId = (id) => document.getElementById(id);
const conversation = byId('conversation');
const composer = byId('composer');
const prompt = byId('prompt');
const send = byId('send');
const stop = byId('stop');
const smoothing = byId('smoothing');
const model = byId('model');

/** The configured markdown-it, once its module has loaded (null until then, or if it cannot). */
let md = null;
/** @type {{role: string, content: string}[]} */
const messages = [];
/** The reply streaming now: its abort controller and view. */
let current = null;
/** Whether the conversation is scrolled to its end; new text keeps it there, and only then. */
let pinned = true;

composer.addEventListener('submit', (event) => {
  event.preventDefault();
  ask();
});
prompt.addEventListener('keydown', (event) => {
  // isComposing: Enter also confirms an IME composition (Chinese, Japanese, Korean input), not a send.
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    composer.requestSubmit();
  }
});
stop.addEventListener('click', () => current?.controller.abort());
smoothing.addEventListener('change', () => current?.view.setSmoother(newSmoother()));
conversation.addEventListener('scroll', () => {
  pinned = conversation.scrollTop + conversation.clientHeight >= conversation.scrollHeight - 32;
});
md = await loadMarkdown();
loadModels();

async function ask() {
  const text = prompt.value.trim();
  if (text === '' || current !== null || md === null) return;
  prompt.value = '';
  messages.push({ role: 'user', content: text });
  addTurn('user', 'You').body.textContent = text;

  const turn = addTurn('assistant streaming', 'Assistant');
  turn.body.classList.add('markdown');
  const view = new MarkdownView({
    container: turn.body,
    renderer: new BlockRenderer(md),
    smoother: newSmoother(),
    onWrite: keepScrolled,
  });
  const controller = new AbortController();
  current = { controller, view };
  setBusy(true);
  const outcome = await streamChat({
    model: model.value,
    messages: messages.slice(),
    signal: controller.signal,
    onDelta: (delta) => view.append(delta),
  });
  view.end();
  showOutcome(turn, outcome);
  // What was shown stays in the conversation, even when cut short, so the next turn sees the same thing.
  if (outcome.content !== '') messages.push({ role: 'assistant', content: outcome.content });
  current = null;
  setBusy(false);
  prompt.focus();
}

function newSmoother() {
  return smoothing.checked ? new Smoother() : null;
}

function addTurn(kind, label) {
  const article = document.createElement('article');
  article.className = `turn ${kind}`;
  const role = document.createElement('div');
  role.className = 'role';
  role.textContent = label;
  const body = document.createElement('div');
  body.className = 'body';
  const meta = document.createElement('div');
  meta.className = 'meta';
  article.append(role, body, meta);
  conversation.append(article);
  keepScrolled();
  return { article, body, meta };
}

/** @param {import('./chat.js').Outcome} outcome */
function showOutcome({ article, meta }, outcome) {
  article.classList.remove('streaming');
  article.classList.add(outcome.status);
  const parts = [];
  if (outcome.status === 'error') {
    parts.push(`Error: ${outcome.error}`);
    meta.setAttribute('role', 'alert');
  } else if (outcome.status === 'truncated') {
    parts.push(
      `Truncated: the stream ended before the reply was finished${outcome.error ? ` (${outcome.error})` : ''}`,
    );
    meta.setAttribute('role', 'alert');
  } else if (outcome.status === 'stopped') {
    parts.push('Stopped');
  } else if (outcome.finishReason && outcome.finishReason !== 'stop') {
    parts.push(`finish_reason: ${outcome.finishReason}`);
  }
  if (outcome.ttftMs !== null) parts.push(`TTFT ${Math.round(outcome.ttftMs)} ms`);
  if (outcome.tokensPerSecond !== null) parts.push(`${outcome.tokensPerSecond.toFixed(1)} tokens/s`);
  if (outcome.tokens > 0) parts.push(`${outcome.tokens} tokens`);
  parts.push(`${(outcome.totalMs / 1000).toFixed(2)} s total`);
  meta.textContent = parts.join(' · ');
  keepScrolled();
}

function setBusy(busy) {
  send.disabled = busy;
  stop.disabled = !busy;
}

function keepScrolled() {
  if (pinned) conversation.scrollTop = conversation.scrollHeight;
}

async function loadMarkdown() {
  try {
    return createMarkdown((await import(MARKDOWN_IT)).default);
  } catch (error) {
    const turn = addTurn('assistant error', 'Page');
    turn.meta.textContent =
      `Error: the Markdown library did not load from ${MARKDOWN_IT} (${error.message}). ` +
      'The server serves it from the npm package markdown-it: run `npm ci` (or `make install`) where tokenrelay runs.';
    turn.meta.setAttribute('role', 'alert');
    send.disabled = true;
    return null;
  }
}

async function loadModels() {
  try {
    const response = await fetch('/v1/models');
    if (!response.ok) return;
    const ids = ((await response.json())?.data ?? []).map((entry) => String(entry.id));
    const list = byId('models');
    for (const id of ids) {
      const option = document.createElement('option');
      option.value = id;
      list.append(option);
    }
    if (model.value === '' && ids.length > 0) model.value = ids[0];
  } catch {
    // No model list: the field stays free text, and a name the server does not serve gets its error.
  }
}
