// The page: conversations kept in the browser, a message box, Send and Stop, settings, and per-reply stats.
// Everything that can be tested without a browser lives in the modules imported here; this file wires them
// to the document.
//
// The modules under lib/ are the npm package `tokenrelay` (lib/package.json): the page draws with the same
// files JS developers install. The libraries (markdown-it, highlight.js) are ES modules served under
// /static/vendor/ (server/page.py: from the wheel, or from node_modules in a checkout), handed to the
// package's MarkdownRenderer as options. They are imported by path, not through an import
// map, so the page needs no inline script and runs under a CSP without 'unsafe-inline' or hashes. They are
// imported dynamically so that a missing library says so on the page instead of leaving it dead; without
// highlight.js code blocks are plain text, without markdown-it nothing can be sent.

import { streamChat } from './chat.js';
import { ThinkingSection } from './thinking.js';
import { JSONView } from './json_view.js';
import { RelayRecorder, drawLanes, heldText } from './lib/lanes.js';
import { Smoother } from './lib/smoother.js';
import { MarkdownRenderer } from './lib/view.js';
import { SettingsPanel } from './settings.js';
import { ToolCards, resultForm } from './tool_cards.js';
import { ConversationStore, loadSettings, requestBody, responseFormat } from './store.js';
import {
  actionButton,
  addCodeCopyButtons,
  addTurn,
  copyText,
  flash,
  liveText,
  showOutcome,
} from './turns.js';

const MARKDOWN_IT = '/static/vendor/markdown-it.esm.min.mjs';
const HIGHLIGHT = '/static/vendor/highlight.min.mjs';
const byId = (id) => document.getElementById(id);
const conversationEl = byId('conversation');
const composer = byId('composer');
const prompt = byId('prompt');
const send = byId('send');
const stop = byId('stop');
const historyEl = byId('history');
const toggleHistory = byId('toggle-history');
const relayToggle = byId('relay');
const RELAY_KEY = 'tokenrelay.relay';

const storage = browserStorage();
const store = new ConversationStore(storage);
const panel = new SettingsPanel(document, storage, loadSettings(storage), settingChanged);
const settings = panel.settings;

/** markdown-it (the library's class), once its module has loaded (null until then, or if it cannot). */
let md = null;
let highlight = null;
/** @type {import('./store.js').Conversation} */
let conversation = store.create();
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
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && current !== null && !byId('settings').open) current.controller.abort();
});
stop.addEventListener('click', () => current?.controller.abort());
byId('new-chat').addEventListener('click', () => openConversation(store.create()));
byId('open-settings').addEventListener('click', () => panel.open());
byId('model-name').addEventListener('click', () => panel.open());
toggleHistory.addEventListener('click', () => showHistory(historyEl.classList.contains('closed')));
relayToggle.addEventListener('click', () => setRelay(relayToggle.getAttribute('aria-pressed') !== 'true'));
setRelay(storage.getItem(RELAY_KEY) === 'on');
conversationEl.addEventListener('scroll', () => {
  pinned = conversationEl.scrollTop + conversationEl.clientHeight >= conversationEl.scrollHeight - 32;
});
// On a narrow screen the conversation list is a drawer over the chat: closed at first, and on narrowing.
const narrow = matchMedia('(max-width: 720px)');
narrow.addEventListener('change', () => showHistory(!narrow.matches));
if (narrow.matches) showHistory(false);
showModelName();
renderHistory();
[md, highlight] = await Promise.all([loadMarkdown(), loadHighlighter()]);
loadModels();

function settingChanged(name) {
  if (name === 'smoothing') current?.view.setSmoother(newSmoother());
  if (name === 'apiKey') loadModels();
  if (name === 'model') showModelName();
}

async function ask() {
  const text = prompt.value.trim();
  if (text === '' || current !== null || md === null) return;
  prompt.value = '';
  conversation.messages.push({ role: 'user', content: text });
  showUserTurn(conversation.messages.length - 1);
  store.save(conversation);
  renderHistory();
  await reply();
}

/** Stream the assistant's answer to the conversation as it stands. */
async function reply() {
  // The conversation this answer belongs to: another may be open by the time it ends (it is then stopped).
  const chat = conversation;
  const format = responseFormat(settings);
  if (format.error !== undefined) {
    pageError(`Error: ${format.error}. Fix it in the settings, or turn JSON off.`);
    panel.open('json-schema');
    return;
  }
  const json = format.responseFormat !== undefined;
  const turn = addTurn(conversationEl, 'assistant', json ? 'json' : 'markdown');
  turn.article.classList.add('streaming');
  keepScrolled();
  let stats = null;
  // The relay toggle: this reply's hops are recorded (and the server asked for step times) only when on.
  const relayStart = performance.now();
  const relay = relayOn() ? new RelayRecorder(() => performance.now() - relayStart) : null;
  const options = {
    container: turn.body,
    smoother: newSmoother(),
    // The live numbers go into the same frame as the text: still one DOM write per frame.
    onWrite: () => {
      if (stats !== null) turn.meta.textContent = liveText(stats);
      relay?.painted(); // this frame draws everything handed to the view so far
      keepScrolled();
    },
  };
  const view = json
    ? new JSONView(options)
    : new MarkdownRenderer(turn.body, { ...options, markdownIt: md, highlighter: highlight });
  const controller = new AbortController();
  current = { controller, view };
  setBusy(true);
  const body = requestBody(settings, chat.messages);
  const { model, messages, ...params } = body;
  // Tool calls (issue 21), drawn as cards under the reply's text as their arguments stream.
  let cards = null;
  const onToolCall = (calls) => {
    cards ??= new ToolCards({ container: toolCallsOf(turn), onWrite: options.onWrite });
    cards.update(calls);
  };
  // Reasoning (issue 31): a "Thinking" section above the answer, made when the first reasoning arrives.
  let thinking = null;
  const onReasoning = (text) => {
    thinking ??= new ThinkingSection(turn.body);
    thinking.append(text);
  };
  const outcome = await streamChat({
    model,
    messages,
    params,
    onToolCall,
    onReasoning,
    apiKey: settings.apiKey,
    signal: controller.signal,
    stepTimes: relay !== null,
    now: relay === null ? undefined : () => performance.now() - relayStart,
    onDelta: (delta, now, hop) => {
      stats = now;
      thinking?.answerStarted();
      view.append(delta);
      relay?.handed(hop);
    },
  });
  await view.finish();
  thinking?.finish({
    finishReason: outcome.finishReason,
    answered: outcome.content !== '',
    reasoningTokens: outcome.usage?.completion_tokens_details?.reasoning_tokens ?? null,
  });
  current = null;
  // What was shown stays in the conversation, even when cut short, so the next turn sees the same thing.
  const { status, error, finishReason, ttftMs, tokensPerSecond, tokens, totalMs } = outcome;
  const summary = { status, error, finishReason, ttftMs, tokensPerSecond, tokens, totalMs };
  const message = { role: 'assistant', content: outcome.content, outcome: summary };
  if (json) message.format = 'json';
  if (outcome.toolCalls.length > 0) message.tool_calls = outcome.toolCalls.map(asToolCall);
  const drawn = cards?.end() ?? [];
  chat.messages.push(message);
  store.save(chat);
  renderHistory();
  setBusy(false);
  if (chat !== conversation) return;
  showOutcome(turn, outcome);
  if (relay !== null && relay.records.length > 0) showRelay(turn, relay.result());
  if (!json) addCodeCopyButtons(turn.body);
  addActions(turn, chat.messages.length - 1);
  if (message.tool_calls && outcome.status === 'finished') askResults(drawn, message.tool_calls);
  keepScrolled();
  if (outcome.httpStatus === 401) {
    panel.requireKey('This server requires an API key. Enter it, then press Regenerate.');
  } else {
    prompt.focus();
  }
}

/** The reply's calls as the chat request keeps them. */
function asToolCall(call) {
  return { id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } };
}

/** The element a turn's tool-call cards go into, under its body (made the first time). */
function toolCallsOf(turn) {
  let element = turn.article.querySelector('.tool-calls');
  if (element === null) {
    element = document.createElement('div');
    element.className = 'tool-calls';
    turn.body.after(element);
  }
  return element;
}

/** A result field under each card; once every call has its result, they go back and the model goes on. */
function askResults(drawn, calls) {
  const chat = conversation;
  const results = new Array(calls.length).fill(null);
  calls.forEach((call, i) => {
    if (drawn[i] === undefined) return;
    resultForm(drawn[i], call.function.name, (text) => {
      results[i] = text;
      if (results.some((r) => r === null) || chat !== conversation || current !== null) return;
      calls.forEach((c, k) => {
        chat.messages.push({ role: 'tool', tool_call_id: c.id, content: results[k] });
        showToolTurn(chat.messages.length - 1);
      });
      store.save(chat);
      reply();
    });
  });
}

function showToolTurn(index) {
  const message = conversation.messages[index];
  const turn = addTurn(conversationEl, 'tool');
  turn.body.textContent = message.content;
  turn.article.dataset.index = String(index);
  keepScrolled();
}

function showUserTurn(index) {
  const turn = addTurn(conversationEl, 'user');
  turn.body.textContent = conversation.messages[index].content;
  addActions(turn, index);
  keepScrolled();
  return turn;
}

function showAssistantTurn(index) {
  const message = conversation.messages[index];
  const turn = addTurn(conversationEl, 'assistant', message.format === 'json' ? 'json' : 'markdown');
  if (message.format === 'json') {
    // A kept JSON reply: the same tree, built in one go.
    const view = new JSONView({
      container: turn.body,
      requestFrame: (callback) => callback(performance.now()),
    });
    if (message.content !== '') view.append(message.content);
    view.finish();
  } else if (md !== null) {
    // A kept reply is drawn in one go: the same renderer, with frames run at once.
    const view = new MarkdownRenderer(turn.body, {
      markdownIt: md,
      highlighter: highlight,
      requestFrame: (callback) => callback(performance.now()),
    });
    if (message.content !== '') view.append(message.content);
    view.finish();
    addCodeCopyButtons(turn.body);
  } else {
    turn.body.textContent = message.content;
  }
  if (message.tool_calls) {
    const cards = new ToolCards({
      container: toolCallsOf(turn),
      requestFrame: (callback) => callback(performance.now()),
    });
    cards.update(message.tool_calls.map((c, i) => ({ index: i, ...c.function })));
    const drawn = cards.end();
    if (index === conversation.messages.length - 1) askResults(drawn, message.tool_calls);
  }
  if (message.outcome) showOutcome(turn, message.outcome);
  addActions(turn, index);
}

/** Copy on every turn; Edit on the last question and Regenerate on the last answer (refreshActions). */
function addActions(turn, index) {
  const message = conversation.messages[index];
  const copy = actionButton(document, 'copy', 'Copy', async () =>
    flash(copy, await copyText(document, message.content)),
  );
  turn.actions.append(copy);
  if (message.role === 'user') {
    turn.actions.append(actionButton(document, 'edit', 'Edit', () => editTurn(turn, index)));
  } else {
    turn.actions.append(actionButton(document, 'regenerate', 'Regenerate', () => regenerate(index)));
  }
  turn.article.dataset.index = String(index);
  refreshActions();
}

/** Only the last turn of each role can be edited or regenerated, and not while a reply streams. */
function refreshActions() {
  const last = { user: -1, assistant: -1 };
  conversation.messages.forEach((message, i) => (last[message.role] = i));
  const lastUserIsLast = last.user > last.assistant;
  for (const article of conversationEl.querySelectorAll('.turn')) {
    const index = Number(article.dataset.index);
    const edit = article.querySelector('.actions .edit');
    const regenerate = article.querySelector('.actions .regenerate');
    // Edit the last question (with or without its answer); regenerate the answer that ends the chat.
    if (edit) edit.hidden = index !== last.user || current !== null;
    if (regenerate) regenerate.hidden = index !== last.assistant || lastUserIsLast || current !== null;
  }
}

function regenerate(index) {
  if (current !== null || md === null) return;
  truncateTo(index);
  reply();
}

/** Edit a question in place; sending it drops it and everything after it, then asks again. */
function editTurn(turn, index) {
  if (current !== null) return;
  const original = conversation.messages[index].content;
  const box = document.createElement('textarea');
  box.className = 'edit-box';
  box.value = original;
  box.setAttribute('aria-label', 'Edit message');
  box.rows = Math.min(12, original.split('\n').length + 1);
  const save = actionButton(document, 'save', 'Send', () => {
    const text = box.value.trim();
    if (text === '' || current !== null || md === null) return;
    truncateTo(index);
    conversation.messages.push({ role: 'user', content: text });
    showUserTurn(index);
    store.save(conversation);
    renderHistory();
    reply();
  });
  save.classList.add('primary');
  const cancel = actionButton(document, 'cancel', 'Cancel', () => {
    turn.body.textContent = original;
    turn.actions.hidden = false;
  });
  box.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      save.click();
    } else if (event.key === 'Escape') {
      event.stopPropagation();
      cancel.click();
    }
  });
  const bar = document.createElement('div');
  bar.className = 'edit-buttons';
  bar.append(save, cancel);
  turn.body.replaceChildren(box, bar);
  turn.actions.hidden = true;
  box.focus();
}

/** Drop message `index` and everything after it, on screen too. */
function truncateTo(index) {
  conversation.messages.length = index;
  for (const article of conversationEl.querySelectorAll('.turn')) {
    if (Number(article.dataset.index) >= index) article.remove();
  }
}

function openConversation(next) {
  current?.controller.abort();
  conversation = next;
  conversationEl.replaceChildren();
  conversation.messages.forEach((message, i) =>
    message.role === 'user'
      ? showUserTurn(i)
      : message.role === 'tool'
        ? showToolTurn(i)
        : showAssistantTurn(i),
  );
  pinned = true;
  keepScrolled();
  renderHistory();
  if (narrow.matches) showHistory(false);
  prompt.focus();
}

/** The list of kept conversations, newest first, the open one marked. */
function renderHistory() {
  const list = byId('conversations');
  const items = store.list().map(({ id, title }) => {
    const item = document.createElement('li');
    const open = actionButton(document, 'open', title, () => {
      const kept = store.get(id);
      if (kept !== null) openConversation(kept);
    });
    if (id === conversation.id) open.setAttribute('aria-current', 'true');
    const remove = actionButton(document, 'delete', '', () => {
      store.remove(id);
      if (id === conversation.id) openConversation(store.create());
      else renderHistory();
    });
    remove.setAttribute('aria-label', `Delete “${title}”`);
    remove.title = 'Delete';
    item.append(open, remove);
    return item;
  });
  list.replaceChildren(...items);
  byId('no-conversations').hidden = items.length > 0;
}

function relayOn() {
  return relayToggle.getAttribute('aria-pressed') === 'true';
}

function setRelay(on) {
  relayToggle.setAttribute('aria-pressed', String(on));
  storage.setItem(RELAY_KEY, on ? 'on' : 'off');
}

/** The reply's lanes under it: the doctor page's drawing, from the model's step to the painted frame. */
function showRelay(turn, result) {
  const figure = document.createElement('figure');
  figure.className = 'relay';
  const caption = document.createElement('figcaption');
  caption.textContent = `relay · held max: ${heldText(result.lanes)}`;
  figure.append(drawLanes(result), caption);
  turn.article.append(figure);
}

function showHistory(show) {
  historyEl.classList.toggle('closed', !show);
  toggleHistory.setAttribute('aria-expanded', String(show));
}

function showModelName() {
  byId('model-name').textContent = settings.model || 'model';
}

function newSmoother() {
  return settings.smoothing ? new Smoother() : null;
}

function setBusy(busy) {
  send.disabled = busy;
  stop.disabled = !busy;
  refreshActions();
}

function keepScrolled() {
  if (pinned) conversationEl.scrollTop = conversationEl.scrollHeight;
}

function pageError(message) {
  const turn = addTurn(conversationEl, 'assistant');
  turn.article.classList.add('error');
  turn.meta.textContent = message;
  turn.meta.setAttribute('role', 'alert');
}

async function loadMarkdown() {
  try {
    return (await import(MARKDOWN_IT)).default;
  } catch (error) {
    pageError(
      `Error: the Markdown library did not load from ${MARKDOWN_IT} (${error.message}). ` +
        'A source checkout serves it from the npm package markdown-it: run `npm ci` where tokenrelay runs.',
    );
    send.disabled = true;
    return null;
  }
}

async function loadHighlighter() {
  try {
    return (await import(HIGHLIGHT)).default;
  } catch {
    return null; // Code blocks stay plain text.
  }
}

async function loadModels() {
  try {
    const headers = settings.apiKey !== '' ? { Authorization: `Bearer ${settings.apiKey}` } : {};
    const response = await fetch('/v1/models', { headers });
    if (response.status === 401) {
      panel.requireKey(
        settings.apiKey === '' ? 'This server requires an API key.' : 'The server refused this API key.',
      );
      return;
    }
    if (!response.ok) return;
    panel.setModels(((await response.json())?.data ?? []).map((entry) => String(entry.id)));
    showModelName();
  } catch {
    // No model list: the request names the model in the settings, and the server says if it has none.
  }
}

/** localStorage, or a stand-in in memory when the browser refuses it (storage switched off). */
function browserStorage() {
  try {
    const probe = 'tokenrelay.probe';
    localStorage.setItem(probe, '1');
    localStorage.removeItem(probe);
    return localStorage;
  } catch {
    const items = new Map();
    return {
      getItem: (key) => items.get(key) ?? null,
      setItem: (key, value) => items.set(key, String(value)),
      removeItem: (key) => items.delete(key),
    };
  }
}
